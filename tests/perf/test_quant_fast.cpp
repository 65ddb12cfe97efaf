// The Fast products with quantized weights (perf/quant_fast.h): the activation
// rounding against the properties ggml's rounding has (scales, range, error at most
// half a step, the 16-value sums), each row's product against a double-precision sum
// written here from the block layouts over the same rounded activations, the AVX2 and
// portable kernels against each other bit for bit, the tiles of many activation rows
// (perf/quant_tiles.h) against one row product per activation row bit for bit, and
// the thread team's splits (odd row counts, several products at once, rows of a
// prefill) against one call, and the rounded vectors' storage on a cache line.
#include <gtest/gtest.h>
#include <algorithm>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "perf/parallel.h"
#include "perf/quant_fast.h"
#include "perf/quant_tiles.h"
#include "util/aligned.h"
#include "util/error.h"

using namespace ds;

namespace {

const Precision kQuantized[] = {Precision::Q8_0, Precision::Q4_0, Precision::Q4_K, Precision::Q5_K, Precision::Q6_K};

int bits(uint8_t b, int lo, int n) { return (b >> lo) & ((1 << n) - 1); }
double half(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }

// The integer parts of value i of a block: w = scale * q - min, as integers, with the
// block's float16 factors d (of scale * q) and dmin (of min) applied outside.
struct IntParts {
  int scale, q, min;
};
IntParts int_parts(Precision p, const uint8_t* b, int i) {
  switch (p) {
    case Precision::Q8_0:
      return {1, int8_t(b[2 + i]), 0};
    case Precision::Q4_0:
      return {1, bits(b[2 + i % 16], i < 16 ? 0 : 4, 4) - 8, 0};
    case Precision::Q4_K:
    case Precision::Q5_K: {
      const bool five = p == Precision::Q5_K;
      const int j = i / 32, l = i % 32;
      const uint8_t* s = b + 4;
      const int sc = j < 4 ? bits(s[j], 0, 6) : bits(s[j + 4], 0, 4) + 16 * bits(s[j - 4], 6, 2);
      const int m = j < 4 ? bits(s[j + 4], 0, 6) : bits(s[j + 4], 4, 4) + 16 * bits(s[j], 6, 2);
      int q = bits((b + (five ? 48 : 16))[32 * (j / 2) + l], (j % 2) * 4, 4);
      if (five) q += 16 * bits(b[16 + l], j, 1);
      return {sc, q, m};
    }
    default: {  // Q6_K: q without its -32
      const int n = i / 128, k = (i % 128) / 32, l = i % 32;
      const int low = bits(b[64 * n + l + 32 * (k % 2)], k < 2 ? 0 : 4, 4);
      return {int8_t(b[192 + i / 16]), low + 16 * bits(b[128 + 32 * n + l], 2 * k, 2), 0};
    }
  }
}

// Value i of a block as scale * q - min (min 0 but for Q4_K and Q5_K), in double: its
// integer parts times the block's float16 factors (Q6_K: d at byte 208, q less 32).
struct Parts {
  double scaled, min;
};
Parts block_value(Precision p, const uint8_t* b, int i) {
  if (std::find(std::begin(kQuantized), std::end(kQuantized), p) == std::end(kQuantized)) return {NAN, NAN};
  const IntParts v = int_parts(p, b, i);
  switch (p) {
    case Precision::Q8_0:
    case Precision::Q4_0:
      return {half(b) * v.q, 0.0};
    case Precision::Q4_K:
    case Precision::Q5_K:
      return {half(b) * v.scale * v.q, half(b + 2) * v.min};
    case Precision::Q6_K:
      return {half(b + 208) * v.scale * (v.q - 32), 0.0};
    default:
      return {NAN, NAN};
  }
}

// Random blocks whose float16 fields are finite halves of moderate size (both signs).
std::vector<uint8_t> random_matrix(Precision p, int64_t rows, int64_t cols, std::mt19937& gen) {
  std::vector<uint8_t> m(size_t(rows * row_bytes(p, cols)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : m) v = uint8_t(byte(gen));
  std::uniform_real_distribution<float> mag(-2.0f, 2.0f);
  const std::vector<int> halves = p == Precision::Q4_K || p == Precision::Q5_K ? std::vector<int>{0, 2}
                                  : p == Precision::Q6_K                       ? std::vector<int>{208}
                                                                               : std::vector<int>{0};
  for (size_t b = 0; b < m.size(); b += size_t(block_bytes(p)))
    for (int o : halves) {
      const uint16_t h = f32_to_f16(mag(gen) * 0.01f);
      m[b + size_t(o)] = uint8_t(h & 0xFF);
      m[b + size_t(o) + 1] = uint8_t(h >> 8);
    }
  return m;
}

std::vector<float> random_vector(int64_t n, std::mt19937& gen) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(gen);
  x[3] = 0.0f;
  return x;
}

// A width with a tail: 7 blocks of 32 (not a multiple of the 4 blocks the AVX2 kernel
// takes at a time) or 3 of 256.
int64_t test_cols(Precision p) { return q8_block_for(p) == 32 ? 7 * 32 : 3 * 256; }

}  // namespace

