// The Trace: what a session records can be rebuilt into the full attention
// matrices the full-sequence forward computes, and survives a JSON round trip.
#include <gtest/gtest.h>

#include "helpers.h"

#include <cmath>
#include <sstream>

#include "model/model.h"
#include "probe/trace.h"
#include "session/session.h"
#include "util/error.h"

using namespace ds;

namespace {

Config small(bool encdec) { return ds::test::small_config(encdec ? ds::test::Arch::EncDec : ds::test::Arch::GPT2); }

// The full-sequence patterns of every layer, head-major: [layer][H, T, T].
std::vector<std::vector<float>> full_patterns(std::shared_ptr<const Model> m, const std::vector<int>& toks,
                                              const std::vector<int>& src, const char* what) {
  Engine e(m);
  std::vector<std::vector<float>> out(m->cfg.n_layers);
  e.hooks().subscribe(std::string("blocks.*.") + what,
                      [&](HookEvent& ev) { out[ev.layer].assign(ev.t.data, ev.t.data + ev.t.size()); });
  if (!src.empty()) e.encode(src);
  e.forward_full(toks);
  return out;
}

}  // namespace

TEST(Trace, RebuildsAttentionMatricesOfTheFullForward) {
  for (bool encdec : {false, true}) {
    SCOPED_TRACE(encdec ? "encoder-decoder" : "decoder-only");
    Config c = small(encdec);
    auto m = std::make_shared<const Model>(c, Weights::random(c, 5));
    SessionOptions o;
    o.sampler.temperature = 0.8f;
    o.sampler.seed = 3;
    o.steps = 20;
    o.record = {"blocks.*.attn.pattern", "blocks.*.attn.scores", "**.cross_attn.pattern"};
    if (!encdec) o.record.pop_back();
    Session s(m, nullptr, o);
    std::vector<int> src = {5, 6, 7, 8, 0, 0};
    s.start({1, 4, 9}, encdec ? src : std::vector<int>{});
    while (!s.done()) s.step();
    const Trace& t = s.trace();
    ASSERT_EQ(t.positions(int(t.steps.size()) - 1), 20);
    std::vector<int> toks = t.tokens();
    ASSERT_EQ(toks.size(), 20u);
    auto pat = full_patterns(m, toks, encdec ? src : std::vector<int>{}, "attn.pattern");
    const int T = 20, H = c.n_heads;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < H; ++h) {
        MatRM a = t.attention(l, h, int(t.steps.size()) - 1);
        ASSERT_EQ(a.rows(), T);
        ASSERT_EQ(a.cols(), T);
        for (int i = 0; i < T; ++i)
          for (int j = 0; j < T; ++j) EXPECT_NEAR(a(i, j), pat[l][(size_t(h) * T + i) * T + j], 1e-5);
        // An earlier step shows only the rows computed so far.
        MatRM early = t.attention(l, h, 2);
        EXPECT_EQ(early.rows(), t.positions(2));
        MatRM sc = t.attention(l, h, int(t.steps.size()) - 1, false, true);
        EXPECT_TRUE(std::isinf(sc(0, 1)) && sc(0, 1) < 0);  // a masked score
      }
    if (encdec) {
      auto cp = full_patterns(m, toks, src, "cross_attn.pattern");
      MatRM a = t.attention(1, 2, int(t.steps.size()) - 1, true);
      ASSERT_EQ(a.cols(), int(src.size()));
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < int(src.size()); ++j)
          EXPECT_NEAR(a(i, j), cp[1][(size_t(2) * T + i) * src.size() + j], 1e-5);
    }
  }
}

