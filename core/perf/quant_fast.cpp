#include "perf/quant_fast.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "perf/quant_blocks.h"
#include "perf/quant_tiles.h"
#include "util/error.h"

// What both implementations compute, so that they give the same bits:
// - Rounding: the same float operations per value (a product, then rounding to the
//   nearest integer, ties to even).
// - Each weight block's product with its part of the vector as eight exact 32-bit
//   integer lanes (any order gives the same integers), then per row, as ggml's AVX2
//   dot products do: eight float32 accumulators, acc_l = fma(dw * dx, float(lane l),
//   acc_l) block after block (Q4_K, Q5_K: four more for the mins), one horizontal sum
//   in a fixed order when the row ends (details with the kernels below).
// - Q4_0 instead as llama.cpp multiplies the Q4_0 matrices it rearranges at load (eight
//   rows side by side): one float32 chain per row over its blocks' whole integer
//   totals, acc = fma(float(total), dw * dx, acc).

namespace ds {

using namespace qb;

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
  if (!is_quantized(p)) throw Error(std::string("not a quantized type: ") + precision_name(p));
  return block_elems(p);  // an activation block per weight block: 32 (Q8_0, Q4_0) or 256 (the K types)
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
  out.start4.clear();  // prepare_tiles makes them again for these values
  out.sums32.clear();
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

// ---- The exact integers of one weight block times its part of the vector, as eight
// 32-bit lanes: lane l of every 32 values covers values 4l .. 4l+3 (what maddubs then
// madd leave in lane l), each chunk of 32 times its scale.
// - Q8_0, Q4_0: lane l = the sum of w x over values 4l .. 4l+3 of the block.
// - Q4_K, Q5_K: lane l = sum over the 8 sub-blocks j of sc_j times that sub-block's
//   lane l (the unsigned quants); and four mins lanes, lane i =
//   m_(2i) S_(2i) + m_(2i+1) S_(2i+1), S_j the sum of sub-block j's x.
// - Q6_K: lane l = sum over the 8 chunks of 32 of the scale of the lane's 16 values
//   times the chunk's lane l (the unsigned quants), minus 32 (sc_(2l) s_(2l) +
//   sc_(2l+1) s_(2l+1)), s_g the sum of x over values 16 g .. 16 g + 15.
// The float part then follows ggml's AVX2 dot products: per row eight float
// accumulators, per block acc_l = fma(dw * dx, float(lane l), acc_l) (one chain per
// lane, no sum across lanes until the row ends); Q4_K and Q5_K also four mins
// accumulators, accm_i = fma(-dx * dmin, float(mins lane i), accm_i); the row is
// hsum8(acc) (+ (accm_0 + accm_2) + (accm_1 + accm_3)). Q4_0: the lanes' exact sum
// (the block's total), then acc = fma(float(total), dw * dx, acc).

// The 8 lanes of a Q8_0 or Q4_0 block.
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

struct KLanes {
  int32_t lanes[8] = {};
  int32_t mins[4] = {};
};

// Q4_K (qh null) and Q5_K.
void lanes_qk45(const uint8_t* b, const uint8_t* qs, const uint8_t* qh, const int8_t* x, const int16_t* sums,
                KLanes& out) {
  uint8_t sc[8], m[8];
  scales_mins_k4(b + kQ4KScales, sc, m);
  for (int j = 0; j < 8; ++j) {
    const uint8_t* q = qs + 32 * (j / 2);
    for (int l = 0; l < 8; ++l) {
      int32_t dot = 0;
      for (int i = 4 * l; i < 4 * l + 4; ++i) {
        int u = (j % 2 == 0) ? (q[i] & 0xF) : (q[i] >> 4);
        if (qh) u |= ((qh[i] >> j) & 1) << 4;
        dot += u * x[32 * j + i];
      }
      out.lanes[l] += sc[j] * dot;
    }
  }
  for (int i = 0; i < 4; ++i)
    out.mins[i] = m[2 * i] * (sums[4 * i] + sums[4 * i + 1]) + m[2 * i + 1] * (sums[4 * i + 2] + sums[4 * i + 3]);
}

// Q6_K: value i (0..255) of the block uses scale i / 16.
void lanes_q6k(const uint8_t* b, const int8_t* x, const int16_t* sums, KLanes& out) {
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 8; ++l) {
        int32_t dot = 0;
        for (int i = 4 * l; i < 4 * l + 4; ++i) {
          const int low = (b[64 * n + i + 32 * (k % 2)] >> (k < 2 ? 0 : 4)) & 0xF;
          const int u = low | (((b[kQ6KQh + 32 * n + i] >> (2 * k)) & 3) << 4);
          dot += u * x[128 * n + 32 * k + i];
        }
        out.lanes[l] += sc[8 * n + 2 * k + l / 4] * dot;
      }
  for (int l = 0; l < 8; ++l) out.lanes[l] -= 32 * (sc[2 * l] * sums[2 * l] + sc[2 * l + 1] * sums[2 * l + 1]);
}

