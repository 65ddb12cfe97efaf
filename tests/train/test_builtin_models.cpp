// The shipped built-in models, as the app and the CLI load them (builtin:NAME), on
// fresh samples drawn with a seed no training run used. Greedy decoding is written
// here directly on the engine, independent of the training code's own evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/loader.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"
#include "train/tasks.h"
#include "util/error.h"

namespace {

constexpr uint64_t kFreshSeed = 0x5EED2026C0FFEEull;  // not a training or validation seed
constexpr int kSamples = 2000;

ds::LoadedModel load_or_skip(const std::string& name) { return ds::load_model("builtin:" + name); }

// Greedy continuation of `prompt` (after encoding `src` for encoder-decoder models)
// until the model writes eos or reaches its context; returns the generated ids.
std::vector<int> greedy(ds::Engine& e, const std::vector<int>& src, const std::vector<int>& prompt, int eos,
                        int max_new) {
  if (!src.empty())
    e.encode(src);
  else
    e.reset();
  std::vector<int> out;
  auto next = [&](const std::vector<int>& feed) {
    auto logits = e.forward(feed);
    return ds::argmax(logits.data(), int(logits.cols()));
  };
  int t = next(prompt);
  for (int i = 0; i < max_new && t != eos; ++i) {
    out.push_back(t);
    if (e.pos() >= e.config().max_seq) break;
    t = next({t});
  }
  return out;
}

std::string text_of(const ds::Tokenizer& tok, const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += tok.decode(-1, id);
  return s;
}

// Greedy exact match of a dates model on kSamples fresh dates drawn from seed: at
// least 99% in all, every format sampled, and at least 98% of each format's samples.
void expect_dates_converted(const std::string& name, uint64_t seed) {
  ds::LoadedModel m = load_or_skip(name);
  ASSERT_TRUE(m.tokenizer);
  const ds::Config& c = m.model->cfg;
  ASSERT_TRUE(c.encoder_decoder);
  ds::train::Task task = ds::train::Task::make("dates");
  ds::train::SplitMix rng(seed);
  ds::Engine e(m.model);
  std::map<int, std::pair<int, int>> per_format;  // format -> (right, total)
  int right = 0;
  std::vector<std::string> wrong;
  for (int i = 0; i < kSamples; ++i) {
    ds::train::TextSample s = task.sample(rng);
    std::vector<int> src = m.tokenizer->encode(s.input, false);
    std::vector<int> out = greedy(e, src, {c.bos_id}, c.eos_id, 16);
    bool ok = text_of(*m.tokenizer, out) == s.answer;
    right += ok;
    per_format[s.format].first += ok;
    per_format[s.format].second += 1;
    if (!ok && wrong.size() < 10) wrong.push_back(s.input + " -> " + text_of(*m.tokenizer, out));
  }
  double acc = double(right) / kSamples;
  std::string report;
  for (auto& w : wrong) report += "\n  " + w;
  EXPECT_GE(acc, 0.99) << "exact match " << acc << "; some misses:" << report;
  EXPECT_EQ(int(per_format.size()), int(ds::train::kNumDateFormats)) << "every format is sampled";
  for (auto& [f, rt] : per_format) {
    EXPECT_GE(rt.second, 40) << "format " << f << " is rarely sampled";
    EXPECT_GE(double(rt.first) / rt.second, 0.98)
        << ds::train::date_format_name(f) << ": " << rt.first << " of " << rt.second;
  }
  std::printf("%s: %d / %d exact (%.2f%%)\n", name.c_str(), right, kSamples, 100.0 * acc);
}

// For each of the four year digits written, the cross-attention of decoder layer 0,
// averaged over its heads, should put its largest weight on a year character of the
// source in at least 90% of 500 fresh samples.
void expect_year_read_through_cross_attention(const std::string& name, uint64_t seed) {
  ds::LoadedModel m = load_or_skip(name);
  const ds::Config& c = m.model->cfg;
  ds::train::Task task = ds::train::Task::make("dates");
  ds::train::SplitMix rng(seed);
  ds::Engine e(m.model);
  std::vector<float> row;  // mean over heads of the last query row
  e.hooks().subscribe("blocks.0.cross_attn.pattern", [&](ds::HookEvent& ev) {
    const int H = ev.t.shape[0], T = ev.t.shape[1], S = ev.t.shape[2];
    row.assign(S, 0.0f);
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < S; ++j) row[j] += ev.t.data[(size_t(h) * T + (T - 1)) * S + j] / H;
  });
  const int n = 500;
  int samples_ok = 0, digits_ok = 0, digits = 0;
  for (int i = 0; i < n; ++i) {
    ds::train::TextSample s = task.sample(rng);
    const std::string year = s.answer.substr(0, 4);
    // Source positions of the year: the last occurrence of the four digits in the text
    // (a day or month never repeats all four).
    size_t at = s.input.rfind(year);
    ASSERT_NE(at, std::string::npos) << s.input;
    std::vector<int> src = m.tokenizer->encode(s.input, false);
    ASSERT_EQ(src.size(), s.input.size());  // one id per (ASCII) character
    e.encode(src);
    // Teacher-forced: feed <s> and the right year digits, reading the attention of the
    // row that writes each digit.
    std::vector<int> feed = {c.bos_id};
    for (int k = 0; k < 4; ++k) feed.push_back(m.tokenizer->encode(year.substr(k, 1), false)[0]);
    bool all = true;
    for (int k = 0; k < 4; ++k) {
      e.forward(std::vector<int>{feed[k]});
      int best = int(std::max_element(row.begin(), row.end()) - row.begin());
      bool ok = best >= int(at) && best < int(at) + 4;
      digits_ok += ok;
      ++digits;
      all = all && ok;
    }
    samples_ok += all;
  }
  double frac = double(samples_ok) / n;
  EXPECT_GE(frac, 0.90) << "samples whose four year digits all read the year";
  std::printf("%s layer 0 cross-attention on the year: %.1f%% of samples, %.1f%% of digits\n", name.c_str(),
              100.0 * frac, 100.0 * digits_ok / digits);
}

}  // namespace

