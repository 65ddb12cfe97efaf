// The logit lens (core/probe/lens.h): the last layer's lens is the model's own
// next-token distribution; the lens equals a naive double-precision final norm and
// head computed here from the weights; the trace records it, keeps it through JSON
// and compact storage; bad input ends in ds::Error; and `decoderscope-cli lens`.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "helpers.h"
#include "model/model.h"
#include "probe/lens.h"
#include "probe/trace.h"
#include "session/session.h"
#include "text/char_tokenizer.h"
#include "util/error.h"

using namespace ds;

namespace {

using ds::test::Arch;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::GPT2:
      return "GPT-like (LayerNorm, tied head)";
    case Arch::Llama:
      return "llama-like (RMSNorm, separate head)";
    case Arch::PostNorm:
      return "post-norm, no final norm";
    default:
      return "encoder-decoder";
  }
}

// Three layers (the shared small configs have two), so the lens has a middle layer.
Config config(Arch a, int vocab = 40) {
  Config c = ds::test::small_config(a, vocab);
  c.n_layers = 3;
  c.max_seq = 48;
  return c;
}

std::shared_ptr<const Model> model(Arch a, uint64_t seed = 3, int vocab = 40) {
  Config c = config(a, vocab);
  return std::make_shared<const Model>(c, Weights::random(c, seed, 0.3f));
}

std::vector<double> softmax(const float* l, int n) {
  double mx = -INFINITY, z = 0;
  for (int i = 0; i < n; ++i) mx = std::max(mx, double(l[i]));
  std::vector<double> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) z += p[size_t(i)] = std::exp(double(l[i]) - mx);
  for (auto& v : p) v /= z;
  return p;
}

// The naive lens of one row, in double precision from the weights' entries: the final
// norm (as config.h defines it), the head, the softmax.
std::vector<double> naive_lens(const Model& m, const std::vector<float>& head_rows, const float* x) {
  const Config& c = m.cfg;
  const int d = c.d_model, V = c.vocab_size;
  std::vector<double> y(x, x + d);
  if (c.final_norm) {
    const Norm& n = m.w.ln_final;
    if (c.norm == NormKind::RMSNorm) {
      double ms = 0;
      for (double v : y) ms += v * v;
      const double inv = 1.0 / std::sqrt(ms / d + c.norm_eps);
      for (int i = 0; i < d; ++i) y[size_t(i)] *= inv * double(n.g(i));
    } else {
      double mean = 0, var = 0;
      for (double v : y) mean += v;
      mean /= d;
      for (double v : y) var += (v - mean) * (v - mean);
      var /= d;
      const double inv = 1.0 / std::sqrt(var + c.norm_eps);
      for (int i = 0; i < d; ++i)
        y[size_t(i)] = (y[size_t(i)] - mean) * inv * double(n.g(i)) + (n.b.size() ? double(n.b(i)) : 0.0);
    }
  }
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> ld(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) {
    double acc = 0;
    for (int i = 0; i < d; ++i) acc += double(head_rows[size_t(v) * d + i]) * y[size_t(i)];
    ld[size_t(v)] = acc;
  }
  double mx = *std::max_element(ld.begin(), ld.end()), z = 0;
  for (auto& v : ld) z += v = std::exp(v - mx);
  for (auto& v : ld) v /= z;
  return ld;
}

// The head's rows as float32, row-major (whatever its storage).
std::vector<float> head_rows(const Model& m) {
  const MatView W = m.w.head_view();
  std::vector<float> out(size_t(W.rows * W.cols));
  W.rows_f32(0, W.rows, out.data());
  return out;
}

// The ids of p ranked by probability, ties lower id first.
std::vector<int> ranking(const std::vector<double>& p) {
  std::vector<int> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
  return ids;
}

std::vector<float> random_rows(int rows, int d, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> x(size_t(rows) * d);
  for (auto& v : x) v = n(g);
  return x;
}

Trace run_session(std::shared_ptr<const Model> m, int k, bool compact, std::vector<std::string> record,
                  std::shared_ptr<const Tokenizer> tok = nullptr) {
  SessionOptions o;
  o.sampler.temperature = 0.9f;
  o.sampler.seed = 5;
  o.steps = 14;
  o.record = std::move(record);
  o.trace_options.compact = compact;
  o.trace_options.lens_top_k = k;
  Session s(m, tok, o);
  const bool encdec = m->cfg.encoder_decoder;
  s.start({1, 4, 9, 12}, encdec ? std::vector<int>{5, 6, 7, 8, 0} : std::vector<int>{});
  while (!s.done()) s.step();
  return s.trace();
}

