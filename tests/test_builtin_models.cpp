// The shipped built-in models, as the app and the CLI load them (builtin:NAME), on
// fresh samples drawn with a seed no training run used. Greedy decoding is written
// here directly on the engine, independent of the training code's own evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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

}  // namespace

TEST(BuiltinModels, DatesConvertsFreshDatesInEveryFormat) {
  ds::LoadedModel m = load_or_skip("dates");
  ASSERT_TRUE(m.tokenizer);
  const ds::Config& c = m.model->cfg;
  ASSERT_TRUE(c.encoder_decoder);
  ds::train::Task task = ds::train::Task::make("dates");
  ds::train::SplitMix rng(kFreshSeed);
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
  for (auto& [f, rt] : per_format) EXPECT_GE(rt.second, 40) << "format " << f << " is rarely sampled";
  std::printf("dates: %d / %d exact (%.2f%%)\n", right, kSamples, 100.0 * acc);
}

TEST(BuiltinModels, DatesYearDigitsReadTheYearThroughCrossAttention) {
  // For each of the four year digits written, the cross-attention of decoder layer 0,
  // averaged over its heads, should put its largest weight on a year character of the
  // source.
  ds::LoadedModel m = load_or_skip("dates");
  const ds::Config& c = m.model->cfg;
  ds::train::Task task = ds::train::Task::make("dates");
  ds::train::SplitMix rng(kFreshSeed + 1);
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
  std::printf("dates layer 0 cross-attention on the year: %.1f%% of samples, %.1f%% of digits\n", 100.0 * frac,
              100.0 * digits_ok / digits);
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
