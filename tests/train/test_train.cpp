// Training tests: the hand-written backward pass against central differences on every
// parameter tensor (double precision), the trainer's forward against ds::Engine
// (exported weights give the same logits), a short run that lowers the loss,
// checkpoint/resume (after a stop and after SIGKILL) and thread-count independence,
// the CLI's spelling of the post-norm architecture, and the task generators against
// independent checks (std::chrono calendar and weekday, regular expressions).
//
// Tolerances:
//   gradient check     |analytic - numeric| / max(|analytic|, |numeric|, 1e-4) <= 1e-5
//                      (the floor: central differences of a loss ~10 with h = 1e-5
//                      carry ~1e-10 of rounding noise; entries where both are below
//                      the noise of the summed loss, max(1e-9, 4 ulp(loss) / 2h), are
//                      skipped: a key bias's exact zero reads as 1.4e-9 on a loss
//                      above 128)
//   trainer vs engine  max abs logit diff / max abs logit <= 1e-4
#include <gtest/gtest.h>

#include "helpers.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/tasks.h"
#include "train/train.h"
#include "train/trainer.h"

namespace {

using ds::train::Example;
using ds::train::SplitMix;
using ds::train::Task;
using ds::train::Trainer;

struct Variant {
  const char* name;
  ds::Config cfg;
  bool separate_enc_embed;
};

// The shared small configs, narrower (gradient checks are cheap at d_model 16) and
// with the tasks' special ids.
ds::Config tiny(bool enc_dec, int vocab) {
  ds::Config c = ds::test::small_config(enc_dec ? ds::test::Arch::EncDec : ds::test::Arch::GPT2, vocab);
  c.d_model = 16, c.n_heads = c.n_kv_heads = 2, c.d_ff = 24, c.max_seq = 16, c.max_src = 40;
  c.bos_id = Task::kBos, c.eos_id = Task::kEos, c.pad_id = Task::kPad;
  return c;
}

std::vector<Variant> variants() {
  const int vd = Task::make("dates").vocab_size(), va = Task::make("adder").vocab_size();
  std::vector<Variant> v;
  {
    ds::Config c = tiny(true, vd);  // the dates model's kind: learned, GELU, tied
    v.push_back({"encdec_learned_gelu_tied", c, false});
  }
  {
    ds::Config c = tiny(true, vd);
    c.pos = ds::PosKind::Sinusoidal;
    c.ffn = ds::FFNKind::ReLU;
    c.tied_head = false;
    c.scale_embed = true;
    c.norm_bias = false;
    c.attn_bias = false;
    c.enc_final_norm = false;
    v.push_back({"encdec_sinusoidal_relu_separate", c, true});
  }
  {
    ds::Config c = tiny(false, va);  // the adder model's kind: learned, ReLU, separate head
    c.ffn = ds::FFNKind::ReLU;
    c.tied_head = false;
    v.push_back({"decoder_learned_relu_separate", c, false});
  }
  {
    ds::Config c = tiny(false, va);
    c.pos = ds::PosKind::Sinusoidal;
    c.final_norm = false;
    c.ffn_bias = false;
    v.push_back({"decoder_sinusoidal_gelu_tied", c, false});
  }
  {
    ds::Config c = tiny(false, va);  // GPT-style decoder with the original's Add & Norm
    c.norm_place = ds::NormPlace::Post;
    c.final_norm = false;
    c.pos = ds::PosKind::Sinusoidal;
    c.ffn = ds::FFNKind::ReLU;
    v.push_back({"decoder_post_sinusoidal_relu", c, false});
  }
  {
    ds::Config c = tiny(true, vd);  // the original Transformer: the dates-postnorm model's kind
    c.norm_place = ds::NormPlace::Post;
    c.final_norm = false;
    c.enc_final_norm = false;
    c.pos = ds::PosKind::Sinusoidal;
    c.ffn = ds::FFNKind::ReLU;
    c.scale_embed = true;
    v.push_back({"encdec_post_sinusoidal_relu_tied", c, false});
  }
  {
    ds::Config c = tiny(true, vd);  // post-norm with final norms on both stacks
    c.norm_place = ds::NormPlace::Post;
    c.tied_head = false;
    c.norm_bias = false;
    v.push_back({"encdec_post_learned_gelu_final_norms", c, true});
  }
  return v;
}

// Two examples of the variant's task; encoder sources padded to a common length.
std::vector<Example> examples(const ds::Config& c, uint64_t seed) {
  Task task = Task::make(c.encoder_decoder ? "dates" : "adder");
  SplitMix rng(seed);
  std::vector<Example> ex = {task.example(rng), task.example(rng)};
  if (c.encoder_decoder) {
    size_t len = std::max(ex[0].src.size(), ex[1].src.size()) + 3;
    for (auto& e : ex) e.src.resize(len, Task::kPad);
  }
  return ex;
}

ds::Weights random_weights(const Variant& v, uint64_t seed, float scale) {
  ds::Weights w = ds::Weights::random(v.cfg, seed, scale);
  if (v.separate_enc_embed) {
    SplitMix r(seed + 99);
    w.enc_tok_embed = ds::MatRM(v.cfg.vocab_size, v.cfg.d_model);
    for (int i = 0; i < w.enc_tok_embed.size(); ++i) w.enc_tok_embed.data()[i] = float(scale * r.normal());
  }
  return w;
}

// gtest prints a parameter on failure: print the variant's name, not its bytes.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class TrainVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(TrainVariant, GradientMatchesCentralDifferencesOnEveryTensor) {
  const Variant& v = GetParam();
  Trainer<double> tr(v.cfg, v.separate_enc_embed);
  tr.from_weights(random_weights(v, 7, 0.3f));
  auto exs = examples(v.cfg, 3);
  std::unique_ptr<Trainer<double>::Workspace, void (*)(Trainer<double>::Workspace*)> ws(
      tr.new_workspace(), &Trainer<double>::delete_workspace);
  auto loss = [&] {
    double l = 0;
    for (auto& e : exs) l += tr.step(e, *ws, nullptr, 1.0, nullptr);
    return l;
  };
  std::vector<double> g(tr.size(), 0.0);
  for (auto& e : exs) tr.step(e, *ws, g.data(), 1.0, nullptr);

