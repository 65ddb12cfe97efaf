// Direct logit attribution (probe/attribution.h) against the double-precision reference
// forward pass (model/reference.cpp): the contributions add up to the reference's logit,
// each sub-layer's share read from the reference's own outputs through a readout computed
// here, post-norm and sandwich-norm models are refused, and the difference of two tokens
// is the difference of their attributions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "helpers.h"
#include "model/reference.h"
#include "probe/attribution.h"

namespace {

using ds::Attribution;
using ds::PartKind;
using ds::test::Variant;

// The pre-norm variants of the engine's tests, and Gemma 3's options without the sandwich
// norms (scaled embeddings, gated GELU, q/k norms, sliding window, soft-capped logits).
std::vector<Variant> pre_norm_variants() {
  std::vector<Variant> out;
  for (Variant v : ds::test::variants()) {
    if (v.cfg.sandwich_norm) {
      v.cfg.sandwich_norm = false;
      v.name = "gemma3_without_sandwich";
    }
    if (v.cfg.norm_place == ds::NormPlace::Pre) out.push_back(v);
  }
  return out;
}

struct Case {
  std::shared_ptr<const ds::Model> m;
  std::vector<int> tokens, src;
  ds::ref::Recorded rec;
  ds::ref::Rows logits;  // [T][vocab], soft-cap undone
};

Case make_case(const Variant& v, int n = 7) {
  Case k;
  k.m = ds::test::random_model(v.cfg, v.seed, 0.15f);
  std::mt19937 g(uint32_t(v.seed));
  std::uniform_int_distribution<int> id(3, v.cfg.vocab_size - 1);
  for (int i = 0; i < n; ++i) k.tokens.push_back(id(g));
  if (v.cfg.encoder_decoder)
    for (int i = 0; i < 6; ++i) k.src.push_back(id(g));
  k.logits = ds::ref::logits(v.cfg, k.m->w, k.tokens, k.src, -1, -1, &k.rec);
  if (v.cfg.logit_softcap > 0)
    for (auto& row : k.logits)
      for (double& x : row) x = double(v.cfg.logit_softcap) * std::atanh(x / double(v.cfg.logit_softcap));
  return k;
}

double range_of(const ds::ref::Row& r) {
  return *std::max_element(r.begin(), r.end()) - *std::min_element(r.begin(), r.end());
}

// The readout direction computed from the reference's final residual row: a residual
// vector's share of logit(token) - logit(vs) is its dot product with this.
std::vector<double> ref_readout(const ds::Config& c, const ds::Model& m, const ds::ref::Row& x, int token, int vs) {
  const int d = c.d_model;
  std::vector<float> a(static_cast<size_t>(d)), b(static_cast<size_t>(d));
  m.w.head_view().row(token, a.data());
  if (vs >= 0) m.w.head_view().row(vs, b.data());
  double mean = 0, ms = 0;
  for (double v : x) mean += v / d;
  for (double v : x) ms += (c.norm == ds::NormKind::LayerNorm ? (v - mean) * (v - mean) : v * v) / d;
  const double s = 1.0 / std::sqrt(ms + double(c.norm_eps));
  std::vector<double> r(static_cast<size_t>(d));
  double rmean = 0;
  for (int j = 0; j < d; ++j) {
    const double u = double(a[size_t(j)]) - (vs >= 0 ? double(b[size_t(j)]) : 0.0);
    r[size_t(j)] = c.final_norm ? s * double(m.w.ln_final.g[j]) * u : u;
    rmean += r[size_t(j)] / d;
  }
  if (c.final_norm && c.norm == ds::NormKind::LayerNorm)
    for (double& v : r) v -= rmean;
  return r;
}

double dot(const std::vector<double>& a, const ds::ref::Row& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

class AttributionOn : public ::testing::TestWithParam<Variant> {};

}  // namespace

// The contributions plus the final norm's bias term are the reference's logit, at the
// last position and at one in the middle, for the greedy token and another one.
TEST_P(AttributionOn, ContributionsSumToTheReferenceLogit) {
  const Variant& v = GetParam();
  const Case k = make_case(v);
  for (int pos : {int(k.tokens.size()) - 1, 3})
    for (int token : {-1, 5}) {
      ds::AttributionRequest r{k.tokens, k.src, pos, token};
      const Attribution a = ds::attribute(k.m, r);
      const auto& row = k.logits[size_t(pos)];
      const double tol = 1e-4 * range_of(row);
      const int t = token >= 0 ? token : int(std::max_element(row.begin(), row.end()) - row.begin());
      EXPECT_EQ(a.token, t) << v.name;
      EXPECT_NEAR(a.total(), row[size_t(t)], tol) << v.name << " pos " << pos;
      EXPECT_NEAR(a.logit, row[size_t(t)], tol) << v.name << " pos " << pos;
      EXPECT_NEAR(a.logit_max - a.logit_min, range_of(row), tol) << v.name;
      // Non-trivial: the parts are not all one sign or one value.
      double mx = 0;
      for (const auto& p : a.parts) mx = std::max(mx, std::fabs(p.value));
      EXPECT_GT(mx, 1e-3) << v.name;
    }
}

// Each sub-layer's share equals its output as the reference computed it, read through a
// readout built here from the reference's final residual row; the heads of a layer add
// up to the attention output's share minus its bias.
TEST_P(AttributionOn, HeadsOfALayerSumToItsAttentionOutput) {
  const Variant& v = GetParam();
  const ds::Config& c = v.cfg;
  const Case k = make_case(v);
  const int pos = int(k.tokens.size()) - 1, token = 7;
  const Attribution a = ds::attribute(k.m, {k.tokens, k.src, pos, token});
  const auto ro = ref_readout(c, *k.m, k.rec.blocks.back().resid_post[size_t(pos)], token, -1);
  const double tol = 1e-4 * range_of(k.logits[size_t(pos)]);
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& b = k.rec.blocks[size_t(l)];
    double heads = 0, bias = 0, cross = 0, cross_bias = 0, mlp = 0;
    int n_heads = 0;
    for (const auto& p : a.parts) {
      if (p.layer != l) continue;
      if (p.kind == PartKind::Head) heads += p.value, ++n_heads;
      if (p.kind == PartKind::AttnBias) bias += p.value;
      if (p.kind == PartKind::CrossHead) cross += p.value;
      if (p.kind == PartKind::CrossBias) cross_bias += p.value;
      if (p.kind == PartKind::Mlp) mlp += p.value;
    }
    EXPECT_EQ(n_heads, c.n_heads);
    EXPECT_NEAR(heads, dot(ro, b.attn_out[size_t(pos)]) - bias, tol) << v.name << " layer " << l;
    EXPECT_NEAR(mlp, dot(ro, b.mlp_out[size_t(pos)]), tol) << v.name << " layer " << l;
    if (c.encoder_decoder) {
      EXPECT_NEAR(cross, dot(ro, b.cross_attn_out[size_t(pos)]) - cross_bias, tol) << v.name << " layer " << l;
    }
  }
  double emb = 0;
  for (const auto& p : a.parts)
    if (p.kind == PartKind::Embed || p.kind == PartKind::PosEmbed) emb += p.value;
  EXPECT_NEAR(emb, dot(ro, k.rec.blocks[0].resid_pre[size_t(pos)]), tol) << v.name;
}

