#include "perf/vmath.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#define DS_VMATH_AVX2 1
#include <immintrin.h>
#if defined(__AVX512F__) && defined(__AVX512VL__)
#define DS_VMATH_AVX512 1
#endif
#endif

namespace ds {

namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

#ifdef DS_VMATH_AVX2
// exp(x) for 8 lanes. Below -87.3 the result is 0 (and -inf gives 0); above 88.7,
// +inf.
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283f), lo = _mm256_set1_ps(-87.33654f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  // x = k ln2 + r, with ln2 split in two parts for an exact reduction.
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  // e^r = 1 + r + r^2/2! + ... + r^7/7!, Horner form.
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // times 2^k: k in [-126, 128]; 2^k built as (k + 127) << 23, split for k = 128.
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i half = _mm256_srai_epi32(ki, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ki, half), _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_andnot_ps(under, y);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()), over);
  return y;
}

#ifdef DS_VMATH_AVX512
// Lanes 8 .. 15 of v.
inline __m256 upper8(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// exp8 on sixteen lanes: the same operations, so each lane's bits are exp8's.
inline __m512 exp16(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.72283f), lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  const __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i ki = _mm512_cvtps_epi32(k);
  const __m512i half = _mm512_srai_epi32(ki, 1);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(127)), 23));
  const __m512 s2 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ki, half), _mm512_set1_epi32(127)), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  y = _mm512_maskz_mov_ps(__mmask16(~under), y);
  return _mm512_mask_blend_ps(over, y, _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}
#endif

// 1/i! for i = 0..13: e^r to degree 13.
constexpr double kInvFact[] = {1.0,
                               1.0,
                               0.5,
                               1.0 / 6.0,
                               1.0 / 24.0,
                               1.0 / 120.0,
                               1.0 / 720.0,
                               1.0 / 5040.0,
                               1.0 / 40320.0,
                               1.0 / 362880.0,
                               1.0 / 3628800.0,
                               1.0 / 39916800.0,
                               1.0 / 479001600.0,
                               1.0 / 6227020800.0};

// exp(a) for four lanes with -708 <= a <= 0: a = k ln2 + r, |r| <= ln2/2, e^r by its
// Taylor series to degree 13 (truncation below 1e-17), times 2^k built in the
// exponent bits.
inline __m256d exp4d(__m256d a) {
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(a, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(6.93147180369123816490e-01), a);  // exact for |k| < 2^20
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(1.90821492927058770002e-10), r);
  // Estrin's scheme (pairs, then r^2, r^4, r^8): a short dependency chain, so
  // consecutive lanes' polynomials overlap in the pipeline.
  auto c = [](int i) { return _mm256_set1_pd(kInvFact[i]); };
  const __m256d r2 = _mm256_mul_pd(r, r), r4 = _mm256_mul_pd(r2, r2), r8 = _mm256_mul_pd(r4, r4);
  const __m256d q0 = _mm256_fmadd_pd(c(1), r, c(0)), q1 = _mm256_fmadd_pd(c(3), r, c(2)),
                q2 = _mm256_fmadd_pd(c(5), r, c(4)), q3 = _mm256_fmadd_pd(c(7), r, c(6)),
                q4 = _mm256_fmadd_pd(c(9), r, c(8)), q5 = _mm256_fmadd_pd(c(11), r, c(10)),
                q6 = _mm256_fmadd_pd(c(13), r, c(12));
  const __m256d s0 = _mm256_fmadd_pd(q1, r2, q0), s1 = _mm256_fmadd_pd(q3, r2, q2), s2 = _mm256_fmadd_pd(q5, r2, q4);
  const __m256d p = _mm256_fmadd_pd(_mm256_fmadd_pd(q6, r4, s2), r8, _mm256_fmadd_pd(s1, r4, s0));
  // 2^k: k + 1023 (in [1, 1023]) lands in the low mantissa bits of k + 1.5 * 2^52 + 1023,
  // and a shift by 52 moves it into the exponent field.
  const __m256d t = _mm256_add_pd(k, _mm256_set1_pd(6755399441055744.0 + 1023.0));
  const __m256d scale = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(t), 52));
  return _mm256_mul_pd(p, scale);
}

