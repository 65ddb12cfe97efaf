#include "perf/quant_fast.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/error.h"

// The AVX2 kernels are compiled for AVX2 whatever the build targets (a function
// attribute) and only called when the processor has it.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DS_QF_X86 1
#include <immintrin.h>
#define DS_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#endif

// What both implementations compute, so that they give the same bits:
// - Rounding: the same float operations per value (a product, then rounding to the
//   nearest integer, ties to even).
// - Each weight block's product with its part of the vector as exact integers (any
//   order gives the same), then float32 operations in a fixed order with explicit
//   fused multiply-adds:
//   Q8_0, Q4_0: eight lane sums per block, lane l = sum of values 4l .. 4l+3 of w x;
//     blocks alternate between two sets of eight accumulators: acc[k % 2][l] =
//     fma(dw * dx, float(lane l), acc[k % 2][l]); the row is hsum8(acc[0] + acc[1]).
//   K types: one accumulator, per block fma(d * dx, float(ints), acc), then for Q4_K
//     and Q5_K fma(dmin * dx, float(-mins), acc).

namespace ds {

const char* products_name(Products p) { return p == Products::Fast ? "fast" : "exact"; }

bool parse_products(const std::string& s, Products& out) {
  if (s == "exact")
    out = Products::Exact;
  else if (s == "fast")
    out = Products::Fast;
  else
    return false;
  return true;
}

int q8_block_for(Precision p) {
  switch (p) {
    case Precision::Q8_0:
    case Precision::Q4_0:
      return 32;
    case Precision::Q4_K:
    case Precision::Q5_K:
    case Precision::Q6_K:
      return 256;
    case Precision::F32:
    case Precision::BF16:
    case Precision::F16:
      break;
  }
  throw Error(std::string("not a quantized type: ") + precision_name(p));
}

bool quant_simd_available() {
#ifdef DS_QF_X86
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  }();
  return ok;
#else
  return false;
#endif
}

namespace {

// ---- Rounding the vector.

// v to the nearest integer, ties to even, for |v| < 2^22 (ggml's nearest_int; what
// _mm256_cvtps_epi32 does in the default rounding mode), clamped to [-127, 127] (the
// products keep |v| <= 127.5 unless x held a NaN or an infinity).
inline int8_t round8(float v) {
  const float t = v + 12582912.0f;  // 1.5 * 2^23: the integer lands in the low mantissa bits
  int32_t i;
  std::memcpy(&i, &t, 4);
  return int8_t(std::clamp((i & 0x007FFFFF) - 0x00400000, -127, 127));
}

void quantize_block32(const float* x, int8_t* q, float& d) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  d = f16_to_f32(f32_to_f16(amax / 127.0f));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = round8(x[j] * id);
}

// The first value of largest magnitude (0 when all are 0).
float signed_max(const float* x, int n) {
  float amax = 0.0f, mx = 0.0f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      mx = x[j];
    }
  return mx;
}

void quantize_block256(const float* x, int8_t* q, float& d, int16_t* sums) {
  const float mx = signed_max(x, 256);
  const float iscale = mx != 0.0f ? -127.0f / mx : 0.0f;
  for (int j = 0; j < 256; ++j) q[j] = round8(iscale * x[j]);
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += q[16 * g + j];
    sums[g] = int16_t(s);
  }
  d = mx != 0.0f ? 1.0f / iscale : 0.0f;
}

#ifdef DS_QF_X86
// 32 products x[j] * f rounded to int8 (saturating: |v| <= 127.5 here).
DS_AVX2_FN inline __m256i round32(const float* x, __m256 f) {
  const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), f));
  const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), f));
  const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), f));
  const __m256i e = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), f));
  // The packs work within 128-bit lanes: [a0-3 b0-3 c0-3 e0-3 | a4-7 b4-7 c4-7 e4-7]
  // as bytes, put back in order by a permutation of 32-bit groups.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, e));
  const __m256i r = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_max_epi8(r, _mm256_set1_epi8(-127));  // -128 only from a NaN
}

DS_AVX2_FN inline float amax32(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x)), _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8)));
  m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 16)));
  m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 24)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

