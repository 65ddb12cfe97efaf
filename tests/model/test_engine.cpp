// Engine tests: every configuration option checked against the naive reference in
// core/model/reference.cpp, the KV cache against the full forward pass, causality, the hook
// points (patterns, masks, interventions) and truncate.
//
// Tolerances:
//   cached vs full logits         max abs diff <= 1e-4
//   engine vs reference logits    max abs diff / max abs reference value <= 1e-4
//   causality, unsubscribe        max abs diff <= 1e-6
//   patterns vs reference         max abs diff <= 1e-4; rows sum to 1 within 1e-5
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "helpers.h"
#include "model/config.h"
#include "model/hooks.h"
#include "model/model.h"
#include "model/reference.h"
#include "model/weights.h"
#include "perf/memory.h"
#include "probe/interventions.h"
#include "util/error.h"

namespace {

using ds::test::Variant;
using ds::test::variants;

std::shared_ptr<const ds::Model> make_model(const Variant& v) {
  return std::make_shared<const ds::Model>(v.cfg, ds::Weights::random(v.cfg, v.seed));
}

std::vector<int> random_tokens(const ds::Config& cfg, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, cfg.vocab_size - 1);
  std::vector<int> t(static_cast<size_t>(n), 0);
  for (int& x : t) x = d(rng);
  return t;
}

// A source of 12 ids with pads in the middle and at the end; empty for decoder-only.
std::vector<int> make_source(const ds::Config& cfg, uint32_t seed = 99) {
  if (!cfg.encoder_decoder) return {};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, cfg.vocab_size - 1);
  std::vector<int> s(12);
  for (int& x : s) {
    do x = d(rng);
    while (x == cfg.pad_id);
  }
  for (int p : {4, 9, 10, 11}) s[size_t(p)] = cfg.pad_id;
  return s;
}

// Runs the encoder when the model has one.
void prepare(ds::Engine& e, const std::vector<int>& src) {
  if (e.config().encoder_decoder) e.encode(src);
}

template <class M>
double max_abs_diff(const M& a, const ds::MatRM& b) {
  EXPECT_EQ(a.rows(), b.rows());
  EXPECT_EQ(a.cols(), b.cols());
  if (a.rows() != b.rows() || a.cols() != b.cols()) return INFINITY;
  double m = 0.0;
  for (long i = 0; i < a.rows(); ++i)
    for (long j = 0; j < a.cols(); ++j) m = std::max(m, std::abs(double(a(i, j)) - double(b(i, j))));
  return m;
}

// max |engine - reference| / max |reference|.
template <class M>
double rel_err(const M& a, const ds::ref::Rows& r) {
  EXPECT_EQ(size_t(a.rows()), r.size());
  if (size_t(a.rows()) != r.size()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(size_t(a.cols()), r[i].size());
    if (size_t(a.cols()) != r[i].size()) return INFINITY;
    for (size_t j = 0; j < r[i].size(); ++j) {
      diff = std::max(diff, std::abs(double(a(long(i), long(j))) - r[i][j]));
      scale = std::max(scale, std::abs(r[i][j]));
    }
  }
  return diff / std::max(scale, 1e-12);
}

// A copy of one hook event.
struct Captured {
  ds::Stack stack;
  int layer;
  ds::Point point;
  int pos0;
  int rank;
  int shape[3];
  std::vector<float> data;
  float at(int a, int b, int c) const {
    return data[(size_t(a) * size_t(shape[1]) + size_t(b)) * size_t(shape[2]) + size_t(c)];
  }
  float at2(int a, int b) const { return data[size_t(a) * size_t(shape[1]) + size_t(b)]; }
};

ds::HookFn recorder(std::vector<Captured>& out) {
  return [&out](ds::HookEvent& e) {
    Captured c{e.stack, e.layer, e.point, e.pos0, e.t.rank, {e.t.shape[0], e.t.shape[1], e.t.shape[2]}, {}};
    c.data.assign(e.t.data, e.t.data + e.t.size());
    out.push_back(std::move(c));
  };
}

class EngineTest : public ::testing::TestWithParam<Variant> {};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) { return info.param.name; }

// ---------------------------------------------------------------------------------

