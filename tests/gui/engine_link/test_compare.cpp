// The Compare view's data: B's run made by the worker (cmd::Compare) against the
// session's own run, and the helpers that line two runs up.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "drain.h"
#include "engine_link/compare.h"
#include "engine_link/models.h"
#include "engine_link/worker.h"

namespace {

namespace cmd = dsgui::cmd;
namespace ev = dsgui::ev;

using dsgui_test::drain;

ds::SampleRecord record(std::vector<std::pair<int, float>> rows, int token = -1, int rank = 0) {
  ds::SampleRecord r;
  r.token = token;
  r.rank = rank;
  for (auto [id, p] : rows) {
    ds::Candidate c;
    c.id = id;
    c.text = "t" + std::to_string(id);
    c.p_raw = c.p_final = p;
    r.candidates.push_back(c);
  }
  return r;
}

// Differences of known probabilities are exact; a token one side does not list lies
// between 0 and that side's smallest listed probability, and the bound says so.
TEST(GuiCompare, RowsAndDifferences) {
  const ds::SampleRecord a = record({{1, 0.5f}, {2, 0.3f}, {3, 0.1f}});
  const ds::SampleRecord b = record({{2, 0.6f}, {4, 0.2f}, {1, 0.15f}});
  const auto rows = dsgui::compare_rows(&a, &b, false, 8);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].id, 1);
  EXPECT_EQ(rows[3].id, 4);  // B's token A does not list comes after A's
  const dsgui::Diff d1 = dsgui::prob_diff(rows[0]);
  ASSERT_TRUE(d1.exact);
  EXPECT_NEAR(d1.lo, 0.5 - 0.15, 1e-7);
  const dsgui::Diff l1 = dsgui::logprob_diff(rows[0]);
  EXPECT_NEAR(l1.lo, std::log(0.5) - std::log(0.15), 1e-6);
  // Token 3: in A only; B gives it at most 0.15 (its smallest listed).
  const dsgui::Diff d3 = dsgui::prob_diff(rows[2]);
  EXPECT_FALSE(d3.exact);
  EXPECT_NEAR(d3.lo, 0.1 - 0.15, 1e-7);
  EXPECT_NEAR(d3.hi, 0.1, 1e-7);
  // Token 4: in B only; A gives it at most 0.1.
  const dsgui::Diff d4 = dsgui::prob_diff(rows[3]);
  EXPECT_NEAR(d4.lo, -0.2, 1e-7);
  EXPECT_NEAR(d4.hi, 0.1 - 0.2, 1e-7);
  EXPECT_EQ(dsgui::diff_text(d4), "<= -0.1000");
  EXPECT_EQ(dsgui::diff_text(d1), "+0.3500");
  EXPECT_EQ(dsgui::diff_text(dsgui::Diff{true, true, 0, 0}), "0");
  EXPECT_EQ(dsgui::prob_text(2.5e-5f), "2.50e-05");
}

// A drawn token appended after the most probable ones does not lower the bound; under a
// repetition penalty the raw probabilities have no bound (the table is ordered by others).
TEST(GuiCompare, FloorLeavesOutTheDrawnTokenAppended) {
  ds::SampleRecord a = record({{1, 0.6f}, {2, 0.3f}, {9, 0.001f}}, 9, 40);
  EXPECT_FLOAT_EQ(dsgui::table_floor(a, false), 0.3f);
  a.config.repetition_penalty = 1.3f;
  EXPECT_LT(dsgui::table_floor(a, false), 0.0f);
  EXPECT_FLOAT_EQ(dsgui::table_floor(a, true), 0.3f);
}