#ifdef DS_VMATH_AVX512
// exp4d on eight lanes: the same operations, so each lane's bits are exp4d's.
inline __m512d exp8d(__m512d a) {
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(a, _mm512_set1_pd(1.4426950408889634)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(6.93147180369123816490e-01), a);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(1.90821492927058770002e-10), r);
  auto c = [](int i) { return _mm512_set1_pd(kInvFact[i]); };
  const __m512d r2 = _mm512_mul_pd(r, r), r4 = _mm512_mul_pd(r2, r2), r8 = _mm512_mul_pd(r4, r4);
  const __m512d q0 = _mm512_fmadd_pd(c(1), r, c(0)), q1 = _mm512_fmadd_pd(c(3), r, c(2)),
                q2 = _mm512_fmadd_pd(c(5), r, c(4)), q3 = _mm512_fmadd_pd(c(7), r, c(6)),
                q4 = _mm512_fmadd_pd(c(9), r, c(8)), q5 = _mm512_fmadd_pd(c(11), r, c(10)),
                q6 = _mm512_fmadd_pd(c(13), r, c(12));
  const __m512d s0 = _mm512_fmadd_pd(q1, r2, q0), s1 = _mm512_fmadd_pd(q3, r2, q2), s2 = _mm512_fmadd_pd(q5, r2, q4);
  const __m512d p = _mm512_fmadd_pd(_mm512_fmadd_pd(q6, r4, s2), r8, _mm512_fmadd_pd(s1, r4, s0));
  const __m512d t = _mm512_add_pd(k, _mm512_set1_pd(6755399441055744.0 + 1023.0));
  const __m512d scale = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_castpd_si512(t), 52));
  return _mm512_mul_pd(p, scale);
}
#endif
#endif

}  // namespace

float max_and_nan(const float* x, int64_t n, bool* nan) {
  float m = -std::numeric_limits<float>::infinity();
  bool bad = false;
  int64_t i = 0;
#ifdef DS_VMATH_AVX2
  __m256 vm = _mm256_set1_ps(m), un = _mm256_setzero_ps();
#ifdef DS_VMATH_AVX512
  __m512 vm16 = _mm512_set1_ps(m);
  __mmask16 un16 = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    un16 |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    vm16 = _mm512_max_ps(vm16, v);
  }
  vm = _mm256_max_ps(_mm512_castps512_ps256(vm16), upper8(vm16));
  bad = un16 != 0;
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vm = _mm256_max_ps(vm, v);  // a NaN in v leaves vm's lane as it was
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, vm);
  for (float v : l) m = v > m ? v : m;
  bad |= _mm256_movemask_ps(un) != 0;
#endif
  for (; i < n; ++i) {
    bad |= std::isnan(x[i]);
    m = x[i] > m ? x[i] : m;
  }
  *nan = bad;
  return m;
}

int64_t first_equal(const float* x, int64_t n, float v) {
  int64_t i = 0;
#ifdef DS_VMATH_AVX2
  const __m256 vv = _mm256_set1_ps(v);
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vv, _CMP_EQ_OQ));
    if (mask) return i + __builtin_ctz(unsigned(mask));
  }
#endif
  for (; i < n; ++i)
    if (x[i] == v) return i;
  return n;
}

void scale_to_float(const double* w, int64_t n, double s, float* p) {
  int64_t i = 0;
#ifdef DS_VMATH_AVX2
  const __m256d vs = _mm256_set1_pd(s);
#ifdef DS_VMATH_AVX512
  const __m512d vs8 = _mm512_set1_pd(s);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(p + i, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_loadu_pd(w + i), vs8)));
#endif
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(p + i, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_loadu_pd(w + i), vs)));
#endif
  for (; i < n; ++i) p[i] = static_cast<float>(w[i] * s);
}

void rms_norm_row(const float* x, int64_t d, const float* g, float eps, float* y) {
  float ss = 0.0f;
  int64_t j = 0;
#ifdef DS_VMATH_AVX512
  if (d >= 16) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_loadu_ps(x));
    for (j = 16; j + 16 <= d; j += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(x + j), _mm512_loadu_ps(x + j), a);
    ss = _mm512_reduce_add_ps(a);
  }
