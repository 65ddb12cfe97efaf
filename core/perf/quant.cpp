#include "perf/quant.h"

#include <cstring>

#include "util/error.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DS_QUANT_AVX2 1
#include <immintrin.h>
#endif

// Every decoded value is computed with ggml's float operations in ggml's order (for
// Q4_K: d1 = d * sc, m1 = dmin * m, value = d1 * q - m1, each rounded to float32), so
// the results are bit-identical to its dequantize_row_*. The only multiply followed by
// an add, d1 * q - m1, has an exact product (see affine()), so whether a compiler fuses
// it cannot change the bits either.
// Blocks are read byte by byte or with unaligned loads: a block has no alignment
// (Q8_0 is 34 bytes), and GGUF, like x86, is little-endian.

namespace ds {

namespace {

// Offsets inside the blocks (ggml-common.h: block_q4_K etc.).
constexpr int kQ4KScales = 4, kQ4KQs = 16;                  // f16 d, f16 dmin, scales[12], qs[128]
constexpr int kQ5KScales = 4, kQ5KQh = 16, kQ5KQs = 48;     // f16 d, f16 dmin, scales[12], qh[32], qs[128]
constexpr int kQ6KQh = 128, kQ6KScales = 192, kQ6KD = 208;  // ql[128], qh[64], scales[16], f16 d

// The float16 at p as float32, exactly.
inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#ifdef DS_QUANT_AVX2
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K block, packed in 12
// bytes: sub-blocks 0-3 have theirs in the low 6 bits of bytes j and j+4; sub-blocks
// 4-7 have their low 4 bits in a nibble of byte j+4 and their top 2 bits in the top
// bits of bytes j-4 (scale) and j (min).
inline void scale_min_k4(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// ---- Plain decoders, one block each: the portable path.

void decode_q8_0(const uint8_t* b, float* out) {
  const float d = half_at(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) out[j] = float(q[j]) * d;
}

void decode_q4_0(const uint8_t* b, float* out) {
  const float d = half_at(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    out[j] = float((q[j] & 0xF) - 8) * d;
    out[j + 16] = float((q[j] >> 4) - 8) * d;
  }
}

// Q4_K and Q5_K: 4 chunks of 64 values, each the low nibbles (sub-block 2c) then the
// high nibbles (sub-block 2c+1) of 32 bytes; Q5_K adds 16 where bit 2c (low) or 2c+1
// (high) of qh[l] is set.
void decode_qk45(const uint8_t* b, const uint8_t* qs, const uint8_t* qh, float* out) {
  const float d = half_at(b), dmin = half_at(b + 2);
  for (int c = 0; c < 4; ++c, qs += 32, out += 64) {
    int s0, m0, s1, m1;
    scale_min_k4(b + kQ4KScales, 2 * c, s0, m0);
    scale_min_k4(b + kQ4KScales, 2 * c + 1, s1, m1);
    const float d0 = d * float(s0), n0 = dmin * float(m0), d1 = d * float(s1), n1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      const int hi0 = qh ? ((qh[l] >> (2 * c)) & 1) << 4 : 0, hi1 = qh ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
      out[l] = d0 * float((qs[l] & 0xF) | hi0) - n0;
      out[l + 32] = d1 * float((qs[l] >> 4) | hi1) - n1;
    }
  }
}

void decode_q4_k(const uint8_t* b, float* out) { decode_qk45(b, b + kQ4KQs, nullptr, out); }
void decode_q5_k(const uint8_t* b, float* out) { decode_qk45(b, b + kQ5KQs, b + kQ5KQh, out); }

// Q6_K: two halves of 128 values; in each, value l + 32k (k = 0..3) takes a nibble of
// ql (low nibbles of ql[l], ql[l+32], then their high nibbles) and bits 2k, 2k+1 of
// qh[l] on top, minus 32, times the scale of its 16 values.
void decode_q6_k(const uint8_t* b, float* out) {
  const float d = half_at(b + kQ6KD);
  const uint8_t *ql = b, *qh = b + kQ6KQh;
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
  for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, out += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * float(sc[is + 0]) * float(q1);
      out[l + 32] = d * float(sc[is + 2]) * float(q2);
      out[l + 64] = d * float(sc[is + 4]) * float(q3);
      out[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

using DecodeFn = void (*)(const uint8_t*, float*);

DecodeFn decoder(Precision p) {
  switch (p) {
    case Precision::Q8_0:
      return decode_q8_0;
    case Precision::Q4_0:
      return decode_q4_0;
    case Precision::Q4_K:
      return decode_q4_k;
    case Precision::Q5_K:
      return decode_q5_k;
    case Precision::Q6_K:
      return decode_q6_k;
    case Precision::F32:
    case Precision::BF16:
    case Precision::F16:
      break;
  }
  throw Error(std::string("not a quantized type: ") + precision_name(p));
}

// One row, a block at a time through a stack buffer, eight partial sums.
float dot_row_portable(DecodeFn decode, int E, int B, const uint8_t* row, int64_t cols, const float* x) {
  float buf[256], acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t c0 = 0; c0 < cols; c0 += E, row += B) {
    decode(row, buf);
    for (int j = 0; j < E; ++j) acc[j & 7] += buf[j] * x[c0 + j];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

#ifdef DS_QUANT_AVX2
// ---- AVX2 decoders: each hands its block to a sink 32 values at a time, as four
// vectors of eight, so the same decoding serves the dot products and dequantize_row.

struct F32x32 {
  __m256 v[4];
};

// 32 int8 values, given as two halves of 16, as floats.
inline F32x32 widen_s8(__m128i lo, __m128i hi) {
  return {
      {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))),
       _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))}};
}
inline F32x32 widen_s8(__m256i v) { return widen_s8(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); }