TEST(QuantFast, NamesParse) {
  Products p = Products::Exact;
  EXPECT_TRUE(parse_products("fast", p));
  EXPECT_EQ(p, Products::Fast);
  EXPECT_STREQ(products_name(p), "fast");
  EXPECT_TRUE(parse_products("exact", p));
  EXPECT_EQ(p, Products::Exact);
  EXPECT_FALSE(parse_products("Fast", p));
  EXPECT_FALSE(parse_products("", p));
  EXPECT_THROW(q8_block_for(Precision::F16), Error);
}

// Every rounded value is within half a step of the input; the scale is the block's
// largest magnitude over 127 (to float16 for blocks of 32), and the largest value
// takes the full range.
TEST(QuantFast, RoundingKeepsEachValueWithinHalfAStep) {
  std::mt19937 gen(7);
  for (int block : {32, 256}) {
    std::vector<float> x = random_vector(4 * 256, gen);
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
    Q8Vector q;
    quantize_q8(x.data(), int64_t(x.size()), block, q);
    ASSERT_EQ(q.q.size(), x.size());
    ASSERT_EQ(q.d.size(), x.size() / size_t(block));
    ASSERT_EQ(q.sums16.size(), block == 256 ? x.size() / 16 : 0u);
    for (size_t b = 0; b < q.d.size(); ++b) {
      double amax = 0.0;
      for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(double(x[b * size_t(block) + size_t(j)])));
      const double d = q.d[b];
      if (block == 32) {
        EXPECT_EQ(q.d[b], f16_to_f32(f32_to_f16(float(amax / 127.0))));
      } else {
        EXPECT_NEAR(std::fabs(d), amax / 127.0, 1e-6 * amax);
      }
      int top = 0;
      for (int j = 0; j < block; ++j) {
        const size_t i = b * size_t(block) + size_t(j);
        EXPECT_LE(std::abs(int(q.q[i])), 127);
        top = std::max(top, std::abs(int(q.q[i])));
        // Half a step, plus the float16 rounding of d for blocks of 32 (2^-11 of it).
        EXPECT_LE(std::fabs(d * q.q[i] - x[i]), std::fabs(d) * (0.5 + 1e-4) + amax * (block == 32 ? 1e-3 : 1e-6))
            << "block " << block << " value " << i;
      }
      EXPECT_EQ(top, amax > 0 ? 127 : 0);
    }
    if (block == 256)
      for (size_t g = 0; g < q.sums16.size(); ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += q.q[16 * g + size_t(j)];
        EXPECT_EQ(q.sums16[g], s);
      }
  }
  Q8Vector q;
  const std::vector<float> x(40, 1.0f);
  EXPECT_THROW(quantize_q8(x.data(), 40, 32, q), Error);
  EXPECT_THROW(quantize_q8(x.data(), 32, 64, q), Error);
}