#endif
  for (; j < d; ++j) ss += x[j] * x[j];
  const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
  j = 0;
#ifdef DS_VMATH_AVX512
  const __m512 vi = _mm512_set1_ps(inv);
  for (; j + 16 <= d; j += 16)
    _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_loadu_ps(g + j), _mm512_mul_ps(vi, _mm512_loadu_ps(x + j))));
#endif
  for (; j < d; ++j) y[j] = g[j] * (inv * x[j]);
}

void layer_norm_row(const float* x, int64_t d, const float* g, const float* b, float eps, float* y) {
  double mean = 0, var = 0;
  int64_t j = 0;
#ifdef DS_VMATH_AVX2
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  for (; j + 8 <= d; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double l[4];
  _mm256_store_pd(l, _mm256_add_pd(s0, s1));
  mean = (l[0] + l[1]) + (l[2] + l[3]);
#endif
  for (; j < d; ++j) mean += x[j];
  mean /= double(d);
  j = 0;
#ifdef DS_VMATH_AVX2
  const __m256d m4 = _mm256_set1_pd(mean);
  s0 = _mm256_setzero_pd(), s1 = s0;
  for (; j + 8 <= d; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m4);
    const __m256d c = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m4);
    s0 = _mm256_fmadd_pd(a, a, s0);
    s1 = _mm256_fmadd_pd(c, c, s1);
  }
  _mm256_store_pd(l, _mm256_add_pd(s0, s1));
  var = (l[0] + l[1]) + (l[2] + l[3]);
#endif
  for (; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
  var /= double(d);
  const float inv = float(1.0 / std::sqrt(var + eps));
  const float m = float(mean);
  if (b) {
    for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - m) * inv * g[i] + b[i];
  } else {
    for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - m) * inv * g[i];
  }
}

namespace {

// One key row's scores for every head.
void row_dots(const float* q, const float* k, int n_heads, int group, int dh, float scale, float* out, int64_t stride) {
  for (int h = 0; h < n_heads; ++h) {
    const float* qh = q + int64_t(h) * dh;
    const float* kh = k + int64_t(h / group) * dh;
    float acc = 0.0f;
    int i = 0;
#ifdef DS_VMATH_AVX2
    if (dh >= 16) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0;
      for (; i + 16 <= dh; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), _mm256_loadu_ps(kh + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i + 8), _mm256_loadu_ps(kh + i + 8), a1);
      }
      const __m256 a = _mm256_add_ps(a0, a1);
      __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      t = _mm_add_ps(t, _mm_movehl_ps(t, t));
      acc = _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
    }
#endif
    for (; i < dh; ++i) acc += qh[i] * kh[i];
    out[h * stride] = scale * acc;
  }
}

// One value row added to every head's mix with its weight.
void row_axpys(const float* p, int64_t stride, const float* v, int n_heads, int group, int dh, float* z) {
  for (int h = 0; h < n_heads; ++h) {
    const float w = p[h * stride];
    if (w == 0.0f) continue;
    const float* vh = v + int64_t(h / group) * dh;
    float* zh = z + int64_t(h) * dh;
    int i = 0;
#ifdef DS_VMATH_AVX2
    const __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= dh; i += 8)
      _mm256_storeu_ps(zh + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(vh + i), _mm256_loadu_ps(zh + i)));
#endif
    for (; i < dh; ++i) zh[i] += w * vh[i];
  }
}

#ifdef DS_VMATH_AVX512
// q_h . k over dh (a multiple of 16) in sixteen lanes, not yet summed across them.
inline __m512 dot_lanes(const float* qh, const float* kh, int dh) {
  __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(qh), _mm512_loadu_ps(kh)), a1 = _mm512_setzero_ps();
  int i = 16;
  for (; i + 32 <= dh; i += 32) {
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + i), _mm512_loadu_ps(kh + i), a1);
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + i + 16), _mm512_loadu_ps(kh + i + 16), a0);
  }
  if (i < dh) a1 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + i), _mm512_loadu_ps(kh + i), a1);
  return _mm512_add_ps(a0, a1);
}

