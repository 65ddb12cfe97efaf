// The Fast products with bfloat16 weights (perf/bf16_fast.h): the rounding of the
// activations against the nearest-even rule checked with doubles, the sum orders
// against cases worked out by hand from vdpbf16ps's definition (the odd value of a
// pair first, each step rounded), the AVX-512 BF16 kernels against the portable ones
// bit for bit, the sums against a double-precision dot product, and the thread team's
// choice of products.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "perf/bf16_fast.h"
#include "perf/gemv.h"
#include "perf/parallel.h"

using namespace ds;

namespace {

float widen_b(uint16_t h) { return widen(h, Precision::BF16); }

uint16_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = round_bf16(d(gen));
  return v;
}

TEST(Bf16Fast, RoundsToTheNearestBfloat16TiesToEven) {
  std::mt19937 gen(1);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           1.00390625f,
                           1.005859375f,
                           3.0e38f,
                           -3.0e38f,
                           1e-40f,
                           -1e-42f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = any(gen);
    if ((u & 0x7F800000u) == 0x7F800000u) continue;   // inf and NaN: below
    if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exactly halfway
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float x : xs) {
    const uint16_t r = round_bf16(x);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint16_t down = uint16_t(u >> 16), up = uint16_t(down + 1);  // toward zero, away from zero
    ASSERT_TRUE(r == down || r == up) << x;
    const double dd = std::fabs(double(x) - double(widen_b(down)));
    // Past the largest finite value, the next step up is 2^128 (which rounds to infinity).
    const double du = std::fabs((up & 0x7FFFu) == 0x7F80u ? std::copysign(std::ldexp(1.0, 128), double(x)) - double(x)
                                                          : double(widen_b(up)) - double(x));
    if (dd < du) {
      EXPECT_EQ(r, down) << x;
    } else if (du < dd) {
      EXPECT_EQ(r, up) << x;
    } else if (dd != 0) {
      EXPECT_EQ(r & 1, 0) << x << ": a tie goes to the even one";
    }
  }
  // Past the largest bfloat16 by half a step: infinity.
  EXPECT_EQ(round_bf16(widen_b(0x7F7F) * (1.0f + 1.0f / 256)), 0x7F80);
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  // NaN stays NaN, made quiet, its sign kept.
  const uint32_t signalling = 0xFF800001u;
  float nan;
  std::memcpy(&nan, &signalling, 4);
  const uint16_t n = round_bf16(nan);
  EXPECT_TRUE(std::isnan(widen_b(n)));
  EXPECT_EQ(n & 0x8040u, 0x8040u);
}

// Worked by hand: pairs take their odd value first and each step rounds, so
// 1 + 2^24 (odd) + 1 (even) is 2^24 in float; taking the even value first would give
// 2^24 + 2. The one-row order puts values 32..63 in a second chain, the many-row order
// keeps them in the first: 2 + 2^24 + 1 is 2^24 + 4 in one chain (2^24 + 3 is a tie,
// to the even 2^24 + 4) but 2 + (2^24 + 1 -> 2^24) = 2^24 + 2 in two.
TEST(Bf16Fast, SumsInVdpbf16psOrder) {
  const uint16_t one = round_bf16(1.0f), two = round_bf16(2.0f), big = round_bf16(16777216.0f);
  for (bool simd : {false, true}) {
    if (simd && !bf16_fast_available()) continue;
    std::vector<uint16_t> w(128, 0), x(128, one);
    w[0] = one;
    w[64] = one;  // values 64..95: the first chain again, lane 0
    w[65] = big;
    float y = 0;
    gemv_bf16_fast(w.data(), 128, x.data(), &y, 0, 1, simd);
    EXPECT_EQ(y, 16777216.0f) << (simd ? "simd" : "portable");

    std::vector<uint16_t> v(64, 0), X(128, one);
    v[0] = two;
    v[32] = one;
    v[33] = big;
    float Y[2] = {};
    gemm_bf16_fast(v.data(), 64, X.data(), 2, Y, 1, 0, 1, simd);  // two activation rows: one chain
    EXPECT_EQ(Y[0], 16777220.0f) << (simd ? "simd" : "portable");
    EXPECT_EQ(Y[1], 16777220.0f) << (simd ? "simd" : "portable");
    gemv_bf16_fast(v.data(), 64, X.data(), Y, 0, 1, simd);  // one: two chains
    EXPECT_EQ(Y[0], 16777218.0f) << (simd ? "simd" : "portable");
  }
}