DS_AVX2_FN void quantize_avx2(const float* x, int64_t n, int block, Q8Vector& out) {
  int8_t* q = out.q.data();
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    int8_t* qb = q + b * block;
    if (block == 32) {
      const float amax = amax32(xb);
      out.d[size_t(b)] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, 0));
      const __m256 f = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), round32(xb, f));
      continue;
    }
    float amax = 0.0f;
    for (int j = 0; j < 256; j += 32) amax = std::max(amax, amax32(xb + j));
    float mx = 0.0f;
    for (int j = 0; j < 256; ++j)  // the first value of that magnitude
      if (std::fabs(xb[j]) == amax) {
        mx = xb[j];
        break;
      }
    const float iscale = mx != 0.0f ? -127.0f / mx : 0.0f;
    const __m256 f = _mm256_set1_ps(iscale);
    int16_t* sums = out.sums16.data() + b * 16;
    for (int j = 0; j < 256; j += 32) {
      const __m256i v = round32(xb + j, f);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + j), v);
      // Sums of 16: pairs (maddubs with ones), then fours (madd), then within each lane.
      __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
      s = _mm256_hadd_epi32(s, s);
      s = _mm256_hadd_epi32(s, s);
      sums[j / 16] = int16_t(_mm256_extract_epi32(s, 0));
      sums[j / 16 + 1] = int16_t(_mm256_extract_epi32(s, 4));
    }
    out.d[size_t(b)] = mx != 0.0f ? 1.0f / iscale : 0.0f;
  }
}
#endif

}  // namespace

void quantize_q8(const float* x, int64_t n, int block, Q8Vector& out, bool simd) {
  if (block != 32 && block != 256) throw Error("quantize_q8: blocks of 32 or 256 values");
  if (n < 0 || n % block != 0) throw Error("quantize_q8: " + std::to_string(n) + " values are not whole blocks");
  out.n = n;
  out.block = block;
  out.q.resize(size_t(n));
  out.d.resize(size_t(n / block));
  out.sums16.resize(block == 256 ? size_t(n / 16) : 0);
#ifdef DS_QF_X86
  if (simd && quant_simd_available()) return quantize_avx2(x, n, block, out);
#endif
  (void)simd;
  for (int64_t b = 0; b < n / block; ++b) {
    if (block == 32)
      quantize_block32(x + b * 32, out.q.data() + b * 32, out.d[size_t(b)]);
    else
      quantize_block256(x + b * 256, out.q.data() + b * 256, out.d[size_t(b)], out.sums16.data() + b * 16);
  }
}

namespace {

// ---- The exact integers of one weight block times its part of the vector.
// K types: ints = sum over the sub-blocks of scale times the sub-block's sum of w x
// (Q4_K, Q5_K: the unsigned quants; Q6_K: quants minus 32), and for Q4_K and Q5_K
// mins = sum_j m_j * (sum of sub-block j's x), so the value is
// d dx ints - dmin dx mins.
struct BlockInts {
  int32_t ints = 0, mins = 0;
};

constexpr int kQ4KScales = 4, kQ4KQs = 16, kQ5KQh = 16, kQ5KQs = 48, kQ6KQh = 128, kQ6KScales = 192, kQ6KD = 208;

inline float half_at(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }

// The 6-bit scales and mins of a Q4_K or Q5_K block's 8 sub-blocks, from its 12 bytes:
// sub-blocks 0-3 keep theirs in the low 6 bits of bytes j (scale) and j+4 (min);
// sub-blocks 4-7 the low 4 bits in byte j+4 (scale: low nibble, min: high nibble) and
// the top 2 bits in the top bits of byte j-4 (scale) or j (min). Four at a time in
// 32-bit words.
inline void scales_mins_k4(const uint8_t* s, uint8_t sc[8], uint8_t m[8]) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t six = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, two = 0x03030303u;
  const uint32_t s03 = a & six, m03 = b & six;
  const uint32_t s47 = (c & low4) | (((a >> 6) & two) << 4), m47 = ((c >> 4) & low4) | (((b >> 6) & two) << 4);
  std::memcpy(sc, &s03, 4);
  std::memcpy(sc + 4, &s47, 4);
  std::memcpy(m, &m03, 4);
  std::memcpy(m + 4, &m47, 4);
}

