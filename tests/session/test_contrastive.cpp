// Contrastive search (session/contrastive.h): alpha 0 is greedy token for token, with
// the same trace; each candidate's recorded degeneration penalty is the largest cosine
// similarity computed here from a full-sequence forward pass; the choice is the best
// score; the look-ahead forwards leave no mark on the trace or the cache.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "helpers.h"
#include "io/loader.h"
#include "session/contrastive.h"
#include "session/session.h"
#include "util/error.h"

namespace {

using ds::test::Arch;

struct Case {
  std::string name;
  std::shared_ptr<const ds::Model> model;
  std::shared_ptr<const ds::Tokenizer> tokenizer;
  std::vector<int> prompt, source;
  int steps = 0;
};

std::vector<Case> random_cases() {
  std::vector<Case> out;
  const std::pair<const char*, Arch> archs[] = {
      {"gpt2", Arch::GPT2}, {"llama", Arch::Llama}, {"postnorm", Arch::PostNorm}, {"encdec", Arch::EncDec}};
  uint64_t seed = 40;
  for (auto [name, a] : archs) {
    Case c;
    c.name = std::string("random ") + name;
    c.model = ds::test::random_model(ds::test::small_config(a), seed++, 0.3f);
    c.prompt = {1, 7, 9, 7, 12};
    if (c.model->cfg.encoder_decoder) c.source = {5, 6, 7, 8, 3};
    c.steps = 40;
    out.push_back(std::move(c));
  }
  return out;
}

Case builtin_case(const std::string& name, const std::string& prompt, const std::string& source) {
  ds::LoadedModel m = ds::load_model("builtin:" + name);
  Case c;
  c.name = "builtin:" + name;
  c.model = m.model;
  c.tokenizer = m.tokenizer;
  if (m.model->cfg.encoder_decoder) {
    c.prompt = {m.model->cfg.bos_id};
    c.source = m.tokenizer->encode(source, false);
  } else {
    c.prompt = ds::encode_prompt(m, prompt);
  }
  c.steps = std::min(m.model->cfg.max_seq, int(c.prompt.size()) + 14);
  return c;
}

struct Generation {
  std::vector<int> tokens;
  ds::Trace trace;
};

Generation run(const Case& c, const ds::SamplerConfig& sc, bool record_all) {
  ds::SessionOptions o;
  o.sampler = sc;
  o.steps = c.steps;
  if (record_all) o.record = {"**"};
  ds::Session s(c.model, c.tokenizer, o);
  s.start(c.prompt, c.source);
  Generation r;
  while (!s.done()) r.tokens.push_back(s.step());
  r.trace = s.trace();
  return r;
}

ds::SamplerConfig greedy() {
  ds::SamplerConfig g;
  g.temperature = 0;
  return g;
}

ds::SamplerConfig contrastive(float alpha, int k) {
  ds::SamplerConfig c;
  c.contrastive = true;
  c.penalty_alpha = alpha;
  c.top_k = k;
  c.temperature = 0.7f;  // ignored by contrastive search
  c.top_p = 0.5f;        // ignored too
  return c;
}

// The same tokens, and the same tensors recorded at every step (logits included):
// the look-aheads were kept out of the trace and left the cache as greedy left it.
void expect_same_run(const Generation& a, const Generation& b, const std::string& what) {
  ASSERT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.trace.steps.size(), b.trace.steps.size()) << what;
  for (size_t i = 0; i < a.trace.steps.size(); ++i) {
    const auto& ta = a.trace.steps[i].tensors;
    const auto& tb = b.trace.steps[i].tensors;
    ASSERT_EQ(ta.size(), tb.size()) << what << " step " << i;
    for (auto& [name, t] : ta) {
      auto it = tb.find(name);
      ASSERT_NE(it, tb.end()) << what << " step " << i << ": " << name;
      EXPECT_EQ(t.shape, it->second.shape) << what << " step " << i << ": " << name;
      EXPECT_EQ(t.data, it->second.data) << what << " step " << i << ": " << name;
    }
  }
}

TEST(Contrastive, AlphaZeroIsGreedyOnRandomModels) {
  for (const Case& c : random_cases()) {
    const Generation g = run(c, greedy(), true);
    expect_same_run(g, run(c, contrastive(0.0f, 4), true), c.name + ", alpha 0, k 4");
    expect_same_run(g, run(c, contrastive(0.6f, 1), true), c.name + ", alpha 0.6, k 1");
    expect_same_run(run(c, greedy(), false), run(c, contrastive(0.0f, 40), false), c.name + ", alpha 0, k = vocab");
  }
}

