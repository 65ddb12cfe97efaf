#pragma once
// The `fast` products with bfloat16 weights (perf/quant_fast.h has the quantized
// ones): the activations are rounded to bfloat16 once per product, as llama.cpp rounds
// them for BF16 weights, and each row's products are summed in the order llama.cpp's
// AVX-512 BF16 build sums them, so that the results follow llama.cpp on the file
// itself rather than the float32 products of the `exact` setting.
//
// The order (pairs of values: value 2j and 2j+1 of a step of 32 are lane j's pair):
// - One activation row (a decode step), or columns not a multiple of 32: two chains of
//   sixteen lanes, the first over values 64i .. 64i+31, the second over 64i+32 ..
//   64i+63. Per step and lane acc = fma(w[2j+1], x[2j+1], acc), then
//   acc = fma(w[2j], x[2j], acc) (vdpbf16ps: bfloat16 inputs below float's normal range
//   read as zero, results below it flushed to zero). Each chain is summed as
//   _mm512_reduce_add_ps sums (lane l + lane l+8, then l + l+4, then (0 + 2) + (1 + 3)),
//   the two sums added in double, then the values past the last whole 64 one product at
//   a time in double, and the total rounded to float.
// - Several activation rows at once (a prompt) and columns a multiple of 32: one chain
//   of sixteen lanes over steps of 32, summed the same way.
#include <cstdint>

namespace ds {

// Whether the AVX-512 BF16 kernels can run here (checked once, from cpuid). The
// portable kernels give the same bits, far more slowly.
bool bf16_fast_available();

// x rounded to bfloat16 as ggml rounds it: to nearest even, NaN kept a quiet NaN.
uint16_t round_bf16(float x);
void round_bf16(const float* x, int64_t n, uint16_t* out);

// y[r - r0] = row r of the row-major bfloat16 [rows, cols] matrix W (at row 0) times
// the rounded vector x, in the one-row order above. simd: the AVX-512 BF16 kernel
// (only when bf16_fast_available()).
void gemv_bf16_fast(const uint16_t* W, int64_t cols, const uint16_t* x, float* y, int64_t r0, int64_t r1,
                    bool simd = bf16_fast_available());

// Y[t * ldy + (r - r0)] for t < T and r in [r0, r1): row r of W times the rounded row
// X + t * cols, in the order llama.cpp uses for T rows at once (the many-row order when
// T >= 2 and cols % 32 == 0, else the one-row order).
void gemm_bf16_fast(const uint16_t* W, int64_t cols, const uint16_t* X, int T, float* Y, int64_t ldy, int64_t r0,
                    int64_t r1, bool simd = bf16_fast_available());

}  // namespace ds
