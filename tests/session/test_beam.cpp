// Beam search (session/beam.h): width 1 is greedy decoding; a width that keeps every
// possible prefix finds the sequence of highest total log-probability that an
// exhaustive search over the naive reference forward pass finds; on the dates model it
// is at least as accurate as greedy decoding.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "helpers.h"
#include "io/loader.h"
#include "model/reference.h"
#include "session/beam.h"
#include "session/session.h"
#include "train/tasks.h"
#include "util/error.h"

namespace {

using namespace ds;
using namespace ds::test;

constexpr uint64_t kFreshSeed = 0xBEA5EA2C4ull;  // not a training or validation seed

// Greedy decoding through the ordinary session (temperature 0).
std::vector<int> session_greedy(std::shared_ptr<const Model> m, const std::vector<int>& prompt,
                                const std::vector<int>& src, const std::vector<int>& stop, int steps) {
  SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = steps;
  o.stop_ids = stop;
  Session s(std::move(m), nullptr, o);
  s.start(prompt, src);
  while (!s.done() && s.step() >= 0) {
  }
  return s.generated();
}

std::vector<int> beam_best(std::shared_ptr<const Model> m, const std::vector<int>& prompt, const std::vector<int>& src,
                           const std::vector<int>& stop, int steps, int width, float penalty = 1.0f) {
  BeamOptions o;
  o.width = width;
  o.length_penalty = penalty;
  o.steps = steps;
  o.eos_ids = stop;
  BeamResult r = beam_search(std::move(m), prompt, src, o);
  EXPECT_FALSE(r.finished.empty());
  return r.finished.empty() ? std::vector<int>{} : r.finished[0].tokens;
}

std::string ids_text(const std::vector<int>& v) {
  std::string s;
  for (int t : v) s += std::to_string(t) + " ";
  return s;
}

void expect_width1_is_greedy(const LoadedModel& m, const std::vector<int>& prompt, const std::vector<int>& src,
                             int steps) {
  const std::vector<int> g = session_greedy(m.model, prompt, src, m.stop_ids, steps);
  for (float penalty : {1.0f, 0.0f, 2.0f}) {
    const std::vector<int> b = beam_best(m.model, prompt, src, m.stop_ids, steps, 1, penalty);
    EXPECT_EQ(b, g) << "length penalty " << penalty << "\n beam:   " << ids_text(b) << "\n greedy: " << ids_text(g);
  }
}

TEST(Beam, WidthOneIsGreedyOnTheBuiltinModels) {
  LoadedModel dates = load_model("builtin:dates");
  LoadedModel adder = load_model("builtin:adder");
  ASSERT_TRUE(dates.tokenizer && adder.tokenizer);
  train::SplitMix rng(kFreshSeed);
  train::Task dt = train::Task::make("dates"), at = train::Task::make("adder");
  for (int i = 0; i < 40; ++i) {
    train::TextSample s = dt.sample(rng);
    expect_width1_is_greedy(dates, {dates.model->cfg.bos_id}, dates.tokenizer->encode(s.input, false), 0);
    train::TextSample a = at.sample(rng);
    expect_width1_is_greedy(adder, adder.tokenizer->encode(a.input, true), {}, 0);
  }
}

TEST(Beam, WidthOneIsGreedyOnTheLlama2cFixture) {
  const fs::path dir = fixture("aidreams260K");
  if (!fs::exists(dir / "model.bin")) GTEST_SKIP() << "../shared/fixtures/aidreams260K is absent: not compared";
  LoadedModel m = load_model((dir / "model.bin").string(), (dir / "tok512.bin").string());
  expect_width1_is_greedy(m, {1}, {}, 0);  // from BOS over the whole context
  expect_width1_is_greedy(m, encode_prompt(m, "The robot dreams of"), {}, 96);
}

TEST(Beam, WidthOneIsGreedyOnRandomModelsOfEveryKind) {
  for (Arch a : {Arch::GPT2, Arch::Llama, Arch::PostNorm, Arch::EncDec}) {
    Config c = small_config(a, 24);
    c.eos_id = 2;
    auto m = random_model(c, 40 + int(a), 0.3f);
    std::vector<int> src = a == Arch::EncDec ? std::vector<int>{5, 9, 3, 7, 11} : std::vector<int>{};
    LoadedModel lm;
    lm.model = m;
    lm.stop_ids = {2};
    expect_width1_is_greedy(lm, {1, 4}, src, 40);
  }
}

// Every continuation of up to max_new tokens (ending early on eos), scored by the
// reference forward pass in double precision: the best total log-probability and the
// sequence that has it, and the runner-up's total.
struct Exhaustive {
  double best = -std::numeric_limits<double>::infinity(), second = -std::numeric_limits<double>::infinity();
  std::vector<int> best_seq;
  int sequences = 0;
};

Exhaustive exhaustive(const Model& m, const std::vector<int>& prompt, int eos, int max_new) {
  Exhaustive ex;
  std::vector<int> seq = prompt;
  std::function<void(double)> walk = [&](double sum) {
    ref::Rows lg = ref::logits(m.cfg, m.w, seq);
    const ref::Row& row = lg.back();
    double mx = -std::numeric_limits<double>::infinity(), z = 0;
    for (double x : row) mx = std::max(mx, x);
    for (double x : row) z += std::exp(x - mx);
    const int generated = int(seq.size() - prompt.size()) + 1;
    for (int t = 0; t < int(row.size()); ++t) {
      const double s = sum + row[size_t(t)] - mx - std::log(z);
      seq.push_back(t);
      if (t == eos || generated == max_new) {
        ++ex.sequences;
        if (s > ex.best) {
          ex.second = ex.best, ex.best = s;
          ex.best_seq.assign(seq.begin() + long(prompt.size()), seq.end());
        } else if (s > ex.second) {
          ex.second = s;
        }
      } else {
        walk(s);
      }
      seq.pop_back();
    }
  };
  walk(0);
  return ex;
}

// The reference's total log-probability of generated tokens after prompt.
double ref_total(const Model& m, const std::vector<int>& prompt, const std::vector<int>& gen) {
  std::vector<int> seq = prompt;
  seq.insert(seq.end(), gen.begin(), gen.end());
  ref::Rows lg = ref::logits(m.cfg, m.w, seq);
  double total = 0;
  for (size_t i = 0; i < gen.size(); ++i) {
    const ref::Row& row = lg[prompt.size() - 1 + i];
    double mx = -std::numeric_limits<double>::infinity(), z = 0;
    for (double x : row) mx = std::max(mx, x);
    for (double x : row) z += std::exp(x - mx);
    total += row[size_t(gen[i])] - mx - std::log(z);
  }
  return total;
}

// Returns whether greedy decoding missed the best sequence (so the case tells beam
// search from greedy).
bool expect_finds_the_best(std::shared_ptr<const Model> m, const std::vector<int>& prompt, int eos, int max_new) {
  const int V = m->cfg.vocab_size;
  const Exhaustive ex = exhaustive(*m, prompt, eos, max_new);
  // A width of V^max_new keeps every prefix at every step, and every pair a step looks
  // at ranks below the width, so no finished hypothesis is skipped.
  int width = 1;
  for (int i = 0; i < max_new; ++i) width *= V;
  const std::vector<int> got =
      beam_best(m, prompt, {}, {eos}, int(prompt.size()) + max_new - 1, width, /*length penalty*/ 0.0f);
  const double got_total = ref_total(*m, prompt, got);
  EXPECT_NEAR(got_total, ex.best, 1e-4) << "beam: " << ids_text(got) << " exhaustive: " << ids_text(ex.best_seq);
  if (ex.best - ex.second > 1e-3) {
    EXPECT_EQ(got, ex.best_seq);
  }
  const std::vector<int> greedy = beam_best(m, prompt, {}, {eos}, int(prompt.size()) + max_new - 1, 1, 0.0f);
  std::printf("exhaustive search over %d sequences: best %.5f (%s), beam (width %d) %.5f, greedy %.5f (%s)\n",
              ex.sequences, ex.best, ids_text(ex.best_seq).c_str(), width, got_total, ref_total(*m, prompt, greedy),
              ids_text(greedy).c_str());
  return ref_total(*m, prompt, greedy) < ex.best - 1e-3;
}

TEST(Beam, WideEnoughFindsTheExhaustiveBestOnATinyRandomModel) {
  int greedy_missed = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Config c = small_config(Arch::GPT2, 8);
    c.eos_id = 2;
    // Larger weights than usual give uneven distributions with clear winners.
    auto m = random_model(c, seed, 0.25f);
    greedy_missed += expect_finds_the_best(m, {1, 5, 7}, 2, 4);
  }
  // The cases must tell beam search from greedy decoding.
  EXPECT_GE(greedy_missed, 1);
}

