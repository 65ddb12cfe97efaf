// decoderscope-cli train | eval | batch: training the built-in models, measuring them
// through the normal loader and engine (what ships), and running one input per line.
//
//   train --task dates|adder|stories --out DIR [--seed S] [--steps N] [--threads N]
//         [--norm pre|post] [--pos learned|sinusoidal] [--ffn gelu|relu] [--scale-embed]
//         [--lr X] [--warmup N] [--force]
//   eval  --model DIR --task dates|adder|stories --samples N [--seed S] [--attention]
//   batch --model DIR [--threads N]
#include "train_cmds.h"

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/loader.h"
#include "io/model_folder.h"
#include "model/model.h"
#include "train/stories.h"
#include "train/story_eval.h"
#include "train/tasks.h"
#include "train/train.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;
using ds::Error;
using ds::train::Task;

struct Opts {
  std::string cmd;
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  std::string str(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  long long integer(const std::string& k, long long def, long long lo, long long hi) const {
    if (!has(k)) return def;
    const std::string& s = kv.at(k);
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || v < lo || v > hi)
      throw Error("--" + k + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" +
                  s + "'");
    return v;
  }
  double number(const std::string& k, double def, double lo, double hi) const {
    if (!has(k)) return def;
    const std::string& s = kv.at(k);
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end || !(v >= lo && v <= hi))
      throw Error("--" + k + " must be a number in " + shortest(lo) + ".." + shortest(hi) + ", got '" + s + "'");
    return v;
  }
  static std::string shortest(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
  }
};

Opts parse(int argc, char** argv, std::initializer_list<const char*> known, std::initializer_list<const char*> flags) {
  Opts o;
  o.cmd = argc > 1 ? argv[1] : "";
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0 || s.size() <= 2) throw Error(o.cmd + ": unexpected argument '" + s + "'");
    std::string k = s.substr(2), v;
    bool is_flag = false;
    for (auto* f : flags) is_flag |= k == f;
    if (auto eq = k.find('='); eq != std::string::npos) {
      v = k.substr(eq + 1);
      k = k.substr(0, eq);
    } else if (!is_flag) {
      if (i + 1 >= argc) throw Error("option --" + k + " needs a value");
      v = argv[++i];
    }
    bool ok = is_flag;
    for (auto* n : known) ok |= k == n;
    if (!ok) throw Error("unknown option --" + k + " for " + o.cmd);
    o.kv[k] = v;
  }
  return o;
}

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop.store(true); }

std::string duration(double s) {
  int t = int(s + 0.5);
  char b[32];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%dh%02dm%02ds", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%dm%02ds", t / 60, t % 60);
  return b;
}

// Greedy output of one input through a loaded model: the generated ids (</s> and
// anything after it dropped). Throws ds::Error for bad input.
std::vector<int> run_one(ds::Engine& e, const ds::LoadedModel& m, const std::string& input) {
  const ds::Config& c = m.model->cfg;
  if (!m.tokenizer) throw Error("the model has no tokenizer");
  if (input.empty()) throw Error("empty input");
  std::vector<int> ids = m.tokenizer->encode(input, false);
  std::vector<int> src, prompt;
  if (c.encoder_decoder) {
    if (int(ids.size()) > c.max_src)
      throw Error("input of " + std::to_string(ids.size()) + " characters; this model reads at most " +
                  std::to_string(c.max_src));
    src = ids;
    prompt = {c.bos_id};
  } else {
    prompt.reserve(ids.size() + 1);
    if (c.bos_id >= 0) prompt.push_back(c.bos_id);
    for (int id : ids) prompt.push_back(id);
    if (int(prompt.size()) >= c.max_seq)
      throw Error("input of " + std::to_string(ids.size()) + " characters leaves no room to answer in this model's " +
                  std::to_string(c.max_seq) + " positions");
  }
  int eos = c.eos_id >= 0 ? c.eos_id : (m.stop_ids.empty() ? -1 : m.stop_ids[0]);
  auto out = ds::train::greedy_decode(e, src, prompt, eos, c.max_seq);
  if (!out.empty() && out.back() == eos) out.pop_back();
  return out;
}

std::string text_of(const ds::LoadedModel& m, const std::vector<int>& ids) {
  std::string s;
  int prev = -1;
  for (int id : ids) {
    s += m.tokenizer->decode(prev, id);
    prev = id;
  }
  return s;
}

