#pragma once
// 8x8 transposes of float32 and 16-bit blocks, in vector registers where the build
// targets AVX2 (float32) or SSE2 (16-bit values). Used to turn [in, out] weight files
// into [out, in] rows and to pack matrix tiles for the prefill's products.
#include <cstdint>

#if defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace ds {

// 8x8 blocks: d[j * ds + i] = s[i * ss + j] for i, j < 8; in vector registers where
// the build targets AVX2 (float32) or SSE2 (16-bit values).
template <class T>
inline void transpose8_scalar(const T* s, int64_t ss, T* d, int64_t ds) {
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 8; ++i) d[j * ds + i] = s[i * ss + j];
}

inline void transpose8(const float* s, int64_t ss, float* d, int64_t ds) {
#ifdef __AVX2__
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ss);
  for (int i = 0; i < 8; i += 2) {                  // rows a = i, b = i + 1
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  for (int i = 0; i < 8; i += 4) {  // four rows per step: columns 0|4, 1|5, 2|6, 3|7
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {  // join the halves of rows 0-3 and 4-7
    _mm256_storeu_ps(d + j * ds, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(d + (j + 4) * ds, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
#else
  transpose8_scalar(s, ss, d, ds);
#endif
}

inline void transpose8(const uint16_t* s, int64_t ss, uint16_t* d, int64_t ds) {
#ifdef __SSE2__
  __m128i a[8], b[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ss));
  for (int i = 0; i < 8; i += 2) {
    b[i] = _mm_unpacklo_epi16(a[i], a[i + 1]);      // columns 0-3 of rows i, i+1, interleaved
    b[i + 1] = _mm_unpackhi_epi16(a[i], a[i + 1]);  // columns 4-7
  }
  for (int h = 0; h < 2; ++h) {  // columns 0-3, then 4-7
    const __m128i c0 = _mm_unpacklo_epi32(b[h], b[h + 2]), c1 = _mm_unpackhi_epi32(b[h], b[h + 2]);
    const __m128i c2 = _mm_unpacklo_epi32(b[h + 4], b[h + 6]), c3 = _mm_unpackhi_epi32(b[h + 4], b[h + 6]);
    uint16_t* o = d + 4 * h * ds;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi64(c0, c2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + ds), _mm_unpackhi_epi64(c0, c2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * ds), _mm_unpacklo_epi64(c1, c3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * ds), _mm_unpackhi_epi64(c1, c3));
  }
#else
  transpose8_scalar(s, ss, d, ds);
#endif
}

}  // namespace ds
