// The decode kernels and 16-bit weights: the matrix-vector products against a naive
// double-precision sum, the vectorised activations against the C library, and
// models kept as bfloat16/float16 against the same models in float32.
#include <gtest/gtest.h>

#include "helpers.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "io/loader.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "perf/gemm.h"
#include "perf/gemv.h"
#include "perf/vmath.h"

using namespace ds;

namespace {

double ref_widen(uint16_t h, Precision p) { return p == Precision::BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

}  // namespace

TEST(Kernels, GemvMatchesANaiveSumForEveryPrecisionAndShape) {
  std::mt19937 gen(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int cols : {1, 7, 8, 31, 32, 33, 100, 768}) {
    for (int rows : {1, 3, 9, 64}) {
      std::vector<float> W(static_cast<size_t>(rows) * cols), x(static_cast<size_t>(cols));
      for (auto& v : W) v = nd(gen);
      for (auto& v : x) v = nd(gen);
      for (Precision p : {Precision::F32, Precision::BF16, Precision::F16}) {
        std::vector<uint16_t> H(W.size());
        if (p != Precision::F32) narrow(W.data(), int64_t(W.size()), p, H.data());
        const void* data = p == Precision::F32 ? static_cast<const void*>(W.data()) : H.data();
        // A slice of rows, as the threads split them.
        const int r0 = rows / 3, r1 = rows;
        std::vector<float> y(size_t(r1 - r0), std::nanf(""));
        gemv_rows(data, p, cols, x.data(), y.data(), r0, r1);
        for (int r = r0; r < r1; ++r) {
          double ref = 0, mag = 0;
          for (int c = 0; c < cols; ++c) {
            double w = p == Precision::F32 ? W[size_t(r) * cols + c] : ref_widen(H[size_t(r) * cols + c], p);
            ref += w * x[size_t(c)];
            mag += std::abs(w * x[size_t(c)]);
          }
          EXPECT_NEAR(y[size_t(r - r0)], ref, 1e-6 * mag + 1e-6)
              << precision_name(p) << " rows " << rows << " cols " << cols << " row " << r;
        }
      }
    }
  }
}

TEST(Kernels, WidenAndNarrowAreExactInverses) {
  for (Precision p : {Precision::BF16, Precision::F16}) {
    std::vector<uint16_t> all(65536), back(65536);
    for (int i = 0; i < 65536; ++i) all[size_t(i)] = uint16_t(i);
    std::vector<float> f(65536);
    widen_rows(all.data(), p, 65536, 0, 1, f.data());
    for (int i = 0; i < 65536; ++i) {
      const float ref = float(ref_widen(all[size_t(i)], p));
      if (std::isnan(ref))
        EXPECT_TRUE(std::isnan(f[size_t(i)]));
      else
        EXPECT_EQ(f[size_t(i)], ref) << precision_name(p) << " bits " << i;
    }
    narrow(f.data(), 65536, p, back.data());
    for (int i = 0; i < 65536; ++i)
      if (!std::isnan(f[size_t(i)])) {
        EXPECT_EQ(back[size_t(i)], all[size_t(i)]) << precision_name(p) << " bits " << i;
      }
  }
}

// narrow() (eight at a time where the build allows) against the one-value conversions
// of io/safetensors.h on random bit patterns: normals, subnormals, ties, overflow,
// infinities and NaNs alike.
TEST(Kernels, NarrowMatchesTheScalarConversionsOnEveryKindOfValue) {
  std::mt19937 gen(11);
  std::vector<float> f(1 << 20);
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t b = gen();
    if (i % 4 == 1) b = (b & 0x8000FFFFu) | 0x3F800000u | ((b >> 8) & 0x1000u);  // ties near 1
    if (i % 4 == 2) b &= 0x807FFFFFu | (uint32_t(0x67) << 23);                   // around the f16 limits
    f[i] = std::bit_cast<float>(b);
  }
  for (Precision p : {Precision::BF16, Precision::F16}) {
    std::vector<uint16_t> got(f.size() + 3);
    narrow(f.data(), int64_t(f.size()) - 3, p, got.data());  // a tail too
    for (size_t i = 0; i + 3 < f.size(); ++i) {
      const uint16_t want = p == Precision::BF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
      ASSERT_EQ(got[i], want) << precision_name(p) << " bits " << std::bit_cast<uint32_t>(f[i]);
    }
  }
}