// The command that reproduces a run: the options that determine it, in one order
// (--threads does not change the result and is left out).
std::string command_line(const Opts& o, const ds::train::TrainSpec& spec) {
  std::string c = "decoderscope-cli train --task " + spec.task;
  for (const char* k : {"norm", "pos", "ffn", "scale-embed", "lr", "warmup"})
    if (o.has(k)) c += std::string(" --") + k + (o.str(k).empty() ? "" : " " + o.str(k));
  return c + " --out " + o.str("out") + " --seed " + std::to_string(spec.seed) + " --steps " +
         std::to_string(spec.steps);
}

// The run's settings: the task's defaults (for the norm placement asked for), then the
// options given.
ds::train::TrainSpec spec_from(const Opts& o) {
  ds::train::TrainSpec spec = ds::train::default_spec(o.str("task"), o.str("norm", "pre"));
  spec.seed = uint64_t(o.integer("seed", 1, 0, (1LL << 53)));
  spec.steps = int(o.integer("steps", spec.steps, 1, 10000000));
  if (o.has("pos")) spec.pos = o.str("pos");
  if (o.has("ffn")) spec.ffn = o.str("ffn");
  if (o.has("scale-embed")) spec.scale_embed = true;
  spec.lr = o.number("lr", spec.lr, 1e-6, 1.0);
  spec.warmup = int(o.integer("warmup", spec.warmup, 1, 10000000));
  return spec;
}

// The figures of a stories model, printed and returned for config.json: perplexity on
// `held` fresh stories against a Kneser-Ney trigram fitted on the first `steps` steps'
// training stories of spec, the grammar of 200 stories sampled at temperature 0.8 from
// "Once upon a time", copying names on 500 prompts, and induction on random words.
nlohmann::json story_figures(const std::shared_ptr<const ds::Model>& model, const Task& task,
                             const ds::train::TrainSpec& spec, int steps, uint64_t seed, int held) {
  namespace tr = ds::train;
  std::vector<std::vector<int>> fresh;
  for (const auto& s : tr::fresh_samples(task, seed, held)) {
    tr::Example ex = task.example(s);
    ex.tokens.push_back(ex.targets.back());
    fresh.push_back(std::move(ex.tokens));
  }
  long n = 0, tn = 0;
  const double nll = tr::mean_nll(model, fresh, &n);
  tr::KneserNeyTrigram kn(task.vocab_size());
  const auto stories = tr::training_stories(spec, steps);
  for (const auto& s : stories) kn.add(s);
  double tri = 0;
  for (const auto& s : fresh) {
    long c = 0;
    tri += kn.nll(s, &c);
    tn += c;
  }
  const double ppl = std::exp(nll), tri_ppl = std::exp(tri / double(std::max(1L, tn)));
  const auto sampled = tr::sample_stories(model, task, "Once upon a time", 200, 0.8, seed + 1);
  const auto copy = tr::name_copying(model, task, tr::fresh_samples(task, seed + 2, 1000), 500);
  const auto ind = tr::induction_scores(model, 20, 20, seed + 3, 4);
  const size_t b = size_t(ind.best);
  const double grammar = double(sampled.grammatical) / std::max(1, sampled.sentences);
  const double copying = double(copy.right) / std::max(1, copy.prompts);
  std::printf(
      "held-out perplexity %.3f per token (%ld tokens of %d fresh stories); Kneser-Ney trigram fitted on the "
      "%zu training stories: %.3f (%.1f%% lower)\n",
      ppl, n, held, stories.size(), tri_ppl, 100 * (1 - ppl / tri_ppl));
  std::printf(
      "grammar: %d of %d sentences (%.2f%%) of 200 stories sampled at temperature 0.8 from \"Once upon a "
      "time\"; %d stories pass the whole-story check, %d ended\n",
      sampled.grammatical, sampled.sentences, 100 * grammar, sampled.stories_ok, sampled.ended);
  std::printf("copying names: %d of %d prompts (%.2f%%)\n", copy.right, copy.prompts, 100 * copying);
  std::printf(
      "induction (20 random words repeated, 20 trials): layer %zu head %zu: %.3f of the repeat's attention on "
      "the token after the earlier occurrence; TransformerLens mul %.3f, without <s> %.3f, without <s> and the "
      "current token %.3f\n",
      b / size_t(ind.n_heads), b % size_t(ind.n_heads), ind.second_half[b], ind.tl[b], ind.tl_no_bos[b],
      ind.tl_no_bos_no_current[b]);
  return {{"heldout_perplexity", ppl},
          {"heldout_stories", held},
          {"heldout_tokens", n},
          {"trigram_perplexity", tri_ppl},
          {"trigram_training_stories", stories.size()},
          {"grammar_sentences", sampled.sentences},
          {"grammar_fraction", grammar},
          {"sampled_stories_ok", sampled.stories_ok},
          {"copying_prompts", copy.prompts},
          {"copying_top1", copying},
          {"induction_layer", b / size_t(ind.n_heads)},
          {"induction_head", b % size_t(ind.n_heads)},
          {"induction_second_half", ind.second_half[b]},
          {"induction_transformerlens_mul", ind.tl[b]},
          {"induction_transformerlens_mul_no_bos", ind.tl_no_bos[b]},
          {"induction_transformerlens_mul_no_bos_no_current", ind.tl_no_bos_no_current[b]},
          {"figures_seed", seed}};
}

}  // namespace

