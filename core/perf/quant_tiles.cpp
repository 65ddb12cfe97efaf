#include "perf/quant_tiles.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "perf/quant_blocks.h"
#include "util/error.h"

// How the tiles give gemv_quant_fast's bits (perf/quant_fast.cpp documents its lanes):
// - A block's integer lanes are exact, so any instructions that sum the same products
//   give the same integers. Here 64 values at a time in 16 lanes (lane L: values
//   4L .. 4L+3), folded to 8 at the block's end: lane l + lane l + 8, which are lane
//   l of two consecutive 32-value chunks, as the row kernels sum them.
// - Q8_0 and Q4_0 weights are taken unsigned (w + 128, or the stored nibble), each
//   lane starting from -128 or -8 times the sum of its four x's (prepare_tiles), so one
//   dpbusd (unsigned bytes times signed bytes, four per lane) gives the lane (Q4_0: the
//   block's total starting from -8 times the sum of its 32).
// - K types: maddubs (pairs of unsigned weights times signed x's, 16 bits, never
//   saturating: at most 2 * 63 * 127) and dpwssd with the sub-blocks' scales (pairs of
//   16-bit values times 16-bit scales, summed into the 32-bit lanes).
// - The float part is the row kernels', term for term: per block acc = fma(dx * dw,
//   float(lanes), acc), the mins' accm = fma(-dx * dmin, float(mins), accm), and the
//   same horizontal sums when the row ends.
// - Q4_0 rows are one float chain each over their blocks' totals, so sixteen weight
//   rows share a register, one row per 32-bit lane: a thread's rows are rearranged once
//   into scratch (pack_q4_0), and each dpbusd multiplies four values of sixteen rows
//   with the same four x's, broadcast; acc = fma(float(totals), dw * dx, acc) is then
//   one instruction for sixteen rows. The file's blocks stay where they are.