namespace {

// Row t of X[., K] dotted with row n of W[., K] in double, and the sum of the terms'
// magnitudes (the scale of a float32 sum's rounding).
std::pair<double, double> row_dot(const std::vector<float>& X, const std::vector<float>& W, int64_t K, int64_t t,
                                  int64_t n) {
  double want = 0, mag = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double term = double(X[size_t(t * K + k)]) * W[size_t(n * K + k)];
    want += term;
    mag += std::abs(term);
  }
  return {want, mag};
}

}  // namespace

// The prefill's products against double loops: shapes with edges in every direction
// (rows not a multiple of 12, columns not a multiple of 32, depths not a multiple of
// 8 or of the depth block), a wider output stride, one and two threads.
TEST(Kernels, PrefillProductsMatchDoubleLoops) {
  if (!gemm_nt_available()) GTEST_SKIP() << "this build has no AVX-512: prefill uses Eigen's products";
  std::mt19937 gen(5);
  std::normal_distribution<float> nd;
  struct Shape {
    int64_t T, K, N;
  };
  for (const Shape sh : {Shape{1, 8, 1}, Shape{12, 256, 32}, Shape{13, 300, 33}, Shape{37, 77, 70},
                         Shape{100, 520, 800}, Shape{5, 3, 9}}) {
    const int64_t ldy = sh.N + 3;
    std::vector<float> X(size_t(sh.T * sh.K)), W(size_t(sh.N * sh.K));
    for (float& v : X) v = nd(gen);
    for (float& v : W) v = nd(gen);
    for (int threads : {1, 2}) {
      std::vector<float> Y(size_t(sh.T * ldy), 42.0f);
      gemm_nt(X.data(), sh.T, sh.K, W.data(), sh.N, Y.data(), ldy, threads);
      for (int64_t t = 0; t < sh.T; ++t) {
        for (int64_t n = 0; n < sh.N; ++n) {
          const auto [want, mag] = row_dot(X, W, sh.K, t, n);
          ASSERT_NEAR(Y[size_t(t * ldy + n)], want, 1e-6 * mag + 1e-30)
              << "T " << sh.T << " K " << sh.K << " N " << sh.N << " at " << t << "," << n << ", " << threads;
        }
        for (int64_t n = sh.N; n < ldy; ++n) ASSERT_EQ(Y[size_t(t * ldy + n)], 42.0f);  // outside the product
      }
    }
  }
}