TEST_P(EngineTest, CachedMatchesFull) {
  const Variant& v = GetParam();
  auto model = make_model(v);
  ds::Engine e(model);
  const auto src = make_source(v.cfg);
  const auto toks = random_tokens(v.cfg, 64, 1);
  prepare(e, src);
  ds::MatRM full = e.forward_full(toks);
  ASSERT_EQ(full.rows(), 64);
  ASSERT_EQ(full.cols(), v.cfg.vocab_size);
  EXPECT_EQ(e.pos(), 64);

  // One token at a time.
  e.reset();
  EXPECT_EQ(e.pos(), 0);
  ds::MatRM step(64, v.cfg.vocab_size);
  for (int i = 0; i < 64; ++i) {
    auto l = e.forward(std::span<const int>(&toks[size_t(i)], 1));
    ASSERT_EQ(l.rows(), 1);
    ASSERT_EQ(l.cols(), v.cfg.vocab_size);
    step.row(i) = l.row(0);
  }
  EXPECT_EQ(e.pos(), 64);
  EXPECT_LE(max_abs_diff(step, full), 1e-4);

  // In two chunks with all rows.
  e.reset();
  ds::MatRM chunked(64, v.cfg.vocab_size);
  {
    auto a = e.forward(std::span<const int>(toks.data(), 30), true);
    ASSERT_EQ(a.rows(), 30);
    chunked.topRows(30) = a;
    auto b = e.forward(std::span<const int>(toks.data() + 30, 34), true);
    ASSERT_EQ(b.rows(), 34);
    chunked.bottomRows(34) = b;
  }
  EXPECT_LE(max_abs_diff(chunked, full), 1e-4);

  // Last row only.
  e.reset();
  auto last = e.forward(toks, false);
  ASSERT_EQ(last.rows(), 1);
  ds::MatRM last_c = last;
  EXPECT_LE(max_abs_diff(last_c, ds::MatRM(full.bottomRows(1))), 1e-4);
}

TEST_P(EngineTest, MatchesReference) {
  const Variant& v = GetParam();
  auto model = make_model(v);
  ds::Engine e(model);
  const auto src = make_source(v.cfg);
  const auto toks = random_tokens(v.cfg, 64, 2);
  prepare(e, src);
  ds::MatRM full = e.forward_full(toks);
  const ds::ref::Rows r = ds::ref::logits(v.cfg, model->w, toks, src);
  EXPECT_LE(rel_err(full, r), 1e-4);

  // The cached path against the reference too.
  e.reset();
  ds::MatRM step(64, v.cfg.vocab_size);
  for (int i = 0; i < 64; ++i) step.row(i) = e.forward(std::span<const int>(&toks[size_t(i)], 1)).row(0);
  EXPECT_LE(rel_err(step, r), 1e-4);

  if (v.cfg.encoder_decoder) {
    // A different source changes the decoder's logits (cross-attention is wired).
    auto src2 = make_source(v.cfg, 1234);
    prepare(e, src2);
    ds::MatRM full2 = e.forward_full(toks);
    EXPECT_GT(max_abs_diff(full2, full), 1e-5);
    EXPECT_LE(rel_err(full2, ds::ref::logits(v.cfg, model->w, toks, src2)), 1e-4);
  }

  // The same weights stored in tiles (as loaded models are), at 1 and 2 threads:
  // the prefill packs from the tiles and the single steps read them, against the
  // reference computed from the row-major weights.
  ds::Weights pw = model->w;
  pw.to_tiles();
  auto tiled = std::make_shared<const ds::Model>(v.cfg, std::move(pw));
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " thread(s), tiles");
    ds::Engine ep(tiled);
    ep.set_threads(threads);
    prepare(ep, src);
    EXPECT_LE(rel_err(ds::MatRM(ep.forward_full(toks)), r), 1e-4);
    ep.reset();
    for (int i = 0; i < 64; ++i) step.row(i) = ep.forward(std::span<const int>(&toks[size_t(i)], 1)).row(0);
    EXPECT_LE(rel_err(step, r), 1e-4);
    ep.set_threads(1);  // Eigen's thread count is global: leave it as found
  }
}

TEST_P(EngineTest, ThreadsMatchSerial) {
  const Variant& v = GetParam();
  auto model = make_model(v);
  const auto src = make_source(v.cfg);
  const auto toks = random_tokens(v.cfg, 64, 8);
  ds::Engine serial(model), threaded(model);
  threaded.set_threads(2);
  EXPECT_EQ(threaded.threads(), 2);
  prepare(serial, src);
  prepare(threaded, src);
  const ds::MatRM a = serial.forward_full(toks);
  const ds::MatRM b = threaded.forward_full(toks);
  EXPECT_LE(max_abs_diff(b, a), 1e-5);
  threaded.reset();
  for (int i = 0; i < 64; ++i) {
    ds::MatRM row = threaded.forward(std::span<const int>(&toks[size_t(i)], 1));
    ASSERT_LE(max_abs_diff(row, ds::MatRM(a.row(i))), 1e-4) << "position " << i;
  }
  threaded.set_threads(1);  // Eigen's thread count is global: leave it as found
}

