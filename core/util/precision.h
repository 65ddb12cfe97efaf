#pragma once
// How a weight matrix is stored (float32, bfloat16 or float16) and the exact
// conversions between float32 and the two 16-bit formats.
#include <cstdint>

namespace ds {

enum class Precision : uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

inline int precision_bytes(Precision p) { return p == Precision::F32 ? 4 : 2; }
const char* precision_name(Precision p);  // "float32", "bfloat16", "float16"

// Exact conversions between float32 and the 16-bit formats. Narrowing rounds to
// nearest, ties to even; overflow gives infinity; NaN stays a (quiet) NaN.
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);

}  // namespace ds
