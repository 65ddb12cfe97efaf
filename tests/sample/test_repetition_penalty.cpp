// The repetition penalty (Hugging Face's RepetitionPenaltyLogitsProcessor) against a
// naive copy of its rule; r = 1 changes nothing; the sampler's later stages read the
// penalised logits; the session marks the candidates it touched; shaping a step
// without drawing; the new sample fields round-trip through the trace JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "probe/trace.h"
#include "sample/sampler.h"
#include "session/session.h"
#include "util/error.h"

namespace {

// Hugging Face's rule, written from its definition: gather the logits of the ids in the
// sequence, divide the positive ones by r and multiply the others by r, scatter back.
std::vector<float> naive_penalty(std::vector<float> x, const std::vector<int>& seen, float r) {
  std::set<int> ids(seen.begin(), seen.end());
  for (int id : ids) {
    float v = x[size_t(id)];
    x[size_t(id)] = v < 0 ? v * r : v / r;
  }
  return x;
}

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(g);
  x[0] = 0.0f;  // zero: multiplied (stays 0)
  return x;
}

std::vector<double> softmax(const std::vector<float>& x, double T = 1.0) {
  double mx = -1e300, z = 0;
  for (float v : x) mx = std::max(mx, double(v));
  std::vector<double> p(x.size());
  for (size_t i = 0; i < x.size(); ++i) z += p[i] = std::exp((double(x[i]) - mx) / T);
  for (double& v : p) v /= z;
  return p;
}

TEST(RepetitionPenalty, EqualsHuggingFacesRule) {
  const std::vector<int> seen = {3, 5, 3, 0, 17, 17, 17, 99, 42, 5};
  for (float r : {1.2f, 2.0f, 0.7f, 10.0f}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      std::vector<float> x = random_logits(100, seed);
      const std::vector<float> want = naive_penalty(x, seen, r);
      ds::apply_repetition_penalty(x.data(), 100, seen, r);
      EXPECT_EQ(x, want) << "r = " << r;
    }
  }
}

TEST(RepetitionPenalty, OneChangesNothing) {
  std::vector<float> x = random_logits(64, 3);
  const std::vector<float> before = x;
  ds::apply_repetition_penalty(x.data(), 64, std::vector<int>{1, 2, 3, 1}, 1.0f);
  EXPECT_EQ(x, before);

  // The sampler with r = 1 and a sequence draws as it does with no sequence.
  ds::SamplerConfig c;
  c.top_p = 0.9f;
  c.top_k = 20;
  ds::Sampler a(c), b(c);
  ds::SampleResult ra, rb;
  for (int i = 0; i < 50; ++i) {
    const std::vector<float> l = random_logits(64, 100 + i);
    EXPECT_EQ(a.sample(l.data(), 64, ra), b.sample(l.data(), 64, rb, std::vector<int>{1, 2, 3, 5, 8}));
    EXPECT_EQ(ra.p_final, rb.p_final);
    EXPECT_TRUE(rb.p_rep.empty());
  }
}

TEST(RepetitionPenalty, LaterStagesReadThePenalisedLogits) {
  const std::vector<int> seen = {4, 9, 4, 30, 31};
  for (float T : {0.0f, 0.5f, 1.0f, 1.7f}) {
    ds::SamplerConfig c;
    c.temperature = T;
    c.top_p = 1.0f;
    c.repetition_penalty = 1.8f;
    ds::Sampler s(c);
    ds::SampleResult out;
    std::vector<float> x = random_logits(50, 7);
    x[4] = 9.0f;  // the favourite is a repeat
    const std::vector<float> pen = naive_penalty(x, seen, 1.8f);
    const int tok = s.sample(x.data(), 50, out, seen);
    const std::vector<double> p_raw = softmax(x), p_rep = softmax(pen);
    ASSERT_EQ(out.p_rep.size(), 50u);
    for (int i = 0; i < 50; ++i) {
      EXPECT_NEAR(out.p_raw[size_t(i)], p_raw[size_t(i)], 1e-6);
      EXPECT_NEAR(out.p_rep[size_t(i)], p_rep[size_t(i)], 1e-6);
    }
    if (T == 0) {
      EXPECT_EQ(tok, ds::argmax(pen.data(), 50));
    } else {
      const std::vector<double> p_temp = softmax(pen, T);
      for (int i = 0; i < 50; ++i) EXPECT_NEAR(out.p_temp[size_t(i)], p_temp[size_t(i)], 1e-6);
    }
  }
}