TEST(Contrastive, AlphaZeroIsGreedyOnBuiltinModels) {
  for (const Case& c : {builtin_case("adder", "123+45=", ""), builtin_case("dates", "", "Sunday, 22 November 2026")}) {
    const Generation g = run(c, greedy(), true);
    expect_same_run(g, run(c, contrastive(0.0f, 5), true), c.name);
  }
}

TEST(Contrastive, AlphaZeroIsGreedyOnLlama2cFixture) {
  const auto dir = ds::test::fixture("aidreams260K");
  DS_NEED_FIXTURE(dir / "model.bin", "contrastive search against greedy on the llama2.c checkpoint");
  ds::LoadedModel m = ds::load_model((dir / "model.bin").string(), (dir / "tok512.bin").string());
  Case c;
  c.name = "aidreams260K";
  c.model = m.model;
  c.tokenizer = m.tokenizer;
  c.prompt = {1};
  c.steps = 96;
  const Generation g = run(c, greedy(), false);
  expect_same_run(g, run(c, contrastive(0.0f, 6), false), c.name);
}

// The final hidden states of a full-sequence forward (ln_final, or the last layer's
// output with no final norm), [n, d].
std::vector<double> full_hidden(const std::shared_ptr<const ds::Model>& m, const std::vector<int>& src,
                                const std::vector<int>& seq, std::vector<float>* last_logits) {
  ds::Engine e(m);
  const ds::Config& c = m->cfg;
  std::vector<double> h;
  const std::string point = c.final_norm ? "ln_final" : "blocks." + std::to_string(c.n_layers - 1) + ".resid_post";
  e.hooks().subscribe(point, [&](ds::HookEvent& ev) {
    if (ev.stack == ds::Stack::Decoder) h.assign(ev.t.data, ev.t.data + ev.t.size());
  });
  if (c.encoder_decoder) e.encode(src);
  ds::MatRM logits = e.forward_full(seq);
  if (last_logits) {
    const float* row = logits.data() + size_t(logits.rows() - 1) * c.vocab_size;
    last_logits->assign(row, row + c.vocab_size);
  }
  return h;
}

double cosine(const double* a, const double* b, int d) {
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < d; ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return ab / std::sqrt(aa * bb);
}

void check_scores(const Case& c, float alpha, int k) {
  ds::SessionOptions o;
  o.sampler = contrastive(alpha, k);
  o.steps = c.steps;
  ds::Session s(c.model, c.tokenizer, o);
  s.start(c.prompt, c.source);
  while (!s.done()) s.step();
  const ds::Trace& t = s.trace();
  const int d = c.model->cfg.d_model;
  std::vector<int> seq;
  int checked = 0;
  for (size_t st = 0; st < t.steps.size(); ++st) {
    seq.insert(seq.end(), t.steps[st].input.begin(), t.steps[st].input.end());
    const ds::SampleRecord& r = *t.steps[st].sample;
    if (int(seq.size()) >= c.model->cfg.max_seq) break;  // no room to look ahead
    std::vector<float> logits;
    full_hidden(c.model, c.source, seq, &logits);
    double mx = -1e300, z = 0;
    for (float x : logits) mx = std::max(mx, double(x));
    for (float x : logits) z += std::exp(double(x) - mx);
    int n_look = 0;
    const ds::Candidate* best = nullptr;
    for (const ds::Candidate& cd : r.candidates) {
      if (!cd.lookahead) continue;
      ++n_look;
      std::vector<int> ext = seq;
      ext.push_back(cd.id);
      const std::vector<double> h = full_hidden(c.model, c.source, ext, nullptr);
      const int n = int(seq.size());
      double pen = -2;
      for (int j = 0; j < n; ++j) pen = std::max(pen, cosine(&h[size_t(n) * d], &h[size_t(j) * d], d));
      const double p = std::exp(double(logits[size_t(cd.id)]) - mx) / z;
      const std::string at = c.name + " step " + std::to_string(st) + " candidate " + std::to_string(cd.id);
      EXPECT_NEAR(cd.degeneration, pen, 2e-4) << at;
      EXPECT_NEAR(cd.confidence, p, 1e-5) << at;
      EXPECT_NEAR(cd.score, (1 - alpha) * cd.confidence - alpha * cd.degeneration, 1e-6) << at;
      if (!best || cd.score > best->score || (cd.score == best->score && cd.confidence > best->confidence)) best = &cd;
      ++checked;
    }
    EXPECT_EQ(n_look, std::min(k, c.model->cfg.vocab_size)) << c.name << " step " << st;
    ASSERT_NE(best, nullptr);
    EXPECT_EQ(r.token, best->id) << c.name << " step " << st;
  }
  EXPECT_GT(checked, 0);
}

TEST(Contrastive, PenaltyIsTheLargestCosineOfAFullForward) {
  for (Case& c : random_cases()) {
    c.steps = 16;
    check_scores(c, 0.6f, 4);
  }
  Case adder = builtin_case("adder", "123+45=", "");
  check_scores(adder, 0.5f, 3);
}

