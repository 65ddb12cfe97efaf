#pragma once
// Matrix-vector products over row-major weights stored as float32, bfloat16 or
// float16, always computing in float32. Decoding a token is a chain of these, each
// reading its whole matrix once, so they are written to run at memory speed.
#include <cstdint>

namespace ds {

enum class Precision : uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

inline int precision_bytes(Precision p) { return p == Precision::F32 ? 4 : 2; }
const char* precision_name(Precision p);  // "float32", "bfloat16", "float16"

// y[r - r0] = sum_c W[r, c] x[c] for rows r0 <= r < r1 of a [rows, cols] matrix whose
// element type is p (W points at row 0). Uses AVX2/FMA (and F16C) when the build
// targets them, plain loops otherwise.
void gemv_rows(const void* W, Precision p, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1);

// One 16-bit value (BF16 or F16) as float32, exactly.
float widen(uint16_t v, Precision p);

// Widens rows r0 <= r < r1 of a 16-bit matrix to float32 (out holds (r1-r0)*cols).
void widen_rows(const uint16_t* W, Precision p, int64_t cols, int64_t r0, int64_t r1, float* out);

// Narrows n floats to p, rounding to nearest even (p must be BF16 or F16).
void narrow(const float* in, int64_t n, Precision p, uint16_t* out);

// Whether the vector kernels are compiled in ("avx2+fma+f16c" or "portable").
const char* gemv_isa();

}  // namespace ds