// The rounded vectors start on a cache line whatever the heap holds: the kernels read
// them with 512-bit loads once per weight row, and an input 16 bytes past a line makes
// every such load span two lines. Odd-sized blocks kept alive in between move malloc's
// next addresses around (with plain std::vector storage, most of these land 16, 32 or
// 48 bytes past a line).
TEST(QuantFast, RoundedVectorsStartOnACacheLine) {
  std::mt19937 gen(11);
  std::vector<std::vector<char>> clutter;
  auto on_line = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; };
  for (int round = 0; round < 24; ++round) {
    clutter.emplace_back(size_t(8 + 24 * round));
    for (int block : {32, 256}) {
      for (int64_t n : {int64_t(256), int64_t(2048), int64_t(8192), int64_t(768)}) {
        const std::vector<float> x = random_vector(n, gen);
        Q8Vector q;
        quantize_q8(x.data(), n, block, q);
        prepare_tiles(block == 32 ? Precision::Q4_0 : Precision::Q4_K, q);
        const std::string at =
            "block " + std::to_string(block) + ", " + std::to_string(n) + " values, round " + std::to_string(round);
        EXPECT_TRUE(on_line(q.q.data())) << at;
        EXPECT_TRUE(on_line(q.d.data())) << at;
        if (block == 256) {
          EXPECT_TRUE(on_line(q.sums16.data())) << at;
          EXPECT_TRUE(on_line(q.sums32.data())) << at;
        } else {
          EXPECT_TRUE(on_line(q.start4.data())) << at;
        }
      }
    }
    AlignedVector<float> v(size_t(3 + round));
    EXPECT_TRUE(on_line(v.data())) << "round " << round;
    v.resize(size_t(5000 + round));  // moved by the growth
    EXPECT_TRUE(on_line(v.data())) << "round " << round;
  }
}

// The AVX2 rounding gives the portable one's values, scales and sums: random values,
// an all-zero block, a block whose largest magnitude comes twice with both signs (the
// first decides the sign of a 256-block's scale), values that land on halves.
TEST(QuantFast, RoundingAvx2EqualsPortable) {
  if (!quant_simd_available()) GTEST_SKIP() << "this processor has no AVX2: only the portable rounding runs";
  std::mt19937 gen(13);
  std::vector<float> x = random_vector(8 * 256, gen);
  std::fill(x.begin(), x.begin() + 256, 0.0f);
  x[300] = -5.0f, x[301] = 5.0f;                                             // block 1 of 256: -5 first
  for (int j = 0; j < 256; ++j) x[size_t(512 + j)] = float(j - 128) * 0.5f;  // halves: ties
  for (int block : {32, 256}) {
    Q8Vector a, b;
    quantize_q8(x.data(), int64_t(x.size()), block, a, true);
    quantize_q8(x.data(), int64_t(x.size()), block, b, false);
    EXPECT_EQ(a.q, b.q) << "block " << block;
    EXPECT_EQ(a.d, b.d) << "block " << block;
    EXPECT_EQ(a.sums16, b.sums16) << "block " << block;
    if (block == 256) {
      EXPECT_GT(b.d[1], 0.0f) << "-5 comes before 5: the scale is 1 / (-127 / -5)";
    }
  }
}

