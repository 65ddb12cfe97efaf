#include "worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "models.h"
#include "trace_view.h"
#include "probe/interventions.h"
#include "util/error.h"

namespace dsgui {

std::vector<std::string> record_patterns(const ds::Config& cfg) { return ds::default_record_patterns(cfg); }

Worker::Worker() {
  thread_ = std::thread([this] { run(); });
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
    queue_.clear();
  }
  cancel_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Worker::post(Command c) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Worker::post_latest(Command c) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    const Command::Kind k = c.kind;
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [k](const Command& q) { return q.kind == k; }),
                 queue_.end());
    queue_.push_back(std::move(c));
  }
  cv_.notify_all();
}

std::vector<Event> Worker::poll() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

bool Worker::busy() const {
  std::lock_guard<std::mutex> lk(mu_);
  return running_ || !queue_.empty();
}

void Worker::cancel() {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = std::remove_if(queue_.begin(), queue_.end(), [](const Command& c) { return c.kind == Command::Step; });
  queue_.erase(it, queue_.end());
  if (running_) cancel_ = true;
}

std::string Worker::activity() const {
  std::lock_guard<std::mutex> lk(mu_);
  return activity_;
}

void Worker::set_wake(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  wake_ = std::move(fn);
}

void Worker::set_activity(std::string s) {
  std::lock_guard<std::mutex> lk(mu_);
  activity_ = std::move(s);
}

void Worker::emit(Event e) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
    wake = wake_;
  }
  if (wake) wake();
}

void Worker::run() {
  for (;;) {
    Command c;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      c = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      cancel_ = false;
    }
    try {
      handle(c);
    } catch (const std::exception& e) {
      Event ev;
      ev.kind = Event::Error;
      ev.msg = e.what();
      emit(std::move(ev));
    }
    set_activity("");
    bool idle;
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_ = false;
      idle = queue_.empty();
    }
    if (idle) emit(Event{});
  }
}

void Worker::apply_heads() {
  if (!session_) return;
  ds::Hooks& h = session_->engine().hooks();
  for (int hd : head_handles_) h.unsubscribe(hd);
  head_handles_.clear();
  const ds::Config& cfg = session_->engine().config();
  for (auto [l, hh] : heads_off_)
    if (l >= 0 && l < cfg.n_layers && hh >= 0 && hh < cfg.n_heads)
      head_handles_.push_back(ds::zero_head(h, l, hh, cfg.d_head));
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The final norm of a model applied to one residual vector (lens).
std::vector<float> final_norm(const ds::Model& m, const std::vector<float>& x) {
  const ds::Config& c = m.cfg;
  const int d = c.d_model;
  std::vector<float> y(x.begin(), x.end());
  if (!c.final_norm || m.w.ln_final.g.size() != d) return y;
  const ds::Norm& n = m.w.ln_final;
  if (c.norm == ds::NormKind::RMSNorm) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
    float r = float(1.0 / std::sqrt(ss / d + c.norm_eps));
    for (int i = 0; i < d; ++i) y[i] = x[i] * r * n.g[i];
  } else {
    double mean = 0, var = 0;
    for (int i = 0; i < d; ++i) mean += x[i];
    mean /= d;
    for (int i = 0; i < d; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= d;
    float r = float(1.0 / std::sqrt(var + c.norm_eps));
    for (int i = 0; i < d; ++i) y[i] = float((x[i] - mean) * r) * n.g[i] + (n.b.size() == d ? n.b[i] : 0.0f);
  }
  return y;
}

}  // namespace