// A decode step applies GELU-tanh inside the product's threads, each over its own
// rows, unless a hook watches the pre-activations; then one pass follows the product.
// Both give the same bits, at 2 threads with 200 and 203 rows (203: 3 past the last
// multiple of 8, which the vector activation leaves to its scalar tail).
TEST_P(EngineTest, FusedActivationHasTheBitsOfTheSeparatePass) {
  const Variant& v = GetParam();
  if (v.cfg.ffn != ds::FFNKind::GELUTanh) GTEST_SKIP() << "this feed-forward's activation is always a separate pass";
  for (int dff : {200, 203}) {
    SCOPED_TRACE("d_ff " + std::to_string(dff));
    ds::Config cfg = v.cfg;
    cfg.d_ff = dff;
    auto model = std::make_shared<const ds::Model>(cfg, ds::Weights::random(cfg, v.seed));
    ds::Engine fused(model), separate(model);
    fused.set_threads(2);
    separate.set_threads(2);
    int seen = 0;
    separate.hooks().subscribe("**mlp.pre", [&seen](ds::HookEvent&) { ++seen; });
    const auto src = make_source(cfg);
    prepare(fused, src);
    prepare(separate, src);
    const auto toks = random_tokens(cfg, 16, 4);
    for (int i = 0; i < 16; ++i) {
      const std::span<const int> t(&toks[size_t(i)], 1);
      const ds::MatRM a = fused.forward(t), b = separate.forward(t);
      ASSERT_EQ(a.size(), b.size());
      for (long j = 0; j < a.size(); ++j)
        ASSERT_EQ(std::bit_cast<uint32_t>(a.data()[j]), std::bit_cast<uint32_t>(b.data()[j]))
            << "position " << i << ", logit " << j;
    }
    EXPECT_GE(seen, 16 * cfg.n_layers) << "the hook did not see the pre-activations";
    fused.set_threads(1);  // Eigen's thread count is global: leave it as found
    separate.set_threads(1);
  }
}

// n single-token decode steps of v's model at 1, 2 and 3 threads against the naive
// reference at every position.
void check_split_decode(const Variant& v, int n) {
  auto model = std::make_shared<const ds::Model>(v.cfg, ds::Weights::random(v.cfg, v.seed, 0.05f));
  const auto toks = random_tokens(v.cfg, n, 21);
  const ds::ref::Rows want = ds::ref::logits(v.cfg, model->w, toks);
  for (int threads : {1, 2, 3}) {
    ds::Engine e(model);
    e.set_threads(threads);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      ds::MatRM row = e.forward(std::span<const int>(&toks[size_t(i)], 1));
      for (int j = 0; j < v.cfg.vocab_size; ++j)
        worst = std::max(worst, std::abs(double(row(0, j)) - want[size_t(i)][size_t(j)]) /
                                    (1.0 + std::abs(want[size_t(i)][size_t(j)])));
    }
    EXPECT_LE(worst, 1e-4) << threads << " thread(s)";
    e.set_threads(1);  // Eigen's thread count is global: leave it as found
  }
}

// A long cache, past the point (32768 cached values per layer) where a decode step
// splits its keys across threads: each thread loads its range of keys and values
// during the q/k/v products, scores and mixes it, and the partial mixes are summed
// (3 threads: ranges that do not divide the cache evenly). Shorter caches are loaded
// by one thread. The GPT-2 and the grouped-query llama layouts, and the llama layout
// with one kv head ("mqa", every query head reading it), against the naive reference
// at every position.
TEST(EngineDecode, LongCacheSplitAcrossThreadsMatchesTheReference) {
  for (const Variant& base : variants()) {
    if (base.name != "gpt2" && base.name != "llama") continue;
    for (const bool mqa : {false, true}) {
      if (mqa && base.name != "llama") continue;
      SCOPED_TRACE(base.name + (mqa ? " with one kv head" : ""));
      Variant v = base;
      v.cfg.d_model = 256;
      v.cfg.n_heads = mqa ? 2 : 8;
      v.cfg.d_head = mqa ? 128 : 32;
      v.cfg.n_kv_heads = mqa ? 1 : base.name == "llama" ? 4 : 8;  // kv width 128 (one or grouped) or 256
      v.cfg.d_ff = 128;
      v.cfg.max_seq = 300;
      check_split_decode(v, v.cfg.n_kv_heads * v.cfg.d_head == 128 ? 290 : 160);  // past 32768 values a layer
    }
  }
}

// Observers do not change a step: at 2 threads, a decode step with its scores and
// patterns published has the bits of one without; and the published scores and
// patterns match those of 1 thread. 280 positions of kv width 128: the keys split
// across the threads from the 256th.
TEST(EngineDecode, ObserversKeepAThreadedStepsBits) {
  for (const Variant& base : variants()) {
    if (base.name != "llama") continue;
    Variant v = base;
    v.cfg.d_model = 256;
    v.cfg.n_heads = 8;
    v.cfg.d_head = 32;
    v.cfg.n_kv_heads = 4;
    v.cfg.max_seq = 300;
    auto model = std::make_shared<const ds::Model>(v.cfg, ds::Weights::random(v.cfg, v.seed, 0.05f));
    const int n = 280;
    const auto toks = random_tokens(v.cfg, n, 5);
    ds::Engine plain(model), watched(model), serial(model);
    plain.set_threads(2);
    watched.set_threads(2);
    std::vector<float> got, want;
    auto keep = [](std::vector<float>& into) {
      return [&into](ds::HookEvent& ev) { into.insert(into.end(), ev.t.data, ev.t.data + ev.t.size()); };
    };
    watched.hooks().subscribe("blocks.*.attn.scores", keep(got));
    watched.hooks().subscribe("blocks.*.attn.pattern", keep(got));
    serial.hooks().subscribe("blocks.*.attn.scores", keep(want));
    serial.hooks().subscribe("blocks.*.attn.pattern", keep(want));
    for (int i = 0; i < n; ++i) {
      const std::span<const int> t(&toks[size_t(i)], 1);
      const ds::MatRM a = plain.forward(t), b = watched.forward(t);
      serial.forward(t);
      for (long j = 0; j < a.size(); ++j)
        ASSERT_EQ(std::bit_cast<uint32_t>(a.data()[j]), std::bit_cast<uint32_t>(b.data()[j]))
            << "position " << i << ", logit " << j;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      if (std::isinf(want[k]))
        ASSERT_EQ(got[k], want[k]) << "value " << k;
      else
        ASSERT_NEAR(got[k], want[k], 1e-5 * (1.0 + std::abs(want[k]))) << "value " << k;
    }
    plain.set_threads(1);  // Eigen's thread count is global: leave it as found
    watched.set_threads(1);
  }
}