TEST(Contrastive, ChoiceIsTheBestScoreTiesToTheMoreProbable) {
  std::vector<ds::ContrastiveScore> s = {{3, 0.5, 0.9, 0}, {8, 0.3, 0.1, 0}, {1, 0.2, 0.1, 0}};
  EXPECT_EQ(ds::contrastive_choice(s, 0.0), 0);
  EXPECT_EQ(ds::contrastive_choice(s, 0.6), 1);
  EXPECT_NEAR(s[1].score, 0.4 * 0.3 - 0.6 * 0.1, 1e-12);
  std::vector<ds::ContrastiveScore> tie = {{3, 0.4, 0.2, 0}, {8, 0.4, 0.2, 0}};
  EXPECT_EQ(ds::contrastive_choice(tie, 0.5), 0);
  std::vector<ds::ContrastiveScore> none;
  EXPECT_EQ(ds::contrastive_choice(none, 0.5), -1);
}

TEST(Contrastive, DegenerationPenaltyOfSimpleVectors) {
  const float h[2] = {1, 0};
  const float ctx[6] = {0, 1, 1, 1, -1, 0};
  EXPECT_NEAR(ds::degeneration_penalty(h, ctx, 3, 2), std::sqrt(0.5), 1e-12);
  const float zero[2] = {0, 0};
  EXPECT_EQ(ds::degeneration_penalty(zero, ctx, 3, 2), 0.0);
  EXPECT_NEAR(ds::degeneration_penalty(h, ctx + 4, 1, 2), -1.0, 1e-12);
}

TEST(Contrastive, SteersAwayFromRepeatingItself) {
  // With alpha 1 only the penalty counts: the chosen candidate has the smallest one.
  Case c = random_cases()[0];
  c.steps = 12;
  ds::SessionOptions o;
  o.sampler = contrastive(1.0f, 5);
  o.steps = c.steps;
  ds::Session s(c.model, nullptr, o);
  s.start(c.prompt, c.source);
  while (!s.done()) s.step();
  for (const auto& st : s.trace().steps) {
    const ds::SampleRecord& r = *st.sample;
    float lowest = 2;
    for (auto& cd : r.candidates)
      if (cd.lookahead) lowest = std::min(lowest, cd.degeneration);
    for (auto& cd : r.candidates)
      if (cd.id == r.token) {
        EXPECT_EQ(cd.degeneration, lowest);
      }
  }
}

TEST(Contrastive, RewindRedrawsTheSameStep) {
  Case c = random_cases()[1];
  ds::SessionOptions o;
  o.sampler = contrastive(0.6f, 4);
  o.steps = 20;
  ds::Session s(c.model, nullptr, o);
  s.start(c.prompt, c.source);
  while (!s.done()) s.step();
  const std::vector<int> first = s.generated();
  s.rewind(5);
  while (!s.done()) s.step();
  EXPECT_EQ(s.generated(), first);
}

TEST(Contrastive, BadAlphaIsAClearError) {
  ds::SamplerConfig c = contrastive(1.5f, 4);
  EXPECT_THROW(ds::validate(c), ds::Error);
  c.penalty_alpha = std::nanf("");
  EXPECT_THROW(ds::validate(c), ds::Error);
  c.penalty_alpha = -0.1f;
  try {
    ds::validate(c);
    FAIL();
  } catch (const ds::Error& e) {
    EXPECT_NE(std::string(e.what()).find("penalty_alpha"), std::string::npos) << e.what();
  }
}

TEST(Contrastive, CommandLine) {
  using ds::test::run_cli;
  auto g = run_cli("generate --model builtin:adder --prompt 123+45= --temperature 0 --ids");
  ASSERT_EQ(g.code, 0) << g.err;
  auto c0 = run_cli("generate --model builtin:adder --prompt 123+45= --penalty-alpha 0 --top-k 4 --ids");
  ASSERT_EQ(c0.code, 0) << c0.err;
  EXPECT_EQ(c0.out, g.out);
  auto c6 = run_cli("generate --model builtin:adder --prompt 123+45= --penalty-alpha 0.6 --top-k 4 --ids");
  ASSERT_EQ(c6.code, 0) << c6.err;
  for (const char* bad : {"--penalty-alpha 0.5", "--penalty-alpha 2 --top-k 4", "--penalty-alpha nan --top-k 4",
                          "--penalty-alpha x --top-k 4"}) {
    auto r = run_cli(std::string("generate --model builtin:adder --prompt 1+1= ") + bad);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("alpha"), std::string::npos) << bad << ": " << r.err;
  }
}

}  // namespace