namespace ds {

using namespace qb;

bool quant_tiles_available() {
#ifdef DS_QF_X86
  static const bool ok = [] {
    __builtin_cpu_init();
    return quant_simd_available() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }();
  return ok;
#else
  return false;
#endif
}

void prepare_tiles(Precision p, Q8Vector& x) {
  const int block = q8_block_for(p);
  if (x.block != block || x.n % block != 0 || x.q.size() != size_t(x.n))
    throw Error(std::string("prepare_tiles: a vector in blocks of ") + std::to_string(x.block) + " for " +
                precision_name(p) + " weights");
  if (block == 32) {
    const int f = p == Precision::Q8_0 ? -128 : -8;
    x.start4.resize(size_t(x.n / 4));
    x.sums32.clear();
    for (size_t i = 0; i < x.start4.size(); ++i)
      x.start4[i] = f * (int(x.q[4 * i]) + x.q[4 * i + 1] + x.q[4 * i + 2] + x.q[4 * i + 3]);
    return;
  }
  x.start4.clear();
  x.sums32.resize(size_t(x.n / 32));
  for (size_t i = 0; i < x.sums32.size(); ++i) x.sums32[i] = int16_t(x.sums16[2 * i] + x.sums16[2 * i + 1]);
}

namespace {

void check_inputs(Precision p, int64_t cols, const Q8Vector* xs, int T) {
  const int block = q8_block_for(p);  // throws for a type that is not quantized
  if (cols % block_elems(p) != 0) throw Error("gemm_quant_fast: " + std::to_string(cols) + " columns");
  for (int t = 0; t < T; ++t) {
    const Q8Vector& x = xs[t];
    const bool prepared = block == 32 ? x.start4.size() == size_t(x.n / 4) : x.sums32.size() == size_t(x.n / 32);
    if (x.n != cols || x.block != block || !prepared)
      throw Error(std::string("gemm_quant_fast: a ") + precision_name(p) + " matrix of " + std::to_string(cols) +
                  " columns and a vector of " + std::to_string(x.n) + " values in blocks of " +
                  std::to_string(x.block) + (prepared ? "" : ", not prepared for tiles"));
  }
}

#ifdef DS_QF_X86

// The C activation rows of one tile.
template <int C>
struct Cols {
  const int8_t* q[C];
  const float* d[C];
  const int32_t* start4[C];
  const int16_t* sums16[C];
  const int16_t* sums32[C];
};

template <int C>
Cols<C> cols_at(const Q8Vector* xs, int t0) {
  Cols<C> c;
  for (int t = 0; t < C; ++t) {
    const Q8Vector& x = xs[t0 + t];
    c.q[t] = x.q.data();
    c.d[t] = x.d.data();
    c.start4[t] = x.start4.data();
    c.sums16[t] = x.sums16.data();
    c.sums32[t] = x.sums32.data();
  }
  return c;
}

// Indices of permutexvar_epi16 that spread 16-bit scales over the 32 pair sums of 64
// values: Q4_K / Q5_K chunk c: pairs 0-15 take scale 2c, 16-31 scale 2c+1; Q6_K
// values 64m .. 64m+63: pair p takes scale 4m + p / 8 (one scale per 16 values).
struct Spread {
  alignas(64) int16_t k45[4][32];
  alignas(64) int16_t k6[4][32];
};
constexpr Spread make_spread() {
  Spread s{};
  for (int c = 0; c < 4; ++c)
    for (int p = 0; p < 32; ++p) {
      s.k45[c][p] = int16_t(2 * c + p / 16);
      s.k6[c][p] = int16_t(4 * c + p / 8);
    }
  return s;
}
constexpr Spread kSpread = make_spread();

DS_TILE_FN inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }

DS_TILE_FN inline __m256i fold(__m512i a) {
  return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

// A Q8_0 block's 32 weights as unsigned bytes: w + 128.
DS_TILE_FN inline __m256i unsigned32(const uint8_t* b) {
  return _mm256_xor_si256(load32(b + 2), _mm256_set1_epi8(char(0x80)));
}

// unsigned32 in both halves of 512 bits: the block's bytes broadcast from memory.
DS_TILE_FN inline __m512i unsigned32_twice(const uint8_t* b) {
  return _mm512_xor_si512(_mm512_broadcast_i64x4(load32(b + 2)), _mm512_set1_epi8(char(0x80)));
}

// Value t of v in all 8 lanes.
DS_TILE_FN inline __m256 lane(__m256 v, int t) { return _mm256_permutexvar_ps(_mm256_set1_epi32(t), v); }

// R consecutive rows (rb bytes apart) of Q8_0 blocks times C activation rows:
// y[t * ldy + i] for row i. Two blocks at a time in 512 bits (the lanes of block k,
// then of block k + 1, fused into the accumulators in that order); dxT[8 k + t] is
// activation row t's scale of block k, so that one product gives a row's dw * dx for
// every activation row. The R weight rows share each load of the activations' blocks.
// For a single activation row (C = 1); rows_q8_0_pairs below takes them in pairs.
template <int R, int C>
DS_TILE_FN void rows_q8_0(const uint8_t* row, int64_t rb, int64_t nb, const Cols<C>& x, const float* dxT, float* y,
                          int64_t ldy) {
  constexpr int B = 34;
  __m256 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < C; ++t) acc[i][t] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= nb; k += 2) {
    __m512i u[R];
    __m256 f0[R], f1[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* b = row + i * rb + k * B;
      u[i] = _mm512_inserti64x4(_mm512_castsi256_si512(unsigned32(b)), unsigned32(b + B), 1);
      f0[i] = _mm256_mul_ps(_mm256_set1_ps(half_f16c(b)), _mm256_loadu_ps(dxT + 8 * k));
      f1[i] = _mm256_mul_ps(_mm256_set1_ps(half_f16c(b + B)), _mm256_loadu_ps(dxT + 8 * k + 8));
    }
    for (int t = 0; t < C; ++t) {
      const __m512i start = load64(x.start4[t] + 8 * k), xq = load64(x.q[t] + 32 * k);
      for (int i = 0; i < R; ++i) {
        const __m512 v = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[i], xq));
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        acc[i][t] = _mm256_fmadd_ps(lane(f0[i], t), _mm512_castps512_ps256(v), acc[i][t]);
        acc[i][t] = _mm256_fmadd_ps(lane(f1[i], t), hi, acc[i][t]);
      }
    }
  }
  for (; k < nb; ++k) {
    __m256i u[R];
    __m256 f[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* b = row + i * rb + k * B;
      u[i] = unsigned32(b);
      f[i] = _mm256_mul_ps(_mm256_set1_ps(half_f16c(b)), _mm256_loadu_ps(dxT + 8 * k));
    }
    for (int t = 0; t < C; ++t) {
      const __m256i start = load32(x.start4[t] + 8 * k), xq = load32(x.q[t] + 32 * k);
      for (int i = 0; i < R; ++i)
        acc[i][t] = _mm256_fmadd_ps(lane(f[i], t), _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, u[i], xq)), acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < C; ++t) y[t * ldy + i] = hsum_ps(acc[i][t]);
}

