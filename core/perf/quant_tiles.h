#pragma once
// The `fast` products of a quantized matrix with many activation rows at once (a
// prompt's prefill): each weight block is unpacked to bytes and scales once and then
// multiplied with several rows' 8-bit blocks while it is in registers, with AVX-512
// VNNI (dot products of four bytes per 32-bit lane, and of 16-bit pairs with the
// scales). Each product gives the bits gemv_quant_fast gives for that row and that
// vector: the same exact integers per block and lane, combined with the same float
// operations in the same order. Without those instructions, one gemv_quant_fast per
// activation row.
#include <cstdint>

#include "perf/quant_fast.h"
#include "util/precision.h"

namespace ds {

// Whether the AVX-512 VNNI tiles can run here (checked once, from cpuid).
bool quant_tiles_available();

// Fills x.start4 (block 32) or x.sums32 (block 256) for products with weights of
// type p: x = quantize_q8(.., q8_block_for(p), ..).
void prepare_tiles(Precision p, Q8Vector& x);

// Y[t * ldy + (r - r0)] for t < T and r in [r0, r1): row r of the quantized [rows, cols]
// matrix W times xs[t] (each quantized for p and prepared by prepare_tiles), the bits of
// gemv_quant_fast(W, p, cols, xs[t], ..). simd: the AVX-512 tiles (only when
// quant_tiles_available()).
void gemm_quant_fast(const void* W, Precision p, int64_t cols, const Q8Vector* xs, int T, float* Y, int64_t ldy,
                     int64_t r0, int64_t r1, bool simd = quant_tiles_available());

// How many weight rows a thread takes at a time for gemm_quant_fast: about 192 KiB of
// blocks (which stay in L2 while all the activation rows pass), at least 16, and few
// enough that each of `threads` threads gets at least 4 blocks; an even count, for
// Q4_0 a multiple of 16.
int64_t quant_tile_rows(Precision p, int64_t cols, int64_t rows, int threads);

}  // namespace ds