TEST_P(EngineTest, Causality) {
  const Variant& v = GetParam();
  auto model = make_model(v);
  ds::Engine e(model);
  const auto src = make_source(v.cfg);
  auto a = random_tokens(v.cfg, 40, 3);
  auto b = a;
  const int t = 17;
  for (size_t i = t + 1; i < b.size(); ++i) b[i] = (b[i] + 7) % v.cfg.vocab_size;
  prepare(e, src);
  ds::MatRM la = e.forward_full(a);
  ds::MatRM lb = e.forward_full(b);
  EXPECT_LE(max_abs_diff(ds::MatRM(la.topRows(t + 1)), ds::MatRM(lb.topRows(t + 1))), 1e-6);
  EXPECT_GT(max_abs_diff(ds::MatRM(la.bottomRows(1)), ds::MatRM(lb.bottomRows(1))), 1e-6);
}

TEST_P(EngineTest, PatternsAndMasks) {
  const Variant& v = GetParam();
  const ds::Config& cfg = v.cfg;
  auto model = make_model(v);
  ds::Engine e(model);
  const auto src = make_source(cfg);
  const auto toks = random_tokens(cfg, 24, 4);
  ds::ref::Recorded tr;
  ds::ref::logits(cfg, model->w, toks, src, -1, -1, &tr);

  std::vector<Captured> pat, mask, cpat, cmask, epat, emask;
  e.hooks().subscribe("blocks.*.attn.pattern", recorder(pat));
  e.hooks().subscribe("blocks.*.attn.mask", recorder(mask));
  if (cfg.encoder_decoder) {
    e.hooks().subscribe("blocks.*.cross_attn.pattern", recorder(cpat));
    e.hooks().subscribe("blocks.*.cross_attn.mask", recorder(cmask));
    e.hooks().subscribe("encoder.blocks.*.attn.pattern", recorder(epat));
    e.hooks().subscribe("encoder.blocks.*.attn.mask", recorder(emask));
  } else {
    EXPECT_THROW(e.hooks().subscribe("blocks.*.cross_attn.pattern", [](ds::HookEvent&) {}), ds::Error);
    EXPECT_THROW(e.hooks().subscribe("encoder.blocks.*.attn.pattern", [](ds::HookEvent&) {}), ds::Error);
  }
  EXPECT_FALSE(e.hooks().empty());

  const int H = cfg.n_heads;
  const int Ssrc = int(src.size());
  auto is_pad = [&](int j) { return cfg.pad_id >= 0 && src[size_t(j)] == cfg.pad_id; };

  // Checks a self-attention pattern event of the decoder: rows sum to 1, future keys
  // are exactly 0, and the values match the reference's rows pos0.. pos0+T-1.
  auto check_self = [&](const Captured& c, int n_total) {
    SCOPED_TRACE("decoder layer " + std::to_string(c.layer) + " pos0 " + std::to_string(c.pos0));
    ASSERT_EQ(c.rank, 3);
    ASSERT_EQ(c.shape[0], H);
    const int T = c.shape[1], S = c.shape[2];
    ASSERT_GE(S, c.pos0 + T);
    ASSERT_LE(c.pos0 + T, n_total);
    ASSERT_GE(c.layer, 0);
    ASSERT_LT(c.layer, cfg.n_layers);
    double worst = 0.0;
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const int qi = c.pos0 + t;
        double sum = 0.0;
        for (int j = 0; j < S; ++j) {
          const float p = c.at(h, t, j);
          sum += p;
          if (j > qi || j < cfg.first_key(c.layer, qi)) {
            EXPECT_EQ(p, 0.0f) << "future key or key before the sliding window " << j << " query " << qi << " head "
                               << h;
          } else {
            worst = std::max(worst, std::abs(double(p) - tr.self[size_t(c.layer)][size_t(h)][size_t(qi)][size_t(j)]));
          }
        }
        EXPECT_NEAR(sum, 1.0, 1e-5) << "head " << h << " query " << qi;
      }
    EXPECT_LE(worst, 1e-4);
  };
  auto check_self_mask = [&](const Captured& c) {
    ASSERT_EQ(c.rank, 2);
    const int T = c.shape[0], S = c.shape[1];
    ASSERT_GE(S, c.pos0 + T);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < S; ++j)
        EXPECT_EQ(c.at2(t, j), j <= c.pos0 + t && j >= cfg.first_key(c.layer, c.pos0 + t) ? 1.0f : 0.0f)
            << "query " << c.pos0 + t << " key " << j;
  };
  // Cross-attention (decoder queries over source keys) or encoder self-attention.
  auto check_src = [&](const Captured& c, const ds::ref::Patterns& refp, int row_offset, int n_layers) {
    SCOPED_TRACE(std::string(c.stack == ds::Stack::Encoder ? "encoder" : "cross") + " layer " +
                 std::to_string(c.layer));
    ASSERT_EQ(c.rank, 3);
    ASSERT_EQ(c.shape[0], H);
    ASSERT_EQ(c.shape[2], Ssrc);
    ASSERT_GE(c.layer, 0);
    ASSERT_LT(c.layer, n_layers);
    const int T = c.shape[1];
    double worst = 0.0;
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        double sum = 0.0;
        for (int j = 0; j < Ssrc; ++j) {
          const float p = c.at(h, t, j);
          sum += p;
          if (is_pad(j)) {
            EXPECT_EQ(p, 0.0f) << "padded key " << j;
          }
          worst = std::max(worst,
                           std::abs(double(p) - refp[size_t(c.layer)][size_t(h)][size_t(row_offset + t)][size_t(j)]));
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    EXPECT_LE(worst, 1e-4);
  };
  auto check_src_mask = [&](const Captured& c) {
    ASSERT_EQ(c.rank, 2);
    ASSERT_EQ(c.shape[1], Ssrc);
    for (int t = 0; t < c.shape[0]; ++t)
      for (int j = 0; j < Ssrc; ++j) EXPECT_EQ(c.at2(t, j), is_pad(j) ? 0.0f : 1.0f) << "key " << j;
  };

  // 1. Full forward.
  prepare(e, src);
  if (cfg.encoder_decoder) {
    ASSERT_EQ(epat.size(), size_t(cfg.n_enc_layers));
    ASSERT_EQ(emask.size(), size_t(cfg.n_enc_layers));
    for (const auto& c : epat) {
      EXPECT_EQ(c.stack, ds::Stack::Encoder);
      EXPECT_EQ(c.shape[1], Ssrc);
      check_src(c, tr.enc, 0, cfg.n_enc_layers);
    }
    for (const auto& c : emask) check_src_mask(c);
  }
  e.forward_full(toks);
  ASSERT_EQ(pat.size(), size_t(cfg.n_layers));
  ASSERT_EQ(mask.size(), size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    EXPECT_EQ(pat[size_t(l)].layer, l);
    EXPECT_EQ(pat[size_t(l)].pos0, 0);
    EXPECT_EQ(pat[size_t(l)].shape[1], 24);
    check_self(pat[size_t(l)], 24);
    check_self_mask(mask[size_t(l)]);
  }
  if (cfg.encoder_decoder) {
    ASSERT_EQ(cpat.size(), size_t(cfg.n_layers));
    ASSERT_EQ(cmask.size(), size_t(cfg.n_layers));
    for (const auto& c : cpat) {
      EXPECT_EQ(c.shape[1], 24);
      check_src(c, tr.cross, 0, cfg.n_layers);
    }
    for (const auto& c : cmask) check_src_mask(c);
  }

  // 2. Chunked: 10 rows, then 14 rows at pos0 = 10, then single tokens.
  for (auto* vec : {&pat, &mask, &cpat, &cmask, &epat, &emask}) vec->clear();
  e.reset();
  e.forward(std::span<const int>(toks.data(), 10), true);
  e.forward(std::span<const int>(toks.data() + 10, 10), true);
  for (int i = 20; i < 24; ++i) e.forward(std::span<const int>(&toks[size_t(i)], 1));
  ASSERT_EQ(pat.size(), size_t(cfg.n_layers) * 6);
  ASSERT_EQ(mask.size(), size_t(cfg.n_layers) * 6);
  for (const auto& c : pat) check_self(c, 24);
  for (const auto& c : mask) check_self_mask(c);
  EXPECT_EQ(pat[size_t(cfg.n_layers)].pos0, 10);
  EXPECT_EQ(pat.back().pos0, 23);
  EXPECT_EQ(pat.back().shape[1], 1);
  if (cfg.encoder_decoder) {
    EXPECT_TRUE(epat.empty()) << "the encoder runs only in encode()";
    ASSERT_EQ(cpat.size(), size_t(cfg.n_layers) * 6);
    for (const auto& c : cpat) check_src(c, tr.cross, c.pos0, cfg.n_layers);
    for (const auto& c : cmask) check_src_mask(c);
  }
}

