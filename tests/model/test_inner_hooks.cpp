// The hook points inside a block: each norm's output (ln1/ln2/ln3.normalized), the
// queries, keys and values per head (attn.q/k/v, cross_attn.q/k/v) and each
// sub-layer's output before the residual add (attn_out, cross_attn_out, mlp_out), and
// the residual stream between the sub-layers (resid_pre, resid_mid, resid_mid_cross,
// resid_post). Every one is held to the naive reference (core/model/reference.cpp), in both stacks
// of every variant the engine supports, for a prefill and for single cached steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "model/hooks.h"
#include "model/model.h"
#include "model/reference.h"
#include "probe/trace.h"
#include "session/session.h"
#include "util/error.h"

namespace {

using ds::Point;
using ds::Stack;
using ds::test::Variant;

// The points this file is about.
const Point kInner[] = {Point::Ln1Normalized, Point::AttnQ,         Point::AttnK,         Point::AttnV,
                        Point::AttnOut,       Point::Ln2Normalized, Point::CrossQ,        Point::CrossK,
                        Point::CrossV,        Point::CrossAttnOut,  Point::Ln3Normalized, Point::MlpOut};

bool inner(Point p) { return std::find(std::begin(kInner), std::end(kInner), p) != std::end(kInner); }

// The residual stream between the sub-layers, held to the reference the same way.
const Point kResid[] = {Point::ResidPre, Point::ResidMid, Point::ResidMidCross, Point::ResidPost};

bool resid(Point p) { return std::find(std::begin(kResid), std::end(kResid), p) != std::end(kResid); }
bool checked(Point p) { return inner(p) || resid(p); }

// The reference's rows for a hook point: [positions][width] (cross k and v: [S][width]).
const ds::ref::Rows& expected(const ds::ref::Recorded& rec, Stack s, int layer, Point p) {
  const ds::ref::BlockRecord& b = (s == Stack::Encoder ? rec.enc_blocks : rec.blocks).at(size_t(layer));
  switch (p) {
    case Point::Ln1Normalized:
      return b.ln1;
    case Point::Ln2Normalized:
      return b.ln2;
    case Point::Ln3Normalized:
      return b.ln3;
    case Point::AttnQ:
      return b.attn.q;
    case Point::AttnK:
      return b.attn.k;
    case Point::AttnV:
      return b.attn.v;
    case Point::CrossQ:
      return b.cross.q;
    case Point::CrossK:
      return b.cross.k;
    case Point::CrossV:
      return b.cross.v;
    case Point::AttnOut:
      return b.attn_out;
    case Point::CrossAttnOut:
      return b.cross_attn_out;
    case Point::MlpOut:
      return b.mlp_out;
    case Point::ResidPre:
      return b.resid_pre;
    case Point::ResidMid:
      return b.resid_mid;
    case Point::ResidMidCross:
      return b.resid_mid_cross;
    case Point::ResidPost:
      return b.resid_post;
    default:
      throw ds::Error("not an inner point");
  }
}

// The shape a point publishes for T rows (S source positions), per model/hooks.h.
std::vector<int> shape_of(const ds::Config& c, Point p, int T, int S) {
  switch (p) {
    case Point::AttnQ:
    case Point::CrossQ:
      return {T, c.n_heads, c.d_head};
    case Point::AttnK:
    case Point::AttnV:
      return {T, c.n_kv_heads, c.d_head};
    case Point::CrossK:
    case Point::CrossV:
      return {S, c.n_kv_heads, c.d_head};
    default:
      return {T, c.d_model};
  }
}

struct Event {
  int pos0;
  std::vector<int> shape;
  std::vector<float> data;
};
using Events = std::map<std::string, std::vector<Event>>;  // hook name -> every call, in order

// Subscribes to every point and keeps what the inner and residual ones publish.
int capture(ds::Engine& e, Events& ev) {
  return e.hooks().subscribe("**", [&ev](ds::HookEvent& h) {
    if (!checked(h.point)) return;
    ev[ds::Hooks::name(h.stack, h.layer, h.point)].push_back({h.pos0, std::vector<int>(h.t.shape, h.t.shape + h.t.rank),
                                                              std::vector<float>(h.t.data, h.t.data + h.t.size())});
  });
}

std::vector<int> random_ids(const ds::Config& c, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, c.vocab_size - 1);
  std::vector<int> ids(size_t(n), 0);
  for (int& x : ids) {
    do x = d(rng);
    while (x == c.pad_id);
  }
  return ids;
}

