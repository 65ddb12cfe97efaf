// Activation patching (probe/patching.h) on random models of each architecture, checked
// against invariants (no patch gives the corrupted run, a whole residual stream gives
// the clean run, every head together equals the attention output) and against the
// double-precision reference forward pass (model/reference.cpp) with the residual
// stream replaced there.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "model/reference.h"
#include "probe/patching.h"

namespace {

using ds::PatchCell;
using ds::PatchSite;
using ds::test::Arch;

struct Case {
  const char* name;
  Arch arch;
};

class Patching : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    cfg = ds::test::small_config(GetParam().arch);
    model = ds::test::random_model(cfg, 40 + uint64_t(GetParam().arch), 0.3f);
    in.clean = {1, 5, 9, 13, 22, 7, 30};
    in.corrupt = in.clean;
    in.corrupt[changed] = 17;
    if (cfg.encoder_decoder) in.prefix = {1, 4, 11, 8};
    in.answer = 12, in.wrong = 25;
  }
  bool encdec() const { return cfg.encoder_decoder; }
  // The last position's logits of a fresh engine's run of `src` (encoder-decoder) or
  // `tokens`, with no patching.
  std::vector<float> fresh(const std::vector<int>& tokens) const {
    ds::Engine e(model);
    std::vector<int> dec = tokens;
    if (encdec()) e.encode(tokens), dec = in.prefix;
    const ds::MatRM out = e.forward_full(dec, false);
    return std::vector<float>(out.data(), out.data() + out.size());
  }
  ds::Config cfg;
  std::shared_ptr<const ds::Model> model;
  ds::PatchInput in;
  const int changed = 3;
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

TEST_P(Patching, NothingPatchedIsTheCorruptedRun) {
  ds::Patcher p(model, in);
  EXPECT_EQ(p.run({}), fresh(in.corrupt));
  EXPECT_EQ(p.corrupt_logits(), fresh(in.corrupt));
  EXPECT_EQ(p.clean_logits(), fresh(in.clean));
  EXPECT_NE(p.clean_metric(), p.corrupt_metric());
}

TEST_P(Patching, EveryPositionOfAResidualStreamGivesTheCleanRun) {
  ds::Patcher p(model, in);
  for (int l = 0; l < cfg.n_layers; ++l) {
    std::vector<PatchCell> cells;
    for (int t = 0; t < p.positions(); ++t) cells.push_back({PatchSite::ResidPre, l, t});
    // An encoder-decoder's later cross-attentions still read the corrupted source: their
    // outputs come from the clean run too.
    if (encdec())
      for (int k = l; k < cfg.n_layers; ++k) cells.push_back({PatchSite::CrossAttnOut, k, -1});
    EXPECT_EQ(p.run(cells), p.clean_logits()) << "layer " << l;
  }
  if (encdec()) {  // the residual stream alone does not restore what the source changed
    const PatchCell last{PatchSite::ResidPre, cfg.n_layers - 1, -1};
    EXPECT_GT(max_diff(p.run(std::span(&last, 1)), p.clean_logits()), 1e-4);
  }
}

TEST_P(Patching, EveryHeadOfALayerEqualsItsAttentionOutput) {
  ds::Patcher p(model, in);
  const std::vector<PatchSite> kinds =
      encdec() ? std::vector{PatchSite::Head, PatchSite::CrossHead} : std::vector{PatchSite::Head};
  for (PatchSite kind : kinds)
    for (int l = 0; l < cfg.n_layers; ++l) {
      std::vector<PatchCell> heads;
      for (int h = 0; h < cfg.n_heads; ++h) heads.push_back({kind, l, -1, h});
      const PatchCell out{kind == PatchSite::Head ? PatchSite::AttnOut : PatchSite::CrossAttnOut, l, -1};
      const auto a = p.run(heads), b = p.run(std::span(&out, 1));
      EXPECT_LT(max_diff(a, b), 1e-5) << ds::patch_site_name(kind) << " layer " << l;
      // (An encoder-decoder's first self-attention reads the same decoder tokens in both
      // runs: patching it changes nothing, and must not.)
      if (encdec() && kind == PatchSite::Head && l == 0)
        EXPECT_EQ(a, p.corrupt_logits());
      else
        EXPECT_GT(max_diff(a, p.corrupt_logits()), 1e-6) << "the patch changed nothing";
    }
}

// Every cell of the residual-stream grid against the reference: the corrupted input run
// in double precision with the reference's own clean resid_pre at that cell.
TEST_P(Patching, ResidualGridEqualsTheReference) {
  ds::Patcher p(model, in);
  const ds::PatchGrid g = ds::patch_grid(p, PatchSite::ResidPre);
  ASSERT_EQ(g.rows, cfg.n_layers);
  ASSERT_EQ(g.cols, p.positions());
  const std::vector<int> dec = encdec() ? in.prefix : in.clean, src_c = encdec() ? in.clean : std::vector<int>{},
                         src_x = encdec() ? in.corrupt : std::vector<int>{};
  ds::ref::Recorded rec;
  const auto clean = ds::ref::logits(cfg, model->w, dec, src_c, -1, -1, &rec);
  const auto corrupt = ds::ref::logits(cfg, model->w, encdec() ? in.prefix : in.corrupt, src_x);
  auto metric = [&](const ds::ref::Rows& r) { return r.back()[size_t(in.answer)] - r.back()[size_t(in.wrong)]; };
  const double mc = metric(clean), mx = metric(corrupt);
  ASSERT_GT(std::fabs(mc - mx), 0.05) << "the random model hardly tells the inputs apart";
  EXPECT_NEAR(g.clean, mc, 1e-4);
  EXPECT_NEAR(g.corrupt, mx, 1e-4);
  for (int l = 0; l < g.rows; ++l)
    for (int t = 0; t < g.cols; ++t) {
      const auto r = ds::ref::logits_with_resid_pre(cfg, model->w, encdec() ? in.prefix : in.corrupt, src_x, l, t,
                                                    rec.blocks[size_t(l)].resid_pre[size_t(t)]);
      EXPECT_NEAR(g.metric[size_t(l * g.cols + t)], metric(r), 1e-4) << "layer " << l << " position " << t;
      EXPECT_NEAR(g.at(l, t), (metric(r) - mx) / (mc - mx), 1e-3) << "layer " << l << " position " << t;
    }
}

