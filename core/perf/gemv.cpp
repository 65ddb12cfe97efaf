#include "perf/gemv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "perf/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DS_GEMV_AVX2 1
#include <immintrin.h>
#endif

namespace ds {

namespace {

inline float widen1(uint16_t v, Precision p) { return p == Precision::BF16 ? bf16_to_f32(v) : f16_to_f32(v); }

}  // namespace

float widen(uint16_t v, Precision p) { return widen1(v, p); }

namespace {

#ifdef DS_GEMV_AVX2
// Eight consecutive weights as floats.
template <Precision P>
inline __m256 load8(const void* base, int64_t i) {
  if constexpr (P == Precision::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  } else {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    if constexpr (P == Precision::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else
      return _mm256_cvtph_ps(h);
  }
}

template <Precision P>
inline float elem(const void* base, int64_t i) {
  if constexpr (P == Precision::F32)
    return static_cast<const float*>(base)[i];
  else
    return widen1(static_cast<const uint16_t*>(base)[i], P);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One row at a time, so the matrix is read as a single sequential stream, which the
// hardware prefetchers follow at full speed. x stays in L1. Four accumulators hide the FMA latency.
template <Precision P>
void gemv_avx2(const void* W, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t esz = P == Precision::F32 ? 4 : 2;
  const char* base = static_cast<const char*>(W);
  const int64_t c32 = cols / 32 * 32, c8 = cols / 8 * 8;
  for (int64_t r = r0; r < r1; ++r) {
    const void* w = base + r * cols * esz;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t c = 0;
    for (; c < c32; c += 32) {
      a0 = _mm256_fmadd_ps(load8<P>(w, c), _mm256_loadu_ps(x + c), a0);
      a1 = _mm256_fmadd_ps(load8<P>(w, c + 8), _mm256_loadu_ps(x + c + 8), a1);
      a2 = _mm256_fmadd_ps(load8<P>(w, c + 16), _mm256_loadu_ps(x + c + 16), a2);
      a3 = _mm256_fmadd_ps(load8<P>(w, c + 24), _mm256_loadu_ps(x + c + 24), a3);
    }
    for (; c < c8; c += 8) a0 = _mm256_fmadd_ps(load8<P>(w, c), _mm256_loadu_ps(x + c), a0);
    float s0 = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; c < cols; ++c) s0 += elem<P>(w, c) * x[c];
    y[r - r0] = s0;
  }
}

// Groups g0 <= g < g1 of a matrix in tiles: eight rows at a time, one accumulator per
// row, each chunk of x loaded once for the eight.
template <Precision P>
void gemv_groups_avx2(const void* W, int64_t cols, const float* x, float* y, int64_t g0, int64_t g1) {
  const int64_t esz = P == Precision::F32 ? 4 : 2;
  for (int64_t g = g0; g < g1; ++g) {
    const void* w = static_cast<const char*>(W) + g * 8 * cols * esz;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t c = 0; c < cols; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x + c);
      const int64_t i = c * 8;
      a0 = _mm256_fmadd_ps(load8<P>(w, i), xv, a0);
      a1 = _mm256_fmadd_ps(load8<P>(w, i + 8), xv, a1);
      a2 = _mm256_fmadd_ps(load8<P>(w, i + 16), xv, a2);
      a3 = _mm256_fmadd_ps(load8<P>(w, i + 24), xv, a3);
      a4 = _mm256_fmadd_ps(load8<P>(w, i + 32), xv, a4);
      a5 = _mm256_fmadd_ps(load8<P>(w, i + 40), xv, a5);
      a6 = _mm256_fmadd_ps(load8<P>(w, i + 48), xv, a6);
      a7 = _mm256_fmadd_ps(load8<P>(w, i + 56), xv, a7);
    }
    // Lane sums of the eight accumulators: rows 0-3 in the low halves, 4-7 in the high.
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    _mm256_storeu_ps(y + (g - g0) * 8,
                     _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  }
}

// The same for bfloat16 with half the instructions per value: a bfloat16 is the top half
// of a float32, so 16 of them loaded as eight 32-bit words give eight floats by a shift
// (the values at even places) and eight by a mask (odd places), with no widening
// shuffle. A 32-byte load holds two rows' 8 values of a chunk (one row per 128-bit lane);
// x is permuted to match once per chunk, [x0 x2 x4 x6 x0 x2 x4 x6] and the odd ones.
template <>
void gemv_groups_avx2<Precision::BF16>(const void* W, int64_t cols, const float* x, float* y, int64_t g0, int64_t g1) {
  const __m256i even_x = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), odd_x = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
  const __m256i high = _mm256_set1_epi32(int(0xFFFF0000u));
  for (int64_t g = g0; g < g1; ++g) {
    const __m256i* w = reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(W) + g * 8 * cols);
    __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, o0 = e0, o1 = e0, o2 = e0, o3 = e0;
    for (int64_t c = 0; c < cols; c += 8, w += 4) {
      const __m256 xv = _mm256_loadu_ps(x + c);
      const __m256 xe = _mm256_permutevar8x32_ps(xv, even_x), xo = _mm256_permutevar8x32_ps(xv, odd_x);
      const __m256i v0 = _mm256_loadu_si256(w), v1 = _mm256_loadu_si256(w + 1);
      const __m256i v2 = _mm256_loadu_si256(w + 2), v3 = _mm256_loadu_si256(w + 3);
      e0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), xe, e0);
      o0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, high)), xo, o0);
      e1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), xe, e1);
      o1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v1, high)), xo, o1);
      e2 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v2, 16)), xe, e2);
      o2 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v2, high)), xo, o2);
      e3 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v3, 16)), xe, e3);
      o3 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v3, high)), xo, o3);
    }
    // s_k holds rows 2k (low lane) and 2k+1 (high lane); after two rounds of pairwise
    // sums the low lane holds rows 0 2 4 6 and the high lane rows 1 3 5 7.
    const __m256 s0 = _mm256_add_ps(e0, o0), s1 = _mm256_add_ps(e1, o1), s2 = _mm256_add_ps(e2, o2),
                 s3 = _mm256_add_ps(e3, o3);
    const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
    const __m128 lo = _mm256_castps256_ps128(u), hi = _mm256_extractf128_ps(u, 1);
    float* out = y + (g - g0) * 8;
    _mm_storeu_ps(out, _mm_unpacklo_ps(lo, hi));
    _mm_storeu_ps(out + 4, _mm_unpackhi_ps(lo, hi));
  }
}