// The sums across the lanes of a0 .. a3, in that order: halves of the four vectors
// added pairwise, then quarters, then within each 128-bit quarter.
inline __m128 sum_lanes4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter i: four partial sums of a_i.
  __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(2, 3, 0, 1)));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// dot_lanes for dh == 64 with the query row in registers: the same operations.
inline __m512 dot_lanes64(const __m512 (&q)[4], const float* k) {
  __m512 a0 = _mm512_mul_ps(q[0], _mm512_loadu_ps(k));
  __m512 a1 = _mm512_fmadd_ps(q[1], _mm512_loadu_ps(k + 16), _mm512_setzero_ps());
  a0 = _mm512_fmadd_ps(q[2], _mm512_loadu_ps(k + 32), a0);
  a1 = _mm512_fmadd_ps(q[3], _mm512_loadu_ps(k + 48), a1);
  return _mm512_add_ps(a0, a1);
}

// head_dots for dh == 64 (the bits of dots16): four heads' query rows stay in registers
// while the keys stream past, so a key costs the loads of its row alone.
void dots64(const float* q, const float* K, int64_t ld, int j0, int j1, int n_heads, int group, float scale, float* att,
            int64_t S) {
  const __m128 vs = _mm_set1_ps(scale);
  int h = 0;
  for (; h + 4 <= n_heads; h += 4) {
    __m512 qr[4][4];
    const float* kh[4];
    for (int i = 0; i < 4; ++i) {
      for (int c = 0; c < 4; ++c) qr[i][c] = _mm512_loadu_ps(q + int64_t(h + i) * 64 + 16 * c);
      kh[i] = K + int64_t((h + i) / group) * 64;
    }
    for (int j = j0; j < j1; ++j) {
      const int64_t at = int64_t(j) * ld;
      alignas(16) float d4[4];
      _mm_store_ps(d4, _mm_mul_ps(vs, sum_lanes4(dot_lanes64(qr[0], kh[0] + at), dot_lanes64(qr[1], kh[1] + at),
                                                 dot_lanes64(qr[2], kh[2] + at), dot_lanes64(qr[3], kh[3] + at))));
      for (int i = 0; i < 4; ++i) att[(h + i) * S + j] = d4[i];
    }
  }
  for (; h < n_heads; ++h)
    for (int j = j0; j < j1; ++j)
      att[h * S + j] = scale * _mm512_reduce_add_ps(
                                   dot_lanes(q + int64_t(h) * 64, K + int64_t(j) * ld + int64_t(h / group) * 64, 64));
}

// head_dots for dh a multiple of 16: sixteen lanes per dot, and the sums across the
// lanes four heads at a time.
void dots16(const float* q, const float* K, int64_t ld, int j0, int j1, int n_heads, int group, int dh, float scale,
            float* att, int64_t S) {
  const __m128 vs = _mm_set1_ps(scale);
  for (int j = j0; j < j1; ++j) {
    const float* k = K + int64_t(j) * ld;
    auto lanes = [&](int h) { return dot_lanes(q + int64_t(h) * dh, k + int64_t(h / group) * dh, dh); };
    int h = 0;
    for (; h + 4 <= n_heads; h += 4) {
      alignas(16) float d4[4];
      _mm_store_ps(d4, _mm_mul_ps(vs, sum_lanes4(lanes(h), lanes(h + 1), lanes(h + 2), lanes(h + 3))));
      for (int i = 0; i < 4; ++i) att[(h + i) * S + j] = d4[i];
    }
    for (; h < n_heads; ++h) att[h * S + j] = scale * _mm512_reduce_add_ps(lanes(h));
  }
}