TEST(Trace, JsonRoundTripKeepsEverything) {
  Config c = small(true);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 9));
  SessionOptions o;
  o.sampler = {0.7f, 10, 0.9f, 4};
  o.steps = 8;
  o.record = {"**"};
  Session s(m, nullptr, o);
  s.start({1, 2}, {3, 4, 5, 0});
  while (!s.done()) s.step();
  Trace t = s.trace();
  t.model_name = "tiny \"quoted\" name";
  std::stringstream ss;
  t.write_json(ss);
  Trace r = Trace::read_json(ss);
  EXPECT_EQ(r.model_name, t.model_name);
  EXPECT_EQ(r.config.d_model, c.d_model);
  EXPECT_EQ(r.source, t.source);
  ASSERT_EQ(r.steps.size(), t.steps.size());
  EXPECT_EQ(r.encoder.size(), t.encoder.size());
  for (size_t i = 0; i < t.steps.size(); ++i) {
    EXPECT_EQ(r.steps[i].input, t.steps[i].input);
    ASSERT_EQ(r.steps[i].tensors.size(), t.steps[i].tensors.size());
    for (auto& [name, ten] : t.steps[i].tensors) {
      const Tensor& o2 = r.steps[i].tensors.at(name);
      ASSERT_EQ(o2.shape, ten.shape) << name;
      for (size_t k = 0; k < ten.data.size(); ++k) {
        if (std::isinf(ten.data[k]))
          EXPECT_EQ(o2.data[k], ten.data[k]);
        else
          EXPECT_FLOAT_EQ(o2.data[k], ten.data[k]) << name;
      }
    }
    ASSERT_TRUE(r.steps[i].sample.has_value());
    EXPECT_EQ(r.steps[i].sample->token, t.steps[i].sample->token);
    EXPECT_EQ(r.steps[i].sample->candidates.size(), t.steps[i].sample->candidates.size());
  }
  EXPECT_EQ(r.attention(0, 1, 3), t.attention(0, 1, 3));
}

TEST(Trace, MalformedJsonIsAClearError) {
  const char* bad[] = {"",
                       "{",
                       "[]",
                       "{\"format\": \"other\"}",
                       "{\"format\":\"decoderscope-trace\",\"model\":{\"config\":{}},\"steps\":[]}",
                       "{\"format\":\"decoderscope-trace\",\"model\":{\"config\":{\"d_model\":2,\"n_layers\":1,"
                       "\"n_heads\":1,\"d_head\":2,\"d_ff\":2,\"vocab_size\":2,\"max_seq\":2,\"norm\":\"layernorm\","
                       "\"norm_place\":\"pre\",\"pos\":\"learned\",\"ffn\":\"gelu\"}},\"steps\":[{\"pos0\":0,"
                       "\"input\":[1],\"tensors\":{\"x\":{\"shape\":[2,2],\"data\":[1,2,3]}}}]}"};
  for (auto* b : bad) {
    std::stringstream ss(b);
    EXPECT_THROW(Trace::read_json(ss), Error) << b;
  }
}

TEST(Session, CandidateTableDescribesTheDraw) {
  Config c = small(false);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 2, 0.3f));
  SessionOptions o;
  o.sampler = {1.3f, 8, 0.8f, 21};
  o.steps = 30;
  o.candidates = 30;
  Session s(m, nullptr, o);
  s.start({1});
  while (!s.done()) {
    int tok = s.step();
    const SampleRecord& r = *s.trace().steps.back().sample;
    EXPECT_EQ(r.token, tok);
    int kept = 0;
    bool found = false;
    for (auto& cd : r.candidates) {
      kept += cd.removed == 0;
      if (cd.id == tok) {
        found = true;
        EXPECT_EQ(cd.removed, 0);
        EXPECT_GT(cd.p_final, 0.0f);
      }
      if (cd.removed) {
        EXPECT_EQ(cd.p_final, 0.0f);
      }
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(kept, r.n_kept);  // the table holds the whole vocabulary here
    EXPECT_LE(r.n_kept, 8);
    EXPECT_GE(r.u, 0.0);
    EXPECT_LT(r.u, 1.0);
  }
}

// Greedy steps: the table lists the model's most probable tokens, ranked here by a
// plain sort of the step's logits (recorded by the "logits" hook), and one token kept.
TEST(Session, GreedyCandidateTableIsTheRanking) {
  Config c = small(false);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 2, 0.3f));
  SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = 12;
  o.candidates = 5;
  o.record = {"logits"};
  Session s(m, nullptr, o);
  s.start({1});
  while (!s.done()) {
    const int tok = s.step();
    const TraceStep& st = s.trace().steps.back();
    const SampleRecord& r = *st.sample;
    ASSERT_TRUE(st.tensors.count("logits"));
    const Tensor& lg = st.tensors.at("logits");
    const int V = c.vocab_size;
    const int64_t last = lg.size() - V;  // the last row
    std::vector<float> x(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) x[size_t(i)] = lg.at(last + i);
    std::vector<int> ids(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) ids[size_t(i)] = i;
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return x[size_t(a)] > x[size_t(b)]; });
    ASSERT_EQ(r.candidates.size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.candidates[i].id, ids[i]) << "row " << i;
    for (size_t i = 1; i < 5; ++i) EXPECT_GT(r.candidates[i].p_raw, 0.0f);  // real runners-up
    EXPECT_EQ(r.candidates[0].id, tok);
    EXPECT_EQ(r.rank, 0);
    EXPECT_EQ(r.n_kept, 1);
    EXPECT_TRUE(r.greedy);
  }
}