// ---- The float part, shared by both implementations.

// (a0 + a4) + (a2 + a6) + ((a1 + a5) + (a3 + a7)): the order of the AVX2 reduction.
inline float hsum4(const float* a) { return (a[0] + a[2]) + (a[1] + a[3]); }
inline float hsum8(const float* a) {
  const float s[4] = {a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]};
  return hsum4(s);
}

// Q8_0: eight chains, one per lane; Q4_0: one chain over the blocks' totals.
float row_q32_portable(Precision p, const uint8_t* row, int64_t nb, const Q8Vector& x) {
  const int B = block_bytes(p);
  float acc[8] = {}, chain = 0.0f;
  int32_t lanes[8];
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    lanes_q32(p, b, x.q.data() + 32 * k, lanes);
    const float f = half_at(b) * x.d[size_t(k)];
    if (p == Precision::Q4_0) {
      int32_t total = 0;
      for (int l = 0; l < 8; ++l) total += lanes[l];
      chain = std::fma(float(total), f, chain);
    } else {
      for (int l = 0; l < 8; ++l) acc[l] = std::fma(f, float(lanes[l]), acc[l]);
    }
  }
  return p == Precision::Q4_0 ? chain : hsum8(acc);
}

float row_k_portable(Precision p, const uint8_t* row, int64_t nb, const Q8Vector& x) {
  const int B = block_bytes(p);
  float acc[8] = {}, accm[4] = {};
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    const int8_t* xq = x.q.data() + 256 * k;
    const int16_t* sums = x.sums16.data() + 16 * k;
    const float dx = x.d[size_t(k)];
    KLanes v;
    if (p == Precision::Q6_K) {
      lanes_q6k(b, xq, sums, v);
      const float d = dx * half_at(b + kQ6KD);
      for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(v.lanes[l]), acc[l]);
      continue;
    }
    lanes_qk45(b, b + (p == Precision::Q5_K ? kQ5KQs : kQ4KQs), p == Precision::Q5_K ? b + kQ5KQh : nullptr, xq, sums,
               v);
    const float d = dx * half_at(b), dmin = -dx * half_at(b + 2);
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(v.lanes[l]), acc[l]);
    for (int i = 0; i < 4; ++i) accm[i] = std::fma(dmin, float(v.mins[i]), accm[i]);
  }
  return p == Precision::Q6_K ? hsum8(acc) : hsum8(acc) + hsum4(accm);
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

// The lanes of 16-bit pair sums (madd with ones).
DS_AVX2_FN inline __m256i widen16(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }

// How far ahead of the block in use a row's bytes are asked for (_mm_prefetch): one
// row at a time, 4 KiB ahead, read 1.3-1.5x as fast from memory on one thread as with
// the hardware's prefetching alone (two or four rows per pass, sharing the vector's
// loads, computed faster from cache but read slower from memory).
constexpr int kAhead = 4096;

DS_AVX2_FN inline void prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T0);
}

// One row of Q8_0 blocks times x.
DS_AVX2_FN inline float row_q8_0_avx2(const uint8_t* row, int64_t nb, const Q8Vector& x) {
  const int8_t* xq = x.q.data();
  const float* xd = x.d.data();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * 34;
    prefetch(b);
    const __m256i xv = load32(xq + 32 * k);
    const __m256i w = load32(b + 2);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
    const __m256 f = _mm256_set1_ps(half_f16c(b) * xd[k]);
    acc = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(widen16(p)), acc);
  }
  return hsum_ps(acc);
}

// The exact integer total of a Q4_0 block times x's block, as 32-bit lanes (values
// 4l .. 4l+3 in lane l; (u - 8) x as u x - 8 x, m8 = maddubs(8, x)).
DS_AVX2_FN inline __m256i q4_0_lanes(const uint8_t* b, __m256i xv, __m256i m8) {
  return widen16(_mm256_sub_epi16(_mm256_maddubs_epi16(q4_0_nibbles(b), xv), m8));
}