// Row k of the tile group at w: its chunks of 8 are 64 values apart.
template <Precision P>
float dot_group_row(const void* w, int64_t k, int64_t cols, const float* x) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    a0 = _mm256_fmadd_ps(load8<P>(w, c * 8 + k * 8), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(load8<P>(w, (c + 8) * 8 + k * 8), _mm256_loadu_ps(x + c + 8), a1);
  }
  for (; c < cols; c += 8) a0 = _mm256_fmadd_ps(load8<P>(w, c * 8 + k * 8), _mm256_loadu_ps(x + c), a0);
  return hsum(_mm256_add_ps(a0, a1));
}

template <Precision P>
void gemv_any_avx2(const void* W, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1, int64_t pr) {
  const int64_t esz = P == Precision::F32 ? 4 : 2;
  const int64_t pend = std::min(r1, pr);
  int64_t r = r0;
  while (r < pend) {
    if ((r & 7) == 0 && r + 8 <= pend) {
      gemv_groups_avx2<P>(W, cols, x, y + (r - r0), r / 8, pend / 8);
      r = pend / 8 * 8;
    } else {
      y[r - r0] = dot_group_row<P>(static_cast<const char*>(W) + (r - (r & 7)) * cols * esz, r & 7, cols, x);
      ++r;
    }
  }
  if (r < r1) gemv_avx2<P>(W, cols, x, y + (r - r0), r, r1);
}
#endif