// A session that hands each step over (as the window's worker does) draws the same tokens
// and hands over the same tensors as one that keeps its whole trace, through a rewind;
// what it keeps of a handed-over step is the step without its tensors.
TEST(Session, HandedOverStepsEqualTheKeptTrace) {
  Config c = small(false);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 5, 0.3f));
  SessionOptions o;
  o.sampler = {1.1f, 0, 0.95f, 7};
  o.steps = 14;
  o.record = {"blocks.*.attn.scores", "blocks.*.resid_post", "logits"};
  o.trace_options.compact = true;
  o.trace_options.lens_top_k = 3;
  Session keep(m, nullptr, o), give(m, nullptr, o);
  keep.start({1, 2, 3});
  give.start({1, 2, 3});
  EXPECT_THROW(give.hand_over_last_step(), Error);
  std::vector<TraceStep> got;
  auto take = [&](int n) {
    for (int i = 0; i < n && !keep.done(); ++i) {
      ASSERT_EQ(keep.step(), give.step());
      got.push_back(give.hand_over_last_step());
    }
  };
  take(6);
  keep.rewind(3);
  give.rewind(3);
  got.resize(3);
  take(20);
  ASSERT_EQ(got.size(), keep.trace().steps.size());
  ASSERT_EQ(got.size(), give.trace().steps.size());
  for (size_t s = 0; s < got.size(); ++s) {
    const TraceStep &want = keep.trace().steps[s], &have = got[s], &shell = give.trace().steps[s];
    EXPECT_EQ(have.pos0, want.pos0);
    EXPECT_EQ(have.input, want.input);
    ASSERT_TRUE(have.sample && want.sample);
    EXPECT_EQ(have.sample->token, want.sample->token);
    EXPECT_EQ(have.token_text, want.token_text);
    ASSERT_FALSE(want.tensors.empty());
    ASSERT_EQ(have.tensors.size(), want.tensors.size()) << "step " << s;
    for (const auto& [name, t] : want.tensors) {
      ASSERT_TRUE(have.tensors.count(name)) << name;
      const Tensor& h = have.tensors.at(name);
      EXPECT_EQ(h.shape, t.shape) << name;
      EXPECT_EQ(h.storage, t.storage) << name;
      EXPECT_EQ(h.data, t.data) << name;
      EXPECT_EQ(h.half, t.half) << name;
    }
    EXPECT_TRUE(shell.tensors.empty());
    EXPECT_EQ(shell.pos0, want.pos0);
    EXPECT_EQ(shell.input, want.input);
    ASSERT_TRUE(shell.sample);
    EXPECT_EQ(shell.sample->token, want.sample->token);
  }
}

TEST(Session, RejectsBadPrompts) {
  Config c = small(false);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 2));
  SessionOptions o;
  o.steps = 4;
  Session s(m, nullptr, o);
  EXPECT_THROW(s.start({}), Error);
  EXPECT_THROW(s.start({1, 2, 3, 4, 5}), Error);
  EXPECT_THROW(s.start({1, 99}), Error);
  EXPECT_THROW(s.start({1}, {2, 3}), Error);
}

TEST(Session, RewindRedoesTheSameStepsAndForksWithNewSettings) {
  Config c = small(false);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 4, 0.3f));
  SessionOptions o;
  o.sampler = {1.0f, 0, 1.0f, 17};
  o.steps = 24;
  o.record = {"blocks.*.attn.pattern"};
  Session s(m, nullptr, o);
  s.start({1, 3});
  while (!s.done()) s.step();
  const std::vector<int> first = s.generated();
  const MatRM att = s.trace().attention(1, 0, int(s.trace().steps.size()) - 1);
  for (int k : {5, 0, 12}) {
    s.rewind(k);
    EXPECT_EQ(s.steps_done(), k);
    while (!s.done()) s.step();
    EXPECT_EQ(s.generated(), first) << "rewind to " << k;
    EXPECT_EQ(s.trace().attention(1, 0, int(s.trace().steps.size()) - 1), att);
  }
  // A fork with another seed from step 6 keeps steps 0..5 and (almost surely) differs later.
  s.rewind(6);
  s.set_sampler({1.0f, 0, 1.0f, 99});
  while (!s.done()) s.step();
  std::vector<int> fork = s.generated();
  EXPECT_TRUE(std::equal(first.begin(), first.begin() + 6, fork.begin()));
  EXPECT_NE(fork, first);
  EXPECT_THROW(s.rewind(1000), Error);
}
