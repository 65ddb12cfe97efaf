#pragma once
// GGML's quantized weight blocks (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, as stored in GGUF files):
// decoding to float32 and matrix-vector products with float32 activations.
//
// A quantized matrix is row-major and never in tiles: row r starts at byte
// r * row_bytes(p, cols), and cols is a multiple of block_elems(p). Decoding gives
// the same float32 bits as ggml's dequantize_row_* (the same float operations in the
// same order), and the products compute sum_c W[r, c] x[c] on those exact values in
// float32, so they match a float32 engine run on the decoded matrix to rounding.
// gemv_rows and rows_f32 (gemv.h) call these when is_quantized(p).
#include <cstdint>

#include "util/precision.h"

namespace ds {

// Decodes the cols values of one row of blocks of type p (is_quantized(p), cols a
// multiple of block_elems(p)) into out.
void dequantize_row(Precision p, const void* blocks, int64_t cols, float* out);

// y[r - r0] = sum_c W[r, c] x[c] for rows r0 <= r < r1 of a quantized [rows, cols]
// matrix (W points at row 0).
void gemv_quant(const void* W, Precision p, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1);

// Rows r0 <= r < r1 of a quantized matrix as float32, row-major (out holds (r1-r0)*cols).
void rows_f32_quant(const void* W, Precision p, int64_t cols, int64_t r0, int64_t r1, float* out);

}  // namespace ds