// A source of 9 ids, the 4th and the last padded; empty for decoder-only models.
std::vector<int> source_of(const ds::Config& c) {
  if (!c.encoder_decoder) return {};
  std::vector<int> s = random_ids(c, 9, 7);
  if (c.pad_id >= 0) s[3] = s[8] = c.pad_id;
  return s;
}

// Every event of every inner point of the model against the reference: the shape the
// header promises, rows at absolute positions pos0.., each position exactly once, and
// the values within 1e-4 of the reference's largest magnitude for that point.
void check_events(const Variant& v, const Events& ev, const ds::ref::Recorded& rec, int T, int S) {
  const ds::Config& c = v.cfg;
  for (const std::string& name : ds::Hooks::names(c)) {
    Stack s;
    int layer;
    Point p;
    ASSERT_TRUE(ds::Hooks::parse(name, s, layer, p));
    if (!checked(p)) continue;
    SCOPED_TRACE(name);
    auto it = ev.find(name);
    ASSERT_NE(it, ev.end()) << "never published";
    const ds::ref::Rows& want = expected(rec, s, layer, p);
    const bool source_rows = s == Stack::Encoder || p == Point::CrossK || p == Point::CrossV;
    ASSERT_EQ(int(want.size()), source_rows ? S : T);
    double scale = 1e-6;
    for (const auto& row : want)
      for (double x : row) scale = std::max(scale, std::abs(x));
    std::vector<int> seen(want.size(), 0);
    for (const Event& e : it->second) {
      const int rows = e.shape.at(0);
      EXPECT_EQ(e.shape, shape_of(c, p, rows, S));
      if (source_rows) {
        EXPECT_EQ(e.pos0, 0);
      }
      const size_t width = e.data.size() / size_t(rows);
      for (int r = 0; r < rows; ++r) {
        const int pos = e.pos0 + r;
        ASSERT_LT(pos, int(want.size()));
        ++seen[size_t(pos)];
        ASSERT_EQ(want[size_t(pos)].size(), width);
        double err = 0;
        for (size_t j = 0; j < width; ++j)
          err = std::max(err, std::abs(double(e.data[size_t(r) * width + j]) - want[size_t(pos)][j]));
        EXPECT_LE(err / scale, 1e-4) << "position " << pos;
      }
    }
    for (size_t pos = 0; pos < seen.size(); ++pos) EXPECT_EQ(seen[pos], 1) << "position " << pos;
  }
}

class InnerHooks : public ::testing::TestWithParam<Variant> {};

// The whole sequence in one call: every row of every inner point.
TEST_P(InnerHooks, PrefillEqualsTheReference) {
  const Variant& v = GetParam();
  auto m = ds::test::random_model(v.cfg, v.seed);
  const std::vector<int> toks = random_ids(v.cfg, 11, 3), src = source_of(v.cfg);
  ds::ref::Recorded rec;
  ds::ref::logits(v.cfg, m->w, toks, src, -1, -1, &rec);
  ds::Engine e(m);
  Events ev;
  capture(e, ev);
  if (v.cfg.encoder_decoder) e.encode(src);
  e.forward(toks, true);
  check_events(v, ev, rec, int(toks.size()), int(src.size()));
}