TEST_P(EngineTest, Interventions) {
  const Variant& v = GetParam();
  const ds::Config& cfg = v.cfg;
  auto model = make_model(v);
  ds::Engine e(model);
  const auto src = make_source(cfg);
  const auto toks = random_tokens(cfg, 20, 5);
  prepare(e, src);
  const ds::MatRM orig = e.forward_full(toks);
  const ds::ref::Rows r0 = ds::ref::logits(cfg, model->w, toks, src);
  ASSERT_LE(rel_err(orig, r0), 1e-4);

  for (int l : {0, cfg.n_layers - 1})
    for (int h : {0, cfg.n_heads - 1}) {
      SCOPED_TRACE("zero_head layer " + std::to_string(l) + " head " + std::to_string(h));
      const ds::ref::Rows rz = ds::ref::logits(cfg, model->w, toks, src, l, h);
      const int hd = ds::zero_head(e.hooks(), l, h, cfg.d_head);
      ds::MatRM z = e.forward_full(toks);
      EXPECT_LE(rel_err(z, rz), 1e-4);
      EXPECT_GT(max_abs_diff(z, orig), 1e-5) << "zeroing a head changed nothing";
      // The cached path with the intervention active from the start.
      e.reset();
      ds::MatRM step(20, cfg.vocab_size);
      for (int i = 0; i < 20; ++i) step.row(i) = e.forward(std::span<const int>(&toks[size_t(i)], 1)).row(0);
      EXPECT_LE(rel_err(step, rz), 1e-4);
      e.hooks().unsubscribe(hd);
      // scale 0 is zeroing.
      const int hs = ds::scale_head(e.hooks(), l, h, cfg.d_head, 0.0f);
      EXPECT_LE(rel_err(e.forward_full(toks), rz), 1e-4);
      e.hooks().unsubscribe(hs);
    }
  EXPECT_TRUE(e.hooks().empty());

  {  // scale 1 changes nothing.
    const int hs = ds::scale_head(e.hooks(), cfg.n_layers - 1, 1, cfg.d_head, 1.0f);
    EXPECT_LE(max_abs_diff(e.forward_full(toks), orig), 1e-6);
    e.hooks().unsubscribe(hs);
  }
  {  // Overwriting resid_post of layer 0 changes the logits; unsubscribing restores them.
    int calls = 0;
    const int hd = e.hooks().subscribe("blocks.0.resid_post", [&calls](ds::HookEvent& ev) {
      ++calls;
      EXPECT_EQ(ev.t.rank, 2);
      std::fill(ev.t.data, ev.t.data + ev.t.size(), 0.0f);
    });
    ds::MatRM changed = e.forward_full(toks);
    EXPECT_EQ(calls, 1);
    EXPECT_GT(max_abs_diff(changed, orig), 1e-3);
    e.hooks().unsubscribe(hd);
    EXPECT_TRUE(e.hooks().empty());
    EXPECT_LE(max_abs_diff(e.forward_full(toks), orig), 1e-6);
  }
  {  // Observing without changing: logits identical, shapes as documented.
    std::vector<Captured> seen;
    const int hd = e.hooks().subscribe("**", recorder(seen));
    EXPECT_LE(max_abs_diff(e.forward_full(toks), orig), 1e-6);
    e.hooks().unsubscribe(hd);
    bool saw_logits = false, saw_embed = false;
    for (const auto& c : seen) {
      if (c.point == ds::Point::Logits) {
        saw_logits = true;
        EXPECT_EQ(c.shape[0], 20);
        EXPECT_EQ(c.shape[1], cfg.vocab_size);
        EXPECT_EQ(c.at2(19, 3), orig(19, 3));
      }
      if (c.point == ds::Point::Embed && c.stack == ds::Stack::Decoder) {
        saw_embed = true;
        EXPECT_EQ(c.shape[0], 20);
        EXPECT_EQ(c.shape[1], cfg.d_model);
      }
      if (c.point == ds::Point::AttnZ) {
        EXPECT_EQ(c.shape[1], cfg.n_heads * cfg.d_head);
      }
      if (c.point == ds::Point::MlpPre || c.point == ds::Point::MlpPost) {
        EXPECT_EQ(c.shape[1], cfg.d_ff);
      }
    }
    EXPECT_TRUE(saw_logits);
    EXPECT_TRUE(saw_embed);
  }
}

