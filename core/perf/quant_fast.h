#pragma once
// The `fast` products with GGML's quantized weight blocks: the activation vector is
// rounded once per product to 8-bit blocks, as ggml rounds it (blocks of 32 with a
// float16 scale for Q8_0 and Q4_0 weights, blocks of 256 with a float32 scale and the
// sums of every 16 values for Q4_K, Q5_K and Q6_K), and each weight block's product
// with its part of the vector is an exact integer dot product, scaled in float32. The
// results then follow llama.cpp on the quantized file itself rather than a float32
// engine on its decoded copy (the `exact` products of perf/quant.h, the reference).
//
// Two implementations give the same bits: AVX2 (maddubs / madd on the bytes) and a
// portable one, chosen at run time from the processor's features. Both compute the
// same exact integers per block and combine them with the same float operations in
// the same order (explicit fused multiply-adds): that of ggml's AVX2 dot products, and
// for Q4_0 that of llama.cpp's products with the Q4_0 matrices it rearranges at load
// (one float chain per row over the blocks' integer totals).
#include <cstdint>
#include <string>
#include <vector>

#include "util/aligned.h"
#include "util/precision.h"

namespace ds {

// Which products a decode uses with quantized weights (float16, bfloat16 and float32
// weights always multiply float32 activations).
enum class Products : uint8_t {
  Exact,  // float32 activations times the decoded weights (the reference)
  Fast,   // activations rounded to 8 bits per block, integer dot products
};
const char* products_name(Products p);  // "exact" or "fast"
// Parses "exact" or "fast"; false for anything else.
bool parse_products(const std::string& s, Products& out);

// A vector rounded to 8-bit blocks: value i is about d[i / block] * q[i].
struct Q8Vector {
  int64_t n = 0;
  int block = 32;                 // 32 (Q8_0 style) or 256 (Q8_K style)
  AlignedVector<int8_t> q;        // n values
  AlignedVector<float> d;         // n / block scales
  AlignedVector<int16_t> sums16;  // block 256: the sum of each 16 q's (n / 16)
  // What the tiles of perf/quant_tiles.h also read (prepare_tiles fills them for one
  // weight type): block 32: for every 4 values the integer their lane of a block's
  // product starts from (-128 or -8 times their sum: Q8_0 and Q4_0 weights are taken
  // unsigned, w + 128 or the stored nibble); block 256: the sum of each 32 q's.
  AlignedVector<int32_t> start4;  // n / 4
  AlignedVector<int16_t> sums32;  // n / 32
};

// Whether the AVX2 kernels can run here (checked once, from cpuid).
bool quant_simd_available();

// The activation block a weight type multiplies: 32 for Q8_0 and Q4_0, 256 for the
// K types.
int q8_block_for(Precision p);

// Rounds x[0 .. n) (n a multiple of block) as ggml does on x86: block 32: d = amax/127
// rounded to float16, q = nearest-even(x * (127/amax)); block 256: d = 1/s with
// s = -127/(the first value of largest magnitude), q = nearest-even(s x). Every
// |q| <= 127. Reuses out's storage (no allocation once it has held n values). simd:
// the AVX2 loops (same results).
void quantize_q8(const float* x, int64_t n, int block, Q8Vector& out, bool simd = quant_simd_available());

// y[r - r0] = sum over the blocks of row r of a quantized [rows, cols] matrix W
// (row-major blocks, W at row 0) of its exact integer product with x's block, scaled:
// x = quantize_q8(.., q8_block_for(p), ..) of the float vector. simd: use the AVX2
// kernels (only when quant_simd_available()); both give the same bits. With simd, a K
// type and x prepared by prepare_tiles (perf/quant_tiles.h), the tiles' AVX-512 kernels
// where they run (again the same bits); Q4_0 with x prepared (for Q4_0 or Q8_0: only
// that it was is read), AVX-512 VNNI rows where they run. quantize_q8 leaves x
// unprepared.
void gemv_quant_fast(const void* W, Precision p, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1,
                     bool simd = quant_simd_available());

}  // namespace ds