void gemv_portable(const void* W, Precision p, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1,
                   int64_t pr) {
  for (int64_t r = r0; r < r1; ++r) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = element_index(r, c, cols, pr);
      const float w =
          p == Precision::F32 ? static_cast<const float*>(W)[i] : widen1(static_cast<const uint16_t*>(W)[i], p);
      acc[c & 7] += w * x[c];
    }
    y[r - r0] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
}

}  // namespace

void gemv_rows(const void* W, Precision p, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1, int64_t pr) {
  if (is_quantized(p)) return gemv_quant(W, p, cols, x, y, r0, r1);  // row-major blocks, never tiles
#ifdef DS_GEMV_AVX2
  switch (p) {  // (tiles only exist where cols is a multiple of 8; gemv_any_avx2 reads both storages)
    case Precision::F32:
      return gemv_any_avx2<Precision::F32>(W, cols, x, y, r0, r1, pr);
    case Precision::BF16:
      return gemv_any_avx2<Precision::BF16>(W, cols, x, y, r0, r1, pr);
    case Precision::F16:
      return gemv_any_avx2<Precision::F16>(W, cols, x, y, r0, r1, pr);
    default:  // the quantized types, done above
      break;
  }
#endif
  gemv_portable(W, p, cols, x, y, r0, r1, pr);
}

void gemv_rows_many(const void* W, Precision p, int64_t cols, const float* X, int n, float* Y, int64_t ldy, int64_t r0,
                    int64_t r1, int64_t pr) {
  // Blocks of 8 rows on the groups' boundaries (the first may be shorter): a group is
  // multiplied as gemv_rows multiplies it, whatever the block.
  for (int64_t b = r0; b < r1;) {
    const int64_t e = std::min(r1, (b / 8 + 1) * 8);
    for (int k = 0; k < n; ++k) gemv_rows(W, p, cols, X + int64_t(k) * cols, Y + int64_t(k) * ldy + (b - r0), b, e, pr);
    b = e;
  }
}

namespace {
// Rows r0 <= r < r1 of a matrix in tiles as float32: each row's chunks of 8 values
// are 64 values apart.
template <Precision P>
void tile_rows_f32(const void* W, int64_t cols, int64_t r0, int64_t r1, float* out) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t first = (r - (r & 7)) * cols + (r & 7) * 8;  // element index of (r, 0)
    float* o = out + (r - r0) * cols;
    for (int64_t c = 0; c < cols; c += 8) {
#ifdef DS_GEMV_AVX2
      _mm256_storeu_ps(o + c, load8<P>(W, first + c * 8));
#else
      for (int64_t k = 0; k < 8; ++k) {
        const int64_t i = first + c * 8 + k;
        o[c + k] =
            P == Precision::F32 ? static_cast<const float*>(W)[i] : widen1(static_cast<const uint16_t*>(W)[i], P);
      }
#endif
    }
  }
}
}  // namespace

void rows_f32(const void* W, Precision p, int64_t cols, int64_t pr, int64_t r0, int64_t r1, float* out) {
  if (is_quantized(p)) return rows_f32_quant(W, p, cols, r0, r1, out);  // row-major blocks, never tiles
  const int64_t pend = std::max(r0, std::min(r1, pr));
  switch (p) {
    case Precision::F32:
      tile_rows_f32<Precision::F32>(W, cols, r0, pend, out);
      break;
    case Precision::BF16:
      tile_rows_f32<Precision::BF16>(W, cols, r0, pend, out);
      break;
    case Precision::F16:
      tile_rows_f32<Precision::F16>(W, cols, r0, pend, out);
      break;
    default:  // the quantized types, done above
      break;
  }
  if (pend == r1) return;
  float* o = out + (pend - r0) * cols;
  if (p == Precision::F32)
    std::memcpy(o, static_cast<const float*>(W) + pend * cols, size_t((r1 - pend) * cols) * sizeof(float));
  else
    widen_rows(static_cast<const uint16_t*>(W), p, cols, pend, r1, o);
}