// rows_q8_0 for an even C with two activation rows in each 512-bit register: block k's
// lanes against row 2p in the low half and against row 2p + 1 in the high half, the
// weights' 32 bytes in both. Each half takes the row kernel's operations in its order
// (one block at a time: fma(dw * dx, float(lanes), acc)), so the bits are rows_q8_0's,
// with one product, conversion and fused multiply-add for two activation rows.
template <int R, int C>
DS_TILE_FN void rows_q8_0_pairs(const uint8_t* row, int64_t rb, int64_t nb, const Cols<C>& x, const float* dxT,
                                float* y, int64_t ldy) {
  static_assert(C % 2 == 0);
  constexpr int B = 34, NP = C / 2;
  __m512 acc[R][NP];
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
  __m512i pick[NP];  // lane 2p in the low half, 2p + 1 in the high half
  for (int p = 0; p < NP; ++p) pick[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
  for (int64_t k = 0; k < nb; ++k) {
    __m512i u[R];
    __m512 f[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* b = row + i * rb + k * B;
      u[i] = unsigned32_twice(b);
      f[i] = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(half_f16c(b)), _mm256_loadu_ps(dxT + 8 * k)));
    }
    for (int p = 0; p < NP; ++p) {
      const __m512i start = _mm512_inserti64x4(_mm512_castsi256_si512(load32(x.start4[2 * p] + 8 * k)),
                                               load32(x.start4[2 * p + 1] + 8 * k), 1);
      const __m512i xq =
          _mm512_inserti64x4(_mm512_castsi256_si512(load32(x.q[2 * p] + 32 * k)), load32(x.q[2 * p + 1] + 32 * k), 1);
      for (int i = 0; i < R; ++i)
        acc[i][p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[p], f[i]),
                                    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[i], xq)), acc[i][p]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < NP; ++p) {
      y[2 * p * ldy + i] = hsum_ps(_mm512_castps512_ps256(acc[i][p]));
      y[(2 * p + 1) * ldy + i] = hsum_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][p]), 1)));
    }
}

// A Q4_K (Five false) or Q5_K block unpacked for the tiles: U[c] its unsigned values
// 64c .. 64c+63 (sub-blocks 2c and 2c+1) as bytes, S[c] their sub-blocks' scales spread
// over the 32 pair sums of those values; returns its 8 mins as 16-bit values.
template <bool Five>
DS_TILE_FN inline __m128i unpack_k45(const uint8_t* b, __m512i U[4], __m512i S[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
  const __m512i nibble = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);  // the low half's low nibbles, the high's high
  alignas(16) uint8_t sc[16] = {}, m[16] = {};
  scales_mins_k4(b + kQ4KScales, sc, m);
  const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<__m128i*>(sc))));
  const uint8_t* qs = b + (Five ? kQ5KQs : kQ4KQs);
  const __m512i qh = Five ? _mm512_broadcast_i64x4(load32(b + kQ5KQh)) : _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    U[c] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcast_i64x4(load32(qs + 32 * c)), nibble), low4);
    if constexpr (Five) {  // bit 2c (low half) or 2c+1 (high half) of each qh byte to bit 4, within its byte
      const __m512i rot = _mm512_setr_epi64((4 - 2 * c) & 63, (4 - 2 * c) & 63, (4 - 2 * c) & 63, (4 - 2 * c) & 63,
                                            (3 - 2 * c) & 63, (3 - 2 * c) & 63, (3 - 2 * c) & 63, (3 - 2 * c) & 63);
      U[c] = _mm512_or_si512(U[c], _mm512_and_si512(_mm512_rolv_epi64(qh, rot), bit4));
    }
    S[c] = _mm512_permutexvar_epi16(load64(kSpread.k45[c]), sc16);
  }
  return _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<__m128i*>(m)));
}