TEST_P(EngineTest, HookNames) {
  const Variant& v = GetParam();
  const ds::Config& cfg = v.cfg;
  const auto names = ds::Hooks::names(cfg);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("embed"));
  EXPECT_TRUE(has("logits"));
  EXPECT_TRUE(has("blocks.0.attn.pattern"));
  EXPECT_TRUE(has("blocks.0.attn.mask"));
  EXPECT_TRUE(has("blocks.0.resid_post"));
  EXPECT_TRUE(has("blocks." + std::to_string(cfg.n_layers - 1) + ".attn.z"));
  EXPECT_FALSE(has("blocks." + std::to_string(cfg.n_layers) + ".attn.z"));
  EXPECT_EQ(has("encoder.blocks.0.resid_post"), cfg.encoder_decoder);
  EXPECT_EQ(has("blocks.0.cross_attn.pattern"), cfg.encoder_decoder);
  // Unique, parseable and round-tripping.
  auto sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  for (const auto& n : names) {
    ds::Stack s;
    int layer;
    ds::Point p;
    ASSERT_TRUE(ds::Hooks::parse(n, s, layer, p)) << n;
    EXPECT_EQ(ds::Hooks::name(s, layer, p), n);
  }
  {
    ds::Stack s;
    int layer;
    ds::Point p;
    EXPECT_FALSE(ds::Hooks::parse("blocks.0.attn.nothing", s, layer, p));
    EXPECT_FALSE(ds::Hooks::parse("encoder.logits.x", s, layer, p));
    ASSERT_TRUE(ds::Hooks::parse("blocks.1.attn.pattern", s, layer, p));
    EXPECT_EQ(s, ds::Stack::Decoder);
    EXPECT_EQ(layer, 1);
    EXPECT_EQ(p, ds::Point::AttnPattern);
  }

  EXPECT_TRUE(ds::Hooks::matches("blocks.*.attn.pattern", "blocks.0.attn.pattern"));
  EXPECT_TRUE(ds::Hooks::matches("blocks.*.attn.pattern", "blocks.12.attn.pattern"));
  EXPECT_FALSE(ds::Hooks::matches("blocks.*.attn.pattern", "blocks.0.cross_attn.pattern"));
  EXPECT_FALSE(ds::Hooks::matches("blocks.*.attn.pattern", "encoder.blocks.0.attn.pattern"));
  EXPECT_FALSE(ds::Hooks::matches("blocks.*", "blocks.0.attn.pattern"));
  EXPECT_TRUE(ds::Hooks::matches("blocks.*.*.pattern", "blocks.1.cross_attn.pattern"));
  EXPECT_TRUE(ds::Hooks::matches("**pattern", "encoder.blocks.0.attn.pattern"));
  EXPECT_TRUE(ds::Hooks::matches("**", "logits"));
  EXPECT_TRUE(ds::Hooks::matches("logits", "logits"));
  EXPECT_FALSE(ds::Hooks::matches("logit", "logits"));

  ds::Hooks hooks(cfg);
  EXPECT_TRUE(hooks.empty());
  EXPECT_THROW(hooks.subscribe("nothing", [](ds::HookEvent&) {}), ds::Error);
  EXPECT_THROW(hooks.subscribe("blocks.*.attn.nothing", [](ds::HookEvent&) {}), ds::Error);
  EXPECT_THROW(hooks.subscribe("blocks." + std::to_string(cfg.n_layers) + ".attn.pattern", [](ds::HookEvent&) {}),
               ds::Error);
  EXPECT_TRUE(hooks.empty());
  const int h = hooks.subscribe("blocks.*.attn.pattern", [](ds::HookEvent&) {});
  EXPECT_FALSE(hooks.empty());
  EXPECT_TRUE(hooks.active(ds::Stack::Decoder, 0, ds::Point::AttnPattern));
  EXPECT_FALSE(hooks.active(ds::Stack::Decoder, 0, ds::Point::AttnScores));
  hooks.unsubscribe(h);
  EXPECT_TRUE(hooks.empty());
  EXPECT_FALSE(hooks.active(ds::Stack::Decoder, 0, ds::Point::AttnPattern));
}