TEST(Beam, WideEnoughFindsTheExhaustiveBestOnTheAdder) {
  LoadedModel m = load_model("builtin:adder");
  ASSERT_TRUE(m.tokenizer);
  for (const char* q : {"12+34=", "999+1=", "5+7="})
    expect_finds_the_best(m.model, m.tokenizer->encode(q, true), m.model->cfg.eos_id, 3);
}

TEST(Beam, IsAtLeastAsAccurateAsGreedyOnTheDatesModel) {
  LoadedModel m = load_model("builtin:dates");
  const Config& c = m.model->cfg;
  train::Task task = train::Task::make("dates");
  train::SplitMix rng(kFreshSeed + 1);
  const int n = 2000;
  int greedy_right = 0, beam_right = 0;
  for (int i = 0; i < n; ++i) {
    train::TextSample s = task.sample(rng);
    std::vector<int> src = m.tokenizer->encode(s.input, false);
    std::vector<int> g = session_greedy(m.model, {c.bos_id}, src, m.stop_ids, 0);
    std::vector<int> b = beam_best(m.model, {c.bos_id}, src, m.stop_ids, 0, 4);
    greedy_right += task.decode(g) == s.answer;
    beam_right += task.decode(b) == s.answer;
  }
  std::printf("dates on %d fresh samples: greedy %d exact, beam search (width 4) %d exact\n", n, greedy_right,
              beam_right);
  EXPECT_GE(beam_right, greedy_right);
  EXPECT_GE(beam_right, n * 99 / 100);
}

