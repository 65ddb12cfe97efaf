// The cost model of the KV cache (core/model/cost.h): its invariants, and a count of
// what the engine actually computes (rows it publishes, attention cells it does not
// mask, the sizes of the weight matrices it holds) on small models of every variant.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "helpers.h"
#include "model/cost.h"
#include "model/hooks.h"
#include "model/model.h"
#include "util/error.h"

namespace {

using ds::StepCost;
using ds::test::Variant;

ds::CostOptions with_source(const ds::Config& c, int S = 7) {
  ds::CostOptions o;
  o.src_len = c.encoder_decoder ? S : 0;
  return o;
}

// Without the cache the step at p redoes the work of the cached steps 0..p: the
// layers' multiply-adds are exactly their sum; the head (one row) and the weights read
// are the same either way.
TEST(Cost, NoCacheStepIsTheSumOfTheCachedSteps) {
  for (const Variant& v : ds::test::variants()) {
    SCOPED_TRACE(v.name);
    const ds::CostOptions o = with_source(v.cfg);
    double sum = 0;
    for (int p = 0; p < 40; ++p) {
      const StepCost a = ds::cached_step_cost(v.cfg, p, o), b = ds::uncached_step_cost(v.cfg, p, o);
      sum += a.layer_macs();
      EXPECT_EQ(b.layer_macs(), sum) << "p " << p;
      EXPECT_EQ(a.head_macs, b.head_macs);
      EXPECT_EQ(a.weight_bytes, b.weight_bytes);
      EXPECT_EQ(a.cross_bytes, b.cross_bytes);
      EXPECT_EQ(a.rows, 1);
      EXPECT_EQ(b.rows, p + 1);
      EXPECT_EQ(b.cache_bytes, 0);
    }
    // Position 0: one row either way.
    EXPECT_EQ(ds::cached_step_cost(v.cfg, 0, o).macs(), ds::uncached_step_cost(v.cfg, 0, o).macs());
  }
}

// With the cache a step grows linearly with its position (the attention over p + 1
// keys), without it quadratically; a whole generation quadratically and cubically.
TEST(Cost, LinearWithTheCacheQuadraticWithout) {
  for (const Variant& v : ds::test::variants()) {
    SCOPED_TRACE(v.name);
    const ds::Config& c = v.cfg;
    const ds::CostOptions o = with_source(c);
    auto cached = [&](int p) { return ds::cached_step_cost(c, p, o); };
    auto full = [&](int p) { return ds::uncached_step_cost(c, p, o); };
    // One more key from p to p + 1: a score and a mix, every head, on every layer but the
    // sliding-window layers whose window is full.
    auto growing = [&](int p) {
      int n = 0;
      for (int l = 0; l < c.n_layers; ++l) n += !c.sliding(l) || p + 2 <= c.sliding_window;
      return double(n);
    };
    auto slope = [&](int p) { return 2.0 * growing(p) * c.q_dim(); };
    // One more float32 key and value a layer that reads one more.
    auto kv_slope = [&](int p) { return 4.0 * growing(p) * 2 * c.kv_dim(); };
    EXPECT_EQ(cached(1).macs() - cached(0).macs(), slope(0));
    EXPECT_EQ(cached(1).cache_bytes - cached(0).cache_bytes, kv_slope(0));
    for (int p = 1; p < 60; ++p) {
      EXPECT_EQ(cached(p + 1).macs() - cached(p).macs(), slope(p));
      EXPECT_EQ(cached(p + 1).cache_bytes - cached(p).cache_bytes, kv_slope(p));
      const double d1 = full(p).macs() - full(p - 1).macs(), d2 = full(p + 1).macs() - full(p).macs();
      EXPECT_EQ(d2 - d1, slope(p)) << "p " << p;  // the second difference of a quadratic (linear past windows)
      EXPECT_GT(d1, 0);
    }
    // A generation: the ratio of the totals grows with its length.
    double last_ratio = 1;
    for (int n : {8, 16, 32, 64}) {
      const double r = ds::generation_cost(c, 1, n, false, o).macs() / ds::generation_cost(c, 1, n, true, o).macs();
      EXPECT_GT(r, last_ratio) << n;
      last_ratio = r;
    }
    // The prompt's step is the same prefill either way.
    EXPECT_EQ(ds::generation_cost(c, 5, 5, true, o).macs(), ds::generation_cost(c, 5, 5, false, o).macs());
  }
}

TEST(Cost, BytesPerWeightAndErrors) {
  const ds::Config c = ds::test::small_config(ds::test::Arch::Llama);
  ds::CostOptions half;
  half.bytes_per_weight = 2;
  EXPECT_EQ(ds::cached_step_cost(c, 9, half).weight_bytes * 2, ds::cached_step_cost(c, 9).weight_bytes);
  EXPECT_EQ(ds::cached_step_cost(c, 9, half).cache_bytes, ds::cached_step_cost(c, 9).cache_bytes);
  EXPECT_THROW(ds::cached_step_cost(c, -1), ds::Error);
  EXPECT_THROW(ds::encode_cost(c, 4), ds::Error);  // decoder-only
  EXPECT_THROW(ds::generation_cost(c, 0, 4, true), ds::Error);
  EXPECT_THROW(ds::encode_cost(ds::test::small_config(ds::test::Arch::EncDec), 0), ds::Error);
}

// GPT-2 small's matrices: its published 124,439,808 parameters less the position
// table (1024 x 768) and the biases and norm gains (9,984 a layer, 1,536 for ln_f).
TEST(Cost, Gpt2SmallReadsItsMatricesOnce) {
  const ds::Config c = ds::gpt2_config(768, 12, 12, 1024, 50257);
  const double matrices = 124439808.0 - 1024 * 768 - 12 * 9984 - 1536;
  EXPECT_EQ(ds::cached_step_cost(c, 0).weight_bytes, 4 * matrices);
  // One row of GPT-2 small touches each matrix element once: as many multiply-adds,
  // plus attention over the keys.
  EXPECT_EQ(ds::cached_step_cost(c, 0).macs(), matrices + 2.0 * 12 * 768);
}

// ---- the engine, counted

// What the engine computed in one call, from what it publishes and the weights it holds.
struct Counted {
  double macs = 0, weight_elems = 0, cache_keys = 0;
};

double size_of(const ds::Linear& l) { return l.W.size(); }

// Subscribes counters: rows of each projection and feed-forward times the size of
// the matrices the model actually holds, unmasked attention cells (finite scores)
// times d_head for the score and again for the mix, and the rows of logits times the
// head's size.
void count(ds::Engine& e, Counted& n, std::map<std::pair<int, int>, bool>& used) {
  const ds::Model& m = e.model();
  const ds::Config& c = m.cfg;
  auto rows = [](const ds::HookEvent& ev) { return double(ev.t.shape[0]); };
  auto block = [&](const ds::HookEvent& ev) -> const ds::Block& {
    return (ev.stack == ds::Stack::Encoder ? m.w.enc_blocks : m.w.blocks)[size_t(ev.layer)];
  };
  auto touch = [&](const ds::HookEvent& ev, int what, double elems) {
    if (!used[{int(ev.stack) * 1000 + ev.layer, what}]) n.weight_elems += elems;
    used[{int(ev.stack) * 1000 + ev.layer, what}] = true;
  };
  e.hooks().subscribe("**", [&, rows, block, touch](ds::HookEvent& ev) {
    using P = ds::Point;
    const ds::Block& b = ev.layer >= 0 ? block(ev) : m.w.blocks[0];
    double cells = 0;
    switch (ev.point) {
      case P::AttnQ: {
        const double w = size_of(b.attn.q) + size_of(b.attn.k) + size_of(b.attn.v) + size_of(b.attn.o);
        n.macs += rows(ev) * w;
        touch(ev, 0, w);
        break;
      }
      case P::CrossQ: {
        const double w = size_of(b.cross.q) + size_of(b.cross.o);
        n.macs += rows(ev) * w;
        touch(ev, 1, w);
        break;
      }
      case P::CrossK: {  // published by encode(): the source's keys and values
        const double w = size_of(b.cross.k) + size_of(b.cross.v);
        n.macs += rows(ev) * w;
        touch(ev, 2, w);
        break;
      }
      case P::MlpPre: {
        const double w = size_of(b.ffn.up) + size_of(b.ffn.down) + (c.gated() ? size_of(b.ffn.gate) : 0);
        n.macs += rows(ev) * w;
        touch(ev, 3, w);
        break;
      }
      case P::AttnScores:
      case P::CrossScores:
        for (int64_t i = 0; i < ev.t.size(); ++i) cells += std::isfinite(ev.t.data[i]) ? 1 : 0;
        n.macs += cells * c.d_head * 2;
        if (ev.point == P::AttnScores && ev.stack == ds::Stack::Decoder)  // the keys head 0 reads
          for (int64_t j = 0; j < ev.t.shape[2]; ++j) n.cache_keys += std::isfinite(ev.t.data[j]) ? 1 : 0;
        break;
      case P::Logits: {
        const double w = double(c.vocab_size) * c.d_model;
        n.macs += rows(ev) * w;
        touch(ev, 4, w);
        break;
      }
      default:
        break;
    }
  });
}

class CostCounted : public ::testing::TestWithParam<Variant> {};

TEST_P(CostCounted, EngineDoesWhatTheModelSays) {
  const Variant& v = GetParam();
  const ds::Config& c = v.cfg;
  auto model = ds::test::random_model(c, v.seed);
  const std::vector<int> src = {3, 4, 6, 7, 8, 9, 10};  // no padding: every source key is read
  const ds::CostOptions o = with_source(c, int(src.size()));
  std::vector<int> toks;
  for (int i = 0; i < 20; ++i) toks.push_back(3 + (i * 7) % (c.vocab_size - 3));

  ds::Engine e(model);
  Counted n;
  std::map<std::pair<int, int>, bool> used;
  count(e, n, used);
  if (c.encoder_decoder) {
    e.encode(src);
    const StepCost enc = ds::encode_cost(c, int(src.size()), o);
    EXPECT_EQ(n.macs, enc.macs());
    EXPECT_EQ(4 * n.weight_elems, enc.weight_bytes);
  }
  for (int p = 0; p < int(toks.size()); ++p) {
    SCOPED_TRACE("p " + std::to_string(p));
    // With the cache: the token at p alone.
    n = {};
    used.clear();
    e.forward(std::span<const int>(&toks[size_t(p)], 1));
    const StepCost a = ds::cached_step_cost(c, p, o);
    EXPECT_EQ(n.macs, a.macs());
    EXPECT_EQ(4 * n.weight_elems, a.weight_bytes);
    EXPECT_EQ(4 * n.cache_keys * 2 * c.kv_dim(), a.cache_bytes);
    // Without: every token up to p again, the last row's logits.
    ds::Engine f(model);
    Counted m;
    std::map<std::pair<int, int>, bool> fused;
    count(f, m, fused);
    if (c.encoder_decoder) f.encode(src);
    m = {};
    fused.clear();
    f.forward_full(std::span<const int>(toks.data(), size_t(p) + 1), false);
    const StepCost b = ds::uncached_step_cost(c, p, o);
    EXPECT_EQ(m.macs, b.macs());
    EXPECT_EQ(4 * m.weight_elems, b.weight_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CostCounted, ::testing::ValuesIn(ds::test::variants()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