namespace {

// The end of a stories run: its figures, and the folder with a "words" tokenizer.
int finish_stories(const Opts& o, const ds::train::TrainSpec& spec, const ds::train::TrainResult& r, const Task& task,
                   const std::shared_ptr<const ds::Model>& model) {
  const std::string out = o.str("out");
  nlohmann::json training = {
      {"task", spec.task},
      {"seed", spec.seed},
      {"steps", r.step},
      {"answer", task.answer_note()},
      {"copy_exercise_share", Task::kCopyShare},
      {"copy_exercise_span", {Task::kCopyMin, Task::kCopyMax}},
      {"validation_loss", r.val_loss},
      {"validation_stories", spec.val_samples},
      {"train_seconds", r.elapsed},
      {"final_loss", r.last_loss},
      {"spec", nlohmann::json::parse(ds::train::spec_to_json(spec))},
      {"command", command_line(o, spec)},
  };
  training["figures"] = story_figures(model, task, spec, r.step, spec.seed + 1000003, 2000);
  ds::save_model_folder(out, r.cfg, r.weights, nlohmann::json::parse(task.tokenizer_json()), {{"training", training}},
                        "F32");
  std::error_code ec;
  fs::remove(ds::train::checkpoint_path(out), ec);
  std::printf("validation loss %.4f per token (%d stories); %s\n", r.val_loss, spec.val_samples,
              duration(r.elapsed).c_str());
  std::printf("wrote %s (config.json, model.safetensors)\n", out.c_str());
  return 0;
}

// A finished model (config.json and model.safetensors) in DIR is replaced only with
// --force: a second run into the same folder would otherwise write over a model that
// took minutes to train. A folder with only a checkpoint (an interrupted run) resumes.
void refuse_finished_model(const std::string& out, bool force) {
  std::error_code ec;
  const fs::path d(out);
  if (force || !fs::exists(d / "config.json", ec) || !fs::exists(d / "model.safetensors", ec)) return;
  throw Error("train: " + out +
              " already holds a finished model (config.json and model.safetensors); give --force to train again and "
              "replace it, or choose another --out folder");
}

}  // namespace