TEST(GuiCompare, TokenDifferencesAndDifferenceMap) {
  const auto d = dsgui::token_differences({1, 2, 3}, {1, 5, 3, 4});
  EXPECT_EQ(d, (std::vector<bool>{false, true, false, true}));
  dsgui::Matrix a, b;
  a.rows = a.cols = 2, a.v = {1, 0, 0.25f, 0.75f}, a.mask = {1, 0, 1, 1};
  b.rows = 3, b.cols = 3, b.v = {0.5f, 0, 0, 0.5f, 0.5f, 0, 1, 1, 1}, b.mask = {1, 0, 0, 1, 0, 0, 1, 1, 1};
  const dsgui::Matrix m = dsgui::difference_map(a, b);
  ASSERT_EQ(m.rows, 2);
  ASSERT_EQ(m.cols, 2);
  EXPECT_FLOAT_EQ(m.at(0, 0), 0.5f);
  EXPECT_FLOAT_EQ(m.at(1, 0), -0.25f);
  EXPECT_FALSE(m.allowed(1, 1));  // masked in B
  EXPECT_FLOAT_EQ(m.vmax, 0.5f);
  EXPECT_FLOAT_EQ(m.vmin, -0.5f);
}

TEST(GuiCompare, VocabularyMismatchIsNamed) {
  auto t = dsgui::demo_tokenizer(128);
  EXPECT_EQ(dsgui::vocabulary_mismatch(128, t.get(), "a", 128, t.get(), "b"), "");
  const std::string m = dsgui::vocabulary_mismatch(128, t.get(), "a", 96, nullptr, "b");
  EXPECT_NE(m.find("128 and 96"), std::string::npos) << m;
}

// B with A's text, settings and model is A again: the same tokens, the same probabilities;
// B with a changed prompt differs from A at the changed position; a model with another
// vocabulary gives a message and no run.
TEST(GuiCompare, WorkerRunsBBesideTheSession) {
  dsgui::Worker w;
  w.post(cmd::Load{"random:decoder", "", ds::Precision::F32});
  cmd::Sampler s;
  s.config.temperature = 1.0f, s.config.top_p = 1.0f, s.config.seed = 3;
  w.post(s);
  cmd::Start st;
  st.prompt = "hello";
  w.post(st);
  w.post(cmd::Step{5});
  std::vector<ds::TraceStep> a;
  for (auto& e : drain(w))
    if (auto* x = std::get_if<ev::Step>(&e)) a.push_back(std::move(x->step));
  ASSERT_EQ(a.size(), 5u);
  auto compare = [&](const std::string& prompt, const std::string& spec) {
    cmd::Compare c;
    c.key = prompt + spec;
    c.spec = spec;
    c.prompt = prompt;
    c.sampler = s.config;
    c.steps = 5;
    w.post(c);
    std::shared_ptr<const dsgui::CompareAnswer> got;
    for (auto& e : drain(w))
      if (auto* x = std::get_if<ev::Compare>(&e)) got = x->answer;
    return got;
  };
  auto same = compare("hello", "");
  ASSERT_TRUE(same);
  ASSERT_EQ(same->error, "");
  ASSERT_EQ(same->trace.steps.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    ASSERT_EQ(same->trace.steps[k].sample->token, a[k].sample->token);
    const auto rows = dsgui::compare_rows(&*a[k].sample, &*same->trace.steps[k].sample, false, 20);
    for (const auto& r : rows) EXPECT_EQ(dsgui::prob_diff(r).lo, 0.0) << "step " << k << " token " << r.id;
  }
  auto other = compare("hallo", "");
  ASSERT_TRUE(other && other->error.empty());
  const auto d = dsgui::token_differences(a[0].input, other->trace.steps[0].input);
  ASSERT_EQ(a[0].input.size(), other->trace.steps[0].input.size());  // a character a token
  EXPECT_EQ(std::count(d.begin(), d.end(), true), 1);                // "e" against "a" only
  auto enc = compare("hello", "random:encdec");
  ASSERT_TRUE(enc);
  EXPECT_TRUE(enc->trace.steps.empty());
  EXPECT_NE(enc->error, "");
  // The session is left alone: it takes its next step as before.
  w.post(cmd::Step{1});
  int steps = 0;
  for (auto& e : drain(w)) steps += std::holds_alternative<ev::Step>(e);
  EXPECT_EQ(steps, 1);
}

}  // namespace