// A Q6_K block unpacked the same way (U[c]: values 64c .. 64c+63, unsigned 0..63;
// S[c]: one scale per 16 values spread over the pair sums); returns its 16 scales as
// 16-bit values.
DS_TILE_FN inline __m256i unpack_q6k(const uint8_t* b, __m512i U[4], __m512i S[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  // qh's 2-bit fields to bits 4-5, within each byte: chunks 0 and 1 of a half take
  // bits 0-1 and 2-3, chunks 2 and 3 bits 4-5 and 6-7.
  const __m512i rot01 = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2),
                rot23 = _mm512_setr_epi64(0, 0, 0, 0, 62, 62, 62, 62);
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + kQ6KScales)));
  for (int n = 0; n < 2; ++n) {  // values 128n .. 128n+63, then 128n+64 .. 128n+127
    const __m512i ql = load64(b + 64 * n), qh = _mm512_broadcast_i64x4(load32(b + kQ6KQh + 32 * n));
    U[2 * n] = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_rolv_epi64(qh, rot01), bits45));
    U[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                   _mm512_and_si512(_mm512_rolv_epi64(qh, rot23), bits45));
  }
  for (int c = 0; c < 4; ++c) S[c] = _mm512_permutexvar_epi16(load64(kSpread.k6[c]), _mm512_castsi256_si512(sc16));
  return sc16;
}

// One row of Q4_K (Five false) or Q5_K blocks times C activation rows.
template <bool Five, int C>
DS_TILE_FN void row_k45(const uint8_t* row, int64_t nb, const Cols<C>& x, float* y, int64_t ldy) {
  constexpr int B = Five ? 176 : 144;
  __m256 acc[C];
  __m128 accm[C];
  for (int t = 0; t < C; ++t) {
    acc[t] = _mm256_setzero_ps();
    accm[t] = _mm_setzero_ps();
  }
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    __m512i U[4], S[4];
    const __m128i m16 = unpack_k45<Five>(b, U, S);
    const float dw = half_f16c(b), dmin = half_f16c(b + 2);
    for (int t = 0; t < C; ++t) {
      const int8_t* xq = x.q[t] + 256 * k;
      __m512i a = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(U[c], load64(xq + 64 * c)), S[c]);
      const __m128i mins = _mm_madd_epi16(m16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sums32[t] + 8 * k)));
      const float dx = x.d[t][k];
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(fold(a)), acc[t]);
      accm[t] = _mm_fmadd_ps(_mm_set1_ps(-dx * dmin), _mm_cvtepi32_ps(mins), accm[t]);
    }
  }
  for (int t = 0; t < C; ++t) y[t * ldy] = hsum_ps(acc[t]) + hsum_ps4(accm[t]);
}

// What the K types' tiles read per block of the activation rows, side by side in pairs
// (pack_k): for pair p of block k (pk = k NP + p, NP = C / 2), dx2[16 pk ..] its two
// rows' scales, eight of each; dxm[8 pk ..] the same, four of each; sums2[32 pk ..] the
// two rows' eight sums of 32 (Q4_K, Q5_K: 16 values) or sixteen sums of 16 (Q6_K: 32).
struct KPairs {
  std::vector<float> dx2, dxm;
  std::vector<int16_t> sums2;
};

template <int C>
void pack_k(const Cols<C>& x, int64_t nb, bool six, KPairs& kp) {
  constexpr int NP = C / 2;
  const size_t ns = six ? 16 : 8;  // sums per row and block
  kp.dx2.resize(size_t(16 * NP * nb));
  kp.dxm.resize(size_t(8 * NP * nb));
  kp.sums2.resize(size_t(32 * NP * nb));
  for (int64_t k = 0; k < nb; ++k)
    for (int t = 0; t < C; ++t) {
      const size_t pk = size_t(k * NP + t / 2), h = size_t(t % 2);
      const int16_t* sums = six ? x.sums16[t] + 16 * k : x.sums32[t] + 8 * k;
      for (size_t j = 0; j < 8; ++j) kp.dx2[16 * pk + 8 * h + j] = x.d[t][k];
      for (size_t j = 0; j < 4; ++j) kp.dxm[8 * pk + 4 * h + j] = x.d[t][k];
      for (size_t j = 0; j < ns; ++j) kp.sums2[32 * pk + ns * h + j] = sums[j];
    }
}

// Two rows' 16 lanes of a block, [row a's eight lanes, row b's]: lane l + lane l + 8 of
// each (the fold of row_k45 and row_q6k, whose lanes are exact integers).
DS_TILE_FN inline __m512i fold_pair(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
}