int cmd_train(int argc, char** argv) {
  Opts o = parse(argc, argv, {"task", "out", "seed", "steps", "threads", "norm", "pos", "ffn", "lr", "warmup"},
                 {"scale-embed", "force"});
  if (!o.has("task")) throw Error("train: --task dates|adder|stories is required");
  if (!o.has("out")) throw Error("train: --out DIR is required");
  refuse_finished_model(o.str("out"), o.has("force"));
  const ds::train::TrainSpec spec = spec_from(o);
  const int threads = int(o.integer("threads", 2, 1, 256));
  const std::string out = o.str("out");
  const Task task = Task::make(spec.task);

  std::printf("training %s (%s): %s\n", spec.task.c_str(), task.answer_note().c_str(),
              ds::train::make_config(spec, task).describe().c_str());
  std::printf("seed %llu, %d steps of %d sequences, peak rate %g after %d warm-up steps, %d thread(s)\n",
              (unsigned long long)spec.seed, spec.steps, spec.batch, spec.lr, spec.warmup, threads);
  std::printf("checkpoint %s every %d steps (Ctrl-C saves it)\n", ds::train::checkpoint_path(out).c_str(),
              spec.checkpoint_every);
  std::fflush(stdout);
  g_stop = false;
  auto old = std::signal(SIGINT, on_sigint);
  ds::train::TrainResult r;
  try {
    r = ds::train::run_training(
        spec, out, threads,
        [&](const ds::train::TrainProgress& p) {
          std::printf("step %6d/%d  loss %.4f", p.step, p.steps, p.loss);
          if (p.val_acc >= 0) std::printf("  val exact %6.2f%%", 100 * p.val_acc);
          if (p.val_loss >= 0) std::printf("  val loss %.4f (perplexity %.3f)", p.val_loss, std::exp(p.val_loss));
          if (p.val_copy_loss >= 0) std::printf("  copying %.4f", p.val_copy_loss);
          std::printf("  elapsed %s  left %s\n", duration(p.elapsed).c_str(), duration(p.left).c_str());
          std::fflush(stdout);
        },
        &g_stop);
  } catch (...) {
    std::signal(SIGINT, old);
    throw;
  }
  // Ctrl-C from here on (final evaluation, writing the folder) is ignored: the
  // trained state is complete and the folder is written in a few seconds.
  struct Restore {
    void (*old)(int);
    ~Restore() { std::signal(SIGINT, old); }
  } restore{old};
  if (r.resumed) std::printf("(resumed from %s)\n", ds::train::checkpoint_path(out).c_str());
  if (r.interrupted) {
    std::printf("interrupted at step %d; state saved to %s; run the same command again to resume\n", r.step,
                ds::train::checkpoint_path(out).c_str());
    return 130;
  }
  // Final figure on 2,000 fresh samples (another stream than the validation set).
  auto model = std::make_shared<const ds::Model>(r.cfg, r.weights);
  if (task.kind() == ds::train::TaskKind::Stories) return finish_stories(o, spec, r, task, model);
  auto fresh = ds::train::fresh_samples(task, spec.seed + 1000003, 2000);
  double acc = ds::train::exact_match(model, task, fresh);
  nlohmann::json training = {
      {"task", spec.task},
      {"seed", spec.seed},
      {"steps", r.step},
      {"answer", task.answer_note()},
      {"validation_exact_match", r.val_acc},
      {"validation_samples", spec.val_samples},
      {"fresh_exact_match", acc},
      {"fresh_samples", 2000},
      {"train_seconds", r.elapsed},
      {"final_loss", r.last_loss},
      {"spec", nlohmann::json::parse(ds::train::spec_to_json(spec))},
      {"command", command_line(o, spec)},
  };
  if (task.kind() == ds::train::TaskKind::Adder) training["answer_reversed"] = true;
  ds::save_model_folder(out, r.cfg, r.weights, nlohmann::json::parse(task.tokenizer_json()), {{"training", training}},
                        "F32");
  std::error_code ec;
  fs::remove(ds::train::checkpoint_path(out), ec);
  std::printf("validation exact match %.2f%% (%d samples), fresh %.2f%% (2000 samples); %s\n", 100 * r.val_acc,
              spec.val_samples, 100 * acc, duration(r.elapsed).c_str());
  std::printf("wrote %s (config.json, model.safetensors)\n", out.c_str());
  return 0;
}

