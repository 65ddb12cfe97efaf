// Heads switched off alone (probe/ablation.h), checked against forward passes computed
// another way: the double-precision reference (model/reference.cpp) with the head
// zeroed, and fresh engines that run the prefix one token at a time and switch the head
// off for the step alone.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "io/loader.h"
#include "model/reference.h"
#include "probe/ablation.h"
#include "session/session.h"

namespace {

using ds::AblationStep;
using ds::HeadSite;
using ds::LoadedModel;

bool have_model(const std::string& name) {
  return std::filesystem::exists(std::filesystem::path(DS_SOURCE_DIR) / "assets" / "models" / name / "config.json");
}

// A greedy trace of n positions from prompt (and source), with every step recorded.
ds::Trace run_trace(const LoadedModel& m, const std::vector<int>& prompt, const std::vector<int>& src, int n,
                    bool kv_cache = true) {
  ds::SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = n;
  o.kv_cache = kv_cache;
  ds::Session s(m.model, m.tokenizer, o);
  s.start(prompt, src);
  while (!s.done()) s.step();
  return s.trace();
}

// log softmax(row)[token] in double precision.
double logprob_of(const std::vector<double>& row, int token) {
  double mx = -INFINITY, sum = 0;
  for (double v : row) mx = std::max(mx, v);
  for (double v : row) sum += std::exp(v - mx);
  return row[size_t(token)] - mx - std::log(sum);
}

// The reference's log-probability of st.token after st.tokens with decoder self-attention
// head (l, h) zeroed at every position (l -1: none).
double reference_logp(const LoadedModel& m, const AblationStep& st, int l, int h) {
  const auto rows = ds::ref::logits(m.model->cfg, m.model->w, st.tokens, st.source, l, h);
  return logprob_of(rows.back(), st.token);
}

// The same from a fresh engine: the prefix fed one token at a time with every head on,
// then the step's input with the head (if any) off.
double engine_logp(const LoadedModel& m, const AblationStep& st, HeadSite site, int l, int h) {
  ds::Engine e(m.model);
  if (m.model->cfg.encoder_decoder) e.encode(st.source);
  for (int p = 0; p < st.pos0; ++p) e.forward(std::span<const int>(&st.tokens[size_t(p)], 1));
  if (l >= 0) ds::zero_head(e.hooks(), l, h, m.model->cfg.d_head, site);
  auto out = e.forward(std::span<const int>(st.tokens).subspan(size_t(st.pos0)));
  std::vector<double> row(out.data(), out.data() + out.cols());
  return logprob_of(row, st.token);
}

constexpr double kTol = 2e-4;  // float32 engine against double reference, in log-probability

}  // namespace

// The first step feeds the whole prompt, so "off for the step" is "off everywhere": the
// reference with the head zeroed gives every head's log-probability.
TEST(HeadAblation, PromptStepMatchesTheReference) {
  if (!have_model("stories")) GTEST_SKIP() << "assets/models/stories is absent";
  const LoadedModel m = ds::load_model("builtin:stories");
  const ds::Trace t = run_trace(m, ds::encode_prompt(m, "Once upon a time, there was a little"), {}, 14);
  const AblationStep st = ds::ablation_step(t, 0);
  const ds::HeadAblation a = ds::ablate_heads(m.model, st);
  const double base = reference_logp(m, st, -1, -1);
  EXPECT_NEAR(a.logp, base, kTol);
  ASSERT_EQ(int(a.heads.size()), m.model->cfg.n_layers * m.model->cfg.n_heads);
  double largest = 0;
  for (const ds::HeadEffect& h : a.heads) {
    const double want = reference_logp(m, st, h.layer, h.head) - base;
    EXPECT_NEAR(h.delta, want, kTol) << "layer " << h.layer << " head " << h.head;
    EXPECT_NEAR(h.logp - a.logp, h.delta, 1e-12);
    largest = std::max(largest, std::fabs(want));
  }
  EXPECT_GT(largest, 1e-3) << "no head moves the token: the comparison would prove nothing";
}

// A step that recomputes every position (no KV cache) has the head off at all of them:
// the reference again, at a later step.
TEST(HeadAblation, UncachedLaterStepMatchesTheReference) {
  if (!have_model("stories")) GTEST_SKIP() << "assets/models/stories is absent";
  const LoadedModel m = ds::load_model("builtin:stories");
  const ds::Trace t = run_trace(m, ds::encode_prompt(m, "The cat sat"), {}, 12, false);
  const int s = int(t.steps.size()) - 1;
  ASSERT_GT(s, 0);
  const AblationStep st = ds::ablation_step(t, s);
  ASSERT_FALSE(st.kv_cache);
  const ds::HeadAblation a = ds::ablate_heads(m.model, st);
  const double base = reference_logp(m, st, -1, -1);
  EXPECT_NEAR(a.logp, base, kTol);
  for (const ds::HeadEffect& h : a.heads)
    EXPECT_NEAR(h.delta, reference_logp(m, st, h.layer, h.head) - base, kTol)
        << "layer " << h.layer << " head " << h.head;
}

