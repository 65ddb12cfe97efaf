#include "train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <Eigen/Core>

#include "train/trainer.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace fs = std::filesystem;

namespace ds::train {

TrainSpec default_spec(const std::string& task, const std::string& norm) {
  Task t = Task::make(task);  // validates the name
  if (norm != "pre" && norm != "post") throw Error("unknown norm placement '" + norm + "' (pre or post)");
  TrainSpec s;
  s.task = task;
  s.norm = norm;
  if (t.kind() == TaskKind::Dates) {
    s.d_model = 64;
    s.n_layers = 2;
    s.n_enc_layers = 2;
    s.n_heads = 4;
    s.d_ff = 256;
    s.ffn = "gelu";
    s.pos = "learned";
    s.tied_head = true;
    s.steps = 2500;
  } else if (t.kind() == TaskKind::Stories) {
    // A small GPT: pre-norm, learned positions, GELU, tied head (README, "Built-in
    // models": the size was chosen from the throughput of this machine).
    s.d_model = 128;
    s.n_layers = 4;
    s.n_heads = 4;
    s.d_ff = 512;
    s.ffn = "gelu";
    s.pos = "learned";
    s.tied_head = true;
    s.lr = 2e-3;
    s.warmup = 200;
    s.batch = 32;
    s.steps = 5000;
    s.val_samples = 200;
    s.eval_every = 250;
  } else {
    // More, narrower heads and a low peak rate: each output digit reads operand digits
    // whose positions depend on the operand lengths (README, "Built-in models").
    s.d_model = 64;
    s.n_layers = 3;
    s.n_enc_layers = 0;
    s.n_heads = 8;
    s.d_ff = 256;
    s.ffn = "relu";
    s.pos = "learned";
    s.tied_head = false;
    s.lr = 1e-3;
    s.warmup = 100;
    s.steps = 6000;
  }
  // Post-norm sends every sub-layer's output through a norm on the residual path itself,
  // so the first, large updates move the whole stream; the original warmed its rate up
  // over 4,000 of 100,000 steps, with Adam's beta2 at 0.98 as here. At this size 10%
  // of the steps is ample (README, "Built-in models").
  if (norm == "post") s.warmup = std::max(s.warmup, s.steps / 10);
  return s;
}

Config make_config(const TrainSpec& s, const Task& task) {
  Config c;
  c.d_model = s.d_model;
  c.n_layers = s.n_layers;
  c.n_enc_layers = task.encoder_decoder() ? s.n_enc_layers : 0;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_heads;
  if (s.n_heads <= 0 || s.d_model % s.n_heads != 0) throw Error("d_model must be a multiple of the head count");
  c.d_head = s.d_model / s.n_heads;
  c.d_ff = s.d_ff;
  c.vocab_size = task.vocab_size();
  c.max_seq = task.max_seq();
  c.max_src = task.max_src();
  c.norm = NormKind::LayerNorm;
  if (s.norm == "pre")
    c.norm_place = NormPlace::Pre;
  else if (s.norm == "post")
    c.norm_place = NormPlace::Post;
  else
    throw Error("unknown norm placement '" + s.norm + "' (pre or post)");
  // A post-norm block already ends in a norm: the original has no final norm.
  c.final_norm = c.enc_final_norm = c.norm_place == NormPlace::Pre;
  c.scale_embed = s.scale_embed;
  if (s.pos == "learned")
    c.pos = PosKind::Learned;
  else if (s.pos == "sinusoidal")
    c.pos = PosKind::Sinusoidal;
  else
    throw Error("unknown position kind '" + s.pos + "' (learned or sinusoidal)");
  if (s.ffn == "gelu")
    c.ffn = FFNKind::GELU;
  else if (s.ffn == "relu")
    c.ffn = FFNKind::ReLU;
  else
    throw Error("unknown feed-forward kind '" + s.ffn + "' (gelu or relu)");
  c.encoder_decoder = task.encoder_decoder();
  c.tied_head = s.tied_head;
  c.bos_id = Task::kBos;
  c.eos_id = Task::kEos;
  c.pad_id = Task::kPad;
  c.validate();
  return c;
}

std::vector<int> greedy_decode(Engine& e, const std::vector<int>& src, const std::vector<int>& prompt, int eos,
                               int max_new) {
  const Config& c = e.config();
  if (c.encoder_decoder) e.encode(src);
  e.reset();
  std::vector<int> out;
  std::vector<int> feed = prompt;
  while (int(out.size()) < max_new && e.pos() + int(feed.size()) <= c.max_seq) {
    auto lg = e.forward(feed);
    int best = 0;
    for (int v = 1; v < c.vocab_size; ++v)
      if (lg(0, v) > lg(0, best)) best = v;
    out.push_back(best);
    if (best == eos) break;
    feed.assign(1, best);
  }
  return out;
}

double exact_match(const std::shared_ptr<const Model>& m, const Task& task, const std::vector<TextSample>& samples,
                   std::vector<int>* wrong) {
  Engine e(m);
  int ok = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const TextSample& s = samples[i];
    std::vector<int> src = task.encoder_decoder() ? task.encode(s.input) : std::vector<int>{};
    auto out = greedy_decode(e, src, task.prompt_ids(s.input), Task::kEos, task.max_answer() + 1);
    bool good = !out.empty() && out.back() == Task::kEos && task.decode(out) == s.answer;
    ok += good;
    if (!good && wrong) wrong->push_back(int(i));
  }
  return samples.empty() ? 0.0 : double(ok) / double(samples.size());
}