TEST_P(EngineTest, Truncate) {
  const Variant& v = GetParam();
  auto model = make_model(v);
  ds::Engine e(model);
  const auto src = make_source(v.cfg);
  const auto toks = random_tokens(v.cfg, 50, 6);
  prepare(e, src);
  e.forward(std::span<const int>(toks.data(), 30), true);
  ds::MatRM first(50, v.cfg.vocab_size);
  for (int i = 30; i < 50; ++i) first.row(i) = e.forward(std::span<const int>(&toks[size_t(i)], 1)).row(0);
  EXPECT_EQ(e.pos(), 50);

  e.truncate(35);
  EXPECT_EQ(e.pos(), 35);
  for (int i = 35; i < 50; ++i) {
    ds::MatRM again = e.forward(std::span<const int>(&toks[size_t(i)], 1));
    for (int j = 0; j < v.cfg.vocab_size; ++j) ASSERT_EQ(again(0, j), first(i, j)) << "position " << i;
  }

  // Truncate then re-feed as one chunk; and a fork with different tokens then back.
  e.truncate(40);
  ds::MatRM chunk = e.forward(std::span<const int>(toks.data() + 40, 10), true);
  EXPECT_LE(max_abs_diff(chunk, ds::MatRM(first.bottomRows(10))), 1e-4);
  e.truncate(32);
  auto other = toks;
  for (int i = 32; i < 50; ++i) other[size_t(i)] = (other[size_t(i)] + 3) % v.cfg.vocab_size;
  e.forward(std::span<const int>(other.data() + 32, 18), true);
  e.truncate(30);
  for (int i = 30; i < 50; ++i) {
    ds::MatRM again = e.forward(std::span<const int>(&toks[size_t(i)], 1));
    for (int j = 0; j < v.cfg.vocab_size; ++j) ASSERT_EQ(again(0, j), first(i, j)) << "position " << i;
  }
  e.truncate(0);
  EXPECT_EQ(e.pos(), 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, EngineTest, ::testing::ValuesIn(variants()), variant_name);

// The reference itself: basic sanity that does not depend on the engine.
TEST(Reference, PatternsAreCausalAndNormalised) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    const ds::Weights w = ds::Weights::random(v.cfg, v.seed);
    const auto toks = random_tokens(v.cfg, 6, 7);
    const auto src = make_source(v.cfg);
    ds::ref::Recorded tr;
    const ds::ref::Rows l = ds::ref::logits(v.cfg, w, toks, src, -1, -1, &tr);
    ASSERT_EQ(l.size(), 6u);
    ASSERT_EQ(tr.self.size(), size_t(v.cfg.n_layers));
    for (const auto& layer : tr.self)
      for (const auto& head : layer)
        for (size_t i = 0; i < head.size(); ++i) {
          double s = 0.0;
          for (size_t j = 0; j < head[i].size(); ++j) {
            s += head[i][j];
            if (j > i) {
              EXPECT_EQ(head[i][j], 0.0);
            }
          }
          EXPECT_NEAR(s, 1.0, 1e-12);
        }
    // Prefix property: logits of a prefix equal the first rows of the longer run.
    const auto shorter = std::vector<int>(toks.begin(), toks.begin() + 3);
    const ds::ref::Rows ls = ds::ref::logits(v.cfg, w, shorter, src);
    for (size_t i = 0; i < 3; ++i)
      for (size_t j = 0; j < ls[i].size(); ++j) EXPECT_NEAR(ls[i][j], l[i][j], 1e-12);
  }
}