TEST(RepetitionPenalty, BadValuesAreClearErrors) {
  for (float r : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    ds::SamplerConfig c;
    c.repetition_penalty = r;
    try {
      ds::validate(c);
      FAIL() << r;
    } catch (const ds::Error& e) {
      EXPECT_NE(std::string(e.what()).find("repetition_penalty"), std::string::npos) << e.what();
    }
  }
  std::vector<float> x(10, 1.0f);
  EXPECT_THROW(ds::apply_repetition_penalty(x.data(), 10, std::vector<int>{10}, 1.5f), ds::Error);
  EXPECT_THROW(ds::apply_repetition_penalty(x.data(), 10, std::vector<int>{-1}, 1.5f), ds::Error);
  EXPECT_THROW(ds::apply_repetition_penalty(x.data(), 10, std::vector<int>{1}, 0.0f), ds::Error);

  using ds::test::run_cli;
  for (const char* bad : {"0", "-2", "nan", "inf", "x"}) {
    auto r = run_cli(std::string("generate --model builtin:adder --prompt 1+1= --repetition-penalty ") + bad);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find("repetition"), std::string::npos) << bad << ": " << r.err;
  }
  auto ok = run_cli("generate --model builtin:adder --prompt 1+1= --repetition-penalty 1.3 --temperature 0 --ids");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(RepetitionPenalty, SessionMarksTheCandidatesItTouched) {
  auto m = ds::test::random_model(ds::test::small_config(ds::test::Arch::GPT2), 5, 0.3f);
  ds::SessionOptions o;
  o.sampler.repetition_penalty = 1.5f;
  o.sampler.seed = 3;
  o.steps = 20;
  o.candidates = 40;  // the whole vocabulary
  ds::Session s(m, nullptr, o);
  s.start({1, 7, 9, 7});
  while (!s.done()) s.step();
  std::vector<int> seq;
  int touched = 0;
  for (const auto& st : s.trace().steps) {
    seq.insert(seq.end(), st.input.begin(), st.input.end());
    for (const ds::Candidate& c : st.sample->candidates) {
      const bool in = std::find(seq.begin(), seq.end(), c.id) != seq.end();
      EXPECT_EQ(c.repeated, in);
      touched += c.repeated;
      if (!in) {
        EXPECT_GE(c.p_rep, c.p_raw);  // the others gain the mass the repeats lost
      }
    }
  }
  EXPECT_GT(touched, 0);
}

TEST(Shape, RecordedSettingsGiveTheRecordedTableAndDrawNothing) {
  auto m = ds::test::random_model(ds::test::small_config(ds::test::Arch::Llama), 6, 0.3f);
  ds::SessionOptions o;
  o.sampler.temperature = 0.8f;
  o.sampler.top_k = 10;
  o.sampler.top_p = 0.9f;
  o.sampler.repetition_penalty = 1.3f;
  o.steps = 16;
  o.keep_logits_bytes = 1 << 20;
  ds::Session a(m, nullptr, o), b(m, nullptr, o);
  a.start({1, 2, 3});
  b.start({1, 2, 3});
  for (int i = 0; i < 8; ++i) a.step(), b.step();
  for (int k = 0; k < 8; ++k) {
    ASSERT_TRUE(a.has_logits(k));
    const ds::SampleRecord& rec = *a.trace().steps[size_t(k)].sample;
    const ds::SampleRecord sh = a.shape(k, rec.config);
    EXPECT_EQ(sh.token, -1);
    EXPECT_EQ(sh.n_kept, rec.n_kept);
    for (const ds::Candidate& c : rec.candidates)
      for (const ds::Candidate& d : sh.candidates)
        if (c.id == d.id) {
          EXPECT_EQ(c.p_raw, d.p_raw);
          EXPECT_EQ(c.p_rep, d.p_rep);
          EXPECT_EQ(c.p_temp, d.p_temp);
          EXPECT_EQ(c.p_final, d.p_final);
          EXPECT_EQ(c.removed, d.removed);
          EXPECT_EQ(c.repeated, d.repeated);
        }
    ds::SamplerConfig hot = rec.config;
    hot.temperature = 2.0f;
    hot.top_k = 0;
    const ds::SampleRecord flat = a.shape(k, hot);
    EXPECT_GE(flat.n_kept, rec.n_kept);
  }
  // Shaping drew nothing: both sessions go on to the same tokens.
  while (!a.done()) EXPECT_EQ(a.step(), b.step());
  // Only the latest rows are kept when the budget is small.
  o.keep_logits_bytes = 3 * 40 * sizeof(float);
  ds::Session c(m, nullptr, o);
  c.start({1, 2, 3});
  for (int i = 0; i < 6; ++i) c.step();
  EXPECT_FALSE(c.has_logits(2));
  EXPECT_TRUE(c.has_logits(3));
  EXPECT_TRUE(c.has_logits(5));
  EXPECT_THROW(c.shape(0, o.sampler), ds::Error);
  c.rewind(4);
  EXPECT_FALSE(c.has_logits(4));
  c.step();
  EXPECT_TRUE(c.has_logits(4));
}