std::vector<TextSample> fresh_samples(const Task& task, uint64_t seed, int n) {
  SplitMix rng(seed ^ 0x5EEDF00DCAFE1234ull);
  rng.next();
  std::vector<TextSample> v;
  for (int i = 0; i < n; ++i) v.push_back(task.sample(rng));
  return v;
}

AttentionLegibility year_attention(const std::shared_ptr<const Model>& m, const std::vector<std::vector<int>>& srcs,
                                   const std::vector<std::vector<int>>& year_positions, int bos, int eos) {
  const Config& c = m->cfg;
  if (!c.encoder_decoder) throw Error("year attention needs an encoder-decoder model");
  Engine e(m);
  const int L = c.n_layers, H = c.n_heads;
  // best[layer][row]: source position of the largest head-averaged weight.
  std::vector<std::vector<int>> best(size_t(L), std::vector<int>(4, -1));
  e.hooks().subscribe("blocks.*.cross_attn.pattern", [&](HookEvent& ev) {
    const int T = ev.t.shape[1], S = ev.t.shape[2];
    for (int t = 0; t < T; ++t) {
      int row = ev.pos0 + t;
      if (row >= 4) continue;
      int arg = 0;
      float top = -1;
      for (int j = 0; j < S; ++j) {
        float avg = 0;
        for (int h = 0; h < H; ++h) avg += ev.t.data[(size_t(h) * T + t) * S + j];
        if (avg > top) {
          top = avg;
          arg = j;
        }
      }
      best[size_t(ev.layer)][size_t(row)] = arg;
    }
  });
  AttentionLegibility r;
  r.per_digit.assign(size_t(L), 0.0);
  r.all_four.assign(size_t(L), 0.0);
  for (size_t i = 0; i < srcs.size(); ++i) {
    for (auto& b : best) std::fill(b.begin(), b.end(), -1);
    greedy_decode(e, srcs[i], {bos}, eos, 4);
    const auto& yp = year_positions[i];
    for (int l = 0; l < L; ++l) {
      int hits = 0;
      for (int k = 0; k < 4; ++k) hits += std::find(yp.begin(), yp.end(), best[size_t(l)][size_t(k)]) != yp.end();
      r.per_digit[size_t(l)] += hits / 4.0;
      r.all_four[size_t(l)] += hits == 4;
    }
  }
  r.samples = int(srcs.size());
  for (int l = 0; l < L; ++l) {
    r.per_digit[size_t(l)] /= std::max(1, r.samples);
    r.all_four[size_t(l)] /= std::max(1, r.samples);
  }
  return r;
}