// The bench's products-only step (Engine::decode_products) runs on every architecture
// (the sanitizer build checks its buffers) and ends with the head's product of its
// constant input, compared here with a double loop over the head's rows.
TEST(Engine, DecodeProductsEndWithTheHeadOfTheirInput) {
  using ds::test::Arch;
  for (Arch a : {Arch::GPT2, Arch::Llama, Arch::PostNorm, Arch::EncDec}) {
    const ds::Config cfg = ds::test::small_config(a);
    const auto m = ds::test::random_model(cfg, 11);
    for (int threads : {1, 2}) {
      ds::Engine e(m);
      e.set_threads(threads);
      std::vector<float> buf;
      const std::span<const float> logits = e.decode_products(buf);
      ASSERT_EQ(logits.size(), size_t(cfg.vocab_size));
      const ds::MatView head = m->w.head_view();
      std::vector<float> row(size_t(cfg.d_model));
      for (int r = 0; r < cfg.vocab_size; ++r) {
        head.row(r, row.data());
        double want = 0;
        for (float v : row) want += double(v) * ds::Engine::kDecodeProductsInput;
        EXPECT_NEAR(logits[size_t(r)], want, 1e-5) << "arch " << int(a) << " threads " << threads << " row " << r;
      }
    }
  }
}

}  // namespace

// A decode step writes one key and one value row per layer into pages of the cache
// that no step has written yet; the engine maps them ahead in one call, so the steps
// take no page fault there. Rows of 4 KB here: without that, every step would fault
// in four fresh pages (two layers, keys and values).
TEST(Engine, DecodeStepsTakeNoPageFaultsInTheCache) {
  {
    auto probe = ds::allocate_weight_block(size_t(2) << 20);
    if (!ds::populate_for_write(probe.get(), size_t(2) << 20))
      GTEST_SKIP() << "this kernel cannot map pages ahead (MADV_POPULATE_WRITE)";
  }
  ds::Config c = ds::test::small_config(ds::test::Arch::Llama, 50);
  c.d_model = 64, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 8, c.d_head = 128, c.d_ff = 96, c.max_seq = 400;
  auto model = std::make_shared<const ds::Model>(c, ds::Weights::random(c, 5));
  ds::Engine e(model);
  std::vector<int> toks(80);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = int((i * 11 + 2) % 50);
  e.forward(std::span<const int>(toks.data(), 8));
  for (int i = 8; i < 12; ++i) e.forward(std::span<const int>(&toks[size_t(i)], 1));  // scratch sized
  auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    return long(u.ru_minflt);
  };
  const long before = faults();
  for (int i = 12; i < 72; ++i) e.forward(std::span<const int>(&toks[size_t(i)], 1));
  const long n = faults() - before;
  // AddressSanitizer maps its own shadow pages as the steps touch memory (about 30 faults
  // here); without the mapping ahead the steps take 240.
#ifdef DS_TEST_ASAN
  const long limit = 120;
#else
  const long limit = 20;
#endif
  EXPECT_LT(n, limit) << "page faults in 60 decode steps whose cache rows are 4 KB each";
}