TEST(Bf16Fast, SimdKernelsGiveThePortableBits) {
  if (!bf16_fast_available()) GTEST_SKIP() << "no AVX-512 BF16 on this processor";
  std::mt19937 gen(2);
  for (int64_t cols : {32, 64, 96, 100, 2048, 2080}) {
    const int64_t rows = 37;
    std::vector<uint16_t> W = random_bf16(size_t(rows * cols), 0.05f, gen);
    W[5] = 0x0012;  // inputs below float's normal range read as zero
    W[size_t(cols) + 7] = 0x8003;
    for (int T : {1, 2, 5, 6, 7, 13}) {
      std::vector<uint16_t> X = random_bf16(size_t(T * cols), 1.0f, gen);
      std::vector<float> a(size_t(T * rows), -1.0f), b(size_t(T * rows), -2.0f);
      gemm_bf16_fast(W.data(), cols, X.data(), T, a.data(), rows, 1, rows, true);
      gemm_bf16_fast(W.data(), cols, X.data(), T, b.data(), rows, 1, rows, false);
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows - 1; ++r)
          ASSERT_EQ(bits_of(a[size_t(t * rows + r)]), bits_of(b[size_t(t * rows + r)]))
              << "cols " << cols << " T " << T << " row " << r + 1 << " activation row " << t;
      std::vector<float> g(static_cast<size_t>(rows)), h(static_cast<size_t>(rows));
      gemv_bf16_fast(W.data(), cols, X.data(), g.data(), 0, rows, true);
      gemv_bf16_fast(W.data(), cols, X.data(), h.data(), 0, rows, false);
      EXPECT_EQ(g, h) << "cols " << cols;
    }
  }
}

TEST(Bf16Fast, SumsAreCloseToTheDoubleDotProduct) {
  std::mt19937 gen(3);
  for (int64_t cols : {64, 100, 2048}) {
    const int64_t rows = 9;
    const std::vector<uint16_t> W = random_bf16(size_t(rows * cols), 0.05f, gen), X = random_bf16(size_t(cols), 1, gen);
    std::vector<float> one(static_cast<size_t>(rows)), many(size_t(2 * rows));
    std::vector<uint16_t> X2(X);
    X2.insert(X2.end(), X.begin(), X.end());
    gemv_bf16_fast(W.data(), cols, X.data(), one.data(), 0, rows, false);
    gemm_bf16_fast(W.data(), cols, X2.data(), 2, many.data(), rows, 0, rows, false);
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(widen_b(W[size_t(r * cols + c)])) * double(widen_b(X[size_t(c)]));
        dot += p;
        mag += std::fabs(p);
      }
      const double tol = double(cols) * 6e-8 * mag;
      EXPECT_NEAR(one[size_t(r)], dot, tol) << "cols " << cols << " row " << r;
      EXPECT_NEAR(many[size_t(r)], dot, tol) << "cols " << cols << " row " << r;
    }
  }
}

// Fast products for bfloat16 matrices kept row by row, where the kernels run; float32
// activations for those in tiles, and for everything with Exact.
TEST(Bf16Fast, TheTeamTakesTheFastProductsForRowMajorBf16) {
  std::mt19937 gen(4);
  const int64_t rows = 75, cols = 96;
  const std::vector<uint16_t> W = random_bf16(size_t(rows * cols), 0.05f, gen);
  std::vector<uint16_t> tiled(W);
  rows_to_tiles(tiled.data(), 2, 72, cols);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int T = 9;
  std::vector<float> X(size_t(T * cols));
  for (auto& v : X) v = d(gen);
  std::vector<uint16_t> Xb(X.size());
  round_bf16(X.data(), int64_t(X.size()), Xb.data());
  std::vector<float> fast1(static_cast<size_t>(rows)), exact1(static_cast<size_t>(rows)),
      exact_t(static_cast<size_t>(rows)), fastT(size_t(T * rows));
  gemv_bf16_fast(W.data(), cols, Xb.data(), fast1.data(), 0, rows);
  gemv_rows(W.data(), Precision::BF16, cols, X.data(), exact1.data(), 0, rows);
  gemv_rows(tiled.data(), Precision::BF16, cols, X.data(), exact_t.data(), 0, rows, 72);
  gemm_bf16_fast(W.data(), cols, Xb.data(), T, fastT.data(), rows, 0, rows);
  ASSERT_NE(fast1, exact1) << "the two roundings should differ somewhere";
  const bool on = bf16_fast_available();
  for (int threads : {1, 2})
    for (Products p : {Products::Exact, Products::Fast}) {
      MatvecTeam team;
      team.set_threads(threads);
      team.set_products(p);
      const bool fast = p == Products::Fast && on;
      const MatView rm{W.data(), Precision::BF16, rows, cols, 0}, tv{tiled.data(), Precision::BF16, rows, cols, 72};
      EXPECT_EQ(team.fast_products(rm), fast);
      EXPECT_FALSE(team.fast_products(tv));
      std::vector<float> y(static_cast<size_t>(rows)), yt(static_cast<size_t>(rows));
      const MatvecPart parts[2] = {{tv, yt.data()}, {rm, y.data()}};  // tiles from row 0, as in a model
      team.run(parts, X.data());
      EXPECT_EQ(y, fast ? fast1 : exact1) << products_name(p) << " threads " << threads;
      EXPECT_EQ(yt, exact_t) << "in tiles: float32 activations";
      if (!fast) continue;
      std::vector<float> Y(size_t(T * rows));
      team.run_fast_rows(rm, T, X.data(), Y.data(), rows);
      EXPECT_EQ(Y, fastT) << "threads " << threads;
    }
}

}  // namespace