// Columns [c0, c0 + 16 NC) of the mixes of the NH heads h0 .. of kv head g, summed over
// the rows j0 .. j1 in registers (in row order, as row_axpys adds them) and then
// added to z.
template <int NH, int NC>
void mix_block(const float* att, int64_t S, const float* V, int64_t ld, int j0, int j1, int h0, int g, int dh, int c0,
               float* z) {
  __m512 acc[NH][NC];
  for (auto& row : acc)
    for (__m512& a : row) a = _mm512_setzero_ps();
  const float* vg = V + int64_t(g) * dh + c0;
  for (int j = j0; j < j1; ++j) {
    const float* v = vg + int64_t(j) * ld;
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
    for (int h = 0; h < NH; ++h) {
      const __m512 w = _mm512_set1_ps(att[int64_t(h0 + h) * S + j]);
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_fmadd_ps(w, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    float* zh = z + int64_t(h0 + h) * dh + c0;
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(zh + 16 * c, _mm512_add_ps(_mm512_loadu_ps(zh + 16 * c), acc[h][c]));
  }
}

// mix_block over NC-wide column blocks: 64 columns at a time, then 16.
template <int NH>
void mix_heads(const float* att, int64_t S, const float* V, int64_t ld, int j0, int j1, int h0, int g, int dh,
               float* z) {
  int c0 = 0;
  for (; c0 + 64 <= dh; c0 += 64) mix_block<NH, 4>(att, S, V, ld, j0, j1, h0, g, dh, c0, z);
  for (; c0 < dh; c0 += 16) mix_block<NH, 1>(att, S, V, ld, j0, j1, h0, g, dh, c0, z);
}

// head_axpys for dh a multiple of 16: each kv head's rows are read once for up to four
// of its query heads.
void mix16(const float* att, int64_t S, const float* V, int64_t ld, int j0, int j1, int n_heads, int group, int dh,
           float* z) {
  for (int h0 = 0; h0 < n_heads;) {
    const int g = h0 / group, nh = std::min({4, (g + 1) * group - h0, n_heads - h0});
    switch (nh) {
      case 1:
        mix_heads<1>(att, S, V, ld, j0, j1, h0, g, dh, z);
        break;
      case 2:
        mix_heads<2>(att, S, V, ld, j0, j1, h0, g, dh, z);
        break;
      case 3:
        mix_heads<3>(att, S, V, ld, j0, j1, h0, g, dh, z);
        break;
      default:
        mix_heads<4>(att, S, V, ld, j0, j1, h0, g, dh, z);
        break;
    }
    h0 += nh;
  }
}
#endif

}  // namespace

void head_dots(const float* q, const float* K, int64_t ld, int j0, int j1, int n_heads, int group, int dh, float scale,
               float* att, int64_t S) {
#ifdef DS_VMATH_AVX512
  if (dh == 64) return dots64(q, K, ld, j0, j1, n_heads, group, scale, att, S);
  if (dh % 16 == 0) return dots16(q, K, ld, j0, j1, n_heads, group, dh, scale, att, S);
#endif
  for (int j = j0; j < j1; ++j) row_dots(q, K + int64_t(j) * ld, n_heads, group, dh, scale, att + j, S);
}

void head_axpys(const float* att, int64_t S, const float* V, int64_t ld, int j0, int j1, int n_heads, int group, int dh,
                float* z) {
#ifdef DS_VMATH_AVX512
  if (dh % 16 == 0) return mix16(att, S, V, ld, j0, j1, n_heads, group, dh, z);
#endif
  for (int j = j0; j < j1; ++j) row_axpys(att + j, S, V + int64_t(j) * ld, n_heads, group, dh, z);
}

double exp_weights(const float* x, int64_t n, float xmax, double inv_t, double* w) {
  const double m = xmax;
  double sum = 0.0;
  int64_t i = 0;
#ifdef DS_VMATH_AVX2
  if (std::isfinite(xmax)) {
    const __m256d vm = _mm256_set1_pd(m), vt = _mm256_set1_pd(inv_t), one = _mm256_set1_pd(1.0),
                  lo = _mm256_set1_pd(-708.0);
    const __m128 fm = _mm_set1_ps(xmax);
    __m256d acc = _mm256_setzero_pd();
    // Lanes i .. i+3: into w and acc, or (a lane below -708) one by one into sum.
    auto four = [&](int64_t i4) {
      const __m128 xf = _mm_loadu_ps(x + i4);
      const __m256d a = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(xf), vm), vt);
      if (_mm256_movemask_pd(_mm256_cmp_pd(a, lo, _CMP_NGE_UQ))) {  // a < -708 (or -inf) in some lane
        for (int64_t j = i4; j < i4 + 4; ++j) {
          w[j] = x[j] == xmax ? 1.0 : std::exp((static_cast<double>(x[j]) - m) * inv_t);
          sum += w[j];
        }
        return;
      }
      const __m128 eq = _mm_cmpeq_ps(xf, fm);
      const __m256d eqd = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(eq)));
      const __m256d e = _mm256_blendv_pd(exp4d(a), one, eqd);
      _mm256_storeu_pd(w + i4, e);
      acc = _mm256_add_pd(acc, e);
    };
