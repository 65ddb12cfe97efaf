// Thumbnails of a growing matrix (app/gui/thumb.h) against pooling done by hand on the
// whole matrix at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "widgets/thumb.h"

using dsgui::Matrix;
using dsgui::Thumb;

namespace {

// A causal matrix grown by steps: the first step has `prompt` rows, each later one a
// row; row r has r + 1 allowed keys (weights in [0, 1)); pos0 of each step returned.
struct Grown {
  Matrix full;  // the whole matrix, masked where a row has no key
  std::vector<Matrix> steps;
  std::vector<int> pos0;
};

Grown causal(int prompt, int n_steps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Grown g;
  int P = 0;
  for (int s = 0; s < n_steps; ++s) {
    const int T = s == 0 ? prompt : 1, S = P + T;
    Matrix m;
    m.rows = T;
    m.cols = S;
    m.v.assign(size_t(T) * S, 0.0f);
    m.mask.assign(m.v.size(), 0);
    for (int r = 0; r < T; ++r)
      for (int c = 0; c <= P + r; ++c) {
        m.v[size_t(r) * S + c] = u(rng);
        m.mask[size_t(r) * S + c] = 1;
      }
    g.steps.push_back(m);
    g.pos0.push_back(P);
    P = S;
  }
  g.full.rows = g.full.cols = P;
  g.full.v.assign(size_t(P) * P, 0.0f);
  g.full.mask.assign(g.full.v.size(), 0);
  for (size_t s = 0; s < g.steps.size(); ++s)
    for (int r = 0; r < g.steps[s].rows; ++r)
      for (int c = 0; c < g.steps[s].cols; ++c) {
        const size_t i = size_t(g.pos0[s] + r) * P + c;
        g.full.v[i] = g.steps[s].at(r, c);
        g.full.mask[i] = g.steps[s].mask[size_t(r) * g.steps[s].cols + c];
      }
  return g;
}

// Max-pools m into bins of b x b, by hand.
void expect_pooled(const Thumb& th, const Matrix& m) {
  const int b = th.bin();
  const Matrix& p = th.pooled();
  ASSERT_EQ(p.rows, (m.rows + b - 1) / b);
  ASSERT_EQ(p.cols, (m.cols + b - 1) / b);
  float lo = 0, hi = -1;
  for (int i = 0; i < p.rows; ++i)
    for (int j = 0; j < p.cols; ++j) {
      bool any = false;
      float best = -1e30f;
      for (int r = i * b; r < std::min(m.rows, (i + 1) * b); ++r)
        for (int c = j * b; c < std::min(m.cols, (j + 1) * b); ++c)
          if (m.allowed(r, c)) {
            any = true;
            best = std::max(best, m.at(r, c));
            lo = lo <= hi ? std::min(lo, m.at(r, c)) : m.at(r, c);
            hi = std::max(hi, m.at(r, c));
          }
      ASSERT_EQ(p.allowed(i, j), any) << "bin " << i << "," << j;
      if (any) {
        ASSERT_EQ(p.at(i, j), best) << "bin " << i << "," << j;
      }
    }
  EXPECT_EQ(p.lo, lo);
  EXPECT_EQ(p.hi, hi);
}

}  // namespace

TEST(Thumb, GrownStepByStepEqualsPoolingTheWholeMatrix) {
  for (int side : {1, 3, 8, 16, 64}) {
    const Grown g = causal(5, 150, 7u + uint32_t(side));
    Thumb th;
    th.reset(side);
    Matrix so_far;  // the full matrix's top-left as of each step
    for (size_t s = 0; s < g.steps.size(); ++s) {
      ASSERT_TRUE(th.add_rows(g.steps[s], g.pos0[s]));
      const int P = g.pos0[s] + g.steps[s].rows;
      // The smallest power-of-two bin that fits P cells into `side` bins.
      int b = 1;
      while ((P + b - 1) / b > side) b *= 2;
      ASSERT_EQ(th.bin(), b) << "side " << side << ", step " << s;
      Matrix top;
      top.rows = top.cols = P;
      top.v.assign(size_t(P) * P, 0.0f);
      top.mask.assign(top.v.size(), 0);
      for (int r = 0; r < P; ++r)
        for (int c = 0; c < P; ++c) {
          top.v[size_t(r) * P + c] = g.full.at(r, c);
          top.mask[size_t(r) * P + c] = g.full.mask[size_t(r) * g.full.cols + c];
        }
      if (s % 37 == 0 || s + 1 == g.steps.size()) expect_pooled(th, top);
    }
    EXPECT_LE(std::max(th.pooled().rows, th.pooled().cols), side);
  }
}

TEST(Thumb, RowsBeforeThoseHeldAreRefusedAndChangeNothing) {
  const Grown g = causal(4, 3, 1u);
  Thumb th;
  th.reset(8);
  ASSERT_TRUE(th.add_rows(g.steps[0], 0));
  const uint64_t serial = th.serial();
  EXPECT_FALSE(th.add_rows(g.steps[1], 2));  // rows 2.. are held already
  EXPECT_EQ(th.serial(), serial);
  Matrix bad = g.steps[1];
  bad.v.resize(1);  // fewer values than rows x cols
  EXPECT_FALSE(th.add_rows(bad, 4));
  EXPECT_EQ(th.full_rows(), 4);
}

TEST(Thumb, SkippedRowsAndNewColumnsStayMasked) {
  Matrix row;
  row.rows = 1;
  row.cols = 2;
  row.v = {0.25f, 0.75f};
  row.mask = {1, 1};
  Thumb th;
  th.reset(16);
  ASSERT_TRUE(th.add_rows(row, 3));  // rows 0..2 never given
  const Matrix& p = th.pooled();
  ASSERT_EQ(p.rows, 4);
  ASSERT_EQ(p.cols, 2);
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(p.allowed(r, 0) || p.allowed(r, 1));
  EXPECT_TRUE(p.allowed(3, 1));
  EXPECT_EQ(p.at(3, 1), 0.75f);
}