// d * q - m for each value, where d = (float16 d) * (6-bit scale) and 0 <= q < 32. ggml
// rounds the product before the subtraction; one fused multiply-subtract gives the same
// bits because the product is exact in float32 (at most 11 + 6 + 5 significant bits),
// so in both the only rounding is that of the difference.
inline F32x32 affine(F32x32 q, float d, float m) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  return {{_mm256_fmsub_ps(dv, q.v[0], mv), _mm256_fmsub_ps(dv, q.v[1], mv), _mm256_fmsub_ps(dv, q.v[2], mv),
           _mm256_fmsub_ps(dv, q.v[3], mv)}};
}
// Values 0-15 times d0, 16-31 times d1.
inline F32x32 scale2(F32x32 q, float d0, float d1) {
  const __m256 a = _mm256_set1_ps(d0), b = _mm256_set1_ps(d1);
  return {{_mm256_mul_ps(a, q.v[0]), _mm256_mul_ps(a, q.v[1]), _mm256_mul_ps(b, q.v[2]), _mm256_mul_ps(b, q.v[3])}};
}

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 32 integers of a Q8_0 or Q4_0 block, before the scale d (the float16 at b).
template <Precision P>
inline F32x32 unscaled_q32(const uint8_t* b) {
  if constexpr (P == Precision::Q8_0) {
    return widen_s8(load32(b + 2));
  } else {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);
    return widen_s8(lo, hi);
  }
}

template <class Sink>
inline void block_q8_0(const uint8_t* b, Sink& s) {
  const float d = half_at(b);
  s(0, scale2(unscaled_q32<Precision::Q8_0>(b), d, d));
}

template <class Sink>
inline void block_q4_0(const uint8_t* b, Sink& s) {
  const float d = half_at(b);
  s(0, scale2(unscaled_q32<Precision::Q4_0>(b), d, d));
}

// Q4_K (qh == nullptr) and Q5_K: per chunk of 64, the low nibbles then the high ones.
// For Q5_K, qh is shifted down by 2 per chunk so that bits 0 and 1 of each byte are
// the chunk's fifth bits, moved to bit 4 by the left shifts (16-bit shifts, but the
// masks keep only bits that stayed inside their byte).
template <bool Five, class Sink>
inline void block_qk45(const uint8_t* b, Sink& s) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* qs = b + (Five ? kQ5KQs : kQ4KQs);
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  __m256i qh = Five ? load32(b + kQ5KQh) : _mm256_setzero_si256();
#pragma GCC unroll 4  // so that every vector stays in a register
  for (int c = 0; c < 4; ++c) {
    int s0, m0, s1, m1;
    scale_min_k4(b + kQ4KScales, 2 * c, s0, m0);
    scale_min_k4(b + kQ4KScales, 2 * c + 1, s1, m1);
    const __m256i q = load32(qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if (Five) {
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
      qh = _mm256_srli_epi16(qh, 2);
    }
    s(64 * c, affine(widen_s8(lo), d * float(s0), dmin * float(m0)));
    s(64 * c + 32, affine(widen_s8(hi), d * float(s1), dmin * float(m1)));
  }
}