// One row of Q4_0 blocks times x as one float chain: acc = fma(float(total), dw * dx,
// acc) block after block (for the rows that do not fill a group of eight).
DS_AVX2_FN inline float row_q4_0_avx2(const uint8_t* row, int64_t nb, const Q8Vector& x) {
  float acc = 0.0f;
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * 18;
    prefetch(b);
    const __m256i xv = load32(x.q.data() + 32 * k);
    const __m256i w = q4_0_lanes(b, xv, _mm256_maddubs_epi16(_mm256_set1_epi8(8), xv));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    acc = std::fma(float(_mm_cvtsi128_si32(s)), half_f16c(b) * x.d[size_t(k)], acc);
  }
  return acc;
}

// Eight rows' totals side by side: the sums of the lanes of w[0] .. w[7].
DS_AVX2_FN inline __m256i totals8(const __m256i w[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(w[0], w[1]), _mm256_hadd_epi32(w[2], w[3]));
  const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(w[4], w[5]), _mm256_hadd_epi32(w[6], w[7]));
  // a: rows 0-3, lanes 0-3 in the low half and 4-7 in the high one; c: rows 4-7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

// Block k of eight Q4_0 rows (rb bytes apart) against x: asks for the next eight rows'
// bytes (as many as this step reads: 144, three lines), then acc = fma(float(totals),
// dw * dx, acc) for the eight rows' lanes w.
DS_AVX2_FN inline __m256 chain8_q4_0(const uint8_t* row, int64_t rb, int64_t k, float dx, const __m256i w[8],
                                     __m256 acc) {
  const char* next = reinterpret_cast<const char*>(row + 8 * rb + 144 * k);
  for (int o = 0; o < 192; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
  uint16_t h[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&h[i], row + i * rb + k * 18, 2);
  const __m128i dw = _mm_setr_epi16(short(h[0]), short(h[1]), short(h[2]), short(h[3]), short(h[4]), short(h[5]),
                                    short(h[6]), short(h[7]));
  const __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(dw), _mm256_set1_ps(dx));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals8(w)), f, acc);
}

// Eight consecutive rows of Q4_0 blocks times x, each its own chain as in
// row_q4_0_avx2, the eight side by side in one register.
DS_AVX2_FN inline void rows8_q4_0_avx2(const uint8_t* row, int64_t rb, int64_t nb, const Q8Vector& x, float* y) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t k = 0; k < nb; ++k) {
    const __m256i xv = load32(x.q.data() + 32 * k);
    const __m256i m8 = _mm256_maddubs_epi16(_mm256_set1_epi8(8), xv);
    __m256i w[8];
    for (int i = 0; i < 8; ++i) w[i] = q4_0_lanes(row + i * rb + k * 18, xv, m8);
    acc = chain8_q4_0(row, rb, k, x.d[size_t(k)], w, acc);
  }
  _mm256_storeu_ps(y, acc);
}

// rows8_q4_0_avx2 with AVX-512 VNNI: each row's lanes are one dpbusd of the nibbles
// with x, starting from -8 times x's fours (one dpbusd of 8s per block).
DS_TILE_FN inline void rows8_q4_0_vnni(const uint8_t* row, int64_t rb, int64_t nb, const Q8Vector& x, float* y) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t k = 0; k < nb; ++k) {
    const __m256i xv = load32(x.q.data() + 32 * k);
    const __m256i m8 = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), xv));
    __m256i w[8];
    for (int i = 0; i < 8; ++i) w[i] = _mm256_dpbusd_epi32(m8, q4_0_nibbles(row + i * rb + k * 18), xv);
    acc = chain8_q4_0(row, rb, k, x.d[size_t(k)], w, acc);
  }
  _mm256_storeu_ps(y, acc);
}

// Byte masks that copy 16-bit value j of each 128-bit lane to all of its lane.
DS_AVX2_FN inline __m256i spread16(int j) { return _mm256_set1_epi16(short(0x0100 * (2 * j + 1) + 2 * j)); }

struct KLanesAvx2 {
  __m256i lanes;
  __m128i mins;
};

template <bool Five>
DS_AVX2_FN inline KLanesAvx2 lanes_qk45_avx2(const uint8_t* b, const int8_t* x, const int16_t* sums) {
  const uint8_t* qs = b + (Five ? kQ5KQs : kQ4KQs);
  alignas(16) uint8_t sc[16], m[8];
  scales_mins_k4(b + kQ4KScales, sc, m);
  const __m256i scales =
      _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<__m128i*>(sc))));
  // The sums of 32 (pairs of the sums of 16) against the mins.
  const __m256i s16 = load32(sums);
  const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
  const __m128i mins = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))), s32);
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
  return {acc, mins};
}