// X packed once and W multiplied in pieces (as the engine widens 16-bit rows a block at
// a time): against double loops, and bit for bit what gemm_nt gives on the whole W.
// The depth blocks are packed last to first (threads pack them in any order), into a
// buffer filled with NaN so that a value the packing missed would show.
TEST(Kernels, PrefillProductsOnXPackedOnceMatchDoubleLoops) {
  if (!gemm_nt_available()) GTEST_SKIP() << "this build has no AVX-512: prefill uses Eigen's products";
  std::mt19937 gen(9);
  std::normal_distribution<float> nd;
  struct Shape {
    int64_t T, K, N, piece;
  };
  for (const Shape sh : {Shape{1, 8, 1, 1}, Shape{13, 300, 70, 32}, Shape{100, 520, 800, 256}, Shape{97, 1030, 96, 40},
                         Shape{5, 3, 9, 4}}) {
    SCOPED_TRACE("T " + std::to_string(sh.T) + " K " + std::to_string(sh.K) + " N " + std::to_string(sh.N));
    const int64_t ldy = sh.N + 3;
    std::vector<float> X(size_t(sh.T * sh.K)), W(size_t(sh.N * sh.K));
    for (float& v : X) v = nd(gen);
    for (float& v : W) v = nd(gen);
    std::vector<float> Xp(size_t(gemm_packed_floats(sh.T, sh.K)), std::numeric_limits<float>::quiet_NaN());
    for (int b = gemm_depth_blocks(sh.K) - 1; b >= 0; --b) gemm_pack_block(X.data(), sh.T, sh.K, b, Xp.data());
    std::vector<float> Y(size_t(sh.T * ldy), 42.0f), whole(Y);
    for (int64_t r0 = 0; r0 < sh.N; r0 += sh.piece) {
      const int64_t n = std::min(sh.piece, sh.N - r0);
      gemm_nt_packed(Xp.data(), sh.T, sh.K, W.data() + r0 * sh.K, n, Y.data() + r0, ldy);
    }
    gemm_nt(X.data(), sh.T, sh.K, W.data(), sh.N, whole.data(), ldy, 1);
    for (int64_t t = 0; t < sh.T; ++t) {
      for (int64_t n = 0; n < sh.N; ++n) {
        const auto [want, mag] = row_dot(X, W, sh.K, t, n);
        const float got = Y[size_t(t * ldy + n)];
        ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30) << "at " << t << "," << n;
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(whole[size_t(t * ldy + n)])) << t << "," << n;
      }
      for (int64_t n = sh.N; n < ldy; ++n) ASSERT_EQ(Y[size_t(t * ldy + n)], 42.0f);  // outside the product
    }
  }
}

// 16-bit rows widened as they are packed (the prefill's float16 and bfloat16 products):
// against double loops on the values the one-value conversions give, and bit for bit
// what gemm_nt_packed gives on the same rows widened first. Shapes with a depth that is
// not a multiple of 8 and columns past the last whole 32-column tile take the packing's
// one-value path; the halves include subnormals (float16) and zeros.
TEST(Kernels, PrefillProductsOn16BitRowsMatchTheWidenedRows) {
  if (!gemm_nt_available()) GTEST_SKIP() << "this build has no AVX-512: prefill uses Eigen's products";
  std::mt19937 gen(11);
  std::normal_distribution<float> nd;
  struct Shape {
    int64_t T, K, N;
  };
  for (const Precision p : {Precision::F16, Precision::BF16})
    for (const Shape sh :
         {Shape{1, 8, 1}, Shape{13, 300, 70}, Shape{100, 520, 800}, Shape{5, 3, 9}, Shape{40, 1030, 33}}) {
      SCOPED_TRACE(std::string(p == Precision::BF16 ? "bf16" : "f16") + " T " + std::to_string(sh.T) + " K " +
                   std::to_string(sh.K) + " N " + std::to_string(sh.N));
      const int64_t ldy = sh.N + 3;
      std::vector<float> X(size_t(sh.T * sh.K)), W(size_t(sh.N * sh.K));
      for (float& v : X) v = nd(gen);
      std::vector<uint16_t> H(W.size());
      for (size_t i = 0; i < H.size(); ++i) {
        const float v = i % 97 == 5 ? 3e-6f * nd(gen) : i % 89 == 7 ? 0.0f : nd(gen);
        H[i] = p == Precision::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        W[i] = float(ref_widen(H[i], p));
      }
      std::vector<float> Xp(size_t(gemm_packed_floats(sh.T, sh.K)), std::numeric_limits<float>::quiet_NaN());
      for (int b = 0; b < gemm_depth_blocks(sh.K); ++b) gemm_pack_block(X.data(), sh.T, sh.K, b, Xp.data());
      std::vector<float> Y(size_t(sh.T * ldy), 42.0f), widened(Y);
      gemm_nt_packed16(Xp.data(), sh.T, sh.K, H.data(), p, sh.N, Y.data(), ldy);
      gemm_nt_packed(Xp.data(), sh.T, sh.K, W.data(), sh.N, widened.data(), ldy);
      for (int64_t t = 0; t < sh.T; ++t) {
        for (int64_t n = 0; n < sh.N; ++n) {
          const auto [want, mag] = row_dot(X, W, sh.K, t, n);
          const float got = Y[size_t(t * ldy + n)];
          ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30) << "at " << t << "," << n;
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(widened[size_t(t * ldy + n)]))
              << t << "," << n;
        }
        for (int64_t n = sh.N; n < ldy; ++n) ASSERT_EQ(Y[size_t(t * ldy + n)], 42.0f);  // outside the product
      }
    }
}

