#include "perf/bf16_fast.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DS_BF_X86 1
#include <immintrin.h>
#define DS_BF16_FN __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace ds {

bool bf16_fast_available() {
#ifdef DS_BF_X86
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return ok;
#else
  return false;
#endif
}

uint16_t round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 64);  // NaN: quiet
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void round_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_bf16(x[i]);
}

namespace {

float widen_b(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// vdpbf16ps reads an input below float's normal range as zero, and flushes such results.
float daz(uint16_t h) { return (h & 0x7F80u) == 0 ? widen_b(uint16_t(h & 0x8000u)) : widen_b(h); }
float ftz(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

// One vdpbf16ps step of 32 values: lane j takes pair j, the odd value first.
void step32(const uint16_t* w, const uint16_t* x, float acc[16]) {
  for (int j = 0; j < 16; ++j) {
    acc[j] = ftz(std::fma(daz(w[2 * j + 1]), daz(x[2 * j + 1]), acc[j]));
    acc[j] = ftz(std::fma(daz(w[2 * j]), daz(x[2 * j]), acc[j]));
  }
}

// _mm512_reduce_add_ps's order.
float reduce16(const float a[16]) {
  float s[8], t[4];
  for (int i = 0; i < 8; ++i) s[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) t[i] = s[i] + s[i + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

// The rest of a one-row sum: the values past the last whole 64, in double.
float finish_one(double s, const uint16_t* w, const uint16_t* x, int64_t i, int64_t n) {
  for (; i < n; ++i) s += double(widen_b(w[i]) * widen_b(x[i]));
  return float(s);
}

float row_one_portable(const uint16_t* w, const uint16_t* x, int64_t n) {
  float c1[16] = {}, c2[16] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    step32(w + i, x + i, c1);
    step32(w + i + 32, x + i + 32, c2);
  }
  double s = double(reduce16(c1));
  s += double(reduce16(c2));
  return finish_one(s, w, x, i, n);
}

float row_many_portable(const uint16_t* w, const uint16_t* x, int64_t n) {
  float c[16] = {};
  for (int64_t l = 0; l < n; l += 32) step32(w + l, x + l, c);
  return reduce16(c);
}

#ifdef DS_BF_X86
DS_BF16_FN inline __m512bh load_bh(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// reduce16's order with vectors.
DS_BF16_FN inline float reduce_v(__m512 v) {
  const __m256 a =
      _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));  // b0 + b2, b1 + b3
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// R rows from r (cols apart) times x in the one-row order.
template <int R>
DS_BF16_FN void rows_one(const uint16_t* W, int64_t cols, const uint16_t* x, float* y) {
  __m512 c1[R], c2[R];
  for (int k = 0; k < R; ++k) c1[k] = c2[k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= cols; i += 64) {
    const __m512bh x1 = load_bh(x + i), x2 = load_bh(x + i + 32);
    for (int k = 0; k < R; ++k) {
      c1[k] = _mm512_dpbf16_ps(c1[k], load_bh(W + k * cols + i), x1);
      c2[k] = _mm512_dpbf16_ps(c2[k], load_bh(W + k * cols + i + 32), x2);
    }
  }
  for (int k = 0; k < R; ++k) {
    double s = double(reduce_v(c1[k]));
    s += double(reduce_v(c2[k]));
    y[k] = finish_one(s, W + k * cols, x, i, cols);
  }
}

DS_BF16_FN void gemv_simd(const uint16_t* W, int64_t cols, const uint16_t* x, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows_one<4>(W + r * cols, cols, x, y + (r - r0));
  for (; r < r1; ++r) rows_one<1>(W + r * cols, cols, x, y + (r - r0));
}

// RM weight rows times RN activation rows in the many-row order: Y[t * ldy + i]. All
// the loads are from L1 or L2 (a thread's piece of weight rows stays in L2 while the
// activation rows pass); keeping six activation rows' chunk of values in L1 over
// several passes (the chains kept in scratch between them) measured slower.
template <int RM, int RN>
DS_BF16_FN void tile_many(const uint16_t* W, int64_t cols, const uint16_t* X, float* Y, int64_t ldy) {
  __m512 c[RN][RM];
  for (int t = 0; t < RN; ++t)
    for (int i = 0; i < RM; ++i) c[t][i] = _mm512_setzero_ps();
  for (int64_t l = 0; l < cols; l += 32) {
    __m512bh a[RM];
    for (int i = 0; i < RM; ++i) a[i] = load_bh(W + i * cols + l);
    for (int t = 0; t < RN; ++t) {
      const __m512bh b = load_bh(X + t * cols + l);
      for (int i = 0; i < RM; ++i) c[t][i] = _mm512_dpbf16_ps(c[t][i], a[i], b);
    }
  }
  for (int t = 0; t < RN; ++t)
    for (int i = 0; i < RM; ++i) Y[t * ldy + i] = reduce_v(c[t][i]);
}

// Weight rows [r0, r1) times RN activation rows: four weight rows at a time, then one.
template <int RN>
DS_BF16_FN void pass_many(const uint16_t* W, int64_t cols, const uint16_t* X, float* Y, int64_t ldy, int64_t r0,
                          int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) tile_many<4, RN>(W + r * cols, cols, X, Y + (r - r0), ldy);
  for (; r < r1; ++r) tile_many<1, RN>(W + r * cols, cols, X, Y + (r - r0), ldy);
}

// Six activation rows at a time (24 accumulators), then the rest together.
DS_BF16_FN void gemm_simd(const uint16_t* W, int64_t cols, const uint16_t* X, int T, float* Y, int64_t ldy, int64_t r0,
                          int64_t r1) {
  int t = 0;
  for (; t + 6 <= T; t += 6) pass_many<6>(W, cols, X + t * cols, Y + t * ldy, ldy, r0, r1);
  const uint16_t* x = X + t * cols;
  float* y = Y + t * ldy;
  switch (T - t) {
    case 5:
      return pass_many<5>(W, cols, x, y, ldy, r0, r1);
    case 4:
      return pass_many<4>(W, cols, x, y, ldy, r0, r1);
    case 3:
      return pass_many<3>(W, cols, x, y, ldy, r0, r1);
    case 2:
      return pass_many<2>(W, cols, x, y, ldy, r0, r1);
    case 1:
      return pass_many<1>(W, cols, x, y, ldy, r0, r1);
    default:
      return;
  }
}
#endif

}  // namespace

void gemv_bf16_fast(const uint16_t* W, int64_t cols, const uint16_t* x, float* y, int64_t r0, int64_t r1, bool simd) {
#ifdef DS_BF_X86
  if (simd && bf16_fast_available()) return gemv_simd(W, cols, x, y, r0, r1);
#endif
  (void)simd;
  for (int64_t r = r0; r < r1; ++r) y[r - r0] = row_one_portable(W + r * cols, x, cols);
}

void gemm_bf16_fast(const uint16_t* W, int64_t cols, const uint16_t* X, int T, float* Y, int64_t ldy, int64_t r0,
                    int64_t r1, bool simd) {
  if (T < 2 || cols % 32 != 0) {
    for (int t = 0; t < T; ++t) gemv_bf16_fast(W, cols, X + t * cols, Y + t * ldy, r0, r1, simd);
    return;
  }
#ifdef DS_BF_X86
  if (simd && bf16_fast_available()) return gemm_simd(W, cols, X, T, Y, ldy, r0, r1);
#endif
  for (int t = 0; t < T; ++t)
    for (int64_t r = r0; r < r1; ++r) Y[t * ldy + (r - r0)] = row_many_portable(W + r * cols, X + t * cols, cols);
}

}  // namespace ds