// Decoder-only: the residual stream entering layer 0 is the embedding; only the changed
// token's differs, so patching it restores everything (1) and any other position nothing (0).
TEST_P(Patching, FirstLayerRestoresOnlyAtTheChangedToken) {
  if (encdec()) GTEST_SKIP() << "the decoder's tokens are the same in both runs";
  ds::Patcher p(model, in);
  const ds::PatchGrid g = ds::patch_grid(p, PatchSite::ResidPre);
  for (int t = 0; t < g.cols; ++t) EXPECT_EQ(g.at(0, t), t == changed ? 1.0 : 0.0) << "position " << t;
  // Positions before the change see no difference at any layer.
  for (int l = 0; l < g.rows; ++l)
    for (int t = 0; t < changed; ++t) EXPECT_EQ(g.at(l, t), 0.0) << "layer " << l << " position " << t;
}

TEST_P(Patching, GridsHaveTheirShapesAndAHeadGridAgreesWithSingleRuns) {
  ds::Patcher p(model, in);
  const ds::PatchGrid h = ds::patch_grid(p, PatchSite::Head);
  EXPECT_EQ(h.rows, cfg.n_layers);
  EXPECT_EQ(h.cols, cfg.n_heads);
  const PatchCell one{PatchSite::Head, 1, -1, 2};
  EXPECT_EQ(h.metric[size_t(1 * h.cols + 2)], p.metric(p.run(std::span(&one, 1))));
  const ds::PatchGrid hp = ds::patch_grid(p, PatchSite::HeadPos, 1);
  EXPECT_EQ(hp.rows, cfg.n_heads);
  EXPECT_EQ(hp.cols, p.positions());
  for (PatchSite s : {PatchSite::AttnOut, PatchSite::MlpOut}) {
    const ds::PatchGrid g = ds::patch_grid(p, s);
    EXPECT_EQ(g.rows * g.cols, cfg.n_layers * p.positions());
    for (double v : g.value) EXPECT_TRUE(std::isfinite(v));
  }
  int calls = 0;
  EXPECT_THROW(ds::patch_grid(p, PatchSite::MlpOut, -1, [&](int, int) { return ++calls < 3; }), ds::Cancelled);
  EXPECT_EQ(calls, 3);
}

INSTANTIATE_TEST_SUITE_P(Arch, Patching,
                         ::testing::Values(Case{"gpt2", Arch::GPT2}, Case{"postnorm", Arch::PostNorm},
                                           Case{"llama", Arch::Llama}, Case{"encdec", Arch::EncDec}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PatchingErrors, BadInputsSayWhatIsWrong) {
  using ds::test::contains;
  using ds::test::error_of;
  const ds::Config cfg = ds::test::small_config(Arch::GPT2);
  const auto m = ds::test::random_model(cfg, 3, 0.3f);
  ds::PatchInput in{{1, 2, 3, 4}, {1, 2, 3}, {}, 5, 6};
  const std::string len = error_of([&] { ds::Patcher p(m, in); });
  EXPECT_TRUE(contains(len, "4 tokens") && contains(len, "3 tokens") && contains(len, "same length")) << len;
  in.corrupt = {1, 2, 9, 4};
  in.wrong = 5;
  EXPECT_TRUE(contains(error_of([&] { ds::Patcher p(m, in); }), "same token"));
  in.wrong = 400;
  EXPECT_TRUE(contains(error_of([&] { ds::Patcher p(m, in); }), "vocabulary"));
  in.wrong = 6, in.corrupt = {1, 2, 77, 4};
  EXPECT_TRUE(contains(error_of([&] { ds::Patcher p(m, in); }), "outside the vocabulary"));
  in.corrupt = in.clean;  // nothing differs: nothing to restore
  ds::Patcher same(m, in);
  EXPECT_TRUE(contains(error_of([&] { ds::patch_grid(same, PatchSite::ResidPre); }), "nothing to restore"));
  in.corrupt = {1, 2, 9, 4};
  ds::Patcher p(m, in);
  EXPECT_TRUE(contains(error_of([&] { ds::patch_grid(p, PatchSite::CrossHead); }), "no cross-attention"));
  EXPECT_TRUE(contains(error_of([&] { ds::patch_grid(p, PatchSite::HeadPos, 7); }), "layer"));
  const PatchCell bad{PatchSite::ResidPre, 5, 0};
  EXPECT_FALSE(error_of([&] { p.run(std::span(&bad, 1)); }).empty());
  const ds::Config ed = ds::test::small_config(Arch::EncDec);
  const auto me = ds::test::random_model(ed, 4, 0.3f);
  ds::PatchInput ei{{3, 4, 5}, {3, 6, 5}, {}, 5, 6};
  EXPECT_TRUE(contains(error_of([&] { ds::Patcher q(me, ei); }), "decoder's tokens"));
  PatchSite s;
  EXPECT_TRUE(ds::parse_patch_site("mlp_out", s) && s == PatchSite::MlpOut);
  EXPECT_FALSE(ds::parse_patch_site("mlp", s));
}

}  // namespace