// Each row equals sum_c W[r, c] * d[c / block] * q[c] in double over the blocks'
// fields, to float32 rounding of the scales' products and the sums.
TEST(QuantFast, EachRowEqualsADoubleSumOverTheRoundedActivations) {
  std::mt19937 gen(11);
  for (Precision p : kQuantized) {
    const int64_t rows = 13, cols = test_cols(p);
    const std::vector<uint8_t> m = random_matrix(p, rows, cols, gen);
    const std::vector<float> x = random_vector(cols, gen);
    Q8Vector q;
    quantize_q8(x.data(), cols, q8_block_for(p), q);
    for (bool simd : {false, true}) {
      if (simd && !quant_simd_available()) continue;
      std::vector<float> y(static_cast<size_t>(rows));
      gemv_quant_fast(m.data(), p, cols, q, y.data(), 0, rows, simd);
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0.0, size = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t* b = m.data() + r * row_bytes(p, cols) + c / block_elems(p) * block_bytes(p);
          const Parts v = block_value(p, b, int(c % block_elems(p)));
          const double xc = double(q.d[size_t(c / q.block)]) * q.q[size_t(c)];
          want += (v.scaled - v.min) * xc;
          size += (std::fabs(v.scaled) + std::fabs(v.min)) * std::fabs(xc);
        }
        EXPECT_NEAR(y[size_t(r)], want, 1e-5 * size + 1e-30)
            << precision_name(p) << " row " << r << (simd ? " avx2" : " portable");
      }
    }
  }
}

// The AVX2 and portable kernels give the same bits, over ranges that start and end
// anywhere; so do the AVX-512 VNNI ones (a prepared vector) where they run.
TEST(QuantFast, Avx2AndPortableKernelsAgreeBitForBit) {
  if (!quant_simd_available()) GTEST_SKIP() << "this processor has no AVX2: only the portable kernels run";
  std::mt19937 gen(5);
  for (Precision p : kQuantized)
    for (int64_t cols : {int64_t(q8_block_for(p) == 32 ? 32 : 256), test_cols(p), int64_t(4096)}) {
      const int64_t rows = 21;
      const std::vector<uint8_t> m = random_matrix(p, rows, cols, gen);
      const std::vector<float> x = random_vector(cols, gen);
      Q8Vector q;
      quantize_q8(x.data(), cols, q8_block_for(p), q);
      Q8Vector prepared = q;
      prepare_tiles(p, prepared);
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {3, 16}, {20, 21}}) {
        std::vector<float> a(size_t(r1 - r0)), b(size_t(r1 - r0)), c(size_t(r1 - r0));
        gemv_quant_fast(m.data(), p, cols, q, a.data(), r0, r1, true);
        gemv_quant_fast(m.data(), p, cols, q, b.data(), r0, r1, false);
        gemv_quant_fast(m.data(), p, cols, prepared, c.data(), r0, r1, true);
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
              << precision_name(p) << " cols " << cols << " row " << r0 + int64_t(i);
          ASSERT_EQ(std::bit_cast<uint32_t>(c[i]), std::bit_cast<uint32_t>(b[i]))
              << precision_name(p) << " cols " << cols << " row " << r0 + int64_t(i) << ", a prepared vector";
        }
      }
    }
}