DS_AVX2_FN inline __m256i lanes_q6k_avx2(const uint8_t* b, const int8_t* x, const int16_t* sums) {
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
  return _mm256_sub_epi32(acc, _mm256_slli_epi32(shift, 5));
}

// One row of K blocks times x.
template <Precision P>
DS_AVX2_FN inline float row_k_avx2(const uint8_t* row, int64_t nb, const Q8Vector& x) {
  constexpr int B = P == Precision::Q4_K ? 144 : P == Precision::Q5_K ? 176 : 210;
  __m256 acc = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    for (int o = 0; o < B; o += 64) prefetch(b + o);
    const int8_t* xq = x.q.data() + 256 * k;
    const int16_t* s = x.sums16.data() + 16 * k;
    const float dx = x.d[size_t(k)];
    if constexpr (P == Precision::Q6_K) {
      const __m256 d = _mm256_set1_ps(dx * half_f16c(b + kQ6KD));
      acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes_q6k_avx2(b, xq, s)), acc);
    } else {
      const KLanesAvx2 v = lanes_qk45_avx2<P == Precision::Q5_K>(b, xq, s);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * half_f16c(b)), _mm256_cvtepi32_ps(v.lanes), acc);
      accm = _mm_fmadd_ps(_mm_set1_ps(-dx * half_f16c(b + 2)), _mm_cvtepi32_ps(v.mins), accm);
    }
  }
  return P == Precision::Q6_K ? hsum_ps(acc) : hsum_ps(acc) + hsum_ps4(accm);
}

template <Precision P>
DS_AVX2_FN void gemv_rows_avx2(const uint8_t* W, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1) {
  constexpr bool q32 = P == Precision::Q8_0 || P == Precision::Q4_0;
  const int64_t rb = row_bytes(P, cols), nb = cols / (q32 ? 32 : 256);
  int64_t r = r0;
  if constexpr (P == Precision::Q4_0) {
    // A vector prepared for the tiles, where they run: the VNNI kernel (the same bits).
    if (x.start4.size() == size_t(cols / 4) && quant_tiles_available())
      for (; r + 8 <= r1; r += 8) rows8_q4_0_vnni(W + r * rb, rb, nb, x, y + (r - r0));
    for (; r + 8 <= r1; r += 8) rows8_q4_0_avx2(W + r * rb, rb, nb, x, y + (r - r0));
    for (; r < r1; ++r) y[r - r0] = row_q4_0_avx2(W + r * rb, nb, x);
    return;
  }
  for (; r < r1; ++r) {
    if constexpr (q32)
      y[r - r0] = row_q8_0_avx2(W + r * rb, nb, x);
    else
      y[r - r0] = row_k_avx2<P>(W + r * rb, nb, x);
  }
}

void gemv_avx2(const uint8_t* w, Precision p, int64_t cols, const Q8Vector& x, float* y, int64_t r0, int64_t r1) {
  switch (p) {
    case Precision::Q8_0:
      return gemv_rows_avx2<Precision::Q8_0>(w, cols, x, y, r0, r1);
    case Precision::Q4_0:
      return gemv_rows_avx2<Precision::Q4_0>(w, cols, x, y, r0, r1);
    case Precision::Q4_K:
      return gemv_rows_avx2<Precision::Q4_K>(w, cols, x, y, r0, r1);
    case Precision::Q5_K:
      return gemv_rows_avx2<Precision::Q5_K>(w, cols, x, y, r0, r1);
    default:
      return gemv_rows_avx2<Precision::Q6_K>(w, cols, x, y, r0, r1);
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
  // K types with a vector prepared for the tiles, where they run: the tiles' kernels for
  // one activation row (64 values per integer product instead of 32; the same bits).
  if (simd && block == 256 && x.sums32.size() == size_t(cols / 32) && quant_tiles_available())
    return gemm_quant_fast(W, p, cols, &x, 1, y, r1 - r0, r0, r1);
  if (simd && quant_simd_available()) return gemv_avx2(w, p, cols, x, y, r0, r1);
#endif
  (void)simd;
  gemv_portable(w, p, cols, x, y, r0, r1);
}

}  // namespace ds