TEST(Kernels, VectorisedActivationsMatchTheCLibrary) {
  std::vector<float> xs;
  for (float v = -30.0f; v <= 30.0f; v += 0.0137f) xs.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, -100.0f}) xs.push_back(v);
  // The same special values at the front too, in the 16-lane body rather than a tail.
  xs.insert(xs.begin(), {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, -100.0f, 89.0f, -88.0f, 0.5f});
  // GELU (tanh form) in double precision, as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)),
  // which equals 0.5 x (1 + tanh(...)) without its cancellation for negative x.
  std::vector<float> g = xs;
  gelu_tanh_inplace(g.data(), int64_t(g.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double ref = x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    if (x > -5) {
      EXPECT_NEAR(ref, 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))), 1e-12);
    }
    // Rounding the exponent's argument a (in float) alone moves the result by about
    // |a| 2^-24 relative; the exponential and the division add a few ulp.
    const double a = std::abs(2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
    EXPECT_NEAR(g[i], ref, (4e-7 + 2.4e-7 * a) * std::abs(ref) + 1e-37) << "x = " << x;
  }
  // SwiGLU: silu(a) * u = a / (1 + exp(-a)) * u.
  std::vector<float> a = xs, u(xs.size());
  for (size_t i = 0; i < u.size(); ++i) u[i] = 0.5f + 0.001f * float(i % 997);
  silu_mul_inplace(a.data(), u.data(), int64_t(a.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double ref = x / (1 + std::exp(-x)) * double(u[i]);
    EXPECT_NEAR(a[i], ref, 5e-7 * std::abs(ref) + 1e-37) << "x = " << x;
  }
  // Softmax exponentials: exp(x - shift) and their sum; -inf gives exactly 0.
  std::vector<float> e = xs;
  e.push_back(-std::numeric_limits<float>::infinity());
  const float shift = 30.0f;
  std::vector<float> in = e;
  float sum = exp_shift_sum(e.data(), int64_t(e.size()), shift);
  double ref_sum = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    // Of the argument as float computes it: this checks the exponential itself.
    const double ref = std::exp(double(in[i] - shift));
    ref_sum += ref;
    EXPECT_NEAR(e[i], ref, 3e-7 * ref + 1e-44) << "x = " << in[i];
  }
  EXPECT_EQ(e.back(), 0.0f);
  EXPECT_NEAR(sum, ref_sum, 1e-5 * ref_sum);
}