// The float order the header documents, which is that of ggml's AVX2 dot products:
// eight lanes of exact integers per block (lane l: the values 4l .. 4l+3 of every 32;
// Q6_K's -32 taken as 32 sc s over the 32 values 32l .. 32l+31; the mins of Q4_K and
// Q5_K in four lanes of two sub-blocks each), fused into eight float accumulators with
// the block's dw * dx, summed as (a0 + a4) + (a2 + a6) + ((a1 + a5) + (a3 + a7));
// Q4_0 as llama.cpp multiplies its rearranged Q4_0 matrices: one chain per row over the
// blocks' whole totals, acc = fma(float(total), dw * dx, acc). Each row, written here
// from the block layouts, gives the kernels' bits.
TEST(QuantFast, EachRowFollowsGgmlsFloatOrderBitForBit) {
  std::mt19937 gen(17);
  for (Precision p : kQuantized) {
    const int64_t rows = 9, cols = test_cols(p);
    const std::vector<uint8_t> m = random_matrix(p, rows, cols, gen);
    const std::vector<float> x = random_vector(cols, gen);
    Q8Vector q;
    quantize_q8(x.data(), cols, q8_block_for(p), q);
    const int E = block_elems(p);
    const int dat = p == Precision::Q6_K ? 208 : 0;
    for (int64_t r = 0; r < rows; ++r) {
      float acc[8] = {}, accm[4] = {}, chain = 0.0f;
      for (int64_t k = 0; k < cols / E; ++k) {
        const uint8_t* b = m.data() + r * row_bytes(p, cols) + k * block_bytes(p);
        const int8_t* xq = q.q.data() + k * E;
        int64_t lanes[8] = {}, mins[4] = {};
        for (int i = 0; i < E; ++i) {
          const IntParts v = int_parts(p, b, i);
          lanes[(i % 32) / 4] += int64_t(v.scale) * v.q * xq[i];
          if (p == Precision::Q6_K) lanes[i / 32] -= 32 * v.scale * xq[i];
          mins[i / 64] += int64_t(v.min) * xq[i];
        }
        const float dx = q.d[size_t(k)];
        const int64_t total = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
        chain = std::fma(float(total), float(half(b)) * dx, chain);
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(float(half(b + dat)) * dx, float(lanes[l]), acc[l]);
        if (p == Precision::Q4_K || p == Precision::Q5_K)
          for (int i = 0; i < 4; ++i) accm[i] = std::fma(-dx * float(half(b + 2)), float(mins[i]), accm[i]);
      }
      float want = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
      if (p == Precision::Q4_K || p == Precision::Q5_K) want += (accm[0] + accm[2]) + (accm[1] + accm[3]);
      if (p == Precision::Q4_0) want = chain;
      // The portable kernel, AVX2, and (K types and Q4_0, a vector prepared for them,
      // where they run) the AVX-512 VNNI kernels for one activation row.
      Q8Vector prepared = q;
      prepare_tiles(p, prepared);
      for (int way : {0, 1, 2}) {
        if (way > 0 && !quant_simd_available()) continue;
        if (way == 2 && ((block_elems(p) != 256 && p != Precision::Q4_0) || !quant_tiles_available())) continue;
        float y = 0.0f;
        gemv_quant_fast(m.data(), p, cols, way == 2 ? prepared : q, &y, r, r + 1, way > 0);
        const char* how[] = {" portable", " avx2", " tiles"};
        EXPECT_EQ(std::bit_cast<uint32_t>(y), std::bit_cast<uint32_t>(want))
            << precision_name(p) << " row " << r << how[way] << ": " << y << " vs " << want;
      }
    }
  }
}

// The tiles (AVX-512 VNNI, several activation rows per weight block) give each
// activation row the bits of its own row product, for every count of rows (the 8, 4,
// 2, 1 of the tiles and their tails), widths with tails and a wide one, parts of the
// weight rows, and activation rows that are all zero or one spike.
TEST(QuantFast, TilesGiveEachActivationRowItsRowProductsBits) {
  if (!quant_tiles_available())
    GTEST_SKIP() << "this processor has no AVX-512 VNNI: the tiles fall back to row products";
  std::mt19937 gen(23);
  for (Precision p : kQuantized)
    for (int64_t cols : {test_cols(p), int64_t(2048)}) {
      const int64_t rows = 21;
      const std::vector<uint8_t> m = random_matrix(p, rows, cols, gen);
      const int T = 19;
      std::vector<Q8Vector> xs(T);
      for (int t = 0; t < T; ++t) {
        std::vector<float> x = random_vector(cols, gen);
        if (t == 4) std::fill(x.begin(), x.end(), 0.0f);
        if (t == 7) {
          std::fill(x.begin(), x.end(), 0.0f);
          x[size_t(cols / 2)] = -3.5e4f;
        }
        quantize_q8(x.data(), cols, q8_block_for(p), xs[size_t(t)]);
        prepare_tiles(p, xs[size_t(t)]);
      }
      for (int count : {1, 2, 3, 5, 8, 9, 13, 19})
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {5, 6}, {3, 19}}) {
          const int64_t ldy = r1 - r0 + 3;
          std::vector<float> Y(size_t(count * ldy), -1.0f), one(size_t(r1 - r0));
          gemm_quant_fast(m.data(), p, cols, xs.data(), count, Y.data(), ldy, r0, r1, true);
          for (int t = 0; t < count; ++t) {
            Q8Vector plain = xs[size_t(t)];  // not prepared: the AVX2 row kernel
            plain.start4.clear();
            plain.sums32.clear();
            gemv_quant_fast(m.data(), p, cols, plain, one.data(), r0, r1);
            for (int64_t r = 0; r < r1 - r0; ++r)
              ASSERT_EQ(std::bit_cast<uint32_t>(Y[size_t(t * ldy + r)]), std::bit_cast<uint32_t>(one[size_t(r)]))
                  << precision_name(p) << " cols " << cols << " count " << count << " activation row " << t
                  << " weight row " << r0 + r << ": " << Y[size_t(t * ldy + r)] << " vs " << one[size_t(r)];
            for (int64_t r = r1 - r0; r < ldy; ++r) ASSERT_EQ(Y[size_t(t * ldy + r)], -1.0f) << "wrote past its rows";
          }
        }
    }
}