namespace {

// eval --task stories: the figures of train's end on other fresh stories; the trigram is
// fitted on the training stories named by the model's "training" record.
int eval_stories(const Opts& o, const ds::LoadedModel& m, const Task& task, int n, uint64_t seed) {
  if (o.has("attention")) throw Error("--attention is for the dates task");
  if (m.model->cfg.encoder_decoder || m.model->cfg.vocab_size != task.vocab_size())
    throw Error(o.str("model") + " is not a model of the stories task (its vocabulary differs)");
  if (m.training.empty())
    throw Error(o.str("model") + ": config.json has no \"training\" record to fit the trigram on");
  const nlohmann::json t = nlohmann::json::parse(m.training);
  if (!t.contains("spec") || !t.contains("steps")) throw Error(o.str("model") + ": the training record has no spec");
  ds::train::TrainSpec spec = ds::train::default_spec("stories");
  spec.seed = t["spec"].value("seed", spec.seed);
  spec.batch = t["spec"].value("batch", spec.batch);
  story_figures(m.model, task, spec, t["steps"].get<int>(), seed, n);
  return 0;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  Opts o = parse(argc, argv, {"model", "task", "samples", "seed"}, {"attention", "show-wrong"});
  if (!o.has("model")) throw Error("eval: --model DIR is required");
  if (!o.has("task")) throw Error("eval: --task dates|adder|stories is required");
  const Task task = Task::make(o.str("task"));
  const int n = int(o.integer("samples", 2000, 1, 10000000));
  const uint64_t seed = uint64_t(o.integer("seed", 12345, 0, (1LL << 53)));
  ds::LoadedModel m = ds::load_model(o.str("model"));
  if (!m.tokenizer) throw Error(o.str("model") + ": the model has no tokenizer");
  if (task.kind() == ds::train::TaskKind::Stories) return eval_stories(o, m, task, n, seed);
  if (m.model->cfg.encoder_decoder != task.encoder_decoder())
    throw Error(o.str("model") + " is " + (m.model->cfg.encoder_decoder ? "an encoder-decoder" : "a decoder-only") +
                " model; task " + task.name() + " needs the other kind");
  ds::Engine e(m.model);
  auto samples = ds::train::fresh_samples(task, seed, n);
  int ok = 0;
  std::map<int, std::pair<int, int>> per_format;  // format -> (ok, total)
  int shown = 0;
  for (auto& s : samples) {
    std::string got;
    try {
      got = text_of(m, run_one(e, m, s.input));
    } catch (const Error& err) {
      got = std::string("<error: ") + err.what() + ">";
    }
    bool good = got == s.answer;
    ok += good;
    per_format[s.format].first += good;
    per_format[s.format].second += 1;
    if (!good && o.has("show-wrong") && shown++ < 20)
      std::printf("  wrong: %-32s -> %s (want %s)\n", s.input.c_str(), got.c_str(), s.answer.c_str());
  }
  std::printf("%s on %s: exact match %.2f%% (%d/%d fresh samples, seed %llu)\n", m.name.c_str(), task.name().c_str(),
              100.0 * ok / n, ok, n, (unsigned long long)seed);
  if (task.kind() == ds::train::TaskKind::Dates) {
    for (auto& [f, c] : per_format)
      std::printf("  %-28s %6.2f%% (%d/%d)\n", ds::train::date_format_name(f), 100.0 * c.first / c.second, c.first,
                  c.second);
  }
  if (o.has("attention")) {
    if (task.kind() != ds::train::TaskKind::Dates) throw Error("--attention is for the dates task");
    std::vector<std::vector<int>> srcs, years;
    for (auto& s : samples) {
      srcs.push_back(m.tokenizer->encode(s.input, false));
      // The year is the only run of four digits in the source.
      std::vector<int> yp;
      for (size_t i = 0; i + 4 <= s.input.size(); ++i) {
        bool four = true;
        for (size_t k = 0; k < 4; ++k) four &= std::isdigit(static_cast<unsigned char>(s.input[i + k])) != 0;
        if (four) {
          for (int k = 0; k < 4; ++k) yp.push_back(int(i) + k);
          break;
        }
      }
      years.push_back(yp);
    }
    const ds::Config& c = m.model->cfg;
    auto r = ds::train::year_attention(m.model, srcs, years, c.bos_id, c.eos_id);
    std::printf("cross-attention on the source year while writing the four year digits (head average, argmax):\n");
    for (size_t l = 0; l < r.per_digit.size(); ++l)
      std::printf("  layer %zu: %6.2f%% of year digits, all four in %6.2f%% of samples\n", l, 100 * r.per_digit[l],
                  100 * r.all_four[l]);
  }
  return 0;
}

int cmd_batch(int argc, char** argv) {
  Opts o = parse(argc, argv, {"model", "tokenizer"}, {});
  if (!o.has("model")) throw Error("batch: --model DIR is required");
  ds::LoadedModel m = ds::load_model(o.str("model"), o.str("tokenizer"));
  if (!m.tokenizer) throw Error(o.str("model") + ": the model has no tokenizer");
  ds::Engine e(m.model);
  std::string line;
  int n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    try {
      std::printf("%s\n", text_of(m, run_one(e, m, line)).c_str());
    } catch (const std::exception& err) {
      std::printf("error: line %d: %s\n", n, err.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