// The decode attention kernels against plain double loops: head widths with and
// without a vector remainder, grouped and plain heads, skipped zero weights.
// One query row's scores and mix over a range of cached rows, against double loops:
// head widths with and without a 16-lane body (and 64-lane blocks with tails), groups
// that split into blocks of four heads with a remainder, a row stride wider than the
// kv heads, ranges that start past 0, and weights of 0 (masked keys).
TEST(Kernels, HeadDotsAndAxpysMatchNaiveLoops) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd;
  for (int dh : {8, 16, 20, 48, 64, 70, 80, 128}) {
    for (int group : {1, 2, 3, 7}) {
      const int kv = 2, H = kv * group, ld = kv * dh + 5, S = 9, j0 = 2, j1 = 8;
      std::vector<float> q(size_t(H * dh)), K(size_t(S * ld)), V(K), z(size_t(H * dh));
      for (float& v : q) v = nd(gen);
      for (float& v : K) v = nd(gen);
      for (float& v : V) v = nd(gen);
      for (float& v : z) v = nd(gen);
      std::vector<float> att(size_t(H * S), -7.0f);
      head_dots(q.data(), K.data(), ld, j0, j1, H, group, dh, 0.125f, att.data(), S);
      std::vector<float> p(size_t(H * S));
      for (float& v : p) v = nd(gen);
      for (int h = 0; h < H; ++h) p[size_t(h * S + 4)] = 0.0f;
      std::vector<float> z2 = z;
      head_axpys(p.data(), S, V.data(), ld, j0, j1, H, group, dh, z2.data());
      for (int h = 0; h < H; ++h) {
        const size_t kvo = size_t((h / group) * dh);
        for (int j = 0; j < S; ++j) {
          if (j < j0 || j >= j1) {
            EXPECT_EQ(att[size_t(h * S + j)], -7.0f) << "a row outside the range was written";
            continue;
          }
          double dot = 0, mag = 0;
          for (int i = 0; i < dh; ++i) {
            const double t = double(q[size_t(h * dh + i)]) * K[size_t(j * ld) + kvo + size_t(i)];
            dot += t, mag += std::abs(t);
          }
          EXPECT_NEAR(att[size_t(h * S + j)], 0.125 * dot, 1e-6 * mag)
              << "dh " << dh << " group " << group << " head " << h << " row " << j;
        }
        for (int i = 0; i < dh; ++i) {
          double want = z[size_t(h * dh + i)], mag = std::abs(want);
          for (int j = j0; j < j1; ++j) {
            const double t = double(p[size_t(h * S + j)]) * V[size_t(j * ld) + kvo + size_t(i)];
            want += t, mag += std::abs(t);
          }
          EXPECT_NEAR(z2[size_t(h * dh + i)], want, 1e-6 * (1 + mag))
              << "dh " << dh << " group " << group << " head " << h << " column " << i;
        }
      }
    }
  }
}

TEST(Kernels, RmsNormRowMatchesDoubleLoops) {
  std::mt19937 gen(5);
  std::normal_distribution<float> nd;
  for (int d : {7, 16, 40, 2048}) {
    std::vector<float> x(static_cast<size_t>(d)), g(x), y(x.size(), -9.0f);
    for (int i = 0; i < d; ++i) x[size_t(i)] = 3.0f * nd(gen), g[size_t(i)] = 1 + 0.1f * nd(gen);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1 / std::sqrt(ss / d + 1e-5);
    y.push_back(-9.0f);
    rms_norm_row(x.data(), d, g.data(), 1e-5f, y.data());
    for (int i = 0; i < d; ++i) {
      const double want = x[size_t(i)] * inv * g[size_t(i)];
      EXPECT_NEAR(y[size_t(i)], want, 2e-6 * (1 + std::abs(want))) << "d " << d << " i " << i;
    }
    EXPECT_EQ(y.back(), -9.0f) << "written past the row";
  }
}

TEST(Kernels, LayerNormRowMatchesDoubleLoops) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd;
  for (int d : {13, 64, 768}) {
    std::vector<float> x(static_cast<size_t>(d)), g(x), b(x), y(x);
    for (int i = 0; i < d; ++i)
      x[size_t(i)] = 5.0f + 2.0f * nd(gen), g[size_t(i)] = 1 + 0.1f * nd(gen), b[size_t(i)] = nd(gen);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= d;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= d;
    for (bool bias : {true, false}) {
      layer_norm_row(x.data(), d, g.data(), bias ? b.data() : nullptr, 1e-5f, y.data());
      for (int i = 0; i < d; ++i) {
        const double want = (x[size_t(i)] - mean) / std::sqrt(var + 1e-5f) * g[size_t(i)] + (bias ? b[size_t(i)] : 0.0);
        EXPECT_NEAR(y[size_t(i)], want, 2e-6 * (1 + std::abs(want))) << "d " << d << " i " << i;
      }
    }
  }
}

