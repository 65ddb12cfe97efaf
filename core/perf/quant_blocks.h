#pragma once
// What the fast quantized products (perf/quant_fast.cpp, one activation row at a time,
// and perf/quant_tiles.cpp, many rows at once) share: where the fields of GGML's
// blocks sit, the 6-bit scales of Q4_K and Q5_K, and the AVX2 helpers whose float
// operations both must repeat to give the same bits. Internal to perf/.
#include <cstdint>
#include <cstring>

#include "util/precision.h"

// The SIMD kernels are compiled for their instructions whatever the build targets (a
// function attribute) and only called when the processor has them.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DS_QF_X86 1
#include <immintrin.h>
#define DS_AVX2_FN __attribute__((target("avx2,fma,f16c")))
// The tiles' kernels and the others that need AVX-512 VNNI (quant_tiles_available()).
#define DS_TILE_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

namespace ds::qb {

// Byte offsets within a block: Q4_K [d, dmin, scales 12, qs 128], Q5_K [d, dmin,
// scales 12, qh 32, qs 128], Q6_K [ql 128, qh 64, scales 16, d].
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

#ifdef DS_QF_X86
DS_AVX2_FN inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// (s0 + s2) + (s1 + s3).
DS_AVX2_FN inline float hsum_ps4(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// (a0 + a4) + (a2 + a6) + ((a1 + a5) + (a3 + a7)).
DS_AVX2_FN inline float hsum_ps(__m256 v) {
  return hsum_ps4(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// A Q4_0 block's 32 stored nibbles as bytes 0..15: values 0-15 are the low nibbles of
// its 16 bytes (after the scale), values 16-31 the high ones.
DS_AVX2_FN inline __m256i q4_0_nibbles(const uint8_t* b) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

DS_AVX2_FN inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
#endif

}  // namespace ds::qb
