// Generation without the KV cache (SessionOptions::kv_cache = false): every step
// recomputes all the positions so far. It must draw the same tokens from the same
// logits as the cached path, and record the same trace (only each step's own rows),
// on real models (the aidreams260K fixture, every built-in model) and on every variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "io/loader.h"
#include "model/model.h"
#include "probe/trace.h"
#include "session/session.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;
using ds::test::Variant;

// One generation: the tokens drawn and the logits each step sampled from.
struct Generation {
  std::vector<int> ids;
  std::vector<std::vector<float>> logits;  // [steps][vocab]
  ds::Trace trace;
};

Generation generate(std::shared_ptr<const ds::Model> m, std::shared_ptr<const ds::Tokenizer> tok, ds::SessionOptions o,
                    const std::vector<int>& prompt, const std::vector<int>& source) {
  ds::Session s(std::move(m), std::move(tok), o);
  Generation r;
  s.engine().hooks().subscribe("logits", [&r](ds::HookEvent& ev) {
    EXPECT_EQ(ev.t.shape[0], 1);  // the last row only, with or without the cache
    r.logits.emplace_back(ev.t.data, ev.t.data + ev.t.shape[1]);
  });
  s.start(prompt, source);
  while (!s.done()) s.step();
  r.ids = s.generated();
  r.trace = s.trace();
  return r;
}

// Greedy with and without the cache: identical ids, logits within 1e-4 (relative to
// the logit's size when it is above 1), every step marked and timed.
void expect_same_greedy(const ds::LoadedModel& m, const std::vector<int>& prompt, const std::vector<int>& source,
                        int steps = 0) {
  ds::SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = steps;
  o.stop_ids = m.stop_ids;
  const Generation cached = generate(m.model, m.tokenizer, o, prompt, source);
  o.kv_cache = false;
  const Generation full = generate(m.model, m.tokenizer, o, prompt, source);
  ASSERT_FALSE(cached.ids.empty());
  EXPECT_EQ(full.ids, cached.ids);
  ASSERT_EQ(full.logits.size(), cached.logits.size());
  for (size_t s = 0; s < full.logits.size(); ++s) {
    double worst = 0;
    for (size_t v = 0; v < full.logits[s].size(); ++v) {
      const double a = full.logits[s][v], b = cached.logits[s][v];
      worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
    }
    EXPECT_LE(worst, 1e-4) << "step " << s;
  }
  for (const ds::TraceStep& st : full.trace.steps) {
    EXPECT_FALSE(st.kv_cache);
    EXPECT_GE(st.forward_ms, 0.0);
  }
  for (const ds::TraceStep& st : cached.trace.steps) EXPECT_TRUE(st.kv_cache);
}

TEST(NoKvCache, Aidreams260KGreedyFromBosAndFromAPrompt) {
  const fs::path dir = ds::test::fixture("aidreams260K");
  DS_NEED_FIXTURE(dir / "model.bin", "generation without the KV cache on a real llama2.c model");
  const ds::LoadedModel m = ds::load_model((dir / "model.bin").string(), (dir / "tok512.bin").string());
  expect_same_greedy(m, {m.model->cfg.bos_id}, {});  // the whole context, 128 positions
  expect_same_greedy(m, ds::encode_prompt(m, "The robot dreams of"), {}, 64);
}

// Every built-in model folder there is (dates, adder, and any other), on a few inputs
// its tokenizer can write.
TEST(NoKvCache, EveryBuiltinModel) {
  const fs::path root = fs::path(DS_SOURCE_DIR) / "assets" / "models";
  int n = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "config.json")) continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const ds::LoadedModel m = ds::load_model("builtin:" + name);
    ASSERT_TRUE(m.tokenizer);
    for (const char* text : {"22 November 2026", "Sunday, 3/4/1999", "123+45=", "7+8="}) {
      SCOPED_TRACE(text);
      std::vector<int> prompt, source;
      try {
        if (m.model->cfg.encoder_decoder) {
          source = m.tokenizer->encode(text, false);
          prompt = {m.model->cfg.bos_id};
        } else {
          prompt = ds::encode_prompt(m, text);
        }
      } catch (const ds::Error&) {
        continue;  // characters this model's vocabulary does not have
      }
      if (prompt.empty() || (m.model->cfg.encoder_decoder && source.empty())) continue;
      if (int(prompt.size()) >= m.model->cfg.max_seq || int(source.size()) > m.model->cfg.max_src) continue;
      expect_same_greedy(m, prompt, source);
      ++n;
    }
  }
  EXPECT_GE(n, 4) << "expected the dates and adder models under " << root;
}