// row_k45 for an even C, two activation rows sharing each register of the float part:
// their lanes folded together ([row 2p's eight lanes, row 2p+1's]), one conversion and
// one multiply-add for both, and the mins of both in one 256-bit product. The same
// float operations per lane as row_k45, so the same bits.
template <bool Five, int C>
DS_TILE_FN void row_k45_pairs(const uint8_t* row, int64_t nb, const Cols<C>& x, const KPairs& kp, float* y,
                              int64_t ldy) {
  constexpr int B = Five ? 176 : 144, NP = C / 2;
  __m512 acc[NP];
  __m256 accm[NP];
  for (int p = 0; p < NP; ++p) {
    acc[p] = _mm512_setzero_ps();
    accm[p] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    __m512i U[4], S[4];
    const __m256i m16 = _mm256_broadcastsi128_si256(unpack_k45<Five>(b, U, S));
    const __m512 dw = _mm512_set1_ps(half_f16c(b));
    const __m256 ndmin = _mm256_set1_ps(-half_f16c(b + 2));
    for (int p = 0; p < NP; ++p) {
      __m512i a[2];
      for (int h = 0; h < 2; ++h) {
        const int8_t* xq = x.q[2 * p + h] + 256 * k;
        a[h] = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c)
          a[h] = _mm512_dpwssd_epi32(a[h], _mm512_maddubs_epi16(U[c], load64(xq + 64 * c)), S[c]);
      }
      const __m512i lanes = fold_pair(a[0], a[1]);
      const size_t pk = size_t(k * NP + p);
      acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(kp.dx2.data() + 16 * pk), dw), _mm512_cvtepi32_ps(lanes),
                               acc[p]);
      const __m256i mins = _mm256_madd_epi16(m16, load32(kp.sums2.data() + 32 * pk));
      accm[p] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(kp.dxm.data() + 8 * pk), ndmin), _mm256_cvtepi32_ps(mins),
                                accm[p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1));
    y[2 * p * ldy] = hsum_ps(_mm512_castps512_ps256(acc[p])) + hsum_ps4(_mm256_castps256_ps128(accm[p]));
    y[(2 * p + 1) * ldy] = hsum_ps(hi) + hsum_ps4(_mm256_extractf128_ps(accm[p], 1));
  }
}

// One row of Q6_K blocks times C activation rows.
template <int C>
DS_TILE_FN void row_q6k(const uint8_t* row, int64_t nb, const Cols<C>& x, float* y, int64_t ldy) {
  constexpr int B = 210;
  __m256 acc[C];
  for (int t = 0; t < C; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    __m512i U[4], S[4];
    const __m256i sc16 = unpack_q6k(b, U, S);
    const float dw = half_f16c(b + kQ6KD);
    for (int t = 0; t < C; ++t) {
      const int8_t* xq = x.q[t] + 256 * k;
      // Every value's -32: 32 times the scales against the sums of 16, taken first.
      const __m256i shift = _mm256_madd_epi16(sc16, load32(x.sums16[t] + 16 * k));
      __m512i a = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(shift, 5)));
      for (int c = 0; c < 4; ++c) a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(U[c], load64(xq + 64 * c)), S[c]);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d[t][k] * dw), _mm256_cvtepi32_ps(fold(a)), acc[t]);
    }
  }
  for (int t = 0; t < C; ++t) y[t * ldy] = hsum_ps(acc[t]);
}

// row_q6k for an even C, two activation rows sharing the float part as in
// row_k45_pairs; the -32 of both rows' values in one 512-bit product, taken from the
// folded lanes (exact integers: the same lanes).
template <int C>
DS_TILE_FN void row_q6k_pairs(const uint8_t* row, int64_t nb, const Cols<C>& x, const KPairs& kp, float* y,
                              int64_t ldy) {
  constexpr int B = 210, NP = C / 2;
  __m512 acc[NP];
  for (int p = 0; p < NP; ++p) acc[p] = _mm512_setzero_ps();
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* b = row + k * B;
    __m512i U[4], S[4];
    const __m512i sc2 = _mm512_broadcast_i64x4(unpack_q6k(b, U, S));
    const __m512 dw = _mm512_set1_ps(half_f16c(b + kQ6KD));
    for (int p = 0; p < NP; ++p) {
      __m512i a[2];
      for (int h = 0; h < 2; ++h) {
        const int8_t* xq = x.q[2 * p + h] + 256 * k;
        a[h] = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c)
          a[h] = _mm512_dpwssd_epi32(a[h], _mm512_maddubs_epi16(U[c], load64(xq + 64 * c)), S[c]);
      }
      const size_t pk = size_t(k * NP + p);
      const __m512i shift = _mm512_madd_epi16(sc2, load64(kp.sums2.data() + 32 * pk));
      const __m512i lanes = _mm512_sub_epi32(fold_pair(a[0], a[1]), _mm512_slli_epi32(shift, 5));
      acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(kp.dx2.data() + 16 * pk), dw), _mm512_cvtepi32_ps(lanes),
                               acc[p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    y[2 * p * ldy] = hsum_ps(_mm512_castps512_ps256(acc[p]));
    y[(2 * p + 1) * ldy] = hsum_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
  }
}