// Q4_0's tiles pack a range of weight rows in pieces of about 192 KiB: a range of more
// than one piece (2048 columns: 160 rows a piece), starting past row 0 and ending in a
// partial group of sixteen, gives each activation row its row product's bits.
TEST(QuantFast, Q4_0TilesOverSeveralPiecesGiveTheRowProductsBits) {
  if (!quant_tiles_available())
    GTEST_SKIP() << "this processor has no AVX-512 VNNI: the tiles fall back to row products";
  std::mt19937 gen(31);
  const Precision p = Precision::Q4_0;
  const int64_t rows = 363, cols = 2048, r0 = 7, r1 = 363;
  ASSERT_LT(quant_tile_rows(p, cols, int64_t(1) << 40, 1), r1 - r0) << "the range should span several pieces";
  const std::vector<uint8_t> m = random_matrix(p, rows, cols, gen);
  const int T = 3;
  std::vector<Q8Vector> xs(T);
  for (int t = 0; t < T; ++t) {
    const std::vector<float> x = random_vector(cols, gen);
    quantize_q8(x.data(), cols, 32, xs[size_t(t)]);
    prepare_tiles(p, xs[size_t(t)]);
  }
  const int64_t ldy = r1 - r0;
  std::vector<float> Y(static_cast<size_t>(T * ldy)), one(static_cast<size_t>(ldy));
  gemm_quant_fast(m.data(), p, cols, xs.data(), T, Y.data(), ldy, r0, r1);
  for (int t = 0; t < T; ++t) {
    Q8Vector plain = xs[size_t(t)];
    plain.start4.clear();  // the AVX2 (or portable) row kernel
    gemv_quant_fast(m.data(), p, cols, plain, one.data(), r0, r1);
    for (int64_t r = 0; r < ldy; ++r)
      ASSERT_EQ(std::bit_cast<uint32_t>(Y[size_t(t * ldy + r)]), std::bit_cast<uint32_t>(one[size_t(r)]))
          << "activation row " << t << " weight row " << r0 + r;
  }
}

TEST(QuantFast, TilesRefuseRowsNotPreparedForThem) {
  std::mt19937 gen(29);
  const std::vector<uint8_t> m = random_matrix(Precision::Q8_0, 2, 64, gen);
  const std::vector<float> x = random_vector(64, gen);
  std::vector<Q8Vector> xs(1);
  quantize_q8(x.data(), 64, 32, xs[0]);
  std::vector<float> y(2);
  if (quant_tiles_available()) {
    EXPECT_THROW(gemm_quant_fast(m.data(), Precision::Q8_0, 64, xs.data(), 1, y.data(), 2, 0, 2), Error);
  }
  EXPECT_THROW(prepare_tiles(Precision::Q4_K, xs[0]), Error);  // blocks of 32 for a K type
  prepare_tiles(Precision::Q8_0, xs[0]);
  gemm_quant_fast(m.data(), Precision::Q8_0, 64, xs.data(), 1, y.data(), 2, 0, 2);
  std::vector<float> want(2);
  gemv_quant_fast(m.data(), Precision::Q8_0, 64, xs[0], want.data(), 0, 2);
  EXPECT_EQ(y, want);
}

