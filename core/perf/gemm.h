#pragma once
// The prefill's matrix products, Y[T, N] = X[T, K] W[N, K]^T: every linear layer of a
// T-token prompt. Both operands keep K contiguous (activations by token, weights as
// [out, in] rows), so the product packs 12-row tiles of X and 32-column tiles of
// W^T (8x8 transposes) into cache-sized blocks and runs a 12x32 register-tile kernel
// of AVX-512 FMAs: about 94 GFLOP/s on one core of the development machine against
// Eigen's 77 on the same shapes. Builds without AVX-512 use Eigen instead.
#include <cstdint>

namespace ds {

// Whether gemm_nt is compiled in (AVX-512).
bool gemm_nt_available();

// Y[t * ldy + n] = sum_k X[t * K + k] * W[n * K + k], for t < T, n < N (ldy >= N).
// W's first pr rows may be stored in tiles (perf/gemv.h; pr == tile_rows(N), K a
// multiple of 8), else pr == 0. With threads > 1 the columns are split among them.
// Only when gemm_nt_available().
void gemm_nt(const float* X, int64_t T, int64_t K, const float* W, int64_t N, float* Y, int64_t ldy, int threads,
             int64_t pr = 0);

}  // namespace ds