// A short prefill, then one token a call through the KV cache: each call publishes
// only its own rows (pos0 = the position of its first row).
TEST_P(InnerHooks, CachedStepsPublishTheirOwnRows) {
  const Variant& v = GetParam();
  auto m = ds::test::random_model(v.cfg, v.seed);
  const std::vector<int> toks = random_ids(v.cfg, 11, 4), src = source_of(v.cfg);
  ds::ref::Recorded rec;
  ds::ref::logits(v.cfg, m->w, toks, src, -1, -1, &rec);
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ds::Engine e(m);
    e.set_threads(threads);
    Events ev;
    capture(e, ev);
    if (v.cfg.encoder_decoder) e.encode(src);
    e.forward(std::span<const int>(toks.data(), 3));
    for (size_t i = 3; i < toks.size(); ++i) e.forward(std::span<const int>(&toks[i], 1));
    check_events(v, ev, rec, int(toks.size()), int(src.size()));
    // The decoder's self-attention points: one call for the prefill, then one a step.
    EXPECT_EQ(ev.at("blocks.0.attn.q").size(), toks.size() - 2);
    EXPECT_EQ(ev.at("blocks.0.attn.k").back().pos0, int(toks.size()) - 1);
  }
}

// The residual stream between cross-attention and the feed-forward, in the engine's own
// events: pre-norm, resid_mid_cross = resid_mid + cross_attn_out (the residual add);
// post-norm, it is the Add & Norm's output, ln2.normalized. Decoder-only models have none.
TEST_P(InnerHooks, ResidMidCrossIsTheResidualAfterCrossAttention) {
  const Variant& v = GetParam();
  auto m = ds::test::random_model(v.cfg, v.seed);
  const std::vector<int> toks = random_ids(v.cfg, 7, 5), src = source_of(v.cfg);
  ds::Engine e(m);
  Events ev;
  capture(e, ev);
  if (v.cfg.encoder_decoder) e.encode(src);
  e.forward(toks, true);
  const bool pre = v.cfg.norm_place == ds::NormPlace::Pre;
  int compared = 0;
  for (int l = 0; l < v.cfg.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    if (!v.cfg.encoder_decoder) {
      EXPECT_EQ(ev.count(b + "resid_mid_cross"), 0u);
      continue;
    }
    const std::vector<float>& got = ev.at(b + "resid_mid_cross").at(0).data;
    const std::vector<float>& mid = ev.at(b + "resid_mid").at(0).data;
    const std::vector<float>& out = ev.at(b + "cross_attn_out").at(0).data;
    const std::vector<float>& ln2 = ev.at(b + "ln2.normalized").at(0).data;
    ASSERT_EQ(got.size(), toks.size() * size_t(v.cfg.d_model));
    ASSERT_EQ(mid.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i, ++compared) {
      if (pre) {
        EXPECT_NEAR(got[i], mid[i] + out[i], 1e-5f * (1 + std::abs(got[i]))) << b << " element " << i;
      } else {
        EXPECT_EQ(got[i], ln2[i]) << b << " element " << i;
      }
    }
  }
  if (v.cfg.encoder_decoder) {
    EXPECT_GT(compared, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, InnerHooks, ::testing::ValuesIn(ds::test::variants()),
                         [](const auto& info) { return info.param.name; });

// ---- names

TEST(InnerHookNames, BothSpellings) {
  const std::pair<const char*, const char*> pairs[] = {
      {"blocks.0.ln1.normalized", "blocks.0.ln1.hook_normalized"},
      {"blocks.1.ln2.normalized", "blocks.1.ln2.hook_normalized"},
      {"blocks.0.ln3.normalized", "blocks.0.ln3.hook_normalized"},
      {"blocks.0.attn.q", "blocks.0.attn.hook_q"},
      {"blocks.1.attn.k", "blocks.1.attn.hook_k"},
      {"blocks.0.attn.v", "blocks.0.attn.hook_v"},
      {"blocks.0.cross_attn.q", "blocks.0.cross_attn.hook_q"},
      {"blocks.0.cross_attn.k", "blocks.0.cross_attn.hook_k"},
      {"blocks.1.cross_attn.v", "blocks.1.cross_attn.hook_v"},
      {"blocks.0.attn_out", "blocks.0.hook_attn_out"},
      {"blocks.0.cross_attn_out", "blocks.0.hook_cross_attn_out"},
      {"blocks.1.mlp_out", "blocks.1.hook_mlp_out"},
      {"encoder.blocks.0.attn.q", "encoder.blocks.0.attn.hook_q"},
      {"encoder.blocks.1.ln3.normalized", "encoder.blocks.1.ln3.hook_normalized"},
  };
  for (auto [ours, theirs] : pairs) {
    EXPECT_EQ(ds::Hooks::transformerlens_name(ours), theirs);
    Stack s1, s2;
    int l1, l2;
    Point p1, p2;
    ASSERT_TRUE(ds::Hooks::parse(ours, s1, l1, p1)) << ours;
    ASSERT_TRUE(ds::Hooks::parse(theirs, s2, l2, p2)) << theirs;
    EXPECT_EQ(s1, s2);
    EXPECT_EQ(l1, l2);
    EXPECT_EQ(p1, p2);
    EXPECT_TRUE(inner(p1)) << ours;
    EXPECT_EQ(ds::Hooks::name(s1, l1, p1), ours);
    EXPECT_TRUE(ds::Hooks::matches(theirs, ours));
  }
  EXPECT_EQ(ds::Hooks::transformerlens_name("ln_final"), "ln_final.hook_normalized");  // unchanged
  Stack s;
  int l;
  Point p;
  EXPECT_FALSE(ds::Hooks::parse("encoder.blocks.0.cross_attn.k", s, l, p));  // the encoder has no cross-attention
  EXPECT_FALSE(ds::Hooks::parse("encoder.blocks.0.ln2.normalized", s, l, p));
  EXPECT_FALSE(ds::Hooks::parse("ln1.normalized", s, l, p));   // a block point needs its block
  EXPECT_FALSE(ds::Hooks::parse("blocks.0.hook_q", s, l, p));  // q is under attn.
  EXPECT_FALSE(ds::Hooks::matches("blocks.*.attn.q", "blocks.0.cross_attn.q"));
}

// Which model has which: ln2 and cross_attn.* only in decoder blocks of
// encoder-decoder models; everything else in every block of both stacks.
TEST(InnerHookNames, ListedForTheBlocksThatHaveThem) {
  for (const Variant& v : ds::test::variants()) {
    SCOPED_TRACE(v.name);
    const auto names = ds::Hooks::names(v.cfg);
    const std::set<std::string> all(names.begin(), names.end());
    EXPECT_EQ(all.size(), names.size());
    for (int l = 0; l < v.cfg.n_layers; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      for (const char* n : {"ln1.normalized", "ln3.normalized", "attn.q", "attn.k", "attn.v", "attn_out", "mlp_out"})
        EXPECT_TRUE(all.count(b + n)) << b + n;
      for (const char* n : {"ln2.normalized", "cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn_out"})
        EXPECT_EQ(all.count(b + n), v.cfg.encoder_decoder ? 1u : 0u) << b + n;
    }
    for (int l = 0; l < v.cfg.n_enc_layers; ++l) {
      const std::string b = "encoder.blocks." + std::to_string(l) + ".";
      EXPECT_TRUE(all.count(b + "ln1.normalized") && all.count(b + "attn.v") && all.count(b + "mlp_out"));
      EXPECT_FALSE(all.count(b + "ln2.normalized") || all.count(b + "cross_attn.k"));
    }
  }
}

// ---- interventions

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a)
    if (std::isfinite(x)) m = std::max(m, double(std::abs(x)));
  return m;
}