// Q6_K: per half, four groups of 32 built from ql nibbles and two bits of qh moved to
// bits 4-5 (again 16-bit shifts with masks that keep each byte's own bits).
template <class Sink>
inline void block_q6_k(const uint8_t* b, Sink& s) {
  const float d = half_at(b + kQ6KD);
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n, sc += 8) {
    const __m256i l0 = load32(b + 64 * n), l1 = load32(b + 64 * n + 32), qh = load32(b + kQ6KQh + 32 * n);
    const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
    const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
    const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, bits45));
    const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
    const int o = 128 * n;
    s(o, scale2(widen_s8(_mm256_sub_epi8(q1, k32)), d * float(sc[0]), d * float(sc[1])));
    s(o + 32, scale2(widen_s8(_mm256_sub_epi8(q2, k32)), d * float(sc[2]), d * float(sc[3])));
    s(o + 64, scale2(widen_s8(_mm256_sub_epi8(q3, k32)), d * float(sc[4]), d * float(sc[5])));
    s(o + 96, scale2(widen_s8(_mm256_sub_epi8(q4, k32)), d * float(sc[6]), d * float(sc[7])));
  }
}

template <Precision P, class Sink>
inline void decode_block(const uint8_t* b, Sink& s) {
  if constexpr (P == Precision::Q8_0) block_q8_0(b, s);
  if constexpr (P == Precision::Q4_0) block_q4_0(b, s);
  if constexpr (P == Precision::Q4_K) block_qk45<false>(b, s);
  if constexpr (P == Precision::Q5_K) block_qk45<true>(b, s);
  if constexpr (P == Precision::Q6_K) block_q6_k(b, s);
}

// Stores the values of the block at out.
struct StoreSink {
  float* out;
  void operator()(int i, const F32x32& w) const {
    _mm256_storeu_ps(out + i, w.v[0]);
    _mm256_storeu_ps(out + i + 8, w.v[1]);
    _mm256_storeu_ps(out + i + 16, w.v[2]);
    _mm256_storeu_ps(out + i + 24, w.v[3]);
  }
};

// Adds the values of the block times x (the block's part of the vector) into four
// accumulators, one per vector of eight.
struct DotSink {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const float* x = nullptr;
  void operator()(int i, const F32x32& w) {
    a0 = _mm256_fmadd_ps(w.v[0], _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(w.v[1], _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(w.v[2], _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(x + i + 24), a3);
  }
  float sum() const {
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

// Q8_0 and Q4_0: a value is q * d with |q| <= 128, exact in float32 (at most 8 + 11
// significant bits), so the row's sum is that of d * (q x) over the blocks: each block's
// sum of q x is made first and scaled by d once, a multiply per block instead of one per
// value. Two accumulators, for alternate blocks, hide the latency of the scaling FMA.
// The sum of q x over the 32 values of the block at b (x: the block's part of the vector).
template <Precision P>
inline __m256 block_qx(const uint8_t* b, const float* x) {
  const F32x32 q = unscaled_q32<P>(b);
  const __m256 s = _mm256_fmadd_ps(q.v[2], _mm256_loadu_ps(x + 16), _mm256_mul_ps(q.v[0], _mm256_loadu_ps(x)));
  const __m256 t = _mm256_fmadd_ps(q.v[3], _mm256_loadu_ps(x + 24), _mm256_mul_ps(q.v[1], _mm256_loadu_ps(x + 8)));
  return _mm256_add_ps(s, t);
}

template <Precision P>
float dot_row_q32(const uint8_t* b, int64_t cols, const float* x) {
  constexpr int B = P == Precision::Q8_0 ? 34 : 18;
  DotSink sum;  // a0 and a1: even and odd blocks
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64, b += 2 * B) {
    sum.a0 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(b)), block_qx<P>(b, x + c), sum.a0);
    sum.a1 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(b + B)), block_qx<P>(b + B, x + c + 32), sum.a1);
  }
  if (c < cols) sum.a0 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(b)), block_qx<P>(b, x + c), sum.a0);
  return sum.sum();
}