// The largest magnitude of a tensor's finite values (1 at least).
double scale_of(const ds::Tensor& t) {
  double m = 1;
  for (int64_t i = 0; i < t.size(); ++i)
    if (std::isfinite(t.at(i))) m = std::max(m, double(std::abs(t.at(i))));
  return m;
}

// Two recordings of the same tensors: same names and shapes, values within 1e-4 of
// the tensor's size (-inf cells, the masked scores, in the same places).
void expect_same_tensors(const std::map<std::string, ds::Tensor>& a, const std::map<std::string, ds::Tensor>& b,
                         bool values) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, x] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const ds::Tensor& y = b.at(name);
    ASSERT_EQ(x.shape, y.shape) << name;
    ASSERT_EQ(x.storage, y.storage) << name;
    if (!values || !x.has_values()) continue;
    const double tol = 1e-4 * scale_of(y);
    for (int64_t i = 0; i < x.size(); ++i) {
      const float p = x.at(i), q = y.at(i);
      if (std::isinf(q)) {
        ASSERT_EQ(p, q) << name << " value " << i;
      } else {
        ASSERT_NEAR(p, q, tol) << name << " value " << i;
      }
    }
  }
}

class NoKvCacheTrace : public ::testing::TestWithParam<Variant> {};

// Every hook point and the logit lens, full and compact: the steps without the cache
// hold exactly the tensors the cached steps hold (the step's own rows, same shapes).
TEST_P(NoKvCacheTrace, RecordsWhatACachedStepRecords) {
  const Variant& v = GetParam();
  auto m = ds::test::random_model(v.cfg, v.seed);
  std::vector<int> source;
  if (v.cfg.encoder_decoder) source = {7, 8, 9, 10, v.cfg.pad_id, 11};
  for (bool compact : {false, true}) {
    SCOPED_TRACE(compact ? "compact" : "full");
    ds::SessionOptions o;
    o.sampler.temperature = 0;
    o.steps = 12;
    o.record = {"**"};
    o.trace_options.compact = compact;
    o.trace_options.lens_top_k = 3;
    const Generation cached = generate(m, nullptr, o, {3, 4, 6, 9}, source);
    o.kv_cache = false;
    const Generation full = generate(m, nullptr, o, {3, 4, 6, 9}, source);
    EXPECT_EQ(full.ids, cached.ids);
    const ds::Trace &a = full.trace, &b = cached.trace;
    ASSERT_EQ(a.steps.size(), b.steps.size());
    ASSERT_EQ(a.steps.size(), 9u);  // the prompt, then one token a step up to 12 positions
    expect_same_tensors(a.encoder, b.encoder, !compact);
    for (size_t s = 0; s < a.steps.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      EXPECT_EQ(a.steps[s].pos0, b.steps[s].pos0);
      EXPECT_EQ(a.steps[s].input, b.steps[s].input);
      expect_same_tensors(a.steps[s].tensors, b.steps[s].tensors, !compact);
    }
    // The attention rows rebuild the same matrices.
    const int last = int(a.steps.size()) - 1;
    for (int l = 0; l < v.cfg.n_layers; ++l) {
      const ds::MatRM pa = a.attention(l, 1, last), pb = b.attention(l, 1, last);
      EXPECT_LE((pa - pb).cwiseAbs().maxCoeff(), compact ? 2e-3 : 1e-5) << "layer " << l;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, NoKvCacheTrace, ::testing::ValuesIn(ds::test::variants()),
                         [](const auto& info) { return info.param.name; });

// Contrastive search looks each candidate one token ahead; without the cache the
// look-ahead recomputes too, and the choices are the same.
TEST(NoKvCache, ContrastiveSearchChoosesTheSame) {
  for (const Variant& v : ds::test::variants()) {
    if (v.name != "gpt2" && v.name != "encdec_rotary_swiglu") continue;
    SCOPED_TRACE(v.name);
    auto m = ds::test::random_model(v.cfg, v.seed, 0.3f);
    ds::SessionOptions o;
    o.sampler.contrastive = true;
    o.sampler.top_k = 4;
    o.sampler.penalty_alpha = 0.6f;
    o.steps = 20;
    const std::vector<int> source = v.cfg.encoder_decoder ? std::vector<int>{5, 6, 7} : std::vector<int>{};
    const Generation cached = generate(m, nullptr, o, {3, 4}, source);
    o.kv_cache = false;
    const Generation full = generate(m, nullptr, o, {3, 4}, source);
    EXPECT_EQ(full.ids, cached.ids);
    for (size_t s = 0; s < full.trace.steps.size(); ++s) {
      const auto &a = full.trace.steps[s].sample->candidates, &b = cached.trace.steps[s].sample->candidates;
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i].degeneration, b[i].degeneration, 1e-4);
    }
  }
}

