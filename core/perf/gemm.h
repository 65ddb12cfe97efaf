#pragma once
// The prefill's matrix products, Y[T, N] = X[T, K] W[N, K]^T: every linear layer of a
// T-token prompt. Both operands keep K contiguous (activations by token, weights as
// [out, in] rows), so the product packs 12-row tiles of X and 32-column tiles of
// W^T (8x8 transposes) into cache-sized blocks and runs a 12x32 register-tile kernel
// of AVX-512 FMAs: about 94 GFLOP/s on one core of the development machine against
// Eigen's 77 on the same shapes. Builds without AVX-512 use Eigen instead.
#include <cstdint>

#include "util/precision.h"

namespace ds {

// Whether gemm_nt is compiled in (AVX-512).
bool gemm_nt_available();

// Y[t * ldy + n] = sum_k X[t * K + k] * W[n * K + k], for t < T, n < N (ldy >= N).
// W's first pr rows may be stored in tiles (perf/gemv.h; pr == tile_rows(N), K a
// multiple of 8), else pr == 0. With threads > 1 the columns are split among them.
// Only when gemm_nt_available().
void gemm_nt(const float* X, int64_t T, int64_t K, const float* W, int64_t N, float* Y, int64_t ldy, int threads,
             int64_t pr = 0);

// X packed once into the layout gemm_nt's kernel reads, for products whose W comes in
// pieces (16-bit or quantized rows widened a block at a time, a thread's share of the
// rows): gemm_nt packs X again for every block of W's rows, which for a 512-token
// prompt is about a sixth of the work. The packed copy holds gemm_packed_floats(T, K)
// floats in gemm_depth_blocks(K) blocks that can be packed independently (by several
// threads); then gemm_nt_packed multiplies it on the calling thread, with the bits of
// gemm_nt. Only when gemm_nt_available().
int64_t gemm_packed_floats(int64_t T, int64_t K);
int gemm_depth_blocks(int64_t K);
void gemm_pack_block(const float* X, int64_t T, int64_t K, int block, float* Xp);
void gemm_nt_packed(const float* Xp, int64_t T, int64_t K, const float* W, int64_t N, float* Y, int64_t ldy,
                    int64_t pr = 0);
// gemm_nt_packed on 16-bit rows W[N, K] of precision p (F16 or BF16), widened to float32
// as they are packed: the bits of gemm_nt_packed on the widened rows, without writing
// them first.
void gemm_nt_packed16(const float* Xp, int64_t T, int64_t K, const uint16_t* W, Precision p, int64_t N, float* Y,
                      int64_t ldy);

}  // namespace ds