std::shared_ptr<const Tokenizer> letters(int vocab) {
  std::vector<std::string> v = {"<pad>", "<s>"};
  for (int i = 2; i < vocab; ++i) v.push_back(std::string(1, char(i < 28 ? 'a' + i - 2 : 'A' + i - 28)));
  return std::make_shared<CharTokenizer>(v, 1);
}

}  // namespace

// The lens of the last layer's resid_post is the model's next-token distribution:
// every row of a full forward, recorded with k = the whole vocabulary.
TEST(Lens, LastLayerIsTheModelsNextTokenDistribution) {
  for (Arch a : {Arch::GPT2, Arch::Llama, Arch::PostNorm, Arch::EncDec}) {
    SCOPED_TRACE(arch_name(a));
    auto m = model(a);
    const Config& c = m->cfg;
    Engine e(m);
    Trace t;
    t.config = c;
    TraceOptions opt;
    opt.lens_top_k = c.vocab_size;
    TraceRecorder rec(e.hooks(), c, t, {}, opt, m);
    if (c.encoder_decoder) e.encode(std::vector<int>{5, 6, 7, 8, 0});
    const std::vector<int> toks = {1, 4, 9, 12, 3, 3, 20, 7};
    const MatRM logits = e.forward_full(toks);
    ASSERT_EQ(t.steps.size(), 1u);
    const std::string hook = "blocks." + std::to_string(c.n_layers - 1) + ".resid_post";
    const Tensor& ids = t.steps[0].tensors.at(lens_ids_name(hook));
    const Tensor& probs = t.steps[0].tensors.at(lens_probs_name(hook));
    const int T = int(toks.size()), V = c.vocab_size;
    ASSERT_EQ(ids.shape, (std::vector<int>{T, V}));
    ASSERT_EQ(probs.shape, ids.shape);
    for (int r = 0; r < T; ++r) {
      const std::vector<double> p = softmax(logits.row(r).data(), V);
      EXPECT_EQ(int(ids.at(int64_t(r) * V)), ranking(p)[0]) << "row " << r;
      double total = 0;
      for (int j = 0; j < V; ++j) {
        const int id = int(ids.at(int64_t(r) * V + j));
        EXPECT_NEAR(probs.at(int64_t(r) * V + j), p[size_t(id)], 2e-6) << "row " << r << " rank " << j;
        if (j > 0) {
          EXPECT_GE(probs.at(int64_t(r) * V + j - 1), probs.at(int64_t(r) * V + j));
        }
        total += probs.at(int64_t(r) * V + j);
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

// In a generation too: at every step the last layer's top token at the step's last row
// is the greedy token the session draws.
TEST(Lens, LastLayerTopTokenIsTheGreedyDraw) {
  auto m = model(Arch::Llama, 8);
  SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = 12;
  o.trace_options.lens_top_k = 3;
  Session s(m, nullptr, o);
  s.start({1, 5});
  while (!s.done()) s.step();
  const Trace& t = s.trace();
  ASSERT_EQ(t.steps.size(), 11u);
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const int last = t.positions(int(i)) - 1;
    const std::vector<LensRow> rows = recorded_lens(t, last);
    ASSERT_EQ(rows.size(), size_t(m->cfg.n_layers + 1));
    EXPECT_EQ(rows.back().ids[0], t.steps[i].sample->token) << "step " << i;
    EXPECT_NEAR(rows.back().probs[0], t.steps[i].sample->candidates[0].p_raw, 2e-6);
  }
}

// lens_top_k and lens_logits against the naive double-precision lens, on random rows,
// with the head row-major, in tiles and as bfloat16; more rows than a block and a
// vocabulary that is not a whole number of slices; one or two threads.
TEST(Lens, EqualsANaiveNormAndHead) {
  for (Arch a : {Arch::GPT2, Arch::Llama, Arch::PostNorm}) {
    for (int storage = 0; storage < 3; ++storage) {
      SCOPED_TRACE(std::string(arch_name(a)) + (storage == 0 ? ", rows" : storage == 1 ? ", tiles" : ", bf16"));
      Config c = config(a, 600);
      Weights w = Weights::random(c, 21, 0.3f);
      if (storage == 1) w.to_tiles();
      if (storage == 2) w.narrow(Precision::BF16);
      const Model m(c, std::move(w));
      const std::vector<float> H = head_rows(m);
      const int rows = 70, k = 12;
      const std::vector<float> x = random_rows(rows, c.d_model, 4, 2.0f);
      for (int threads : {1, 2}) {
        const LensTop top = lens_top_k(m, x.data(), rows, k, threads);
        ASSERT_EQ(top.rows, rows);
        ASSERT_EQ(top.k, k);
        for (int r = 0; r < rows; ++r) {
          const std::vector<double> p = naive_lens(m, H, x.data() + size_t(r) * c.d_model);
          const std::vector<int> want = ranking(p);
          for (int j = 0; j < k; ++j) {
            const int id = top.ids[size_t(r) * k + j];
            // The same token, or one whose probability is as high (a near tie).
            if (id != want[size_t(j)]) {
              EXPECT_NEAR(p[size_t(id)], p[size_t(want[size_t(j)])], 1e-6);
            }
            EXPECT_NEAR(top.probs[size_t(r) * k + j], p[size_t(id)], 1e-5) << "row " << r << " rank " << j;
          }
        }
      }
      const std::vector<float> l = lens_logits(m, x.data());
      const std::vector<double> p = softmax(l.data(), int(l.size())), q = naive_lens(m, H, x.data());
      for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], q[i], 1e-5);
    }
  }
}

// Equal logits rank the lower id first, also across the threads' vocabulary ranges.
TEST(Lens, TiesRankTheLowerIdFirst) {
  // No final norm and small integers: the tied logits are exact whatever the order of
  // the sums.
  Config c = config(Arch::PostNorm, 1024);
  Weights w = Weights::random(c, 2, 0.3f);
  for (int i = 0; i < c.d_model; ++i) w.tok_embed(5, i) = float(i % 3) - 1.0f;
  for (int v : {900, 17, 600, 300}) w.tok_embed.row(v) = w.tok_embed.row(5);  // ids 5, 17, 300, 600, 900 tie
  const Model m(c, std::move(w));
  std::vector<float> x(size_t(c.d_model));
  for (int i = 0; i < c.d_model; ++i) x[size_t(i)] = m.w.tok_embed(5, i) * 8.0f;  // the largest logit
  for (int threads : {1, 2, 3}) {
    const LensTop top = lens_top_k(m, x.data(), 1, 5, threads);
    EXPECT_EQ(top.ids, (std::vector<int>{5, 17, 300, 600, 900})) << threads << " threads";
    for (float p : top.probs) EXPECT_FLOAT_EQ(p, top.probs[0]);
    EXPECT_EQ(lens_top_k(m, x.data(), 1, 3, threads).ids, (std::vector<int>{5, 17, 300})) << threads << " threads";
  }
}

// A trace records the lens of every row of every step; it survives a JSON round trip
// (ids written as integers), compact storage keeps it within float16's precision, and
// the window's default recording with the lens stays small.
TEST(Lens, TraceRecordsItAndKeepsItThroughJson) {
  for (Arch a : {Arch::GPT2, Arch::EncDec}) {
    SCOPED_TRACE(arch_name(a));
    auto m = model(a);
    auto tok = letters(m->cfg.vocab_size);
    const Trace full = run_session(m, 10, false, default_record_patterns(m->cfg), tok);
    const Trace comp = run_session(m, 10, true, default_record_patterns(m->cfg), tok);
    std::stringstream ss;
    comp.write_json(ss);
    const nlohmann::json j = nlohmann::json::parse(ss.str());
    const auto& step0 = j.at("steps")[0];
    EXPECT_TRUE(step0.at("tensors").at("blocks.0.resid_pre.lens.ids").at("data")[0].is_number_integer());
    EXPECT_EQ(step0.at("tensors").at("blocks.2.resid_post.lens.probs").at("shape"), nlohmann::json({4, 10}));
    EXPECT_TRUE(step0.at("token_text").is_object());
    const Trace back = Trace::read_json(ss);
    const int n = full.positions(int(full.steps.size()) - 1);
    ASSERT_EQ(n, 14);
    for (int pos = 0; pos < n; ++pos) {
      const std::vector<LensRow> f = recorded_lens(full, pos), c = recorded_lens(comp, pos),
                                 b = recorded_lens(back, pos), x = compute_lens(*m, full, pos, 10);
      ASSERT_EQ(f.size(), size_t(m->cfg.n_layers + 1));
      ASSERT_EQ(c.size(), f.size());
      ASSERT_EQ(b.size(), f.size());
      ASSERT_EQ(x.size(), f.size());
      for (size_t i = 0; i < f.size(); ++i) {
        EXPECT_EQ(f[i].hook, x[i].hook);
        EXPECT_EQ(f[i].label, i == 0 ? "embedding" : "after layer " + std::to_string(i - 1));
        EXPECT_EQ(c[i].ids, f[i].ids);
        EXPECT_EQ(b[i].ids, c[i].ids);
        EXPECT_EQ(x[i].ids, f[i].ids);
        EXPECT_EQ(b[i].texts, c[i].texts);
        ASSERT_EQ(f[i].ids.size(), 10u);
        for (size_t j = 0; j < 10; ++j) {
          EXPECT_NEAR(c[i].probs[j], f[i].probs[j], 1e-3 * f[i].probs[j] + 1e-7);
          EXPECT_EQ(b[i].probs[j], c[i].probs[j]);
          EXPECT_NEAR(x[i].probs[j], f[i].probs[j], 1e-6);
          EXPECT_EQ(f[i].texts[j], tok->piece(f[i].ids[j]));
        }
      }
    }
    // A compact trace keeps the probabilities as float16.
    const Tensor& p = comp.steps[1].tensors.at("blocks.1.resid_post.lens.probs");
    EXPECT_EQ(p.storage, Storage::F16);
    EXPECT_EQ(p.half.size(), 10u);
    EXPECT_TRUE(p.data.empty());
    const Trace no_lens = run_session(m, 0, true, default_record_patterns(m->cfg), tok);
    EXPECT_TRUE(recorded_lens(no_lens, 3).empty());
    EXPECT_TRUE(no_lens.steps[0].token_text.empty());
  }
}

// The lens needs no other recording; without a tokenizer it names ids as "#id".
TEST(Lens, RecordedAloneWithoutTokenizer) {
  auto m = model(Arch::GPT2);
  const Trace t = run_session(m, 4, true, {});
  for (auto& s : t.steps) {
    EXPECT_EQ(s.tensors.size(), 2u * (m->cfg.n_layers + 1));
    EXPECT_TRUE(s.token_text.empty());
  }
  const std::vector<LensRow> rows = recorded_lens(t, 0);
  ASSERT_EQ(rows.size(), size_t(m->cfg.n_layers + 1));
  EXPECT_EQ(rows[0].texts[0], "#" + std::to_string(rows[0].ids[0]));
}

TEST(Lens, BadInputEndsInAClearError) {
  auto m = model(Arch::GPT2);
  const Trace t = run_session(m, 5, false, {"blocks.*.resid_post", "blocks.0.resid_pre"});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { recorded_lens(t, 14); }).find("position 14 is not in the trace: it has 14 positions"),
            std::string::npos);
  EXPECT_NE(message([&] { recorded_lens(t, -1); }).find("position -1"), std::string::npos);
  EXPECT_NE(message([&] { compute_lens(*m, t, 99, 5); }).find("position 99"), std::string::npos);
  EXPECT_NE(message([&] { recorded_lens(Trace{}, 0); }).find("it has 0 positions"), std::string::npos);
  // A model that is not the trace's.
  Config other = config(Arch::GPT2);
  other.d_model = 16;
  other.d_head = 4;
  const Model o(other, Weights::random(other, 1));
  EXPECT_NE(message([&] { compute_lens(o, t, 0, 5); }).find("the model does not fit the trace"), std::string::npos);
  Config fewer = config(Arch::GPT2);
  fewer.n_layers = 2;
  const Model f(fewer, Weights::random(fewer, 1));
  EXPECT_NE(message([&] { compute_lens(f, t, 0, 5); }).find("2 layers"), std::string::npos);
  // The recorder without the weights, or with a model other than the one recorded.
  Engine e(m);
  Trace out;
  TraceOptions opt;
  opt.lens_top_k = 3;
  EXPECT_NE(message([&] { TraceRecorder r(e.hooks(), m->cfg, out, {}, opt); }).find("needs the model's weights"),
            std::string::npos);
  EXPECT_NE(message([&] {
              TraceRecorder r(e.hooks(), m->cfg, out, {}, opt,
                              std::make_shared<const Model>(other, Weights::random(other, 1)));
            }).find("is not the model recorded"),
            std::string::npos);
  opt.lens_top_k = -2;
  EXPECT_NE(message([&] { TraceRecorder r(e.hooks(), m->cfg, out, {}, opt, m); }).find("top k"), std::string::npos);
  std::vector<float> x(size_t(m->cfg.d_model), 0.5f);
  EXPECT_NE(message([&] { lens_top_k(*m, x.data(), 1, 0); }).find("at least 1"), std::string::npos);
  // A recorded lens of the wrong shape, and token_text with a bad id, in a trace file.
  Trace bad = t;
  bad.steps[0].tensors.at("blocks.0.resid_pre.lens.ids").shape = {1, 5};
  EXPECT_NE(message([&] { recorded_lens(bad, 2); }).find("wrong shape"), std::string::npos);
  std::stringstream ss;
  t.write_json(ss);
  std::string text = ss.str();
  text.replace(text.find("\"steps\":["), 9,
               "\"steps\":[{\"pos0\":0,\"input\":[1],\"tensors\":{},\"token_text\":{\"x\":\"a\"}},");
  std::stringstream in(text);
  EXPECT_NE(message([&] { Trace::read_json(in); }).find("token_text: 'x' is not a token id"), std::string::npos);
}

