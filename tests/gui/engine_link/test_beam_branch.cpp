// Beam search beside the generation (engine_link: cmd::Beam, cmd::BeamBranch) and how the
// window names the way each token was chosen (engine_link/choice.h): the beam's texts are
// decoded as the tokenizer prints generated text, its winner comes back as a trace of its
// own whose steps say beam search chose them with the scores that did, the live session
// is left alone, and labels and explanations come from the steps' records, never from
// settings that were only previewed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

#include "drain.h"
#include "engine_link/choice.h"
#include "engine_link/models.h"
#include "engine_link/worker.h"

namespace {

namespace cmd = dsgui::cmd;
namespace ev = dsgui::ev;
using dsgui::Event;

using dsgui_test::drain;

template <class T>
T* find(std::vector<Event>& evs) {
  for (auto& e : evs) {
    if (auto* err = std::get_if<ev::Error>(&e)) ADD_FAILURE() << err->msg;
    if (auto* x = std::get_if<T>(&e)) return x;
  }
  return nullptr;
}

bool has_stories() {
  return std::filesystem::exists(std::filesystem::path(DS_SOURCE_DIR) / "assets/models/stories/model.safetensors");
}

TEST(BeamBranch, TheWinnerIsDecodedWithSpacesAndKeptBesideTheLiveSession) {
  if (!has_stories()) GTEST_SKIP() << "builtin:stories is not trained here";
  const ds::LoadedModel m = dsgui::open_model("builtin:stories", "");
  ASSERT_TRUE(m.tokenizer);
  dsgui::Worker w;
  w.post(cmd::Load{"builtin:stories", "", ds::Precision::F32});
  cmd::Start s;
  s.prompt = "Once upon a time, Lily";
  w.post(s);
  w.post(cmd::Step{5});
  auto evs = drain(w);
  int live_steps = 0;
  for (auto& e : evs) live_steps += std::holds_alternative<ev::Step>(e);
  ASSERT_EQ(live_steps, 5);

  cmd::Beam b;
  b.prompt = s.prompt;
  b.width = 3;
  b.positions = 48;
  w.post(b);
  evs = drain(w);
  ev::Beam* be = find<ev::Beam>(evs);
  ASSERT_TRUE(be && be->answer);
  const dsgui::BeamAnswer& a = *be->answer;
  ASSERT_FALSE(a.result.finished.empty());
  const ds::BeamFinished& f = a.result.finished[0];
  // The Best line's text is the tokenizer's decode of the winner's ids after the
  // prompt, each after the one before (as decoderscope-cli prints it): with spaces, where
  // the pieces side by side have none.
  std::string want, pieces;
  int prev = a.result.prompt.back();
  for (size_t i = 0; i + (f.eos ? 1 : 0) < f.tokens.size(); ++i) {
    want += m.tokenizer->decode(prev, f.tokens[i]);
    pieces += m.tokenizer->piece(f.tokens[i]);
    prev = f.tokens[i];
  }
  ASSERT_EQ(a.finished_text.size(), a.result.finished.size());
  EXPECT_EQ(a.finished_text[0], want);
  EXPECT_NE(want.find(' '), std::string::npos) << want;
  EXPECT_NE(want, pieces);

  cmd::BeamBranch bb;
  bb.answer = be->answer;
  w.post(bb);
  evs = drain(w);
  ev::BeamBranch* br = find<ev::BeamBranch>(evs);
  ASSERT_TRUE(br);
  ASSERT_EQ(br->trace.steps.size(), f.tokens.size());
  EXPECT_EQ(br->trace.steps[0].input, a.result.prompt);
  double sum = 0;
  for (size_t k = 0; k < f.tokens.size(); ++k) {
    const ds::SampleRecord& r = *br->trace.steps[k].sample;
    EXPECT_EQ(r.token, f.tokens[k]);
    ASSERT_TRUE(r.chosen);
    EXPECT_EQ(r.chosen->by, "beam search");
    EXPECT_EQ(r.chosen->width, 3);
    // The scores that chose it against the session's own forward pass: log p of the
    // token from the step's candidate table, summed along the way.
    const ds::Candidate* c = nullptr;
    for (auto& cd : r.candidates)
      if (cd.id == r.token) c = &cd;
    ASSERT_TRUE(c);
    sum += std::log(double(c->p_raw));
    EXPECT_NEAR(r.chosen->logprob, std::log(double(c->p_raw)), 1e-3) << "step " << k;
    EXPECT_NEAR(r.chosen->sum, sum, 2e-3 * double(k + 1)) << "step " << k;
  }
  EXPECT_TRUE(br->trace.steps.back().sample->chosen->final);
  EXPECT_NEAR(br->trace.steps.back().sample->chosen->score, f.score, 1e-9);
  // A JSON trace keeps what chose each token.
  std::stringstream js;
  br->trace.write_json(js);
  const ds::Trace back = ds::Trace::read_json(js);
  ASSERT_EQ(back.steps.size(), br->trace.steps.size());
  for (size_t k = 0; k < back.steps.size(); ++k) {
    const auto& want_ch = br->trace.steps[k].sample->chosen;
    const auto& got_ch = back.steps[k].sample->chosen;
    ASSERT_TRUE(got_ch) << "step " << k;
    EXPECT_EQ(got_ch->by, want_ch->by);
    EXPECT_EQ(got_ch->width, want_ch->width);
    EXPECT_EQ(got_ch->rank, want_ch->rank);
    EXPECT_EQ(got_ch->final, want_ch->final);
    EXPECT_DOUBLE_EQ(got_ch->sum, want_ch->sum);
  }

  // The live session went on where it was: its next step is step 6.
  w.post(cmd::Step{1});
  evs = drain(w);
  ev::Step* next = find<ev::Step>(evs);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->index, 5);
  EXPECT_FALSE(next->step.sample->chosen);  // drawn, not given
}