// The 8 lane sums of a Q8_0 or Q4_0 block (lane l: values 4l .. 4l+3).
void lanes_q32(Precision p, const uint8_t* b, const int8_t* x, int32_t lanes[8]) {
  for (int l = 0; l < 8; ++l) {
    int32_t s = 0;
    for (int j = 4 * l; j < 4 * l + 4; ++j) {
      const int w =
          p == Precision::Q8_0 ? int(int8_t(b[2 + j])) : (j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4)) - 8;
      s += w * x[j];
    }
    lanes[l] = s;
  }
}

// Q4_K (qh null) and Q5_K.
BlockInts ints_qk45(const uint8_t* b, const uint8_t* qs, const uint8_t* qh, const int8_t* x, const int16_t* sums) {
  uint8_t sc[8], m[8];
  scales_mins_k4(b + kQ4KScales, sc, m);
  BlockInts r;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* q = qs + 32 * (j / 2);
    int32_t dot = 0;
    for (int l = 0; l < 32; ++l) {
      int u = (j % 2 == 0) ? (q[l] & 0xF) : (q[l] >> 4);
      if (qh) u |= ((qh[l] >> j) & 1) << 4;
      dot += u * x[32 * j + l];
    }
    r.ints += sc[j] * dot;
    r.mins += m[j] * (sums[2 * j] + sums[2 * j + 1]);
  }
  return r;
}

// Q6_K: value i (0..255) of the block uses scale i / 16.
BlockInts ints_q6k(const uint8_t* b, const int8_t* x, const int16_t* sums) {
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
  BlockInts r;
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int h = 0; h < 2; ++h) {
        const int g = 8 * n + 2 * k + h;  // the 16 values 16 g .. 16 g + 15
        int32_t dot = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int low = (b[64 * n + l + 32 * (k % 2)] >> (k < 2 ? 0 : 4)) & 0xF;
          const int u = low | (((b[kQ6KQh + 32 * n + l] >> (2 * k)) & 3) << 4);
          dot += u * x[128 * n + 32 * k + l];
        }
        r.ints += sc[g] * (dot - 32 * sums[g]);
      }
  return r;
}

// ---- The float part, shared by both implementations.

// (a0 + a4) + (a2 + a6) + ((a1 + a5) + (a3 + a7)): the order of the AVX2 reduction.
inline float hsum8(const float* a) {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

// K types: one accumulator, the block's d part then its dmin part.
inline float add_k_block(float acc, float d, float dmin, Precision p, float dx, BlockInts v) {
  acc = std::fma(d * dx, float(v.ints), acc);
  if (p == Precision::Q6_K) return acc;
  return std::fma(dmin * dx, float(-v.mins), acc);
}

BlockInts ints_k_portable(Precision p, const uint8_t* b, const int8_t* x, const int16_t* sums) {
  if (p == Precision::Q4_K) return ints_qk45(b, b + kQ4KQs, nullptr, x, sums);
  if (p == Precision::Q5_K) return ints_qk45(b, b + kQ5KQs, b + kQ5KQh, x, sums);
  return ints_q6k(b, x, sums);
}

float row_q32_portable(Precision p, const uint8_t* row, int64_t nb, const Q8Vector& x) {
  const int B = block_bytes(p);
  float acc[2][8] = {};
  int32_t lanes[8];
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    lanes_q32(p, b, x.q.data() + 32 * k, lanes);
    const float f = half_at(b) * x.d[size_t(k)];
    for (int l = 0; l < 8; ++l) acc[k & 1][l] = std::fma(f, float(lanes[l]), acc[k & 1][l]);
  }
  float a[8];
  for (int l = 0; l < 8; ++l) a[l] = acc[0][l] + acc[1][l];
  return hsum8(a);
}

float row_k_portable(Precision p, const uint8_t* row, int64_t nb, const Q8Vector& x) {
  const int B = block_bytes(p);
  float acc = 0.0f;
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    const BlockInts v = ints_k_portable(p, b, x.q.data() + 256 * k, x.sums16.data() + 16 * k);
    const bool six = p == Precision::Q6_K;
    acc = add_k_block(acc, half_at(six ? b + kQ6KD : b), six ? 0.0f : half_at(b + 2), p, x.d[size_t(k)], v);
  }
  return acc;
}