  SplitMix pick(11);
  const double h = 1e-5;
  const double noise = std::max(1e-9, 4 * std::numeric_limits<double>::epsilon() * std::abs(loss()) / (2 * h));
  double worst = 0;
  std::string worst_name;
  int checked_tensors = 0;
  for (auto& t : tr.tensors()) {
    bool any = false;
    double tensor_worst = 0;
    for (int k = 0; k < 6; ++k) {
      size_t i = t.offset + size_t(pick.next() % t.size());
      double& p = tr.params()[i];
      const double keep = p;
      p = keep + h;
      double lp = loss();
      p = keep - h;
      double lm = loss();
      p = keep;
      double num = (lp - lm) / (2 * h), ana = g[i];
      if (std::abs(num) < noise && std::abs(ana) < noise) continue;
      any = true;
      double rel = std::abs(num - ana) / std::max({std::abs(num), std::abs(ana), 1e-4});
      if (rel > 1e-5) std::printf("  %s[%zu]: analytic %.10e numeric %.10e\n", t.name.c_str(), i - t.offset, ana, num);
      tensor_worst = std::max(tensor_worst, rel);
    }
    // Embedding rows of ids the examples never use have zero gradient: check that
    // the tensor was reached at all through a used row.
    if (!any && (t.name.find("tok_embed") != std::string::npos || t.name.find("lm_head") != std::string::npos ||
                 t.name.find("pos_embed") != std::string::npos)) {
      continue;
    }
    // A key bias adds the same q.b to every score of a row, which the softmax ignores:
    // its gradient is exactly zero (and the numeric one too, checked above).
    if (!any && t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, ".k.b") == 0) continue;
    EXPECT_TRUE(any) << t.name << ": every sampled entry has zero gradient";
    EXPECT_LE(tensor_worst, 1e-5) << t.name;
    if (tensor_worst > worst) {
      worst = tensor_worst;
      worst_name = t.name;
    }
    ++checked_tensors;
  }
  std::printf("[ gradcheck ] %s: %d tensors, worst relative error %.2e (%s)\n", v.name, checked_tensors, worst,
              worst_name.c_str());
}