ds::Trace trace_of(const std::vector<ds::SampleRecord>& recs) {
  ds::Trace t;
  int pos = 0;
  for (size_t k = 0; k < recs.size(); ++k) {
    ds::TraceStep s;
    s.pos0 = pos;
    s.input = {k == 0 ? 1 : recs[k - 1].token};
    pos += 1;
    s.sample = recs[k];
    t.steps.push_back(std::move(s));
  }
  return t;
}

ds::SampleRecord sampled(float temperature, int top_k, float top_p, uint64_t seed) {
  ds::SampleRecord r;
  r.config = {temperature, top_k, top_p, seed};
  r.u = 0.114;
  r.token = 7;
  return r;
}

TEST(Choice, BranchLabelsNameTheMethodTheirStepsUsed) {
  ds::SampleRecord c = sampled(1.88f, 5, 1.0f, 3);  // contrastive search ignores temperature
  c.config.contrastive = true;
  c.config.penalty_alpha = 0.6f;
  c.u = -1;
  const ds::Trace contrastive = trace_of({c, c, c});
  const std::string lc = dsgui::branch_method(contrastive, 0);
  EXPECT_NE(lc.find("contrastive search (alpha 0.60, top-k 5)"), std::string::npos) << lc;
  EXPECT_EQ(lc.find("temperature"), std::string::npos) << lc;

  ds::SampleRecord g = sampled(0, 0, 1.0f, 0);
  g.greedy = true;
  const ds::Trace mixed = trace_of({sampled(0.7f, 0, 0.9f, 4), sampled(0.7f, 0, 0.9f, 4), g});
  EXPECT_EQ(dsgui::branch_method(mixed, 0),
            "sampling (temperature 0.70, top-k off, top-p 0.90, seed 4); then greedy (temperature 0)");
  EXPECT_EQ(dsgui::branch_method(mixed, 2), "greedy (temperature 0)");  // from the fork on
  EXPECT_EQ(dsgui::branch_method(mixed, 3), "no token drawn yet");

  ds::SampleRecord beam = sampled(1.88f, 5, 1.0f, 0);
  beam.chosen = ds::TokenChoice{"beam search", 3, 1.0, -0.5, -3.25, 0, -0.81, false};
  ds::SampleRecord forced = sampled(1.0f, 0, 1.0f, 0);
  forced.chosen = ds::TokenChoice{};
  const std::string lb = dsgui::branch_method(trace_of({beam, beam, forced}), 0);
  EXPECT_EQ(lb, "beam search (width 3, length penalty 1.00); then forced (token given, not drawn)");
}

TEST(Choice, AGivenTokenIsExplainedByWhatChoseItNeverByADraw) {
  ds::SampleRecord r = sampled(1.88f, 5, 1.0f, 0);  // settings moved on the sliders, u drawn but not used
  r.chosen = ds::TokenChoice{"beam search", 3, 1.0, -0.25, -3.25, 1, 0, false};
  const std::string t = dsgui::choice_text(r, "girl");
  EXPECT_NE(t.find("chosen by beam search"), std::string::npos) << t;
  EXPECT_NE(t.find("-3.2500"), std::string::npos) << t;  // the cumulative log-probability
  EXPECT_NE(t.find("-0.2500"), std::string::npos) << t;  // log p of the token
  EXPECT_NE(t.find("#2"), std::string::npos) << t;       // its rank among the step's pairs
  EXPECT_EQ(t.find("u ="), std::string::npos) << t;
  EXPECT_EQ(t.find("1.88"), std::string::npos) << t;
  EXPECT_EQ(dsgui::step_method(r).find("1.88"), std::string::npos);
  r.chosen->final = true;
  r.chosen->score = -0.8125;
  EXPECT_NE(dsgui::choice_text(r, "girl").find("-0.8125"), std::string::npos);
  EXPECT_EQ(dsgui::choice_text(sampled(1.0f, 0, 1.0f, 0), "girl"), "");  // a drawn token: the draw explains it
}

}  // namespace