// logit(A) - logit(B) splits into the differences of their contributions.
TEST_P(AttributionOn, DifferenceOfTwoTokens) {
  const Variant& v = GetParam();
  const Case k = make_case(v);
  const int pos = int(k.tokens.size()) - 1;
  const Attribution a = ds::attribute(k.m, {k.tokens, k.src, pos, 6});
  const Attribution b = ds::attribute(k.m, {k.tokens, k.src, pos, 9});
  const Attribution d = ds::attribute(k.m, {k.tokens, k.src, pos, 6, 9});
  const auto& row = k.logits[size_t(pos)];
  const double tol = 1e-4 * range_of(row);
  EXPECT_EQ(d.vs, 9);
  EXPECT_NEAR(d.total(), row[6] - row[9], tol) << v.name;
  ASSERT_EQ(d.parts.size(), a.parts.size());
  for (size_t i = 0; i < d.parts.size(); ++i)
    EXPECT_NEAR(d.parts[i].value, a.parts[i].value - b.parts[i].value, 1e-9 + 1e-6 * tol) << ds::part_label(d.parts[i]);
  EXPECT_NEAR(d.bias_term, a.bias_term - b.bias_term, 1e-9);
}

// What a head writes: its most pushed-up token is the one whose attribution gives that
// head the largest share, checked against attributions of other tokens.
TEST_P(AttributionOn, WhatAHeadWritesAgreesWithItsShares) {
  const Variant& v = GetParam();
  const Case k = make_case(v);
  const int pos = int(k.tokens.size()) - 1;
  const Attribution a = ds::attribute(k.m, {k.tokens, k.src, pos});
  const int part = ds::find_head_part(a, ds::HeadSite::Self, v.cfg.n_layers - 1, 1);
  ASSERT_GE(part, 0);
  const ds::PartWrites w = ds::part_writes(*k.m, a, size_t(part), 3);
  ASSERT_EQ(w.up.size(), 3u);
  ASSERT_EQ(w.down.size(), 3u);
  EXPECT_GE(w.up[0].value, w.up[1].value);
  EXPECT_LE(w.down[0].value, w.down[1].value);
  EXPECT_GT(w.up[0].value, w.down[0].value);
  for (int t : {w.up[0].id, w.down[0].id, 4, 11}) {
    const Attribution at = ds::attribute(k.m, {k.tokens, k.src, pos, t});
    const double share = at.parts[size_t(part)].value;
    EXPECT_LE(share, w.up[0].value + 1e-9) << v.name;
    EXPECT_GE(share, w.down[0].value - 1e-9) << v.name;
    if (t == w.up[0].id) {
      EXPECT_NEAR(share, w.up[0].value, 1e-6) << v.name;
    }
    if (t == w.down[0].id) {
      EXPECT_NEAR(share, w.down[0].value, 1e-6) << v.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PreNorm, AttributionOn, ::testing::ValuesIn(pre_norm_variants()),
                         [](const auto& i) { return i.param.name; });

// Post-norm and sandwich-norm models are refused, saying why.
TEST(Attribution, PostNormAndSandwichNormAreRefused) {
  int refused = 0;
  for (const Variant& v : ds::test::variants()) {
    if (v.cfg.norm_place == ds::NormPlace::Pre && !v.cfg.sandwich_norm) continue;
    auto m = ds::test::random_model(v.cfg, v.seed);
    ds::AttributionRequest r{{3, 4, 5}, v.cfg.encoder_decoder ? std::vector<int>{3, 4} : std::vector<int>{}};
    try {
      ds::attribute(m, r);
      ADD_FAILURE() << v.name << " was not refused";
    } catch (const ds::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("defined for pre-norm models"), std::string::npos) << msg;
      EXPECT_NE(msg.find(v.cfg.sandwich_norm ? "sandwich" : "post-norm"), std::string::npos) << msg;
      ++refused;
    }
    EXPECT_FALSE(ds::attribution_refusal(v.cfg).empty());
  }
  EXPECT_GE(refused, 4);
}

// Bad requests end in messages, not crashes.
TEST(Attribution, BadRequestsSayWhatIsWrong) {
  const ds::Config c = ds::test::small_config(ds::test::Arch::GPT2);
  auto m = ds::test::random_model(c, 3);
  EXPECT_THROW(ds::attribute(m, {{}, {}}), ds::Error);
  EXPECT_THROW(ds::attribute(m, {{3, 4}, {}, 5}), ds::Error);
  EXPECT_THROW(ds::attribute(m, {{3, 400}, {}}), ds::Error);
  EXPECT_THROW(ds::attribute(m, {{3, 4}, {}, -1, 400}), ds::Error);
  const ds::Config e = ds::test::small_config(ds::test::Arch::EncDec);
  EXPECT_THROW(ds::attribute(ds::test::random_model(e, 3), {{3, 4}, {}}), ds::Error);
}