// The trainer's forward (float) against ds::Engine on exported weights.
void expect_same_logits(const Trainer<float>& tr, const ds::Config& cfg, const std::vector<Example>& exs) {
  auto model = std::make_shared<const ds::Model>(cfg, tr.to_weights());
  ds::Engine e(model);
  std::unique_ptr<Trainer<float>::Workspace, void (*)(Trainer<float>::Workspace*)> ws(
      tr.new_workspace(), &Trainer<float>::delete_workspace);
  for (auto& ex : exs) {
    auto mine = tr.logits(ex, *ws);
    if (cfg.encoder_decoder) e.encode(ex.src);
    ds::MatRM eng = e.forward_full(ex.tokens);
    ASSERT_EQ(eng.rows(), mine.rows());
    ASSERT_EQ(eng.cols(), mine.cols());
    double scale = std::max(1e-6, double(eng.cwiseAbs().maxCoeff()));
    double diff = double((eng - mine).cwiseAbs().maxCoeff());
    EXPECT_LE(diff / scale, 1e-4) << "max abs diff " << diff << " of max " << scale;
  }
}

TEST_P(TrainVariant, ExportedWeightsGiveTheSameLogitsInTheEngine) {
  const Variant& v = GetParam();
  Trainer<float> tr(v.cfg, v.separate_enc_embed);
  tr.from_weights(random_weights(v, 5, 0.2f));
  expect_same_logits(tr, v.cfg, examples(v.cfg, 9));
}

INSTANTIATE_TEST_SUITE_P(All, TrainVariant, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return std::string(i.param.name); });

// A small, short run of a task; norm "post" gives the original Transformer's blocks
// (post-norm, sinusoidal positions, ReLU, scaled embeddings, no final norms).
ds::train::TrainSpec tiny_spec(const std::string& task, int steps, const std::string& norm = "pre") {
  auto s = ds::train::default_spec(task, norm);
  if (norm == "post") s.pos = "sinusoidal", s.ffn = "relu", s.scale_embed = true;
  s.d_model = 32;
  s.n_heads = 2;
  s.d_ff = 64;
  s.n_layers = 1;
  s.n_enc_layers = 1;
  s.batch = 16;
  s.steps = steps;
  s.warmup = 10;
  s.lr = 3e-3;
  s.eval_every = 1000000;
  s.val_samples = 20;
  s.checkpoint_every = 0;
  return s;
}

TEST(Train, ShortRunLowersTheLossAndExportsWhatItTrained) {
  for (auto [task, norm] : {std::pair{"adder", "pre"}, {"dates", "pre"}, {"dates", "post"}, {"stories", "pre"}}) {
    SCOPED_TRACE(std::string(task) + ", " + norm + "-norm");
    const std::string name = task;
    auto spec = tiny_spec(task, name == "adder" ? 800 : name == "stories" ? 600 : 300, norm);
    if (name == "stories") spec.batch = 8;  // longer sequences
    auto r = ds::train::run_training(spec, "", 2, nullptr, nullptr);
    std::printf("[ train ] %s, %s-norm: loss %.3f -> %.3f in %d steps, %.1f s\n", task, norm, r.first_loss, r.last_loss,
                r.step, r.elapsed);
    EXPECT_EQ(r.cfg.norm_place, std::string(norm) == "post" ? ds::NormPlace::Post : ds::NormPlace::Pre);
    EXPECT_GT(r.first_loss, 2.0);
    // stories: the training loss also counts the copying exercises' first span, random
    // words no model can predict (about ln V each), so the held-out stories' loss is the
    // figure that must fall.
    if (name == "stories") {
      EXPECT_GT(r.val_loss, 0.0);
    }
    EXPECT_LT(name == "stories" ? r.val_loss : r.last_loss, 0.6 * r.first_loss);
    // The exported (trained) weights run in the engine exactly as in the trainer.
    Trainer<float> tr(r.cfg);
    tr.from_weights(r.weights);
    Task t = Task::make(task);
    SplitMix rng(77);
    expect_same_logits(tr, r.cfg, {t.example(rng), t.example(rng), t.example(rng)});
  }
}

struct ResumeCase {
  const char* task;
  const char* norm;
};
void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.task << "_" << c.norm; }

class Resume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(Resume, InterruptedRunResumesToTheSameWeightsWhateverTheThreads) {
  namespace fs = std::filesystem;
  auto spec = tiny_spec(GetParam().task, 16, GetParam().norm);
  spec.eval_every = 4;  // reports every 4 steps
  spec.checkpoint_every = 4;
  auto full = ds::train::run_training(spec, "", 1, nullptr, nullptr);