// Changing q acts before the scores: zero queries give zero scores on every key a row
// may read. Zeroing a sub-layer's output leaves the residual stream as it was.
TEST(InnerHookInterventions, TakeEffectDownstream) {
  const Variant v = ds::test::variants()[0];  // GPT-2: pre-norm
  auto m = ds::test::random_model(v.cfg, v.seed);
  const std::vector<int> toks = random_ids(v.cfg, 6, 5);
  ds::Engine e(m);
  auto zero = [](ds::HookEvent& ev) { std::fill(ev.t.data, ev.t.data + ev.t.size(), 0.0f); };
  std::map<std::string, std::vector<float>> seen;
  auto keep = [&seen](ds::HookEvent& ev) {
    seen[ds::Hooks::name(ev.stack, ev.layer, ev.point)].assign(ev.t.data, ev.t.data + ev.t.size());
  };
  e.hooks().subscribe("blocks.0.attn.q", zero);
  e.hooks().subscribe("blocks.1.attn_out", zero);
  e.hooks().subscribe("blocks.0.mlp_out", zero);
  for (const char* p : {"blocks.*.attn.scores", "blocks.*.resid_pre", "blocks.*.resid_mid", "blocks.*.resid_post"})
    e.hooks().subscribe(p, keep);
  e.forward(toks, true);
  EXPECT_EQ(max_abs(seen.at("blocks.0.attn.scores")), 0.0);
  EXPECT_GT(max_abs(seen.at("blocks.1.attn.scores")), 0.0);
  EXPECT_EQ(seen.at("blocks.1.resid_mid"), seen.at("blocks.1.resid_pre"));
  EXPECT_EQ(seen.at("blocks.0.resid_post"), seen.at("blocks.0.resid_mid"));
  EXPECT_NE(seen.at("blocks.1.resid_post"), seen.at("blocks.1.resid_mid"));
}