LensRow Worker::lens_row(const std::vector<float>& x, const std::string& label) {
  const ds::Model& m = *lm_.model;
  const ds::MatView head = m.w.head_view();
  const int V = m.cfg.vocab_size, d = m.cfg.d_model;
  if (int(x.size()) != d) throw ds::Error("logit lens: the residual vector does not fit this model");
  std::vector<float> y = final_norm(m, x);
  std::vector<float> logits(V);
  head.gemv(y.data(), logits.data(), 0, V);
  float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float v : logits) z += std::exp(double(v - mx));
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  const int k = std::min(5, V);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  LensRow row;
  row.label = label;
  for (int i = 0; i < k; ++i) {
    row.ids.push_back(idx[i]);
    row.texts.push_back(lm_.tokenizer ? lm_.tokenizer->piece(idx[i]) : "#" + std::to_string(idx[i]));
    row.probs.push_back(float(std::exp(double(logits[idx[i]] - mx)) / z));
  }
  return row;
}

void Worker::handle(Command& c) {
  switch (c.kind) {
    case Command::Load: {
      set_activity("loading " + c.a);
      Event ev;
      ev.kind = Event::Loading;
      ev.msg = c.a;
      emit(std::move(ev));
      auto t0 = Clock::now();
      session_.reset();
      head_handles_.clear();
      lm_ = ds::LoadedModel{};
      ds::LoadedModel m = open_model(c.a, c.b, c.precision);
      lm_ = std::move(m);
      auto info = std::make_shared<ModelInfo>();
      info->spec = c.a;
      info->tokenizer = c.b;
      info->name = lm_.name;
      info->kind = lm_.kind;
      info->cfg = lm_.model->cfg;
      info->describe = lm_.model->cfg.describe();
      info->has_tokenizer = lm_.tokenizer != nullptr;
      info->prompt = default_prompt(lm_);
      info->source = default_source(lm_);
      info->params = lm_.model->w.parameter_count();
      info->precision = lm_.model->w.precision();
      info->weight_bytes = lm_.model->w.bytes();
      info->load_seconds = since(t0);
      Event done;
      done.kind = Event::Loaded;
      done.info = std::move(info);
      emit(std::move(done));
      return;
    }
    case Command::Start: {
      if (!lm_.model) throw ds::Error("no model is loaded");
      set_activity("encoding the prompt");
      const ds::Config& cfg = lm_.model->cfg;
      ds::SessionOptions o;
      o.sampler = sampler_;
      o.stop_ids = lm_.stop_ids;
      o.record = record_patterns(cfg);
      o.trace_options.compact = true;
      o.candidates = 20;
      o.threads = std::max(1, c.threads);
      std::vector<int> prompt, src;
      if (lm_.tokenizer) {
        if (cfg.encoder_decoder) {
          // The target starts with BOS, then the prefix typed (if any).
          if (cfg.bos_id >= 0) prompt.push_back(cfg.bos_id);
          for (int id : lm_.tokenizer->encode(c.a, false)) prompt.push_back(id);
          src = lm_.tokenizer->encode(c.b, false);
        } else if (lm_.kind == "random") {
          prompt = lm_.tokenizer->encode(c.a, lm_.bos_prompt);
        } else {
          prompt = ds::encode_prompt(lm_, c.a);
        }
      }
      if (prompt.empty()) {
        if (cfg.bos_id >= 0)
          prompt = {cfg.bos_id};
        else if (!lm_.tokenizer)
          throw ds::Error("this model has no tokenizer, so text cannot be turned into tokens");
        else
          throw ds::Error("the prompt is empty: type some text");
      }
      if (cfg.encoder_decoder && src.empty()) throw ds::Error("the source is empty: type a source text");
      session_.reset();
      head_handles_.clear();
      session_ = std::make_unique<ds::Session>(lm_.model, lm_.tokenizer, o);
      apply_heads();
      session_->start(prompt, src);
      Event ev;
      ev.kind = Event::Started;
      ev.source = session_->trace().source;
      ev.source_text = session_->trace().source_text;
      ev.encoder = session_->trace().encoder;
      emit(std::move(ev));
      return;
    }
    case Command::Step: {
      if (!session_) throw ds::Error("press Start first: there is no prompt yet");
      for (int i = 0; c.n < 0 || i < c.n; ++i) {
        if (cancel_ || session_->done()) break;
        set_activity("computing step " + std::to_string(session_->steps_done() + 1));
        auto t0 = Clock::now();
        session_->step();
        Event ev;
        ev.kind = Event::Step;
        ev.seconds = since(t0);
        ev.index = session_->steps_done() - 1;
        ev.done = session_->done();
        ev.step = std::make_shared<const ds::TraceStep>(session_->trace().steps.back());
        emit(std::move(ev));
      }
      return;
    }
    case Command::Rewind: {
      if (!session_) return;
      int k = std::clamp(c.n, 0, session_->steps_done());
      // The steps from k on are drawn again with the current settings. With the seed
      // step k was drawn with, the random numbers repeat exactly (the same draw for the
      // same settings); with another seed, they start afresh from that seed.
      uint64_t used = sampler_.seed;
      const auto& steps = session_->trace().steps;
      if (k < int(steps.size()) && steps[k].sample) used = steps[k].sample->config.seed;
      session_->rewind(k);
      session_->set_sampler(sampler_);
      if (sampler_.seed != used) session_->sampler().reseed(sampler_.seed);
      Event ev;
      ev.kind = Event::Truncate;
      ev.index = k;
      emit(std::move(ev));
      return;
    }
    case Command::Sampler: {
      ds::validate(c.sampler);
      sampler_ = c.sampler;
      if (session_) session_->set_sampler(c.sampler);
      return;
    }
    case Command::Heads: {
      heads_off_ = c.heads;
      apply_heads();
      return;
    }
    case Command::Lens: {
      if (!lm_.model) throw ds::Error("the logit lens needs the model loaded");
      set_activity("logit lens");
      Event ev;
      ev.kind = Event::Lens;
      ev.lens.step = c.step;
      ev.lens.pos = c.pos;
      ev.lens.version = c.version;
      for (size_t r = 0; r < c.resid.size(); ++r)
        ev.lens.rows.push_back(lens_row(c.resid[r], r < c.labels.size() ? c.labels[r] : std::to_string(r)));
      emit(std::move(ev));
      return;
    }
    case Command::SaveTrace: {
      set_activity("saving " + c.a);
      const ds::Trace& t = *c.trace;
      // The logit lens of every position goes into the file too (when this model made
      // the trace), so that a replay without the model still shows it.
      nlohmann::json lens = nlohmann::json::array();
      const bool fits = lm_.model && lm_.model->cfg.d_model == t.config.d_model &&
                        lm_.model->cfg.vocab_size == t.config.vocab_size && !t.steps.empty();
      if (fits) {
        const int last = int(t.steps.size()) - 1;
        for (int pos = 0; pos < t.positions(last); ++pos) {
          std::vector<std::vector<float>> resid;
          std::vector<std::string> labels;
          lens_inputs(t, last, pos, resid, labels);
          nlohmann::json rows = nlohmann::json::array();
          for (size_t r = 0; r < resid.size(); ++r) {
            LensRow row = lens_row(resid[r], labels[r]);
            rows.push_back({{"label", row.label}, {"ids", row.ids}, {"texts", row.texts}, {"probs", row.probs}});
          }
          if (!rows.empty()) lens.push_back({{"pos", pos}, {"rows", std::move(rows)}});
        }
      }
      std::ostringstream os;
      t.write_json(os);
      nlohmann::json j = nlohmann::json::parse(os.str());
      if (!lens.empty()) j["gui_logit_lens"] = std::move(lens);
      std::ofstream f(c.a);
      if (!f) throw ds::Error("cannot write trace file " + c.a);
      f << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      if (!f) throw ds::Error("error while writing trace file " + c.a);
      Event ev;
      ev.kind = Event::Saved;
      ev.msg = c.a;
      emit(std::move(ev));
      return;
    }
  }
}

}  // namespace dsgui