// Rows [r0, r1) times activation rows [t0, t0 + C).
template <Precision P, int C>
DS_TILE_FN void tile_rows(const uint8_t* W, int64_t cols, const Q8Vector* xs, int t0, float* Y, int64_t ldy, int64_t r0,
                          int64_t r1) {
  const Cols<C> x = cols_at<C>(xs, t0);
  const int64_t rb = row_bytes(P, cols), nb = cols / block_elems(P);
  int64_t r = r0;
  if constexpr (P == Precision::Q8_0) {
    // The activation rows' block scales, 8 per block (zero past C).
    thread_local std::vector<float> dxT;
    dxT.assign(size_t(8 * nb), 0.0f);
    for (int64_t k = 0; k < nb; ++k)
      for (int t = 0; t < C; ++t) dxT[size_t(8 * k + t)] = x.d[t][k];
    constexpr int R = 4;
    float* y = Y + t0 * ldy;
    if constexpr (C % 2 == 0) {
      for (; r + R <= r1; r += R) rows_q8_0_pairs<R, C>(W + r * rb, rb, nb, x, dxT.data(), y + (r - r0), ldy);
      for (; r < r1; ++r) rows_q8_0_pairs<1, C>(W + r * rb, rb, nb, x, dxT.data(), y + (r - r0), ldy);
    } else {
      for (; r + R <= r1; r += R) rows_q8_0<R, C>(W + r * rb, rb, nb, x, dxT.data(), y + (r - r0), ldy);
      for (; r < r1; ++r) rows_q8_0<1, C>(W + r * rb, rb, nb, x, dxT.data(), y + (r - r0), ldy);
    }
    return;
  }
  if constexpr (C % 2 == 0) {
    thread_local KPairs kp;
    pack_k<C>(x, nb, P == Precision::Q6_K, kp);
    for (; r < r1; ++r) {
      float* y = Y + t0 * ldy + (r - r0);
      if constexpr (P == Precision::Q6_K)
        row_q6k_pairs<C>(W + r * rb, nb, x, kp, y, ldy);
      else
        row_k45_pairs<P == Precision::Q5_K, C>(W + r * rb, nb, x, kp, y, ldy);
    }
    return;
  }
  for (; r < r1; ++r) {
    float* y = Y + t0 * ldy + (r - r0);
    if constexpr (P == Precision::Q6_K)
      row_q6k<C>(W + r * rb, nb, x, y, ldy);
    else
      row_k45<P == Precision::Q5_K, C>(W + r * rb, nb, x, y, ldy);
  }
}

// The K types take eight activation rows at a time (their x blocks stay in L1 while
// the weight rows pass), Q8_0 four (with four weight rows at a time, two activation
// rows per register: its per-block float work is the larger share), then 4, 2 and 1
// for the rest.
template <Precision P>
void gemm_tiles(const uint8_t* W, int64_t cols, const Q8Vector* xs, int T, float* Y, int64_t ldy, int64_t r0,
                int64_t r1) {
  constexpr int wide = P == Precision::Q8_0 ? 4 : 8;
  int t = 0;
  for (; t + wide <= T; t += wide) tile_rows<P, wide>(W, cols, xs, t, Y, ldy, r0, r1);
  if constexpr (wide == 8)
    if (t + 4 <= T) tile_rows<P, 4>(W, cols, xs, t, Y, ldy, r0, r1), t += 4;
  if (t + 2 <= T) tile_rows<P, 2>(W, cols, xs, t, Y, ldy, r0, r1), t += 2;
  if (t < T) tile_rows<P, 1>(W, cols, xs, t, Y, ldy, r0, r1);
}

// ---- Q4_0 in llama.cpp's order (perf/quant_fast.cpp): each row one float chain over
// its blocks' totals, sixteen weight rows side by side in the lanes of one register.

