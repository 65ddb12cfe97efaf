#include "perf/gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "perf/gemv.h"  // element_index (tiles), widen
#include "perf/transpose.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ds {

#if defined(__AVX512F__)

namespace {

// Register tile MR x NR (24 accumulators of 16 floats), depth block KC, and blocks of
// MC rows of X and NC columns of W^T: a packed X block (MC x KC, 96 KB) stays in L2
// next to the packed W^T block (KC x NC, 768 KB) it is multiplied with.
constexpr int MR = 12, NR = 32, KC = 256, MC = 96, NC = 768;

// C[rows, cols] (= or +=) Ap^T Bp over kc: Ap is [kc][MR], Bp is [kc][NR].
inline void tile(const float* Ap, const float* Bp, int kc, float* C, int64_t ldc, int rows, int cols, bool add) {
  __m512 c[MR][2];
  for (int i = 0; i < MR; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(Bp + k * NR), b1 = _mm512_load_ps(Bp + k * NR + 16);
    const float* a = Ap + k * MR;
    for (int i = 0; i < MR; ++i) {  // unrolled by the compiler: MR is a constant
      const __m512 ai = _mm512_set1_ps(a[i]);
      c[i][0] = _mm512_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(ai, b1, c[i][1]);
    }
  }
  const __mmask16 m0 = cols >= 16 ? 0xFFFF : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : __mmask16((1u << (cols - 16)) - 1);
  for (int i = 0; i < rows; ++i) {
    float* ci = C + i * ldc;
    __m512 v0 = c[i][0], v1 = c[i][1];
    if (add) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, v0);
    _mm512_mask_storeu_ps(ci + 16, m1, v1);
  }
}

// Rows [r0, r0 + rows) of X, depth [k0, k0 + kc), as MR-row tiles [kc][MR],
// zero-padded past the last row.
void pack_x(const float* X, int64_t K, int64_t r0, int rows, int64_t k0, int kc, float* Ap) {
  for (int p = 0; p < rows; p += MR) {
    float* dst = Ap + int64_t(p) * kc;
    const int n = std::min(MR, rows - p);
    int k = 0;
    if (n == MR) {  // rows 0-7 by 8x8 transposes, rows 8-11 one value at a time
      alignas(32) float tmp[64];
      for (; k + 8 <= kc; k += 8) {
        transpose8(X + (r0 + p) * K + k0 + k, K, tmp, 8);
        for (int c = 0; c < 8; ++c) {
          std::copy_n(tmp + c * 8, 8, dst + (k + c) * MR);
          for (int i = 8; i < MR; ++i) dst[(k + c) * MR + i] = X[(r0 + p + i) * K + k0 + k + c];
        }
      }
    }
    for (; k < kc; ++k) {
      for (int i = 0; i < n; ++i) dst[k * MR + i] = X[(r0 + p + i) * K + k0 + k];
      for (int i = n; i < MR; ++i) dst[k * MR + i] = 0.0f;
    }
  }
}

// Where pack_w reads W: float32 rows, the first pr of them in tiles (perf/gemv.h: each
// 8x8 block contiguous, rows 8 floats apart), or 16-bit rows (float16 or bfloat16)
// widened as they are packed, so that no float32 copy of the rows is written first.
struct WSource {
  const float* f32 = nullptr;
  const uint16_t* b16 = nullptr;
  Precision p16 = Precision::F16;  // of b16: F16 or BF16
  int64_t K = 0, pr = 0;
  // The 8x8 block of rows r .. r + 7, depth k .. k + 7 (r and k multiples of 8), as
  // d[k' * ldd + r'].
  void block8(int64_t r, int64_t k, float* d, int64_t ldd) const {
    if (f32) {
      if (r + 8 <= pr)
        transpose8(f32 + r * K + k * 8, 8, d, ldd);
      else
        transpose8(f32 + r * K + k, K, d, ldd);
      return;
    }
    alignas(32) float tmp[64];
    for (int i = 0; i < 8; ++i) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16 + (r + i) * K + k));
      const __m256 v = p16 == Precision::BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                              : _mm256_cvtph_ps(h);
      _mm256_store_ps(tmp + 8 * i, v);
    }
    transpose8(tmp, 8, d, ldd);
  }
  float at(int64_t r, int64_t k) const {
    if (f32) return f32[element_index(r, k, K, pr)];
    return widen(b16[r * K + k], p16);
  }
};

// Columns [n0, n0 + cols) of W^T (rows of W), depth [k0, k0 + kc), as NR-column
// tiles [kc][NR], zero-padded past the last column.
void pack_w(const WSource& W, int64_t n0, int cols, int64_t k0, int kc, float* Bp) {
  for (int p = 0; p < cols; p += NR) {
    float* dst = Bp + int64_t(p) * kc;
    const int n = std::min(NR, cols - p);
    int k = 0;
    if (n == NR)
      for (; k + 8 <= kc; k += 8)
        for (int j = 0; j < NR; j += 8) W.block8(n0 + p + j, k0 + k, dst + k * NR + j, NR);  // multiples of 8
    for (; k < kc; ++k) {
      for (int j = 0; j < n; ++j) dst[k * NR + j] = W.at(n0 + p + j, k0 + k);
      for (int j = n; j < NR; ++j) dst[k * NR + j] = 0.0f;
    }
  }
}