std::string checkpoint_path(const std::string& dir) { return (fs::path(dir) / "checkpoint.bin").string(); }

namespace {

using json = nlohmann::json;

json spec_json(const TrainSpec& s) {
  return {{"task", s.task},
          {"seed", s.seed},
          {"steps", s.steps},
          {"batch", s.batch},
          {"lr", s.lr},
          {"min_lr_frac", s.min_lr_frac},
          {"warmup", s.warmup},
          {"weight_decay", s.weight_decay},
          {"clip", s.clip},
          {"beta1", s.beta1},
          {"beta2", s.beta2},
          {"adam_eps", s.adam_eps},
          {"d_model", s.d_model},
          {"n_layers", s.n_layers},
          {"n_enc_layers", s.n_enc_layers},
          {"n_heads", s.n_heads},
          {"d_ff", s.d_ff},
          {"ffn", s.ffn},
          {"pos", s.pos},
          {"norm", s.norm},
          {"scale_embed", s.scale_embed},
          {"tied_head", s.tied_head},
          {"eval_every", s.eval_every},
          {"val_samples", s.val_samples},
          {"checkpoint_every", s.checkpoint_every}};
}

struct State {
  AVec<float> theta, m, v;
  int step = 0;
  uint64_t rng = 0;
  double elapsed = 0;
  double first_loss = -1;
};

constexpr char kMagic[8] = {'D', 'S', 'T', 'R', 'A', 'I', 'N', '1'};

void save_checkpoint(const std::string& dir, const TrainSpec& spec, const State& st) {
  json h = {{"spec", spec_json(spec)},     {"step", st.step},     {"rng", st.rng}, {"elapsed", st.elapsed},
            {"first_loss", st.first_loss}, {"n", st.theta.size()}};
  std::string hs = h.dump();
  // Atomic (util/atomic_file.h): a run killed while saving resumes from the previous
  // checkpoint, which stays whole until the new one has reached the disk.
  save_file(checkpoint_path(dir), [&](SaveFile& f) {
    const uint64_t len = hs.size();
    f.write(kMagic, 8);
    f.write(&len, 8);
    f.write(hs);
    for (auto* v : {&st.theta, &st.m, &st.v}) f.write(v->data(), v->size() * sizeof(float));
  });
}

// Returns false when there is no checkpoint.
bool load_checkpoint(const std::string& dir, const TrainSpec& spec, size_t n, State& st) {
  std::string path = checkpoint_path(dir);
  std::error_code ec;
  if (dir.empty() || !fs::exists(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  char magic[8];
  uint64_t len = 0;
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 || !f.read(reinterpret_cast<char*>(&len), 8) ||
      len > (1u << 20))
    throw Error(path + ": not a decoderscope training checkpoint");
  std::string hs(len, '\0');
  if (!f.read(hs.data(), std::streamsize(len))) throw Error(path + ": truncated header");
  json h;
  try {
    h = json::parse(hs);
  } catch (const std::exception& e) {
    throw Error(path + ": bad header (not valid JSON: " + shorten_json_error(e.what()) + ")");
  }
  json want = spec_json(spec);
  if (h.value("spec", json()) != want)
    throw Error(path + " was written by a run with other settings (" + h.value("spec", json()).dump() +
                "); remove it or use another --out folder");
  if (h.value("n", size_t(0)) != n) throw Error(path + ": parameter count differs");
  st.step = h.value("step", 0);
  st.rng = h.value("rng", uint64_t(0));
  st.elapsed = h.value("elapsed", 0.0);
  st.first_loss = h.value("first_loss", -1.0);
  for (auto* v : {&st.theta, &st.m, &st.v}) {
    v->resize(n);
    if (!f.read(reinterpret_cast<char*>(v->data()), std::streamsize(n * sizeof(float))))
      throw Error(path + ": truncated checkpoint");
  }
  return true;
}

}  // namespace

std::string spec_to_json(const TrainSpec& s) { return spec_json(s).dump(); }

uint64_t stream_start(const TrainSpec& s) { return s.seed * 0x9E3779B97F4A7C15ull + 0x7261696Eull; }

namespace {

using WorkspacePtr = std::unique_ptr<Trainer<float>::Workspace, void (*)(Trainer<float>::Workspace*)>;

// The gradient of a batch, summed into g, and its summed loss. The batch is always
// split into the same chunks (grads.size()), each with its own gradient buffer, summed
// in order: results do not depend on the thread count.
double batch_gradient(Trainer<float>& tr, const std::vector<Example>& batch, float scale, int threads,
                      std::vector<WorkspacePtr>& wss, std::vector<AVec<float>>& grads, std::vector<double>& chunk_loss,
                      AVec<float>& g) {
  const int chunks = int(grads.size()), n_batch = int(batch.size());
  auto work = [&](int th) {
    for (int c = th; c < chunks; c += threads) {
      auto& gc = grads[size_t(c)];
      std::fill(gc.begin(), gc.end(), 0.0f);
      double l = 0;
      const int b0 = n_batch * c / chunks, b1 = n_batch * (c + 1) / chunks;
      for (int b = b0; b < b1; ++b) l += tr.step(batch[size_t(b)], *wss[size_t(th)], gc.data(), scale, nullptr);
      chunk_loss[size_t(c)] = l;
    }
  };
  std::vector<std::thread> pool;
  for (int th = 1; th < threads; ++th) pool.emplace_back(work, th);
  work(0);
  for (auto& t : pool) t.join();
  double loss = 0;
  std::fill(g.begin(), g.end(), 0.0f);
  for (int c = 0; c < chunks; ++c) {
    loss += chunk_loss[size_t(c)];
    const float* gc = grads[size_t(c)].data();
    for (size_t i = 0; i < g.size(); ++i) g[i] += gc[i];
  }
  return loss;
}

// The learning rate of step s: linear warm-up, then a cosine down to min_lr_frac.
double learning_rate(const TrainSpec& spec, int s) {
  if (s < spec.warmup) return spec.lr * (s + 1) / spec.warmup;
  const double prog = double(s - spec.warmup) / std::max(1, spec.steps - spec.warmup);
  return spec.lr * (spec.min_lr_frac + (1 - spec.min_lr_frac) * 0.5 * (1 + std::cos(3.14159265358979 * prog)));
}

// One AdamW update of the parameters theta for step s, the gradient g clipped to a
// norm of at most spec.clip; weight decay only where decay[i].
void adamw_step(const TrainSpec& spec, int s, const AVec<float>& g, const std::vector<char>& decay, State& st,
                float* theta) {
  double norm2 = 0;
  for (float x : g) norm2 += double(x) * x;
  const double gn = std::sqrt(norm2);
  const float clipf = gn > spec.clip ? float(spec.clip / gn) : 1.0f;
  const double lr = learning_rate(spec, s);
  const double bc1 = 1 - std::pow(spec.beta1, s + 1), bc2 = 1 - std::pow(spec.beta2, s + 1);
  const float b1 = float(spec.beta1), b2 = float(spec.beta2);
  const float step_size = float(lr / bc1), inv_bc2 = float(1 / bc2), eps = float(spec.adam_eps);
  const float wd = float(lr * spec.weight_decay);
  for (size_t i = 0; i < g.size(); ++i) {
    const float gi = g[i] * clipf;
    st.m[i] = b1 * st.m[i] + (1 - b1) * gi;
    st.v[i] = b2 * st.v[i] + (1 - b2) * gi * gi;
    if (decay[i]) theta[i] -= wd * theta[i];
    theta[i] -= step_size * st.m[i] / (std::sqrt(st.v[i] * inv_bc2) + eps);
  }
}

// The batch is parallelised over sequences; Eigen's own OpenMP threads inside these
// small products would only contend with them (and spin on a busy machine), so
// Eigen runs on one thread while this object lives.
struct OneEigenThread {
  int keep = Eigen::nbThreads();
  OneEigenThread() { Eigen::setNbThreads(1); }
  ~OneEigenThread() { Eigen::setNbThreads(keep); }
};

// Resumes from dir's checkpoint when it holds one for this spec (returns true), or
// initialises the parameters and the optimiser's state from the seed.
bool start_state(const std::string& dir, const TrainSpec& spec, Trainer<float>& tr, State& st) {
  if (load_checkpoint(dir, spec, tr.size(), st)) {
    tr.params() = st.theta;
    return true;
  }
  tr.init(spec.seed);
  st.m.assign(tr.size(), 0.0f);
  st.v.assign(tr.size(), 0.0f);
  st.rng = stream_start(spec);
  return false;
}

// 1 for every parameter that weight decay applies to.
std::vector<char> decay_mask(Trainer<float>& tr) {
  std::vector<char> decay(tr.size(), 0);
  for (auto& t : tr.tensors())
    if (t.decay) std::fill_n(decay.begin() + long(t.offset), t.size(), 1);
  return decay;
}

// The figure of the validation set: greedy exact match through ds::Engine (dates,
// adder), or the mean cross-entropy per token of held-out stories under the trainer's
// own forward pass (stories). For stories also the loss on 50 copying exercises of 20
// random words (copy_loss(): it drops when an induction head forms).
class Validation {
 public:
  Validation(const Task& task, const Config& cfg, std::vector<TextSample> samples, uint64_t seed)
      : task_(task), cfg_(cfg), samples_(std::move(samples)) {
    if (task_.kind() != TaskKind::Stories) return;
    for (const auto& s : samples_) examples_.push_back(task_.example(s));
    SplitMix rng(seed ^ 0xC0D1E5ull);
    for (int k = 0; k < 50; ++k) {
      std::vector<int> span(20);
      for (int& id : span) id = rng.uniform(Task::kEos + 2, task_.vocab_size() - 1);
      copies_.push_back(Task::copy_exercise(span));
    }
  }
  double operator()(const Trainer<float>& tr, Trainer<float>::Workspace& ws) const {
    if (examples_.empty()) return exact_match(std::make_shared<const Model>(cfg_, tr.to_weights()), task_, samples_);
    copy_loss_ = mean_loss(tr, ws, copies_);
    return mean_loss(tr, ws, examples_);
  }
  double copy_loss() const { return copy_loss_; }