// ---- decoderscope-cli lens

namespace {

using ds::test::CliRun;
using ds::test::run_cli;

}  // namespace

// On the built-in adder: the last layer's top token at the last position is the
// token greedy generation writes next, at every position of the answer.
TEST(CliLens, LastLayerReadsTheNextTokenOfGreedyGeneration) {
  CliRun g = run_cli("generate --model builtin:adder --prompt 123+45= --temperature 0 --ids");
  ASSERT_EQ(g.code, 0) << g.err;
  std::istringstream gi(g.out);
  std::vector<int> drawn;
  for (int x; gi >> x;) drawn.push_back(x);
  ASSERT_EQ(drawn.size(), 3u);  // "861", then the end token stops it
  CliRun r = run_cli("lens --model builtin:adder --prompt 123+45= --top-k 3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("position").get<int>(), 7);  // <s> 1 2 3 + 4 5 =
  EXPECT_EQ(j.at("text").get<std::string>(), "=");
  EXPECT_EQ(j.at("top_k").get<int>(), 3);
  const auto& layers = j.at("layers");
  ASSERT_EQ(layers.size(), 4u);  // the embedding and 3 layers
  EXPECT_EQ(layers[0].at("hook").get<std::string>(), "blocks.0.resid_pre");
  EXPECT_EQ(layers[0].at("label").get<std::string>(), "embedding");
  EXPECT_EQ(layers[3].at("hook").get<std::string>(), "blocks.2.resid_post");
  for (auto& l : layers) {
    ASSERT_EQ(l.at("ids").size(), 3u);
    ASSERT_EQ(l.at("texts").size(), 3u);
    auto p = l.at("probs").get<std::vector<float>>();
    EXPECT_TRUE(p[0] >= p[1] && p[1] >= p[2]);
  }
  EXPECT_EQ(layers[3].at("ids")[0].get<int>(), drawn[0]);
  EXPECT_EQ(layers[3].at("texts")[0].get<std::string>(), "8");
  // After generating, at each position of the answer.
  for (int pos = 7; pos < 10; ++pos) {
    CliRun s = run_cli("lens --model builtin:adder --prompt 123+45= --steps 11 --temperature 0 --json --position " +
                       std::to_string(pos));
    ASSERT_EQ(s.code, 0) << s.err;
    nlohmann::json k = nlohmann::json::parse(s.out);
    EXPECT_EQ(k.at("layers")[3].at("ids")[0].get<int>(), drawn[size_t(pos - 7)]) << "position " << pos;
    EXPECT_EQ(k.at("next").get<int>(), drawn[size_t(pos - 7)]);
  }
}

TEST(CliLens, PrintsOneLinePerLayer) {
  CliRun r = run_cli("lens --model builtin:adder --prompt 12+3= --top-k 2 --position 3");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_EQ(lines[0].rfind("logit lens at position 3 \"+\", followed by \"3\": the top 2 tokens", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("  embedding", 0), 0u) << lines[1];
  EXPECT_EQ(lines[4].rfind("  after layer 2", 0), 0u) << lines[4];
}

TEST(CliLens, BadArgumentsEndWithOneLine) {
  const char* cases[] = {
      "lens",
      "lens --model builtin:adder --prompt 1+1= --position 9",
      "lens --model builtin:adder --prompt 1+1= --position -1",
      "lens --model builtin:adder --prompt 1+1= --top-k 0",
      "lens --model builtin:adder --prompt 1+1= --top-k 16",
      "lens --model builtin:adder --prompt 1+1= --steps 2",
      "lens --model builtin:adder --prompt x",
      "lens --model builtin:adder --prompt 1+1= --bogus 1",
      "lens --model builtin:dates --prompt 2026",  // encoder-decoder: needs a source
  };
  for (auto* c : cases) {
    SCOPED_TRACE(c);
    CliRun r = run_cli(c);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
  }
  CliRun r = run_cli("lens --model builtin:adder --prompt 1+1= --position 9");
  EXPECT_NE(r.err.find("--position must be between 0 and 4"), std::string::npos) << r.err;
}