TEST(BuiltinModels, DatesConvertsFreshDatesInEveryFormat) { expect_dates_converted("dates", kFreshSeed); }

TEST(BuiltinModels, DatesYearDigitsReadTheYearThroughCrossAttention) {
  expect_year_read_through_cross_attention("dates", kFreshSeed + 1);
}

// The original Transformer's architecture, as the seeds describe it: LayerNorm after
// each sub-layer's residual add ("Add & Norm"), so no norm after the last block of
// either stack; sinusoidal positions; ReLU feed-forward; embeddings times
// sqrt(d_model); the size of builtin:dates.
TEST(BuiltinModels, DatesPostnormIsTheOriginalArchitecture) {
  ds::LoadedModel m = load_or_skip("dates-postnorm");
  const ds::Config& c = m.model->cfg;
  EXPECT_TRUE(c.encoder_decoder);
  EXPECT_EQ(c.norm, ds::NormKind::LayerNorm);
  EXPECT_EQ(c.norm_place, ds::NormPlace::Post);
  EXPECT_EQ(c.pos, ds::PosKind::Sinusoidal);
  EXPECT_EQ(c.ffn, ds::FFNKind::ReLU);
  EXPECT_FALSE(c.final_norm);
  EXPECT_FALSE(c.enc_final_norm);
  EXPECT_TRUE(c.scale_embed);
  EXPECT_TRUE(m.model->w.ln_final.g.size() == 0 && m.model->w.enc_ln_final.g.size() == 0) << "no final norm weights";
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_enc_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
}

TEST(BuiltinModels, DatesPostnormConvertsFreshDatesInEveryFormat) {
  expect_dates_converted("dates-postnorm", kFreshSeed + 3);
}

TEST(BuiltinModels, DatesPostnormYearDigitsReadTheYearThroughCrossAttention) {
  expect_year_read_through_cross_attention("dates-postnorm", kFreshSeed + 4);
}

TEST(BuiltinModels, AdderAddsFreshPairs) {
  ds::LoadedModel m = load_or_skip("adder");
  const ds::Config& c = m.model->cfg;
  ASSERT_FALSE(c.encoder_decoder);
  ds::train::Task task = ds::train::Task::make("adder");
  ds::train::SplitMix rng(kFreshSeed + 2);
  ds::Engine e(m.model);
  int right = 0;
  std::vector<std::string> wrong;
  for (int i = 0; i < kSamples; ++i) {
    ds::train::TextSample s = task.sample(rng);
    // Independent check of the sample itself: the answer is a+b written reversed.
    int a = std::stoi(s.input.substr(0, s.input.find('+')));
    int b = std::stoi(s.input.substr(s.input.find('+') + 1));
    std::string sum = std::to_string(a + b);
    ASSERT_EQ(s.answer, std::string(sum.rbegin(), sum.rend())) << s.input;
    std::vector<int> prompt = m.tokenizer->encode(s.input, true);
    std::vector<int> out = greedy(e, {}, prompt, c.eos_id, 6);
    bool ok = text_of(*m.tokenizer, out) == s.answer;
    right += ok;
    if (!ok && wrong.size() < 10) wrong.push_back(s.input + " -> " + text_of(*m.tokenizer, out));
  }
  double acc = double(right) / kSamples;
  std::string report;
  for (auto& w : wrong) report += "\n  " + w;
  EXPECT_GE(acc, 0.99) << "exact match " << acc << "; some misses:" << report;
  std::printf("adder: %d / %d exact (%.2f%%)\n", right, kSamples, 100.0 * acc);
}

namespace {

// Every shipped model records the command that trains it again, and that command
// writes into the folder the model ships in (README, "Built-in models"): a copy of
// the command can be run as it is from the repository's root.
TEST(BuiltinModels, TrainingCommandWritesIntoTheShippedFolder) {
  for (const char* name : {"dates", "dates-postnorm", "adder", "stories"}) {
    SCOPED_TRACE(name);
    const ds::LoadedModel m = load_or_skip(name);
    const nlohmann::json t = nlohmann::json::parse(m.training);
    const std::string command = t.at("command").get<std::string>();
    EXPECT_EQ(command.rfind("decoderscope-cli train --task ", 0), 0u) << command;
    EXPECT_NE(command.find(" --out assets/models/" + std::string(name) + " "), std::string::npos) << command;
  }
}

}  // namespace