// The sampler's double-precision softmax weights against std::exp: every lane path
// (the vector body, its tail, lanes far below the maximum, -inf, ties with the
// maximum) and the temperatures the sampler uses (1, 0.3, 7, and the tiny 1/T of an
// infinite temperature).
TEST(Kernels, SoftmaxWeightsMatchTheCLibraryInDouble) {
  std::vector<float> xs;
  for (float v = -40.0f; v <= 12.0f; v += 0.00731f) xs.push_back(v);
  for (float v : {12.0f, 12.0f, -800.0f, -1e30f, 11.999999f, -0.0f}) xs.push_back(v);
  xs.push_back(-std::numeric_limits<float>::infinity());
  const float xmax = *std::max_element(xs.begin(), xs.end());
  ASSERT_EQ(xmax, 12.0f);
  for (double inv_t : {1.0, 1 / 0.3, 1 / 7.0, std::numeric_limits<double>::min()}) {
    for (size_t n : {xs.size(), xs.size() - 1, size_t(3)}) {
      std::vector<double> w(n, -1.0);
      const double sum = exp_weights(xs.data(), int64_t(n), xmax, inv_t, w.data());
      double ref_sum = 0;
      for (size_t i = 0; i < n; ++i) {
        const double ref = xs[i] == xmax ? 1.0 : std::exp((double(xs[i]) - double(xmax)) * inv_t);
        ref_sum += ref;
        ASSERT_NEAR(w[i], ref, 4.5e-16 * ref) << "x = " << xs[i] << ", 1/T = " << inv_t;
        if (xs[i] == xmax) {
          ASSERT_EQ(w[i], 1.0);
        }
      }
      EXPECT_NEAR(sum, ref_sum, 1e-14 * ref_sum);
    }
  }
  // All -inf: the maximum itself, so every weight is 1.
  std::vector<float> neg(9, -std::numeric_limits<float>::infinity());
  std::vector<double> w(9);
  EXPECT_EQ(exp_weights(neg.data(), 9, neg[0], 1.0, w.data()), 9.0);
}

namespace {

Config gpt2_like() {
  Config c = gpt2_config(64, 3, 4, 48, 97);
  return c;
}
// The shared llama-like config, wider (products over 64 columns) and longer.
Config llama_like() {
  Config c = ds::test::small_config(ds::test::Arch::Llama, 97);
  c.d_model = 64, c.n_layers = 3, c.d_head = 16, c.d_ff = 160, c.max_seq = 48;
  return c;
}

// Logits of every position: step by step through the KV cache (the decode kernels)
// and in one full forward (the matrix-matrix path).
void logits_both_ways(const std::shared_ptr<const Model>& m, const std::vector<int>& toks, MatRM& steps, MatRM& full) {
  Engine e(m);
  steps.resize(Eigen::Index(toks.size()), m->cfg.vocab_size);
  for (size_t i = 0; i < toks.size(); ++i) steps.row(Eigen::Index(i)) = e.forward(std::span<const int>(&toks[i], 1));
  full = e.forward_full(toks);
}

}  // namespace

TEST(Precision16, LogitsStayWithinTwoHundredthsOfFloat32) {
  std::vector<std::pair<std::string, std::shared_ptr<const Model>>> models;
  for (auto [name, cfg] : {std::pair<std::string, Config>{"gpt2-like", gpt2_like()}, {"llama-like", llama_like()}})
    models.emplace_back(name, std::make_shared<const Model>(cfg, Weights::random(cfg, 9)));
  for (auto& [name, m32] : models) {
    std::vector<int> toks;
    for (int i = 0; i < std::min(40, m32->cfg.max_seq); ++i) toks.push_back((i * 37 + 5) % m32->cfg.vocab_size);
    MatRM ref_steps, ref_full;
    logits_both_ways(m32, toks, ref_steps, ref_full);
    ASSERT_GT(std::sqrt((ref_steps.array() - ref_steps.mean()).square().mean()), 0.5) << name << ": logits too flat";
    for (Precision p : {Precision::BF16, Precision::F16}) {
      Weights w = m32->w;
      w.narrow(p);
      EXPECT_EQ(w.precision(), p);
      EXPECT_NEAR(double(w.bytes()), 0.5 * m32->w.bytes(), 0.05 * m32->w.bytes());
      auto m16 = std::make_shared<const Model>(m32->cfg, std::move(w));
      MatRM s16, f16;
      logits_both_ways(m16, toks, s16, f16);
      const float worst = (s16 - ref_steps).cwiseAbs().maxCoeff();
      std::printf("[ precision ] %s %s: worst logit difference %.4f\n", name.c_str(), precision_name(p), worst);
      EXPECT_LE(worst, 2e-2f) << name << " " << precision_name(p);
      // The decode kernels and the matrix-matrix path read the same 16-bit weights.
      EXPECT_LE((s16 - f16).cwiseAbs().maxCoeff(), 1e-4f) << name << " " << precision_name(p);
    }
  }
}