void gemv_portable(const uint8_t* W, Precision p, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1) {
  const int64_t rb = row_bytes(p, cols), nb = cols / block_elems(p);
  for (int64_t r = r0; r < r1; ++r)
    y[r - r0] = block_elems(p) == 32 ? row_q32_portable(p, W + r * rb, nb, x) : row_k_portable(p, W + r * rb, nb, x);
}

#ifdef DS_QF_X86
// ---- AVX2: the same integers with maddubs (unsigned bytes times signed bytes, pairs
// summed to 16 bits: never saturating here, |w| <= 128 or u <= 63 against |x| <= 127)
// and madd (pairs of 16-bit values times 16-bit factors summed to 32 bits).

DS_AVX2_FN inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

DS_AVX2_FN inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

DS_AVX2_FN inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // a_l + a_(l+4)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                         // (s0 + s2), (s1 + s3)
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

// The 8 lane sums of signed bytes w times signed bytes x (|x| <= 127).
DS_AVX2_FN inline __m256i dot_s8(__m256i w, __m256i x) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// The 32 weights of a Q8_0 or Q4_0 block as signed bytes.
template <Precision P>
DS_AVX2_FN inline __m256i weights32(const uint8_t* b) {
  if constexpr (P == Precision::Q8_0) {
    return load32(b + 2);
  } else {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);  // values 0-15 low, 16-31 high
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
  }
}

template <Precision P>
DS_AVX2_FN inline __m256 add_q32_block(const uint8_t* b, const int8_t* xq, float dx, __m256 acc) {
  const __m256 f = _mm256_set1_ps(_cvtsh_ss(uint16_t(b[0] | (b[1] << 8))) * dx);
  return _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(dot_s8(weights32<P>(b), load32(xq))), acc);
}

template <Precision P>
DS_AVX2_FN void gemv_q32_avx2(const uint8_t* W, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1) {
  constexpr int B = P == Precision::Q8_0 ? 34 : 18;
  const int64_t rb = row_bytes(P, cols), nb = cols / 32;
  const int8_t* xq = x.q.data();
  const float* xd = x.d.data();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = W + r * rb;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t k = 0;
    for (; k + 2 <= nb; k += 2) {
      a0 = add_q32_block<P>(row + k * B, xq + 32 * k, xd[k], a0);
      a1 = add_q32_block<P>(row + (k + 1) * B, xq + 32 * k + 32, xd[k + 1], a1);
    }
    if (k < nb) a0 = add_q32_block<P>(row + k * B, xq + 32 * k, xd[k], a0);
    y[r - r0] = hsum_ps(_mm256_add_ps(a0, a1));
  }
}

// Byte masks that copy 16-bit value j of each 128-bit lane to all of its lane.
DS_AVX2_FN inline __m256i spread16(int j) { return _mm256_set1_epi16(short(0x0100 * (2 * j + 1) + 2 * j)); }

template <bool Five>
DS_AVX2_FN inline BlockInts ints_qk45_avx2(const uint8_t* b, const int8_t* x, const int16_t* sums) {
  const uint8_t* qs = b + (Five ? kQ5KQs : kQ4KQs);
  alignas(16) uint8_t sc[16], m[8];
  scales_mins_k4(b + kQ4KScales, sc, m);
  // The scales as 16-bit values in both lanes; the mins twice each against the sums of 16.
  const __m256i scales =
      _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<__m128i*>(sc))));
  const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m));
  const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
  const __m256i mins = _mm256_madd_epi16(m16, load32(sums));
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  __m256i qh = Five ? load32(b + kQ5KQh) : _mm256_setzero_si256();
  __m256i acc = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load32(qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if (Five) {  // bits 2c and 2c+1 of each qh byte (qh shifted down by 2 per chunk) to bit 4
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
      qh = _mm256_srli_epi16(qh, 2);
    }
    const __m256i p0 = _mm256_maddubs_epi16(lo, load32(x + 64 * c));
    const __m256i p1 = _mm256_maddubs_epi16(hi, load32(x + 64 * c + 32));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_shuffle_epi8(scales, spread16(2 * c))));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_shuffle_epi8(scales, spread16(2 * c + 1))));
  }
  return {hsum_i32(acc), hsum_i32(mins)};
}