// One row at a time, its blocks in order: the matrix is read as one sequential stream.
template <Precision P>
void gemv_avx2(const uint8_t* W, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1) {
  constexpr int E = P == Precision::Q8_0 || P == Precision::Q4_0 ? 32 : 256;
  const int B = block_bytes(P);
  const int64_t rb = row_bytes(P, cols);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* b = W + r * rb;
    if constexpr (E == 32) {
      y[r - r0] = dot_row_q32<P>(b, cols, x);
    } else {
      DotSink s;
      for (int64_t c = 0; c < cols; c += E, b += B) {
        s.x = x + c;
        decode_block<P>(b, s);
      }
      y[r - r0] = s.sum();
    }
  }
}

template <Precision P>
void dequantize_avx2(const uint8_t* blocks, int64_t n_blocks, float* out) {
  constexpr int E = P == Precision::Q8_0 || P == Precision::Q4_0 ? 32 : 256;
  for (int64_t i = 0; i < n_blocks; ++i) {
    StoreSink s{out + i * E};
    decode_block<P>(blocks + i * block_bytes(P), s);
  }
}
#endif

void check_quantized(Precision p, int64_t cols) {
  if (!is_quantized(p)) throw Error(std::string("not a quantized type: ") + precision_name(p));
  if (cols % block_elems(p) != 0)
    throw Error(std::string(precision_name(p)) + " rows of " + std::to_string(cols) +
                " values: not a whole number of blocks of " + std::to_string(block_elems(p)));
}

}  // namespace

void dequantize_row(Precision p, const void* blocks, int64_t cols, float* out) {
  check_quantized(p, cols);
  const auto* b = static_cast<const uint8_t*>(blocks);
  const int64_t n = cols / block_elems(p);
#ifdef DS_QUANT_AVX2
  switch (p) {
    case Precision::Q8_0:
      return dequantize_avx2<Precision::Q8_0>(b, n, out);
    case Precision::Q4_0:
      return dequantize_avx2<Precision::Q4_0>(b, n, out);
    case Precision::Q4_K:
      return dequantize_avx2<Precision::Q4_K>(b, n, out);
    case Precision::Q5_K:
      return dequantize_avx2<Precision::Q5_K>(b, n, out);
    case Precision::Q6_K:
      return dequantize_avx2<Precision::Q6_K>(b, n, out);
    case Precision::F32:
    case Precision::BF16:
    case Precision::F16:
      break;
  }
#endif
  const DecodeFn decode = decoder(p);
  const int E = block_elems(p), B = block_bytes(p);
  for (int64_t i = 0; i < n; ++i) decode(b + i * B, out + i * E);
}

void gemv_quant(const void* W, Precision p, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1) {
  check_quantized(p, cols);
  const auto* w = static_cast<const uint8_t*>(W);
#ifdef DS_QUANT_AVX2
  switch (p) {
    case Precision::Q8_0:
      return gemv_avx2<Precision::Q8_0>(w, cols, x, y, r0, r1);
    case Precision::Q4_0:
      return gemv_avx2<Precision::Q4_0>(w, cols, x, y, r0, r1);
    case Precision::Q4_K:
      return gemv_avx2<Precision::Q4_K>(w, cols, x, y, r0, r1);
    case Precision::Q5_K:
      return gemv_avx2<Precision::Q5_K>(w, cols, x, y, r0, r1);
    case Precision::Q6_K:
      return gemv_avx2<Precision::Q6_K>(w, cols, x, y, r0, r1);
    case Precision::F32:
    case Precision::BF16:
    case Precision::F16:
      break;
  }
#endif
  const DecodeFn decode = decoder(p);
  const int E = block_elems(p), B = block_bytes(p);
  const int64_t rb = row_bytes(p, cols);
  for (int64_t r = r0; r < r1; ++r) y[r - r0] = dot_row_portable(decode, E, B, w + r * rb, cols, x);
}

void rows_f32_quant(const void* W, Precision p, int64_t cols, int64_t r0, int64_t r1, float* out) {
  check_quantized(p, cols);
  const int64_t rb = row_bytes(p, cols);
  for (int64_t r = r0; r < r1; ++r)
    dequantize_row(p, static_cast<const uint8_t*>(W) + r * rb, cols, out + (r - r0) * cols);
}

}  // namespace ds