  ds::test::TempDir tmp;
  const fs::path dir = tmp.path("run");
  std::atomic<bool> stop{false};
  auto part = ds::train::run_training(
      spec, dir.string(), 2, [&](const ds::train::TrainProgress& p) { stop = p.step >= 8; }, &stop);
  EXPECT_TRUE(part.interrupted);
  EXPECT_EQ(part.step, 8);
  EXPECT_TRUE(fs::exists(ds::train::checkpoint_path(dir.string())));
  auto rest = ds::train::run_training(spec, dir.string(), 2, nullptr, nullptr);
  EXPECT_TRUE(rest.resumed);
  EXPECT_EQ(rest.step, 16);
  auto a = full.weights.tensors(), b = rest.weights.tensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (int64_t j = 0; j < a[i].rows * a[i].cols; ++j) ASSERT_EQ(a[i].data[j], b[i].data[j]) << a[i].name;
  // A run killed outright (no chance to save) resumes from its last periodic
  // checkpoint, step 8 here: the report at step 12 comes before that step's checkpoint.
  const fs::path killed = tmp.path("killed");
  EXPECT_EXIT(
      {
        ds::train::run_training(
            spec, killed.string(), 2,
            [&](const ds::train::TrainProgress& p) {
              if (p.step >= 12) std::raise(SIGKILL);
            },
            nullptr);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");
  auto after_kill = ds::train::run_training(spec, killed.string(), 1, nullptr, nullptr);
  EXPECT_TRUE(after_kill.resumed);
  auto k = after_kill.weights.tensors();
  ASSERT_EQ(a.size(), k.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (int64_t j = 0; j < a[i].rows * a[i].cols; ++j) ASSERT_EQ(a[i].data[j], k[i].data[j]) << a[i].name;
  // Another run's settings are refused rather than silently mixed.
  auto other = spec;
  other.seed = 2;
  EXPECT_THROW(ds::train::run_training(other, dir.string(), 1, nullptr, nullptr), std::exception);
}

INSTANTIATE_TEST_SUITE_P(Tasks, Resume,
                         ::testing::Values(ResumeCase{"adder", "pre"}, ResumeCase{"dates", "pre"},
                                           ResumeCase{"dates", "post"}, ResumeCase{"stories", "pre"}),
                         [](const ::testing::TestParamInfo<ResumeCase>& i) {
                           return std::string(i.param.task) + "_" + i.param.norm;
                         });

// The CLI's spelling of the original architecture reaches the model folder, and the
// command recorded in config.json is the one that was run.
TEST(Train, CliTrainsThePostNormArchitectureAndRecordsTheCommand) {
  ds::test::TempDir tmp;
  const std::string out = tmp.path("pn");
  const std::string args = "--task dates --norm post --pos sinusoidal --ffn relu --scale-embed --warmup 2 --out " +
                           out + " --seed 3 --steps 4";
  auto r = ds::test::run_cli("train " + args + " --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(ds::test::read_file(std::filesystem::path(out) / "config.json"));
  EXPECT_EQ(j["norm_place"], "post");
  EXPECT_EQ(j["pos"], "sinusoidal");
  EXPECT_EQ(j["ffn"], "relu");
  EXPECT_EQ(j["norm"], "layernorm");
  EXPECT_EQ(j["final_norm"], false);
  EXPECT_EQ(j["enc_final_norm"], false);
  EXPECT_EQ(j["scale_embed"], true);
  EXPECT_EQ(j["training"]["command"], "decoderscope-cli train " + args);
  EXPECT_EQ(j["training"]["spec"]["warmup"], 2);
  EXPECT_FALSE(std::filesystem::exists(ds::train::checkpoint_path(out)));
  // Unknown values are refused with the option's name.
  auto bad = ds::test::run_cli("train --task dates --norm middle --out " + tmp.path("bad"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("norm placement 'middle'"), std::string::npos) << bad.err;
  bad = ds::test::run_cli("train --task dates --lr 0 --out " + tmp.path("bad"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--lr"), std::string::npos) << bad.err;
}

// ---- task generators

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST(Tasks, DatesAreValidInEveryFormatWithTheRightWeekdayAndTarget) {
  using namespace std::chrono;
  Task task = Task::make("dates");
  const char* months[] = {"january", "february", "march",     "april",   "may",      "june",
                          "july",    "august",   "september", "october", "november", "december"};
  const char* wdays[] = {"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"};  // C++ order
  auto month_of = [&](const std::string& name) {
    for (int i = 0; i < 12; ++i)
      if (name == months[i] || name == std::string(months[i]).substr(0, 3)) return i + 1;
    return 0;
  };
  const std::string MON = "([A-Za-z]+)";
  // Per format: regex and which group holds day, month, year, weekday (0: none).
  struct Fmt {
    std::regex re;
    int d, m, y, w;
    bool month_full, month_abbr;
  };
  std::vector<Fmt> fmts = {
      {std::regex("^(\\d{1,2}) " + MON + " (\\d{4})$", std::regex::icase), 1, 2, 3, 0, true, false},
      {std::regex("^" + MON + " (\\d{1,2}), (\\d{4})$", std::regex::icase), 2, 1, 3, 0, true, false},
      {std::regex("^" + MON + " (\\d{1,2}), (\\d{4})$", std::regex::icase), 2, 1, 3, 0, false, true},
      {std::regex("^(\\d{1,2}) " + MON + " (\\d{4})$", std::regex::icase), 1, 2, 3, 0, false, true},
      {std::regex("^" + MON + "\\. (\\d{1,2}) (\\d{4})$", std::regex::icase), 2, 1, 3, 0, false, true},
      {std::regex("^" + MON + ", (\\d{1,2}) " + MON + " (\\d{4})$", std::regex::icase), 2, 3, 4, 1, true, false},
      {std::regex("^" + MON + " (\\d{1,2}) " + MON + " (\\d{4})$", std::regex::icase), 2, 3, 4, 1, false, true},
      {std::regex("^the (\\d{1,2})(st|nd|rd|th) of " + MON + " (\\d{4})$", std::regex::icase), 1, 3, 4, 0, true, false},
      {std::regex("^" + MON + " (\\d{1,2})(st|nd|rd|th), (\\d{4})$", std::regex::icase), 2, 1, 4, 0, true, false},
      {std::regex("^(\\d{1,2})\\.(\\d{1,2})\\.(\\d{4})$", std::regex::icase), 1, 2, 3, 0, false, false},
      {std::regex("^(\\d{1,2})/(\\d{1,2})/(\\d{4})$", std::regex::icase), 1, 2, 3, 0, false, false},
      {std::regex("^(\\d{4})/(\\d{1,2})/(\\d{1,2})$", std::regex::icase), 3, 2, 1, 0, false, false},
      {std::regex("^(\\d{1,2})-(\\d{1,2})-(\\d{4})$", std::regex::icase), 1, 2, 3, 0, false, false},
  };
  ASSERT_EQ(int(fmts.size()), int(ds::train::kNumDateFormats));
  SplitMix rng(2024);
  std::map<int, int> per_format;
  std::set<std::string> seen;  // format:case:padded variants
  std::set<int> years;
  for (int n = 0; n < 8000; ++n) {
    auto s = task.sample(rng);
    SCOPED_TRACE(s.input);
    ASSERT_GE(s.format, 0);
    ASSERT_LT(s.format, int(fmts.size()));
    ASSERT_LE(int(s.input.size()), task.max_input());
    per_format[s.format]++;
    // Target: YYYY-MM-DD of a valid date in 1900-2099.
    std::smatch t;
    ASSERT_TRUE(std::regex_match(s.answer, t, std::regex("^(\\d{4})-(\\d{2})-(\\d{2})$"))) << s.answer;
    int ty = std::stoi(t[1]), tm = std::stoi(t[2]), td = std::stoi(t[3]);
    year_month_day ymd{year{ty}, month{unsigned(tm)}, day{unsigned(td)}};
    ASSERT_TRUE(ymd.ok());
    ASSERT_GE(ty, 1900);
    ASSERT_LE(ty, 2099);
    years.insert(ty);
    // The source says the same date.
    const Fmt& f = fmts[size_t(s.format)];
    std::smatch mt;
    ASSERT_TRUE(std::regex_match(s.input, mt, f.re)) << ds::train::date_format_name(s.format);
    ASSERT_EQ(std::stoi(mt[size_t(f.y)]), ty);
    ASSERT_EQ(std::stoi(mt[size_t(f.d)]), td);
    std::string mstr = mt[size_t(f.m)];
    if (f.month_full || f.month_abbr) {
      std::string lm = lower(mstr);
      ASSERT_EQ(month_of(lm), tm);
      ASSERT_EQ(lm, f.month_abbr ? std::string(months[tm - 1]).substr(0, 3) : std::string(months[tm - 1]));
    } else {
      ASSERT_EQ(std::stoi(mstr), tm);
    }
    if (f.w) {
      std::string lw = lower(mt[size_t(f.w)]);
      unsigned wd = weekday{sys_days{ymd}}.c_encoding();
      std::string want = wdays[wd];
      if (f.month_abbr) want = want.substr(0, 3);
      ASSERT_EQ(lw, want);
    }
    // Ordinal suffixes are right.
    if (s.format == ds::train::kTheDthOfMonthY || s.format == ds::train::kMonthDthY) {
      std::string suf = lower(mt[size_t(f.d + 1)]);
      std::string want = (td % 10 == 1 && td != 11)   ? "st"
                         : (td % 10 == 2 && td != 12) ? "nd"
                         : (td % 10 == 3 && td != 13) ? "rd"
                                                      : "th";
      ASSERT_EQ(suf, want);
      ASSERT_NE(std::string(mt[size_t(f.d)])[0], '0');
    }
    // Letter case: as written, all lower or all upper.
    bool has_upper = std::any_of(s.input.begin(), s.input.end(), [](char c) { return std::isupper((unsigned char)c); });
    bool has_lower = std::any_of(s.input.begin(), s.input.end(), [](char c) { return std::islower((unsigned char)c); });
    std::string kase = has_upper && has_lower ? "mixed" : has_upper ? "upper" : has_lower ? "lower" : "none";
    bool padded = std::string(mt[size_t(f.d)])[0] == '0' || (!f.month_full && !f.month_abbr && mstr[0] == '0');
    seen.insert(std::to_string(s.format) + ":" + kase + ":" + (padded ? "0" : "-"));
    // Round trip through the vocabulary.
    auto ex = task.example(s);
    EXPECT_EQ(task.decode(std::vector<int>(ex.targets.begin(), ex.targets.end())), s.answer);
  }
  for (int f = 0; f < ds::train::kNumDateFormats; ++f) {
    EXPECT_GT(per_format[f], 400) << ds::train::date_format_name(f);
    bool numeric = f >= ds::train::kDotted;
    for (std::string k :
         numeric ? std::vector<std::string>{"none"} : std::vector<std::string>{"mixed", "upper", "lower"}) {
      EXPECT_TRUE(seen.count(std::to_string(f) + ":" + k + ":-")) << f << " " << k;
      if (f != ds::train::kTheDthOfMonthY && f != ds::train::kMonthDthY) {
        EXPECT_TRUE(seen.count(std::to_string(f) + ":" + k + ":0")) << f << " " << k << " zero-padded";
      }
    }
  }
  EXPECT_EQ(years.size(), 200u);
}

TEST(Tasks, AdderPromptsAndReversedSums) {
  Task task = Task::make("adder");
  SplitMix rng(5);
  std::set<int> lens;
  for (int n = 0; n < 5000; ++n) {
    auto s = task.sample(rng);
    std::smatch m;
    ASSERT_TRUE(std::regex_match(s.input, m, std::regex("^(0|[1-9]\\d{0,2})\\+(0|[1-9]\\d{0,2})=$"))) << s.input;
    int a = std::stoi(m[1]), b = std::stoi(m[2]);
    lens.insert(int(std::string(m[1]).size()));
    std::string sum = std::to_string(a + b);
    ASSERT_EQ(std::string(s.answer.rbegin(), s.answer.rend()), sum);
    auto ex = task.example(s);
    // Loss only on the answer and </s>.
    int n_targets = 0;
    for (int y : ex.targets) n_targets += y >= 0;
    EXPECT_EQ(n_targets, int(s.answer.size()) + 1);
    EXPECT_EQ(ex.targets.back(), Task::kEos);
    EXPECT_LE(int(ex.tokens.size()), task.max_seq());
  }
  EXPECT_EQ(lens, (std::set<int>{1, 2, 3}));
  EXPECT_THROW(task.encode("12a"), std::exception);
}

}  // namespace