namespace {
// Group g of a matrix of esz-byte elements: between its 8 rows (from) and its tile (to).
void regroup(char* g, char* tmp, int esz, int64_t cols, bool to_tiles) {
  const size_t bytes = size_t(8 * cols * esz), piece = size_t(8 * esz);
  std::memcpy(tmp, g, bytes);
  for (int64_t k = 0; k < 8; ++k)
    for (int64_t c = 0; c < cols; c += 8) {
      const size_t row_major = size_t(k * cols + c) * esz, tile = size_t(c * 8 + k * 8) * esz;
      if (to_tiles)
        std::memcpy(g + tile, tmp + row_major, piece);
      else
        std::memcpy(g + row_major, tmp + tile, piece);
    }
}
void regroup_all(void* W, int esz, int64_t rows, int64_t cols, bool to_tiles) {
  const int64_t groups = rows / 8;
  char* base = static_cast<char*>(W);
#pragma omp parallel if (groups >= 64)
  {
    std::vector<char> tmp(size_t(8 * cols * esz));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) regroup(base + g * 8 * cols * esz, tmp.data(), esz, cols, to_tiles);
  }
}
}  // namespace

void rows_to_tiles(void* W, int esz, int64_t rows, int64_t cols) { regroup_all(W, esz, rows, cols, true); }
void tiles_to_rows(void* W, int esz, int64_t rows, int64_t cols) { regroup_all(W, esz, rows, cols, false); }

namespace {
template <int Esz>
void rows_into_tiles_of(const char* src, char* dst, int64_t rows, int64_t cols) {
  constexpr size_t piece = 8 * Esz;
  const size_t row_bytes = size_t(cols) * Esz;
  for (int64_t g = 0; g < rows / 8; ++g) {
    const char* in = src + size_t(g) * 8 * row_bytes;
    char* out = dst + size_t(g) * 8 * row_bytes;
    for (int64_t c = 0; c < cols; c += 8)
      for (int64_t k = 0; k < 8; ++k, out += piece)
        std::memcpy(out, in + size_t(k) * row_bytes + size_t(c) * Esz, piece);
  }
}
}  // namespace

void rows_into_tiles(const void* src, void* dst, int esz, int64_t rows, int64_t cols) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  if (esz == 4)
    rows_into_tiles_of<4>(s, d, rows, cols);
  else
    rows_into_tiles_of<2>(s, d, rows, cols);
}

void widen_rows(const uint16_t* W, Precision p, int64_t cols, int64_t r0, int64_t r1, float* out) {
  const uint16_t* in = W + r0 * cols;
  const int64_t n = (r1 - r0) * cols;
  int64_t i = 0;
#ifdef DS_GEMV_AVX2
  if (p == Precision::BF16)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<Precision::BF16>(in, i));
  else
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<Precision::F16>(in, i));
#endif
  for (; i < n; ++i) out[i] = widen1(in[i], p);
}

void narrow(const float* in, int64_t n, Precision p, uint16_t* out) {
  int64_t i = 0;
#ifdef DS_GEMV_AVX2
  if (p == Precision::BF16) {
    // Round to nearest even on the bits, NaNs quieted: f32_to_bf16 eight at a time.
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF), abs = _mm256_set1_epi32(0x7FFFFFFF),
                  inf = _mm256_set1_epi32(0x7F800000), quiet = _mm256_set1_epi32(0x0040);
    for (; i + 8 <= n; i += 8) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      const __m256i hi = _mm256_srli_epi32(x, 16);
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(hi, one)), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
      r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
      const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
    }
  } else {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  if (p == Precision::BF16)
    for (; i < n; ++i) out[i] = f32_to_bf16(in[i]);
  else
    for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

const char* gemv_isa() {
#ifdef DS_GEMV_AVX2
  return "avx2+fma+f16c";
#else
  return "portable";
#endif
}

}  // namespace ds
