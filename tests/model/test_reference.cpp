// The reference forward pass (core/model/reference.cpp) against properties any correct
// transformer has, independent of the engine it is used to check.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "helpers.h"
#include "model/reference.h"

namespace {

using ds::test::Arch;

// Changing a later token never changes an earlier position's logits (the causal mask).
TEST(Reference, LaterTokensDoNotChangeEarlierLogits) {
  for (Arch a : {Arch::GPT2, Arch::Llama, Arch::PostNorm, Arch::EncDec}) {
    const ds::Config c = ds::test::small_config(a);
    const ds::Weights w = ds::Weights::random(c, 5, 0.2f);
    const std::vector<int> src = {3, 4, 5, 0};
    const std::vector<int> x = {1, 7, 9, 11, 13}, y = {1, 7, 9, 30, 2};
    const auto lx = ds::ref::logits(c, w, x, src), ly = ds::ref::logits(c, w, y, src);
    for (size_t p = 0; p < 3; ++p) EXPECT_EQ(lx[p], ly[p]) << "position " << p;
    EXPECT_NE(lx[3], ly[3]);
  }
}

// Every attention row is a distribution over the keys the mask allows: masked keys get
// exactly 0 (later positions; padded source positions), the rest sum to 1.
TEST(Reference, AttentionRowsAreDistributionsOverAllowedKeys) {
  const ds::Config c = ds::test::small_config(Arch::EncDec);
  const ds::Weights w = ds::Weights::random(c, 6, 0.3f);
  const std::vector<int> src = {3, 0, 5, 0}, toks = {1, 8, 9, 10};
  ds::ref::Recorded rec;
  ds::ref::logits(c, w, toks, src, -1, -1, &rec);
  auto check = [&](const ds::ref::Patterns& pats, auto allowed) {
    for (const auto& layer : pats)
      for (const auto& head : layer)
        for (size_t i = 0; i < head.size(); ++i) {
          double sum = 0;
          for (size_t j = 0; j < head[i].size(); ++j) {
            if (!allowed(i, j)) {
              EXPECT_EQ(head[i][j], 0.0);
            }
            sum += head[i][j];
          }
          EXPECT_NEAR(sum, 1.0, 1e-12);
        }
  };
  check(rec.self, [](size_t i, size_t j) { return j <= i; });
  check(rec.cross, [&](size_t, size_t j) { return src[j] != c.pad_id; });
  check(rec.enc, [&](size_t, size_t j) { return src[j] != c.pad_id; });
}

// With rotary positions (and no other position signal) a query-key score depends on
// the two positions only through their distance. In a one-layer model fed one token
// repeated, row 1 of "a a" and row 2 of "a a a" see keys at distances 1 and 0 with
// equal scores, so their two weights stand in the same ratio.
TEST(Reference, RotaryScoresDependOnlyOnDistance) {
  ds::Config c = ds::test::small_config(Arch::Llama);
  c.n_layers = 1;
  const ds::Weights w = ds::Weights::random(c, 7, 0.3f);
  ds::ref::Recorded two, three;
  ds::ref::logits(c, w, {5, 5}, {}, -1, -1, &two);
  ds::ref::logits(c, w, {5, 5, 5}, {}, -1, -1, &three);
  for (int h = 0; h < c.n_heads; ++h) {
    const auto& r2 = two.self[0][size_t(h)][1];
    const auto& r3 = three.self[0][size_t(h)][2];
    EXPECT_NEAR(r2[0] / r2[1], r3[1] / r3[2], 1e-9) << "head " << h;
    EXPECT_GT(std::abs(r2[0] / r2[1] - 1.0), 1e-6) << "head " << h << ": the positions made no difference";
  }
}

// A head switched off contributes nothing: with zero weights in its slice of the
// output projection, the logits equal those with the head switched off.
TEST(Reference, SwitchingAHeadOffEqualsZeroingItsOutputProjection) {
  const ds::Config c = ds::test::small_config(Arch::GPT2);
  ds::Weights w = ds::Weights::random(c, 8, 0.3f);
  const std::vector<int> toks = {1, 4, 6, 8};
  const auto off = ds::ref::logits(c, w, toks, {}, 1, 2);
  for (int r = 0; r < c.d_model; ++r)
    for (int k = 0; k < c.d_head; ++k) w.blocks[1].attn.o.W(r, 2 * c.d_head + k) = 0.0f;
  const auto zeroed = ds::ref::logits(c, w, toks);
  for (size_t p = 0; p < toks.size(); ++p)
    for (size_t v = 0; v < off[p].size(); ++v) EXPECT_NEAR(off[p][v], zeroed[p][v], 1e-12);
}

}  // namespace