TEST(TraceJson, NewSampleFieldsRoundTripAndOldTracesLoad) {
  auto m = ds::test::random_model(ds::test::small_config(ds::test::Arch::GPT2), 8, 0.3f);
  ds::SessionOptions o;
  o.sampler.contrastive = true;
  o.sampler.penalty_alpha = 0.6f;
  o.sampler.top_k = 4;
  o.sampler.repetition_penalty = 1.4f;
  o.steps = 10;
  ds::Session s(m, nullptr, o);
  s.start({1, 5, 5, 6});
  while (!s.done()) s.step();
  std::stringstream js;
  s.trace().write_json(js);
  const std::string text = js.str();
  const ds::Trace t = ds::Trace::read_json(js);
  ASSERT_EQ(t.steps.size(), s.trace().steps.size());
  int looked = 0;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const ds::SampleRecord &a = *s.trace().steps[i].sample, &b = *t.steps[i].sample;
    EXPECT_TRUE(b.config.contrastive);
    EXPECT_EQ(b.config.penalty_alpha, a.config.penalty_alpha);
    EXPECT_EQ(b.config.repetition_penalty, a.config.repetition_penalty);
    ASSERT_EQ(a.candidates.size(), b.candidates.size());
    for (size_t j = 0; j < a.candidates.size(); ++j) {
      const ds::Candidate &x = a.candidates[j], &y = b.candidates[j];
      EXPECT_EQ(x.p_rep, y.p_rep);
      EXPECT_EQ(x.repeated, y.repeated);
      EXPECT_EQ(x.lookahead, y.lookahead);
      EXPECT_EQ(x.confidence, y.confidence);
      EXPECT_EQ(x.degeneration, y.degeneration);
      EXPECT_EQ(x.score, y.score);
      looked += y.lookahead;
    }
  }
  EXPECT_EQ(looked, 4 * int(t.steps.size()));

  // A trace written before these fields existed: they read as off.
  std::string old = R"({"format": "decoderscope-trace", "version": 1, "model": {"name": "m", "config": )";
  nlohmann::json cfg = nlohmann::json::parse(text)["model"]["config"];
  old += cfg.dump();
  old += R"(}, "steps": [{"pos0": 0, "input": [1], "input_text": [""], "tensors": {},
      "sample": {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "seed": 0, "greedy": false, "u": 0.5,
                 "token": 3, "rank": 0, "n_kept": 2,
                 "candidates": [{"id": 3, "text": "", "p_raw": 0.6, "p_temp": 0.6, "p_topk": 0.6,
                                 "p_final": 0.6, "removed": ""}]}}]})";
  std::istringstream in(old);
  const ds::Trace ot = ds::Trace::read_json(in);
  const ds::SampleRecord& r = *ot.steps.at(0).sample;
  EXPECT_EQ(r.config.repetition_penalty, 1.0f);
  EXPECT_FALSE(r.config.contrastive);
  EXPECT_EQ(r.candidates.at(0).p_rep, 0.6f);
  EXPECT_FALSE(r.candidates.at(0).repeated);
  EXPECT_FALSE(r.candidates.at(0).lookahead);
}

}  // namespace