// Stepping back without the cache redoes the step from the same prefix.
TEST(NoKvCache, RewindRedoesTheSameStep) {
  const Variant v = ds::test::variants()[1];  // llama
  auto m = ds::test::random_model(v.cfg, v.seed);
  ds::SessionOptions o;
  o.sampler.temperature = 0.9f;
  o.sampler.seed = 4;
  o.steps = 16;
  o.kv_cache = false;
  ds::Session s(m, nullptr, o);
  s.start({1, 2, 3});
  while (!s.done()) s.step();
  const std::vector<int> first = s.generated();
  s.rewind(5);
  while (!s.done()) s.step();
  EXPECT_EQ(s.generated(), first);
  EXPECT_EQ(s.trace().steps[5].pos0, 3 + 4);
  EXPECT_FALSE(s.trace().steps.back().kv_cache);
}

// forward_ms and kv_cache survive JSON; a trace written before they existed loads with
// the time unknown (-1) and the cache used.
TEST(NoKvCache, TraceFieldsRoundTripAndAreOptional) {
  ds::Trace t;
  t.config = ds::test::small_config(ds::test::Arch::GPT2);
  t.steps.resize(2);
  t.steps[0].input = {1, 2};
  t.steps[0].forward_ms = 1.25;
  t.steps[0].kv_cache = false;
  t.steps[1].pos0 = 2;
  t.steps[1].input = {3};
  std::stringstream js;
  t.write_json(js);
  const ds::Trace back = ds::Trace::read_json(js);
  EXPECT_EQ(back.steps[0].forward_ms, 1.25);
  EXPECT_FALSE(back.steps[0].kv_cache);
  EXPECT_EQ(back.steps[1].forward_ms, -1);
  EXPECT_TRUE(back.steps[1].kv_cache);
  const std::string old = std::regex_replace(js.str(), std::regex("\"(forward_ms|kv_cache)\":[^,}]*,"), "");
  ASSERT_EQ(old.find("kv_cache"), std::string::npos) << old;
  ASSERT_EQ(old.find("forward_ms"), std::string::npos) << old;
  std::stringstream os(old);
  const ds::Trace older = ds::Trace::read_json(os);
  EXPECT_EQ(older.steps[0].forward_ms, -1);
  EXPECT_TRUE(older.steps[0].kv_cache);
}

// ---- the command line

TEST(NoKvCacheCli, SameOutputAndBothTimesOnStderr) {
  for (const std::string args : {"--model builtin:adder --prompt '123+45=' --temperature 0 --ids",
                                 "--model builtin:dates --source 'Sunday, 22 November 2026' --temperature 0",
                                 "--model builtin:adder --prompt '9+9=' --penalty-alpha 0.6 --top-k 3 --ids"}) {
    SCOPED_TRACE(args);
    const auto cached = ds::test::run_cli("generate " + args);
    const auto full = ds::test::run_cli("generate " + args + " --no-kv-cache");
    ASSERT_EQ(cached.code, 0) << cached.err;
    ASSERT_EQ(full.code, 0) << full.err;
    EXPECT_EQ(full.out, cached.out);
    EXPECT_EQ(cached.err.find("KV cache"), std::string::npos);
    const std::regex line(
        "no KV cache: [0-9]+\\.[0-9] ms for [0-9]+ tokens; with the KV cache: [0-9]+\\.[0-9] ms \\([0-9]+\\.[0-9]x\\)");
    EXPECT_TRUE(std::regex_search(full.err, line)) << full.err;
    EXPECT_NE(full.err.find("multiply-adds"), std::string::npos) << full.err;
  }
  {  // The trace says how each step ran.
    ds::test::TempDir tmp;
    const auto r = ds::test::run_cli(
        "generate --model builtin:adder --prompt '1+2=' --temperature 0 --no-kv-cache "
        "--trace " +
        ds::test::quoted(tmp.path("t.json")) + " --hooks 'blocks.*.attn.pattern'");
    ASSERT_EQ(r.code, 0) << r.err;
    const ds::Trace t = ds::Trace::load(tmp.path("t.json"));
    ASSERT_FALSE(t.steps.empty());
    for (const ds::TraceStep& st : t.steps) {
      EXPECT_FALSE(st.kv_cache);
      EXPECT_EQ(st.tensors.at("blocks.0.attn.pattern").shape[1], int(st.input.size()));
    }
  }
}

TEST(NoKvCacheCli, BeamSearchRefusesIt) {
  const auto r = ds::test::run_cli("generate --model builtin:dates --source '22 Nov 2026' --beam 2 --no-kv-cache");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--no-kv-cache is not available with --beam"), std::string::npos) << r.err;
}

}  // namespace