// The shipped models are confident (logits of tens), so 16-bit weights move their
// logits by more than 2e-2 in absolute terms (bfloat16 keeps 8 bits); measured
// against the logits' own scale the change stays small, and every greedy answer
// stays the same.
TEST(Precision16, BuiltinModelsKeepTheirAnswers) {
  for (const char* b : {"dates", "adder"}) {
    auto m32 = load_model(std::string("builtin:") + b).model;
    const Config& c = m32->cfg;
    for (Precision p : {Precision::BF16, Precision::F16}) {
      Weights w = m32->w;
      w.narrow(p);
      auto m16 = std::make_shared<const Model>(c, std::move(w));
      Engine e32(m32), e16(m16);
      if (c.encoder_decoder) {
        std::vector<int> src;
        for (int i = 0; i < std::min(12, c.max_src); ++i) src.push_back(3 + (i * 5) % (c.vocab_size - 3));
        e32.encode(src);
        e16.encode(src);
      }
      std::vector<int> toks = {c.bos_id >= 0 ? c.bos_id : 0};
      float worst = 0, scale = 0;
      for (int i = 0; i < std::min(10, c.max_seq); ++i) {
        auto a = e32.forward(std::span<const int>(&toks.back(), 1));
        auto d = e16.forward(std::span<const int>(&toks.back(), 1));
        worst = std::max(worst, (a - d).cwiseAbs().maxCoeff());
        scale = std::max(scale, a.cwiseAbs().maxCoeff());
        Eigen::Index arg32, arg16;
        a.row(0).maxCoeff(&arg32);
        d.row(0).maxCoeff(&arg16);
        EXPECT_EQ(arg16, arg32) << b << " " << precision_name(p) << " step " << i;
        toks.push_back(int(arg32));
      }
      std::printf("[ precision ] builtin:%s %s: worst logit difference %.4f (largest logit %.1f)\n", b,
                  precision_name(p), worst, scale);
      EXPECT_LE(worst, (p == Precision::BF16 ? 1e-2f : 2e-3f) * scale) << b << " " << precision_name(p);
    }
  }
}

// A prompt longer than the attention's row blocks (64), in one piece and in two
// pieces (the second starting at position 70), gives the logits of single steps.
TEST(Prefill, LongPromptsInBlocksMatchSingleSteps) {
  for (Config c : {gpt2_like(), llama_like()}) {
    c.max_seq = 200;
    auto m = std::make_shared<const Model>(c, Weights::random(c, 21));
    std::vector<int> toks;
    for (int i = 0; i < 150; ++i) toks.push_back((i * 29 + 3) % c.vocab_size);
    Engine e(m);
    MatRM steps(150, c.vocab_size);
    for (int i = 0; i < 150; ++i) steps.row(i) = e.forward(std::span<const int>(&toks[size_t(i)], 1));
    MatRM full = e.forward_full(toks);
    e.reset();
    MatRM a = e.forward(std::span<const int>(toks.data(), 70), true);
    MatRM b = e.forward(std::span<const int>(toks.data() + 70, 80), true);
    EXPECT_LE((full - steps).cwiseAbs().maxCoeff(), 1e-4f);
    EXPECT_LE((a - steps.topRows(70)).cwiseAbs().maxCoeff(), 1e-4f);
    EXPECT_LE((b - steps.bottomRows(80)).cwiseAbs().maxCoeff(), 1e-4f);
  }
}