TEST(Beam, RecordsTheTreeConsistently) {
  LoadedModel m = load_model("builtin:dates");
  BeamOptions o;
  o.width = 3;
  o.eos_ids = m.stop_ids;
  BeamResult r = beam_search(m.model, {m.model->cfg.bos_id}, m.tokenizer->encode("22 Nov 2026", false), o);
  ASSERT_FALSE(r.steps.empty());
  ASSERT_FALSE(r.finished.empty());
  EXPECT_EQ(r.steps[0].hyps.size(), 1u);
  for (size_t t = 0; t < r.steps.size(); ++t) {
    int kept = 0;
    for (size_t h = 0; h < r.steps[t].hyps.size(); ++h) {
      const BeamHyp& hyp = r.steps[t].hyps[h];
      EXPECT_EQ(int(hyp.tokens.size()), int(t));
      EXPECT_LE(hyp.candidates.size(), size_t(2 * o.width));
      for (size_t j = 0; j < hyp.candidates.size(); ++j) {
        const BeamCandidate& cd = hyp.candidates[j];
        EXPECT_NEAR(cd.sum, hyp.sum + cd.logprob, 1e-12);
        if (j > 0) {
          EXPECT_LE(cd.logprob, hyp.candidates[j - 1].logprob);
        }
        if (cd.fate != BeamFate::Kept) continue;
        ++kept;
        // The child continues this hypothesis with this token.
        ASSERT_LT(t + 1, r.steps.size() + 1);
        if (t + 1 < r.steps.size()) {
          const BeamHyp& child = r.steps[t + 1].hyps.at(size_t(cd.child));
          EXPECT_EQ(child.parent, int(h));
          EXPECT_EQ(child.tokens.back(), cd.token);
          EXPECT_DOUBLE_EQ(child.sum, cd.sum);
        }
      }
    }
    EXPECT_LE(kept, o.width);
  }
  // The winner's path leads through the tree to its last token.
  const BeamFinished& w = r.finished[0];
  ASSERT_EQ(int(w.path.size()), w.step + 1);
  for (int t = 0; t <= w.step; ++t) {
    const BeamHyp& h = r.steps[size_t(t)].hyps.at(size_t(w.path[size_t(t)]));
    EXPECT_EQ(h.tokens, std::vector<int>(w.tokens.begin(), w.tokens.begin() + t));
  }
  for (size_t i = 1; i < r.finished.size(); ++i) EXPECT_GE(r.finished[i - 1].score, r.finished[i].score);
  EXPECT_EQ(m.tokenizer->decode(-1, w.tokens[0]) + m.tokenizer->decode(-1, w.tokens[1]), "20");
}

TEST(Beam, RejectsBadOptions) {
  LoadedModel m = load_model("builtin:adder");
  BeamOptions o;
  o.width = 0;
  EXPECT_THROW(beam_search(m.model, {1, 4}, {}, o), Error);
  o.width = 2;
  o.length_penalty = std::nanf("");
  EXPECT_THROW(beam_search(m.model, {1, 4}, {}, o), Error);
  o.length_penalty = 1;
  EXPECT_THROW(beam_search(m.model, {}, {}, o), Error);
  EXPECT_THROW(beam_search(m.model, {1, 999}, {}, o), Error);
  EXPECT_THROW(beam_search(m.model, {1, 4}, {3}, o), Error);  // decoder-only: no source
  o.steps = 1;
  EXPECT_THROW(beam_search(m.model, {1, 4}, {}, o), Error);  // more prompt than positions
  // A width whose KV caches would not fit in memory is refused, naming the limit.
  Config big = small_config(Arch::GPT2, 40);
  big.max_seq = 1024;
  BeamOptions wide;
  wide.width = 1 << 16;
  try {
    beam_search(random_model(big, 1), {1}, {}, wide);
    ADD_FAILURE() << "a width of 65536 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most"), std::string::npos) << e.what();
  }
}

TEST(BeamCli, WidthOneMatchesGreedyAndAllBeamsListsThem) {
  const std::string model = "--model builtin:adder --prompt '12+34=' --ids";
  CliRun g = run_cli("generate " + model + " --temperature 0");
  CliRun b = run_cli("generate " + model + " --beam 1");
  ASSERT_EQ(g.code, 0) << g.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(b.out, g.out);
  CliRun all = run_cli("generate --model builtin:dates --source '22 Nov 2026' --beam 3 --all-beams");
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("beam 0: score"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("2026-11-22"), std::string::npos) << all.out;
  CliRun bad = run_cli("generate --model builtin:adder --prompt '1+1=' --length-penalty 2");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--beam"), std::string::npos) << bad.err;
}

}  // namespace