TEST(QuantFast, MismatchedVectorIsRefused) {
  std::mt19937 gen(3);
  const std::vector<uint8_t> m = random_matrix(Precision::Q4_K, 2, 256, gen);
  const std::vector<float> x = random_vector(256, gen);
  Q8Vector q;
  quantize_q8(x.data(), 256, 32, q);  // blocks of 32 for a K type
  std::vector<float> y(2);
  EXPECT_THROW(gemv_quant_fast(m.data(), Precision::Q4_K, 256, q, y.data(), 0, 2), Error);
  quantize_q8(x.data(), 256, 256, q);
  EXPECT_THROW(gemv_quant_fast(x.data(), Precision::F32, 256, q, y.data(), 0, 2), Error);
}

// The team with Fast products: two quantized matrices of odd row counts (and a float32
// one) in one run, on 1 and 2 threads, give what one call per matrix gives; the rows of
// a prefill (run_fast_rows) give what one call per row gives.
TEST(QuantFast, TeamSplitsEqualOneCall) {
  std::mt19937 gen(9);
  for (Precision p : kQuantized) {
    const int64_t cols = test_cols(p), ra = 77, rb = 45;
    const std::vector<uint8_t> ma = random_matrix(p, ra, cols, gen), mb = random_matrix(p, rb, cols, gen);
    const std::vector<float> mf = random_vector(3 * cols, gen);
    const std::vector<float> x = random_vector(cols, gen);
    Q8Vector q;
    quantize_q8(x.data(), cols, q8_block_for(p), q);
    std::vector<float> wa(static_cast<size_t>(ra)), wb(static_cast<size_t>(rb)), wf(3);
    gemv_quant_fast(ma.data(), p, cols, q, wa.data(), 0, ra);
    gemv_quant_fast(mb.data(), p, cols, q, wb.data(), 0, rb);
    gemv_rows(mf.data(), Precision::F32, cols, x.data(), wf.data(), 0, 3);
    for (int threads : {1, 2}) {
      MatvecTeam team;
      team.set_threads(threads);
      team.set_products(Products::Fast);
      std::vector<float> ya(static_cast<size_t>(ra)), yb(static_cast<size_t>(rb)), yf(3);
      const MatvecPart parts[3] = {{MatView{ma.data(), p, ra, cols, 0}, ya.data()},
                                   {MatView{mf.data(), Precision::F32, 3, cols, 0}, yf.data()},
                                   {MatView{mb.data(), p, rb, cols, 0}, yb.data()}};
      for (int rep = 0; rep < 3; ++rep) {  // the shares' order alternates between runs
        team.run(parts, x.data());
        EXPECT_EQ(ya, wa) << precision_name(p) << " threads " << threads;
        EXPECT_EQ(yb, wb) << precision_name(p) << " threads " << threads;
        EXPECT_EQ(yf, wf) << "float32 weights keep float32 activations";
      }
      // Prefill rows: Y [T, ra] (tiles of 8 rows and a tail of 3).
      const int T = 11;
      const std::vector<float> X = random_vector(T * cols, gen);
      std::vector<float> Y(size_t(T * ra)), one(static_cast<size_t>(ra));
      team.run_fast_rows(MatView{ma.data(), p, ra, cols, 0}, T, X.data(), Y.data(), ra);
      for (int t = 0; t < T; ++t) {
        Q8Vector qt;
        quantize_q8(X.data() + t * cols, cols, q8_block_for(p), qt);
        gemv_quant_fast(ma.data(), p, cols, qt, one.data(), 0, ra);
        EXPECT_EQ(std::vector<float>(Y.begin() + t * ra, Y.begin() + (t + 1) * ra), one)
            << precision_name(p) << " prefill row " << t;
      }
    }
  }
}