struct alignas(64) Vec64 {
  uint8_t bytes[64];
};

// Rows [0, n) (n <= 16, rb bytes apart) of Q4_0 blocks, rearranged into S: per block,
// vector j < 8 holds values 4j .. 4j+3 as unsigned nibbles, row i's four in 32-bit lane
// i, and vector 8 the rows' dw as floats (lanes past n: zeros; no byte past row n - 1
// is read).
DS_TILE_FN void pack_q4_0(const uint8_t* row, int64_t rb, int64_t nb, int n, Vec64* S) {
  const __mmask16 m = __mmask16((1u << n) - 1);
  const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32(int32_t(rb)));
  const __m512i low4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  for (int64_t k = 0; k < nb; ++k, S += 9) {
    const uint8_t* b = row + 18 * k;
    for (int j = 0; j < 4; ++j) {  // bytes 4j .. 4j+3: values 4j .. (low nibbles), 16 + 4j .. (high)
      const __m512i q = _mm512_mask_i32gather_epi32(zero, m, at, b + 2 + 4 * j, 1);
      _mm512_store_si512(S + j, _mm512_and_si512(q, low4));
      _mm512_store_si512(S + j + 4, _mm512_and_si512(_mm512_srli_epi32(q, 4), low4));
    }
    const __m512i d = _mm512_mask_i32gather_epi32(zero, m, at, b, 1);  // the scale in the low 16 bits
    _mm512_store_ps(S + 8, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
  }
}

// C activation rows side by side for group_q4_0, block by block: per block k, at
// X + k * stride(C), each row's 32 values (32 bytes a row), then the integers the rows'
// totals start from (-8 times the sum of the block's values: the nibbles are taken
// unsigned), then the rows' scales dx.
template <int C>
constexpr int64_t stride_q4_0 = C*(32 + 4 + 4);

template <int C>
void pack_rows_q4_0(const Q8Vector* xs, int64_t nb, uint8_t* X) {
  for (int64_t k = 0; k < nb; ++k, X += stride_q4_0<C>)
    for (int t = 0; t < C; ++t) {
      std::memcpy(X + 32 * t, xs[t].q.data() + 32 * k, 32);
      const int32_t* s4 = xs[t].start4.data() + 8 * k;
      const int32_t start = s4[0] + s4[1] + s4[2] + s4[3] + s4[4] + s4[5] + s4[6] + s4[7];
      std::memcpy(X + 32 * C + 4 * t, &start, 4);
      std::memcpy(X + 36 * C + 4 * t, &xs[t].d[size_t(k)], 4);
    }
}

DS_TILE_FN inline __m512i broadcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Sixteen packed weight rows times C activation rows (packed by pack_rows_q4_0): per
// activation row and block the sixteen totals (eight dpbusd of the rows' nibbles with
// four of x's bytes, broadcast), then acc = fma(float(totals), dw * dx, acc), lane i for
// weight row i. y[t * ldy + i] for the lanes in m.
template <int C>
DS_TILE_FN void group_q4_0(const Vec64* S, int64_t nb, const uint8_t* X, float* y, int64_t ldy, __mmask16 m) {
  __m512 acc[C];
  for (int t = 0; t < C; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < nb; ++k, S += 9, X += stride_q4_0<C>) {
    __m512i w[8];
    for (int j = 0; j < 8; ++j) w[j] = _mm512_load_si512(S + j);
    const __m512 dw = _mm512_load_ps(S + 8);
    for (int t = 0; t < C; ++t) {
      const uint8_t* q = X + 32 * t;
      __m512i a = broadcast4(X + 32 * C + 4 * t), b = _mm512_setzero_si512();
      for (int j = 0; j < 8; j += 2) {  // two chains of exact integers
        a = _mm512_dpbusd_epi32(a, w[j], broadcast4(q + 4 * j));
        b = _mm512_dpbusd_epi32(b, w[j + 1], broadcast4(q + 4 * j + 4));
      }
      float dx;
      std::memcpy(&dx, X + 36 * C + 4 * t, 4);
      const __m512 f = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a, b)), f, acc[t]);
    }
  }
  for (int t = 0; t < C; ++t) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