// A cached later step, self- and cross-attention heads of the encoder-decoder model:
// every head against a fresh engine of its own.
TEST(HeadAblation, CachedStepMatchesFreshEnginesWithCrossHeads) {
  if (!have_model("dates")) GTEST_SKIP() << "assets/models/dates is absent";
  const LoadedModel m = ds::load_model("builtin:dates");
  const ds::Config& c = m.model->cfg;
  const ds::Trace t = run_trace(m, {c.bos_id}, m.tokenizer->encode("July 14, 1989", false), 8);
  const int s = std::min(4, int(t.steps.size()) - 1);
  ASSERT_GT(s, 0);
  const AblationStep st = ds::ablation_step(t, s);
  const ds::HeadAblation a = ds::ablate_heads(m.model, st);
  ASSERT_EQ(int(a.heads.size()), 2 * c.n_layers * c.n_heads);
  const double base = engine_logp(m, st, HeadSite::Self, -1, -1);
  EXPECT_NEAR(a.logp, base, 1e-5);
  int cross = 0;
  for (const ds::HeadEffect& h : a.heads) {
    cross += h.site == HeadSite::Cross;
    EXPECT_NEAR(h.delta, engine_logp(m, st, h.site, h.layer, h.head) - base, 1e-5)
        << (h.site == HeadSite::Cross ? "cross " : "") << "layer " << h.layer << " head " << h.head;
  }
  EXPECT_EQ(cross, c.n_layers * c.n_heads);
}

TEST(HeadAblation, RankingIsByLargestChange) {
  std::vector<ds::HeadEffect> v = {{HeadSite::Self, 0, 0, 0, -0.1},
                                   {HeadSite::Self, 0, 1, 0, 0.5},
                                   {HeadSite::Cross, 1, 0, 0, -0.1},
                                   {HeadSite::Self, 1, 1, 0, -2}};
  ds::rank_by_effect(v);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].delta, -2);
  EXPECT_EQ(v[1].delta, 0.5);
  EXPECT_EQ(v[2].site, HeadSite::Self);  // ties keep layer, head order
  EXPECT_EQ(v[3].site, HeadSite::Cross);
}

// One head across the steps equals that head's row of each step's own ablation.
TEST(HeadAblation, AcrossStepsEqualsEachStepsAblation) {
  if (!have_model("stories")) GTEST_SKIP() << "assets/models/stories is absent";
  const LoadedModel m = ds::load_model("builtin:stories");
  const ds::Trace t = run_trace(m, ds::encode_prompt(m, "Once upon a time"), {}, 12);
  const int L = 1, H = 2, nh = m.model->cfg.n_heads;
  const auto across = ds::head_across_steps(m.model, t, HeadSite::Self, L, H);
  int n = 0;
  for (size_t s = 0; s < t.steps.size(); ++s) n += bool(t.steps[s].sample);
  ASSERT_EQ(int(across.size()), n);
  for (const ds::StepEffect& e : across) {
    const ds::HeadAblation a = ds::ablate_heads(m.model, ds::ablation_step(t, e.step));
    EXPECT_EQ(e.token, a.token);
    EXPECT_NEAR(e.logp, a.logp, 1e-5) << "step " << e.step;
    EXPECT_NEAR(e.delta, a.heads[size_t(L * nh + H)].delta, 1e-5) << "step " << e.step;
  }
  EXPECT_THROW(ds::head_across_steps(m.model, t, HeadSite::Cross, 0, 0), ds::Error);  // decoder-only: no cross heads
  EXPECT_THROW(ds::head_across_steps(m.model, t, HeadSite::Self, 9, 0), ds::Error);
}

TEST(HeadAblation, StopsWhenAskedAndRefusesBadSteps) {
  if (!have_model("stories")) GTEST_SKIP() << "assets/models/stories is absent";
  const LoadedModel m = ds::load_model("builtin:stories");
  const ds::Trace t = run_trace(m, ds::encode_prompt(m, "Once"), {}, 4);
  int calls = 0;
  EXPECT_THROW(ds::ablate_heads(m.model, ds::ablation_step(t, 0), 1, [&](int, int) { return ++calls < 3; }),
               ds::Cancelled);
  EXPECT_EQ(calls, 3);
  AblationStep bad = ds::ablation_step(t, 0);
  bad.token = 100000;
  EXPECT_THROW(ds::ablate_heads(m.model, bad), ds::Error);
  EXPECT_THROW(ds::ablation_step(t, 99), ds::Error);
}