float* aligned64(std::vector<float>& v, size_t n) {
  v.resize(n + 16);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

// Rows padded to whole MR-row tiles: a packed depth block [pc, pc + kc) of X holds
// padded_rows(T) * kc floats, the tile of rows r .. r + MR - 1 at r * kc.
int64_t padded_rows(int64_t T) { return (T + MR - 1) / MR * MR; }

// The columns [n_begin, n_end) of Y. Xp: X packed whole (gemm_pack_block), or null to
// pack each block of X's rows as it is used.
void gemm_columns(const float* X, const float* Xp, int64_t T, int64_t K, const WSource& W, int64_t n_begin,
                  int64_t n_end, float* Y, int64_t ldy) {
  thread_local std::vector<float> a_buf, b_buf;  // kept between calls: no allocation once warm
  float* Abuf = Xp ? nullptr : aligned64(a_buf, size_t(MC + MR) * KC);
  float* Bp = aligned64(b_buf, size_t(NC + NR) * KC);
  for (int64_t jc = n_begin; jc < n_end; jc += NC) {
    const int nc = int(std::min<int64_t>(NC, n_end - jc));
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int kc = int(std::min<int64_t>(KC, K - pc));
      pack_w(W, jc, nc, pc, kc, Bp);
      for (int64_t ic = 0; ic < T; ic += MC) {
        const int mc = int(std::min<int64_t>(MC, T - ic));
        const float* Ap = Xp ? Xp + pc * padded_rows(T) + ic * kc : Abuf;
        if (!Xp) pack_x(X, K, ic, mc, pc, kc, Abuf);
        for (int jr = 0; jr < nc; jr += NR)
          for (int ir = 0; ir < mc; ir += MR)
            tile(Ap + int64_t(ir) * kc, Bp + int64_t(jr) * kc, kc, Y + (ic + ir) * ldy + jc + jr, ldy,
                 std::min(MR, mc - ir), std::min(NR, nc - jr), pc > 0);
      }
    }
  }
}

// Products with no rows, no columns or no depth (Y = 0): done here, true.
bool empty_product(int64_t T, int64_t K, int64_t N, float* Y, int64_t ldy) {
  if (T <= 0 || N <= 0) return true;
  if (K > 0) return false;
  for (int64_t t = 0; t < T; ++t) std::fill_n(Y + t * ldy, N, 0.0f);
  return true;
}

}  // namespace

bool gemm_nt_available() { return true; }

void gemm_nt(const float* X, int64_t T, int64_t K, const float* W, int64_t N, float* Y, int64_t ldy, int threads,
             int64_t pr) {
  if (empty_product(T, K, N, Y, ldy)) return;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(threads, (N + NR - 1) / NR)));
  const WSource src{.f32 = W, .K = K, .pr = pr};
  if (nt == 1) return gemm_columns(X, nullptr, T, K, src, 0, N, Y, ldy);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; ++t) {
    const int64_t a = t == 0 ? 0 : N * t / nt / NR * NR, b = t + 1 == nt ? N : N * (t + 1) / nt / NR * NR;
    if (a < b) gemm_columns(X, nullptr, T, K, src, a, b, Y, ldy);
  }
}

int64_t gemm_packed_floats(int64_t T, int64_t K) { return padded_rows(T) * K; }

int gemm_depth_blocks(int64_t K) { return int((K + KC - 1) / KC); }

void gemm_pack_block(const float* X, int64_t T, int64_t K, int block, float* Xp) {
  const int64_t pc = int64_t(block) * KC;
  const int kc = int(std::min<int64_t>(KC, K - pc));
  for (int64_t ic = 0; ic < T; ic += MC)  // pack_x's tiles of MC rows, one after another
    pack_x(X, K, ic, int(std::min<int64_t>(MC, T - ic)), pc, kc, Xp + pc * padded_rows(T) + ic * kc);
}

void gemm_nt_packed(const float* Xp, int64_t T, int64_t K, const float* W, int64_t N, float* Y, int64_t ldy,
                    int64_t pr) {
  if (!empty_product(T, K, N, Y, ldy))
    gemm_columns(nullptr, Xp, T, K, WSource{.f32 = W, .K = K, .pr = pr}, 0, N, Y, ldy);
}

void gemm_nt_packed16(const float* Xp, int64_t T, int64_t K, const uint16_t* W, Precision p, int64_t N, float* Y,
                      int64_t ldy) {
  if (!empty_product(T, K, N, Y, ldy))
    gemm_columns(nullptr, Xp, T, K, WSource{.b16 = W, .p16 = p, .K = K}, 0, N, Y, ldy);
}

#else

bool gemm_nt_available() { return false; }
void gemm_nt(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int, int64_t) {}
int64_t gemm_packed_floats(int64_t, int64_t) { return 0; }
int gemm_depth_blocks(int64_t) { return 0; }
void gemm_pack_block(const float*, int64_t, int64_t, int, float*) {}
void gemm_nt_packed(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t) {}
void gemm_nt_packed16(const float*, int64_t, int64_t, const uint16_t*, Precision, int64_t, float*, int64_t) {}

#endif

}  // namespace ds