 private:
  static double mean_loss(const Trainer<float>& tr, Trainer<float>::Workspace& ws, const std::vector<Example>& v) {
    double loss = 0;
    long count = 0;
    for (const auto& ex : v) {
      int c = 0;
      loss += tr.step(ex, ws, nullptr, 0.0f, &c);
      count += c;
    }
    return loss / double(std::max(1L, count));
  }
  const Task& task_;
  const Config& cfg_;
  std::vector<TextSample> samples_;
  std::vector<Example> examples_, copies_;
  mutable double copy_loss_ = -1;
};

// Fresh examples into batch; returns how many target tokens they hold.
int sample_batch(const Task& task, SplitMix& rng, std::vector<Example>& batch) {
  int total = 0;
  for (auto& ex : batch) {
    ex = task.example(rng);
    for (int y : ex.targets) total += y >= 0;
  }
  return total;
}

}  // namespace

TrainResult run_training(const TrainSpec& spec, const std::string& dir, int threads,
                         const std::function<void(const TrainProgress&)>& report, const std::atomic<bool>* stop) {
  using clock = std::chrono::steady_clock;
  const OneEigenThread one_eigen_thread;
  const Task task = Task::make(spec.task);
  const Config cfg = make_config(spec, task);
  if (spec.steps < 1 || spec.batch < 1) throw Error("steps and batch must be positive");
  Trainer<float> tr(cfg);
  const size_t n = tr.size();
  State st;
  TrainResult res;
  if (!dir.empty()) fs::create_directories(dir);
  res.resumed = start_state(dir, spec, tr, st);
  const std::vector<char> decay = decay_mask(tr);

  const Validation val(task, cfg, fresh_samples(task, spec.seed, spec.val_samples), spec.seed);
  const bool by_loss = task.kind() == TaskKind::Stories;

  // The same chunks of a batch on any number of threads (see batch_gradient).
  const int chunks = std::min(spec.batch, 8);
  threads = std::max(1, std::min(threads, chunks));
  std::vector<AVec<float>> grads(static_cast<size_t>(chunks), AVec<float>(n));
  std::vector<double> chunk_loss(static_cast<size_t>(chunks));
  std::vector<WorkspacePtr> wss;
  for (int i = 0; i < threads; ++i) wss.emplace_back(tr.new_workspace(), &Trainer<float>::delete_workspace);
  AVec<float> g(n);

  SplitMix rng(0);
  rng.state = st.rng;
  auto t0 = clock::now();
  const double elapsed0 = st.elapsed;
  const int start_step = st.step;
  double loss_acc = 0;
  int loss_n = 0;
  double last_val = -1;
  auto elapsed = [&] { return elapsed0 + std::chrono::duration<double>(clock::now() - t0).count(); };
  auto checkpoint = [&] {  // the state so far, to resume from
    st.theta = tr.params();
    st.elapsed = elapsed();
    st.rng = rng.state;
    if (!dir.empty()) save_checkpoint(dir, spec, st);
  };
  auto progress = [&](double v) {
    TrainProgress p;
    p.step = st.step;
    p.steps = spec.steps;
    p.loss = loss_n ? loss_acc / loss_n : 0;
    (by_loss ? p.val_loss : p.val_acc) = v;
    if (by_loss && v >= 0) p.val_copy_loss = val.copy_loss();
    p.elapsed = elapsed();
    double rate = st.step > start_step ? (p.elapsed - elapsed0) / (st.step - start_step) : 0;
    p.left = rate * (spec.steps - st.step);
    if (report) report(p);
    res.last_loss = p.loss;
    loss_acc = 0;
    loss_n = 0;
  };

  std::vector<Example> batch(static_cast<size_t>(spec.batch));
  const int report_every = std::max(1, std::min(50, spec.eval_every));
  while (st.step < spec.steps) {
    if (stop && stop->load()) {
      checkpoint();
      res.interrupted = true;
      res.step = st.step;
      res.elapsed = st.elapsed;
      res.cfg = cfg;
      return res;
    }
    const int total = sample_batch(task, rng, batch);
    const float scale = 1.0f / float(std::max(1, total));
    const double loss = batch_gradient(tr, batch, scale, threads, wss, grads, chunk_loss, g) / std::max(1, total);
    if (!std::isfinite(loss))
      throw Error("training diverged at step " + std::to_string(st.step) + " (loss not finite)");
    if (st.first_loss < 0) st.first_loss = loss;
    loss_acc += loss;
    ++loss_n;

    adamw_step(spec, st.step, g, decay, st, tr.params().data());
    ++st.step;

    if (st.step % spec.eval_every == 0 || st.step == spec.steps)
      progress(last_val = val(tr, *wss[0]));
    else if (st.step % report_every == 0)
      progress(-1);
    if (spec.checkpoint_every > 0 && st.step % spec.checkpoint_every == 0 && st.step < spec.steps) checkpoint();
  }
  if (last_val < 0) last_val = val(tr, *wss[0]);
  res.step = st.step;
  (by_loss ? res.val_loss : res.val_acc) = last_val;
  res.elapsed = elapsed();
  res.first_loss = st.first_loss;
  res.cfg = cfg;
  res.weights = tr.to_weights();
  return res;
}

}  // namespace ds::train