// Changing the cached keys a step publishes (attn.k) changes what later steps read:
// the key row written at position 1 is the one the next step's scores use.
TEST(InnerHookInterventions, ChangedKeysStayInTheCache) {
  const Variant v = ds::test::variants()[1];  // llama: rotary, GQA
  auto m = ds::test::random_model(v.cfg, v.seed);
  const std::vector<int> toks = random_ids(v.cfg, 3, 6);
  ds::Engine e(m);
  std::vector<float> scores;
  const int zk = e.hooks().subscribe("blocks.0.attn.k", [](ds::HookEvent& ev) {
    if (ev.pos0 == 1) std::fill(ev.t.data, ev.t.data + ev.t.size(), 0.0f);
  });
  e.hooks().subscribe("blocks.0.attn.scores",
                      [&](ds::HookEvent& ev) { scores.assign(ev.t.data, ev.t.data + ev.t.size()); });
  e.forward(std::span<const int>(toks.data(), 1));
  e.forward(std::span<const int>(toks.data() + 1, 1));
  e.hooks().unsubscribe(zk);
  e.forward(std::span<const int>(toks.data() + 2, 1));
  // Step 3's scores [H, 1, 3]: key 1 (zeroed) scores 0 for every head, key 0 does not.
  ASSERT_EQ(scores.size(), size_t(v.cfg.n_heads) * 3);
  for (int h = 0; h < v.cfg.n_heads; ++h) {
    EXPECT_EQ(scores[size_t(h) * 3 + 1], 0.0f) << "head " << h;
    EXPECT_NE(scores[size_t(h) * 3 + 0], 0.0f) << "head " << h;
  }
}

// ---- the trace