DS_AVX2_FN inline BlockInts ints_q6k_avx2(const uint8_t* b, const int8_t* x, const int16_t* sums) {
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const __m128i sc16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
  // 32 times the scales against the sums of 16: the -32 of every value.
  const __m256i shift = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc16), load32(sums));
  __m256i acc = _mm256_setzero_si256();
  for (int n = 0; n < 2; ++n) {
    // This half's 8 scales as 16-bit values in both lanes; group k takes scale 2k in
    // its low lane (values 0-15) and 2k+1 in its high lane.
    const __m256i s = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(n == 0 ? sc16 : _mm_srli_si128(sc16, 8)));
    const __m256i l0 = load32(b + 64 * n), l1 = load32(b + 64 * n + 32), qh = load32(b + kQ6KQh + 32 * n);
    const __m256i u[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
        _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, bits45)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
    for (int k = 0; k < 4; ++k) {
      const __m256i mask =
          _mm256_set_m128i(_mm256_castsi256_si128(spread16(2 * k + 1)), _mm256_castsi256_si128(spread16(2 * k)));
      const __m256i p = _mm256_maddubs_epi16(u[k], load32(x + 128 * n + 32 * k));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_shuffle_epi8(s, mask)));
    }
  }
  return {hsum_i32(_mm256_sub_epi32(acc, _mm256_slli_epi32(shift, 5))), 0};
}

template <Precision P>
DS_AVX2_FN void gemv_k_avx2(const uint8_t* W, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1) {
  constexpr int B = P == Precision::Q4_K ? 144 : P == Precision::Q5_K ? 176 : 210;
  const int64_t rb = row_bytes(P, cols), nb = cols / 256;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = W + r * rb;
    float acc = 0.0f;
    for (int64_t k = 0; k < nb; ++k) {
      const uint8_t* b = row + k * B;
      const int8_t* xq = x.q.data() + 256 * k;
      const int16_t* s = x.sums16.data() + 16 * k;
      if constexpr (P == Precision::Q6_K)
        acc = add_k_block(acc, half_f16c(b + kQ6KD), 0.0f, P, x.d[size_t(k)], ints_q6k_avx2(b, xq, s));
      else
        acc = add_k_block(acc, half_f16c(b), half_f16c(b + 2), P, x.d[size_t(k)],
                          ints_qk45_avx2<P == Precision::Q5_K>(b, xq, s));
    }
    y[r - r0] = acc;
  }
}

void gemv_avx2(const uint8_t* w, Precision p, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1) {
  switch (p) {
    case Precision::Q8_0:
      return gemv_q32_avx2<Precision::Q8_0>(w, cols, x, y, r0, r1);
    case Precision::Q4_0:
      return gemv_q32_avx2<Precision::Q4_0>(w, cols, x, y, r0, r1);
    case Precision::Q4_K:
      return gemv_k_avx2<Precision::Q4_K>(w, cols, x, y, r0, r1);
    case Precision::Q5_K:
      return gemv_k_avx2<Precision::Q5_K>(w, cols, x, y, r0, r1);
    default:
      return gemv_k_avx2<Precision::Q6_K>(w, cols, x, y, r0, r1);
  }
}
#endif

}  // namespace

void gemv_quant_fast(const void* W, Precision p, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1,
                     bool simd) {
  const int block = q8_block_for(p);  // throws for a type that is not quantized
  if (cols % block_elems(p) != 0 || x.n != cols || x.block != block)
    throw Error(std::string("gemv_quant_fast: a ") + precision_name(p) + " matrix of " + std::to_string(cols) +
                " columns and a vector of " + std::to_string(x.n) + " values in blocks of " + std::to_string(x.block));
  const auto* w = static_cast<const uint8_t*>(W);
#ifdef DS_QF_X86
  if (simd && quant_simd_available()) return gemv_avx2(w, p, cols, x, y, r0, r1);
#endif
  (void)simd;
  gemv_portable(w, p, cols, x, y, r0, r1);
}

}  // namespace ds
