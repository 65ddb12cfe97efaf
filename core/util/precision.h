#pragma once
// How a weight matrix is stored (float32, bfloat16, float16 or one of GGML's quantized
// block formats) and the exact conversions between float32 and the two 16-bit formats.
#include <cassert>
#include <cstdint>

namespace ds {

// The quantized types store a row as blocks of block_elems(p) values in block_bytes(p)
// bytes, laid out as GGML (GGUF files) defines them; perf/quant.h decodes them.
enum class Precision : uint8_t { F32 = 0, BF16 = 1, F16 = 2, Q8_0 = 3, Q4_0 = 4, Q4_K = 5, Q5_K = 6, Q6_K = 7 };

inline bool is_quantized(Precision p) { return p != Precision::F32 && p != Precision::BF16 && p != Precision::F16; }

// Values per block: 1 for the float types, 32 for Q8_0 and Q4_0, 256 for the K types.
inline int block_elems(Precision p) {
  switch (p) {
    case Precision::F32:
    case Precision::BF16:
    case Precision::F16:
      return 1;
    case Precision::Q8_0:
    case Precision::Q4_0:
      return 32;
    case Precision::Q4_K:
    case Precision::Q5_K:
    case Precision::Q6_K:
      return 256;
  }
  return 1;
}

// Bytes per block (for the float types, per value).
inline int block_bytes(Precision p) {
  switch (p) {
    case Precision::F32:
      return 4;
    case Precision::BF16:
    case Precision::F16:
      return 2;
    case Precision::Q8_0:
      return 34;  // f16 d, int8 qs[32]
    case Precision::Q4_0:
      return 18;  // f16 d, uint8 qs[16]
    case Precision::Q4_K:
      return 144;  // f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]
    case Precision::Q5_K:
      return 176;  // f16 d, f16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128]
    case Precision::Q6_K:
      return 210;  // uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d
  }
  return 0;
}

// Bytes of one row of cols values (cols a multiple of block_elems(p)).
inline int64_t row_bytes(Precision p, int64_t cols) { return cols / block_elems(p) * block_bytes(p); }

// Bytes per value of the float types only: a quantized type has no size per value (its
// values come in blocks), so code that may see one uses row_bytes instead.
inline int precision_bytes(Precision p) {
  assert(!is_quantized(p));
  return p == Precision::F32 ? 4 : 2;
}
const char* precision_name(Precision p);  // "float32", "bfloat16", "float16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"

// Exact conversions between float32 and the 16-bit formats. Narrowing rounds to
// nearest, ties to even; overflow gives infinity; NaN stays a (quiet) NaN.
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);

}  // namespace ds
