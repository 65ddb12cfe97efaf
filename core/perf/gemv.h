#pragma once
// Matrix-vector products over row-major weights stored as float32, bfloat16, float16
// or GGML's quantized blocks (perf/quant.h), always computing in float32. Decoding a
// token is a chain of these, each reading its whole matrix once, so they are written
// to run at memory speed.
#include <cstdint>

#include "util/precision.h"

namespace ds {

// Tiles: the storage a matrix is given for decoding. Its rows are taken in groups of
// 8, and each group is stored as chunks of 8 columns, the group's 8 rows one after
// another in each chunk: [r0 c0-7][r1 c0-7] ... [r7 c0-7][r0 c8-15] ... A product
// with a vector then still reads the matrix as one sequential stream, and loads each
// value of the vector once per 8 rows instead of once per row. A group covers the same bytes as
// its rows row-major, so converting is done in place, group by group. Only the first
// tile_rows(rows) rows are in groups; the rest stay row-major after them. A matrix
// whose cols is not a multiple of 8 is not stored in tiles.
inline bool tiles_fit(int64_t rows, int64_t cols) { return rows >= 8 && cols > 0 && cols % 8 == 0; }
inline int64_t tile_rows(int64_t rows) { return rows / 8 * 8; }
// Where element (r, c) is, counted in elements from the start of the matrix, when its
// first pr rows are in tiles (pr == 0: row-major).
inline int64_t element_index(int64_t r, int64_t c, int64_t cols, int64_t pr) {
  if (r >= pr) return r * cols + c;
  return (r - (r & 7)) * cols + (c - (c & 7)) * 8 + (r & 7) * 8 + (c & 7);
}
// Converts a [rows, cols] matrix of esz-byte elements between row-major and tiles,
// in place (tiles_fit(rows, cols) must hold).
void rows_to_tiles(void* W, int esz, int64_t rows, int64_t cols);
void tiles_to_rows(void* W, int esz, int64_t rows, int64_t cols);
// Writes `rows` row-major rows at src (rows a multiple of 8, cols of 8) as tiles at dst,
// which covers the same number of bytes and does not overlap src: the copy a loader
// makes from a buffer it has just read into a matrix's storage.
void rows_into_tiles(const void* src, void* dst, int esz, int64_t rows, int64_t cols);

// y[r - r0] = sum_c W[r, c] x[c] for rows r0 <= r < r1 of a [rows, cols] matrix whose
// element type is p (W points at row 0) and whose first pr rows are in tiles (0:
// all row-major). Uses AVX2/FMA (and F16C) when the build targets them, plain loops
// otherwise. A quantized matrix (is_quantized(p)) is always row-major, its row r at byte
// r * row_bytes(p, cols), and pr must be 0.
void gemv_rows(const void* W, Precision p, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1,
               int64_t pr = 0);

// y_k[r - r0] = (W x_k)[r] for n vectors at once, x_k = X + k * cols, y_k = Y + k * ldy:
// the matrix is read from memory once, 8 rows (a tile group) at a time, and each group
// stays in the cache while every vector is multiplied with it (gemv_rows per group: the
// same sums, bit for bit, as gemv_rows of each vector alone).
void gemv_rows_many(const void* W, Precision p, int64_t cols, const float* X, int n, float* Y, int64_t ldy, int64_t r0,
                    int64_t r1, int64_t pr = 0);

// Rows r0 <= r < r1 of such a matrix (quantized ones too) as float32, row-major (out
// holds (r1-r0)*cols).
void rows_f32(const void* W, Precision p, int64_t cols, int64_t pr, int64_t r0, int64_t r1, float* out);

// One 16-bit value (BF16 or F16) as float32, exactly.
float widen(uint16_t v, Precision p);

// Widens rows r0 <= r < r1 of a 16-bit matrix to float32 (out holds (r1-r0)*cols).
void widen_rows(const uint16_t* W, Precision p, int64_t cols, int64_t r0, int64_t r1, float* out);

// Narrows n floats to p, rounding to nearest even (p must be BF16 or F16).
void narrow(const float* in, int64_t n, Precision p, uint16_t* out);

// A matrix in any of the storages above: where it is, its element type, its shape and
// how many of its first rows are in tiles.
struct MatView {
  const void* data = nullptr;
  Precision type = Precision::F32;
  int64_t rows = 0, cols = 0;
  int64_t tile_rows = 0;  // the first tile_rows rows are in tiles
  bool empty() const { return rows * cols == 0; }
  void row(int64_t r, float* out) const { rows_f32(r, r + 1, out); }
  // Rows r0 <= r < r1 as float32, row-major.
  void rows_f32(int64_t r0, int64_t r1, float* out) const { ds::rows_f32(data, type, cols, tile_rows, r0, r1, out); }
  // gemv_rows_many over rows r0 <= r < r1.
  void gemv_many(const float* X, int n, float* Y, int64_t ldy, int64_t r0, int64_t r1) const {
    ds::gemv_rows_many(data, type, cols, X, n, Y, ldy, r0, r1, tile_rows);
  }
  // y[r - r0] = (W x)[r] for r0 <= r < r1.
  void gemv(const float* x, float* y, int64_t r0, int64_t r1) const {
    gemv_rows(data, type, cols, x, y, r0, r1, tile_rows);
  }
};

// Whether the vector kernels are compiled in ("avx2+fma+f16c" or "portable").
const char* gemv_isa();

}  // namespace ds