// A session recording the inner points: each step holds its own rows (shape per the
// header), the source's cross-attention keys and values sit with the encoder's
// tensors, and JSON gives all of it back.
TEST(InnerHookTrace, RecordsAndRoundTrips) {
  for (const Variant& v : ds::test::variants()) {
    if (v.name != "llama" && v.name != "encdec_original") continue;
    for (bool compact : {false, true}) {
      SCOPED_TRACE(v.name + (compact ? " compact" : " full"));
      auto m = ds::test::random_model(v.cfg, v.seed);
      ds::SessionOptions o;
      o.sampler.temperature = 0;
      o.steps = 8;
      o.trace_options.compact = compact;
      o.record = {"**.ln1.hook_normalized", "blocks.*.attn.q", "blocks.*.attn.k", "**.attn.v",
                  "blocks.*.hook_attn_out", "blocks.*.mlp_out"};
      if (v.cfg.encoder_decoder)
        o.record.insert(o.record.end(),
                        {"blocks.*.ln2.normalized", "blocks.*.cross_attn.*", "blocks.*.cross_attn_out"});
      ds::Session s(m, nullptr, o);
      const std::vector<int> src = source_of(v.cfg), prompt = {1, 4, 9};
      s.start(prompt, src);
      while (!s.done()) s.step();
      const ds::Trace& t = s.trace();
      ASSERT_EQ(t.steps.size(), 6u);
      const ds::Config& c = v.cfg;
      for (const ds::TraceStep& st : t.steps) {
        const int T = int(st.input.size());
        EXPECT_EQ(st.tensors.at("blocks.1.attn.q").shape, (std::vector<int>{T, c.n_heads, c.d_head}));
        EXPECT_EQ(st.tensors.at("blocks.0.attn.v").shape, (std::vector<int>{T, c.n_kv_heads, c.d_head}));
        EXPECT_EQ(st.tensors.at("blocks.0.ln1.normalized").shape, (std::vector<int>{T, c.d_model}));
        EXPECT_EQ(st.tensors.count("blocks.0.cross_attn.k"), 0u);
        if (c.encoder_decoder) {
          EXPECT_EQ(st.tensors.at("blocks.1.cross_attn.q").shape[0], T);
        }
      }
      if (c.encoder_decoder) {
        const int S = int(src.size());
        EXPECT_EQ(t.encoder.at("blocks.1.cross_attn.k").shape, (std::vector<int>{S, c.n_kv_heads, c.d_head}));
        EXPECT_EQ(t.encoder.at("encoder.blocks.0.ln1.normalized").shape, (std::vector<int>{S, c.d_model}));
        // The recorded keys are the reference's (float16 in a compact trace).
        ds::ref::Recorded rec;
        ds::ref::logits(c, m->w, t.tokens(), src, -1, -1, &rec);
        const ds::Tensor& k = t.encoder.at("blocks.1.cross_attn.k");
        for (int64_t i = 0; i < k.size(); ++i) {
          const double want = rec.blocks[1].cross.k[size_t(i / c.kv_dim())][size_t(i % c.kv_dim())];
          ASSERT_NEAR(k.at(i), want, compact ? 2e-3 * (1 + std::abs(want)) : 1e-4) << i;
        }
      }
      std::stringstream json;
      t.write_json(json);
      const ds::Trace back = ds::Trace::read_json(json);
      auto same = [](const std::map<std::string, ds::Tensor>& a, const std::map<std::string, ds::Tensor>& b) {
        ASSERT_EQ(a.size(), b.size());
        for (const auto& [name, x] : a) {
          const ds::Tensor& y = b.at(name);
          ASSERT_EQ(x.shape, y.shape) << name;
          for (int64_t i = 0; i < x.size(); ++i) ASSERT_EQ(x.at(i), y.at(i)) << name << " value " << i;
        }
      };
      same(t.encoder, back.encoder);
      ASSERT_EQ(back.steps.size(), t.steps.size());
      for (size_t i = 0; i < t.steps.size(); ++i) same(t.steps[i].tensors, back.steps[i].tensors);
    }
  }
}

// Nothing new by default: the window's patterns record none of these points.
TEST(InnerHookTrace, NotInTheDefaultRecording) {
  for (const Variant& v : ds::test::variants())
    for (const std::string& pat : ds::default_record_patterns(v.cfg))
      for (const std::string& n : ds::Hooks::names(v.cfg)) {
        Stack s;
        int l;
        Point p;
        ASSERT_TRUE(ds::Hooks::parse(n, s, l, p));
        if (inner(p)) {
          EXPECT_FALSE(ds::Hooks::matches(pat, n)) << pat << " records " << n;
        }
      }
}

}  // namespace