#ifdef DS_VMATH_AVX512
    // Eight lanes at a time, added to acc as two fours in order: the bits of four().
    const __m512d vm8 = _mm512_set1_pd(m), vt8 = _mm512_set1_pd(inv_t), one8 = _mm512_set1_pd(1.0),
                  lo8 = _mm512_set1_pd(-708.0);
    const __m256 fm8 = _mm256_set1_ps(xmax);
    for (; i + 8 <= n; i += 8) {
      const __m256 xf = _mm256_loadu_ps(x + i);
      const __m512d a = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(xf), vm8), vt8);
      if (_mm512_cmp_pd_mask(a, lo8, _CMP_NGE_UQ)) {
        four(i);
        four(i + 4);
        continue;
      }
      const __m512d e = _mm512_mask_blend_pd(_mm256_cmp_ps_mask(xf, fm8, _CMP_EQ_OQ), exp8d(a), one8);
      _mm512_storeu_pd(w + i, e);
      acc = _mm256_add_pd(acc, _mm512_castpd512_pd256(e));
      acc = _mm256_add_pd(acc, _mm512_extractf64x4_pd(e, 1));
    }
#endif
    for (; i + 4 <= n; i += 4) four(i);
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, acc);
    sum += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
#endif
  for (; i < n; ++i) {
    w[i] = x[i] == xmax ? 1.0 : std::exp((static_cast<double>(x[i]) - m) * inv_t);
    sum += w[i];
  }
  return sum;
}

void gelu_tanh_inplace(float* x, int64_t n) {
  int64_t i = 0;
#ifdef DS_VMATH_AVX2
  const __m256 c = _mm256_set1_ps(-2.0f * kGeluC), c3 = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.0f);
#ifdef DS_VMATH_AVX512
  const __m512 c16 = _mm512_set1_ps(-2.0f * kGeluC), c316 = _mm512_set1_ps(0.044715f), one16 = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    const __m512 u = _mm512_fmadd_ps(c316, v3, v);
    const __m512 e = exp16(_mm512_mul_ps(c16, u));
    _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(one16, e)));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 u = _mm256_fmadd_ps(c3, v3, v);                       // x + 0.044715 x^3
    const __m256 e = exp8(_mm256_mul_ps(c, u));                        // exp(-2 sqrt(2/pi) u)
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));  // x * sigmoid(2 ...)
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    x[i] = v / (1.0f + std::exp(-2.0f * kGeluC * (v + 0.044715f * v * v * v)));
  }
}

void silu_mul_inplace(float* a, const float* u, int64_t n) {
  int64_t i = 0;
#ifdef DS_VMATH_AVX2
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
#ifdef DS_VMATH_AVX512
  const __m512 one16 = _mm512_set1_ps(1.0f), neg16 = _mm512_set1_ps(-0.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(a + i);
    const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_castps_si512(neg16))));
    _mm512_storeu_ps(a + i, _mm512_mul_ps(_mm512_div_ps(v, _mm512_add_ps(one16, e)), _mm512_loadu_ps(u + i)));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(a + i);
    const __m256 e = exp8(_mm256_xor_ps(v, neg));
    _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
#endif
  for (; i < n; ++i) {
    const float v = a[i];
    a[i] = v / (1.0f + std::exp(-v)) * u[i];
  }
}

float exp_shift_sum(float* x, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef DS_VMATH_AVX2
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
#ifdef DS_VMATH_AVX512
  // Sixteen lanes at a time, added to acc as two eights in order: exp8's sum.
  const __m512 s16 = _mm512_set1_ps(shift);
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s16));
    _mm512_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    acc = _mm256_add_ps(acc, upper8(e));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float v : lanes) sum += v;
#endif
  for (; i < n; ++i) {
    x[i] = x[i] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

}  // namespace ds