// Activation rows [t0, t0 + C) against every packed group of n weight rows.
template <int C>
DS_TILE_FN void pass_q4_0(const Vec64* S, int64_t nb, const Q8Vector* xs, int t0, float* Y, int64_t ldy, int64_t n) {
  thread_local std::vector<uint8_t> X;
  X.resize(size_t(nb * stride_q4_0<C>));
  pack_rows_q4_0<C>(xs + t0, nb, X.data());
  for (int64_t g = 0; g < n; g += 16) {
    const int rows = int(std::min<int64_t>(16, n - g));
    group_q4_0<C>(S + g / 16 * nb * 9, nb, X.data(), Y + t0 * ldy + g, ldy, __mmask16((1u << rows) - 1));
  }
}

// Q4_0 rows [r0, r1) in pieces of about 192 KiB of blocks (quant_tile_rows' size for
// one thread): each piece packed once (sixteen rows at a time, while they stay in L2),
// then sixteen activation rows at a time pass over it (their blocks stay in L1), then
// 8, 4, 2, 1. The scratch is at most about twice a piece, whatever the range.
DS_TILE_FN void gemm_q4_0(const uint8_t* W, int64_t cols, const Q8Vector* xs, int T, float* Y, int64_t ldy, int64_t r0,
                          int64_t r1) {
  const int64_t rb = row_bytes(Precision::Q4_0, cols), nb = cols / 32;
  const int64_t piece = quant_tile_rows(Precision::Q4_0, cols, int64_t(1) << 40, 1);
  thread_local std::vector<Vec64> S;
  for (int64_t p0 = r0; p0 < r1; p0 += piece) {
    const int64_t n = std::min(piece, r1 - p0);
    S.resize(size_t((n + 15) / 16 * nb * 9));
    for (int64_t g = 0; g < n; g += 16)
      pack_q4_0(W + (p0 + g) * rb, rb, nb, int(std::min<int64_t>(16, n - g)), S.data() + g / 16 * nb * 9);
    float* y = Y + (p0 - r0);
    int t = 0;
    for (; t + 16 <= T; t += 16) pass_q4_0<16>(S.data(), nb, xs, t, y, ldy, n);
    if (t + 8 <= T) pass_q4_0<8>(S.data(), nb, xs, t, y, ldy, n), t += 8;
    if (t + 4 <= T) pass_q4_0<4>(S.data(), nb, xs, t, y, ldy, n), t += 4;
    if (t + 2 <= T) pass_q4_0<2>(S.data(), nb, xs, t, y, ldy, n), t += 2;
    if (t < T) pass_q4_0<1>(S.data(), nb, xs, t, y, ldy, n);
  }
}
#endif

}  // namespace

int64_t quant_tile_rows(Precision p, int64_t cols, int64_t rows, int threads) {
  const int64_t by_bytes = (int64_t(192) << 10) / std::max<int64_t>(1, row_bytes(p, cols));
  const int64_t by_share = rows / (4 * int64_t(std::max(1, threads)));
  const int64_t step = p == Precision::Q4_0 ? 16 : 2;  // Q4_0: whole groups of sixteen rows
  return std::max<int64_t>(16, std::min(by_bytes, by_share) / step * step);
}

void gemm_quant_fast(const void* W, Precision p, int64_t cols, const Q8Vector* xs, int T, float* Y, int64_t ldy,
                     int64_t r0, int64_t r1, bool simd) {
  const auto* w = static_cast<const uint8_t*>(W);
#ifdef DS_QF_X86
  if (simd && quant_tiles_available()) {
    check_inputs(p, cols, xs, T);
    switch (p) {
      case Precision::Q8_0:
        return gemm_tiles<Precision::Q8_0>(w, cols, xs, T, Y, ldy, r0, r1);
      case Precision::Q4_0:
        if (row_bytes(p, cols) <= (int64_t(1) << 26)) return gemm_q4_0(w, cols, xs, T, Y, ldy, r0, r1);
        break;  // rows too long for the packing's 32-bit offsets: one row product per activation row
      case Precision::Q4_K:
        return gemm_tiles<Precision::Q4_K>(w, cols, xs, T, Y, ldy, r0, r1);
      case Precision::Q5_K:
        return gemm_tiles<Precision::Q5_K>(w, cols, xs, T, Y, ldy, r0, r1);
      default:
        return gemm_tiles<Precision::Q6_K>(w, cols, xs, T, Y, ldy, r0, r1);
    }
  }
#endif
  (void)simd;
  for (int t = 0; t < T; ++t) gemv_quant_fast(w, p, cols, xs[t], Y + t * ldy, r0, r1);
}

}  // namespace ds
