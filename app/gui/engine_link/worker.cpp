#include "engine_link/worker.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <span>

#include "engine_link/models.h"
#include "engine_link/trace_view.h"
#include "probe/interventions.h"
#include "probe/lens.h"
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
    const size_t k = c.index();
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [k](const Command& q) { return q.index() == k; }),
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
  // Busy until its events are collected too: a step's event posted after this frame's
  // poll, with the worker already idle, left a scripted run (and a lesson) seeing an
  // idle worker and a step short, and it asked for one more.
  return running_ || !queue_.empty() || !events_.empty();
}

void Worker::cancel() {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = std::remove_if(queue_.begin(), queue_.end(),
                           [](const Command& c) { return std::holds_alternative<cmd::Step>(c); });
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
  // The engine's thread (and the threads it starts, which inherit this) yields to the
  // window's and the renderer's when they compete for a core: on 2 cores a long run
  // otherwise left the window waiting for a core for up to 40 ms of a frame. Nice 15
  // rather than 5: All heads at 1,024 GPT-2-small positions, longest frame 57.5 ms against
  // 68.0 and 99th percentile 44.5 against 52.3, for 6% of the engine's speed while the
  // window draws. Linux keeps the nice value per thread; where that fails the thread runs
  // as before.
  (void)setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), 15);
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
      std::visit([this](auto& command) { handle(command); }, c);
    } catch (const std::exception& e) {
      ev::Error err;
      // ds::Error says what was wrong in words; anything else is named as what it is.
      if (dynamic_cast<const ds::Error*>(&e))
        err.msg = e.what();
      else if (dynamic_cast<const std::bad_alloc*>(&e))
        err.msg = "there is not enough memory for this";
      else
        err.msg = std::string("the engine stopped on an unexpected problem (") + e.what() + ")";
      err.start_failed = std::holds_alternative<cmd::Start>(c);
      emit(std::move(err));
    }
    set_activity("");
    bool idle;
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_ = false;
      idle = queue_.empty();
    }
    if (idle) emit(ev::Idle{});
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
  for (auto [l, hh] : cross_heads_off_)
    if (cfg.encoder_decoder && l >= 0 && l < cfg.n_layers && hh >= 0 && hh < cfg.n_heads)
      head_handles_.push_back(ds::zero_head(h, l, hh, cfg.d_head, ds::HeadSite::Cross));
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::vector<LensColumn> Worker::lens_columns(const std::vector<cmd::Lens::Column>& cols) {
  const ds::Model& m = *lm_.model;
  const int d = m.cfg.d_model;
  std::vector<float> x;  // every row of every column, [rows, d_model]
  for (auto& c : cols)
    for (auto& r : c.resid) {
      if (int(r.size()) != d) throw ds::Error("logit lens: the residual vector does not fit this model");
      x.insert(x.end(), r.begin(), r.end());
    }
  const int rows = int(x.size() / size_t(std::max(d, 1)));
  const ds::LensTop top = ds::lens_top_k(m, x.data(), rows, ds::kWindowLensTopK);
  std::vector<LensColumn> out;
  size_t i = 0;
  for (auto& c : cols) {
    LensColumn col;
    col.pos = c.pos;
    for (size_t r = 0; r < c.resid.size(); ++r, ++i) {
      LensRow row;
      row.label = r < c.labels.size() ? c.labels[r] : std::to_string(r);
      for (int j = 0; j < top.k && top.ids[i * size_t(top.k) + size_t(j)] >= 0; ++j) {
        const int id = top.ids[i * size_t(top.k) + size_t(j)];
        row.ids.push_back(id);
        row.texts.push_back(lm_.tokenizer ? lm_.tokenizer->piece(id) : "#" + std::to_string(id));
        row.probs.push_back(top.probs[i * size_t(top.k) + size_t(j)]);
      }
      col.rows.push_back(std::move(row));
    }
    out.push_back(std::move(col));
  }
  return out;
}

void Worker::handle(cmd::Load& c) {
  set_activity("loading " + c.spec);
  emit(ev::Loading{c.spec});
  auto t0 = Clock::now();
  session_.reset();
  head_handles_.clear();
  lm_ = ds::LoadedModel{};
  compare_lm_ = ds::LoadedModel{};  // the Compare view's B is run again for the new model
  compare_spec_.clear();
  ds::LoadedModel m = open_model(c.spec, c.tokenizer, c.precision);
  lm_ = std::move(m);
  spec_ = c.spec;
  products_ = c.products;
  auto info = std::make_shared<ModelInfo>();
  info->spec = c.spec;
  info->tokenizer = c.tokenizer;
  info->name = lm_.name;
  info->kind = lm_.kind;
  info->cfg = lm_.model->cfg;
  info->describe = lm_.model->cfg.describe();
  info->has_tokenizer = lm_.tokenizer != nullptr;
  info->prompt = default_prompt(lm_);
  info->source = default_source(lm_);
  info->params = lm_.model->w.parameter_count();
  info->precision = lm_.model->w.precision();
  info->storage = lm_.storage;
  info->products = products_;
  info->has_chat = lm_.tokenizer && !lm_.chat.template_text.empty() && !lm_.model->cfg.encoder_decoder;
  info->special_ids = lm_.special_ids;
  info->weight_bytes = lm_.model->w.bytes();
  info->load_seconds = since(t0);
  emit(ev::Loaded{std::move(info)});
}

void Worker::inputs(const std::string& prompt_text, const std::string& source_text, const cmd::ChatInput& chat,
                    std::vector<int>& prompt, std::vector<int>& src) const {
  const ds::Config& cfg = lm_.model->cfg;
  if (lm_.tokenizer && chat.on && !cfg.encoder_decoder) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    if (!chat.system.empty()) msgs.push_back({{"role", "system"}, {"content", chat.system}});
    msgs.push_back({{"role", "user"}, {"content", prompt_text}});
    prompt = ds::encode_chat(*lm_.tokenizer, lm_.chat, lm_.special_ids, ds::render_chat(lm_.chat, msgs, lm_.name));
  } else if (lm_.tokenizer) {
    if (cfg.encoder_decoder) {
      // The target starts with BOS, then the prefix typed (if any).
      if (cfg.bos_id >= 0) prompt.push_back(cfg.bos_id);
      for (int id : lm_.tokenizer->encode(prompt_text, false)) prompt.push_back(id);
      src = lm_.tokenizer->encode(source_text, false);
    } else if (lm_.kind == "random") {
      prompt = lm_.tokenizer->encode(prompt_text, lm_.bos_prompt);
    } else {
      prompt = ds::encode_prompt(lm_, prompt_text);
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
}

void Worker::handle(cmd::Start& c) {
  if (!lm_.model) throw ds::Error("no model is loaded");
  set_activity("encoding the prompt");
  std::vector<int> prompt, src;
  inputs(c.prompt, c.source, c.chat, prompt, src);
  begin(c.threads, c.kv_cache, prompt, src);
  forced_ = std::move(c.forced);
  const ds::Trace& t = session_->trace();
  emit(ev::Started{t.source, t.source_text, t.encoder});
}

ds::SessionOptions Worker::session_options(int threads, bool kv_cache) const {
  const ds::Config& cfg = lm_.model->cfg;
  ds::SessionOptions o;
  o.sampler = sampler_;
  o.stop_ids = lm_.stop_ids;
  o.products = products_;
  o.record = record_patterns(cfg);
  o.trace_options.compact = true;
  // The panel reads the lens from the trace. Recording it costs (layers + 1) x vocabulary x
  // d_model multiply-adds a token: for a 1B llama-family model with its 128,256-token
  // vocabulary (4.5 G, 3.6 times the model's own step) the window would step at a third of
  // the engine's speed, so beyond kLensRecordMacs the panel asks for the lens of the
  // positions it shows instead (cmd::Lens), and steps run at the engine's speed.
  constexpr double kLensRecordMacs = 1.5e9;  // GPT-2 small's 0.5 G and medium's 1.3 G are recorded
  const double lens_macs = double(cfg.n_layers + 1) * double(cfg.vocab_size) * double(cfg.d_model);
  o.trace_options.lens_top_k = lens_macs <= kLensRecordMacs ? ds::kWindowLensTopK : 0;
  o.candidates = 20;
  o.keep_logits_bytes = size_t(64) << 20;  // the Next token view reshapes kept steps (cmd::Shape)
  o.threads = std::max(1, threads);
  o.kv_cache = kv_cache;
  return o;
}

void Worker::begin(int threads, bool kv_cache, const std::vector<int>& prompt, const std::vector<int>& src) {
  const ds::SessionOptions o = session_options(threads, kv_cache);
  // A prompt the session turns down (too long for the context, say) leaves the session
  // that was running as it was: the window still shows its trace.
  std::unique_ptr<ds::Session> old = std::move(session_);
  std::vector<int> old_handles = std::move(head_handles_);
  head_handles_.clear();
  try {
    session_ = std::make_unique<ds::Session>(lm_.model, lm_.tokenizer, o);
    apply_heads();
    session_->start(prompt, src);
  } catch (...) {
    session_ = std::move(old);
    head_handles_ = std::move(old_handles);
    apply_heads();  // the heads switched off since, on the old session
    throw;
  }
  old.reset();
}

void Worker::handle(cmd::Restore& c) {
  if (!lm_.model) throw ds::Error("undo: no model is loaded to put the steps back on");
  if (c.restart) {
    set_activity("undo: starting the session again");
    begin(c.threads, c.kv_cache, c.prompt, c.src);
    forced_.clear();
  }
  if (!session_) throw ds::Error("undo: there is no session to put the steps back on");
  if (c.keep < 0 || c.keep > session_->steps_done())
    throw ds::Error("undo: the engine has " + std::to_string(session_->steps_done()) + " steps, not the " +
                    std::to_string(c.keep) + " the undone steps follow");
  session_->rewind(c.keep);
  forced_.resize(std::min(forced_.size(), size_t(c.keep)));
  for (size_t i = 0; i < c.forced.size(); ++i) {
    if (session_->done())
      throw ds::Error("undo: the engine finished the text at step " + std::to_string(session_->steps_done()) +
                      ", before the undone steps ended");
    set_activity("undo: taking step " + std::to_string(session_->steps_done() + 1) + " again");
    if (i < c.step_samplers.size()) session_->set_sampler(c.step_samplers[i]);
    session_->step(c.forced[i]);
  }
  session_->set_sampler(sampler_);  // the steps to come draw with the window's settings
}

namespace {

// Text of ids after prev: decoded as generated text is printed, or the pieces ("#id"
// for ids without one) when there is no tokenizer.
std::string ids_text(const ds::Tokenizer* tok, const BeamAnswer& a, int prev, std::span<const int> ids) {
  if (tok) try {
      return ds::decode_text(*tok, prev, ids);
    } catch (const ds::Error&) {
    }
  std::string s;
  for (int id : ids) {
    auto it = a.text.find(id);
    s += it == a.text.end() ? "#" + std::to_string(id) : it->second;
  }
  return s;
}

// The texts of a beam search's hypotheses, finished ones and candidates (BeamAnswer).
void beam_texts(BeamAnswer& a, const ds::Tokenizer* tok) {
  const ds::BeamResult& r = a.result;
  const int start = r.prompt.empty() ? -1 : r.prompt.back();
  for (const ds::BeamFinished& f : r.finished) {
    std::span<const int> ids(f.tokens);
    if (f.eos && !ids.empty()) ids = ids.first(ids.size() - 1);
    a.finished_text.push_back(ids_text(tok, a, start, ids));
  }
  for (const ds::BeamStep& st : r.steps) {
    auto& ht = a.hyp_text.emplace_back();
    auto& ct = a.cand_text.emplace_back();
    for (const ds::BeamHyp& h : st.hyps) {
      ht.push_back(ids_text(tok, a, start, h.tokens));
      const int prev = h.tokens.empty() ? start : h.tokens.back();
      auto& c = ct.emplace_back();
      for (const ds::BeamCandidate& cd : h.candidates)
        c.push_back(ids_text(tok, a, prev, std::span<const int>(&cd.token, 1)));
    }
  }
}

// The tokens of hypothesis h of step t extended by its candidate j, and how beam search
// chose each of them (the candidate it was at every step on the way).
bool beam_path(const BeamAnswer& a, int t, int h, int j, std::vector<int>& tokens, std::vector<ds::TokenChoice>& why) {
  const ds::BeamResult& r = a.result;
  if (t < 0 || t >= int(r.steps.size()) || h < 0 || h >= int(r.steps[size_t(t)].hyps.size())) return false;
  const auto& last = r.steps[size_t(t)].hyps[size_t(h)];
  if (j < 0 || j >= int(last.candidates.size())) return false;
  tokens = last.tokens;
  tokens.push_back(last.candidates[size_t(j)].token);
  why.assign(tokens.size(), ds::TokenChoice{});
  for (int k = t, hk = h; k >= 0 && hk >= 0; hk = r.steps[size_t(k)].hyps[size_t(hk)].parent, --k) {
    for (const ds::BeamCandidate& cd : r.steps[size_t(k)].hyps[size_t(hk)].candidates)
      if (cd.token == tokens[size_t(k)]) {
        ds::TokenChoice& ch = why[size_t(k)];
        ch.by = "beam search";
        ch.width = a.width;
        ch.length_penalty = a.length_penalty;
        ch.logprob = cd.logprob;
        ch.sum = cd.sum;
        ch.rank = cd.rank;
      }
  }
  why.back().final = true;
  const double len = double(tokens.size());
  why.back().score = why.back().sum / std::pow(len, double(a.length_penalty));
  return true;
}

}  // namespace

void Worker::handle(cmd::BeamBranch& c) {
  if (!lm_.model || !c.answer) throw ds::Error("beam search: no model is loaded to follow the hypothesis with");
  const BeamAnswer& a = *c.answer;
  int t = c.step, h = c.hyp, j = c.cand;
  if (t < 0) {  // the winner: its last step's hypothesis and candidate
    if (a.result.finished.empty()) throw ds::Error("beam search finished no hypothesis");
    const ds::BeamFinished& f = a.result.finished[0];
    t = f.step;
    h = f.path.at(size_t(t));
    j = -1;
    const auto& cs = a.result.steps.at(size_t(t)).hyps.at(size_t(h)).candidates;
    for (int k = 0; k < int(cs.size()); ++k)
      if (cs[size_t(k)].token == f.tokens.back()) j = k;
  }
  std::vector<int> tokens;
  std::vector<ds::TokenChoice> why;
  if (!beam_path(a, t, h, j, tokens, why)) throw ds::Error("beam search: no such hypothesis in the tree");
  set_activity("following the beam search's hypothesis");
  ds::SessionOptions o = session_options(c.threads, true);
  o.keep_logits_bytes = 0;
  ds::Session s(lm_.model, lm_.tokenizer, o);
  s.start(a.result.prompt, a.src);
  for (size_t k = 0; k < tokens.size() && !s.done(); ++k) {
    if (cancel_) return;
    s.step(tokens[k]);
  }
  ev::BeamBranch e;
  e.answer = c.answer;
  e.step = t, e.hyp = h, e.cand = j;
  e.trace = s.trace();
  e.trace.model_name = lm_.name;
  for (size_t k = 0; k < e.trace.steps.size() && k < why.size(); ++k)
    if (e.trace.steps[k].sample) e.trace.steps[k].sample->chosen = why[k];
  emit(std::move(e));
}

void Worker::handle(cmd::Beam& c) {
  if (!lm_.model) throw ds::Error("no model is loaded");
  set_activity("beam search");
  auto t0 = Clock::now();
  auto a = std::make_shared<BeamAnswer>();
  std::vector<int> prompt, src;
  inputs(c.prompt, c.source, c.chat, prompt, src);
  ds::BeamOptions o;
  o.width = c.width;
  o.length_penalty = c.length_penalty;
  o.eos_ids = lm_.stop_ids;
  o.threads = std::max(1, c.threads);
  o.products = products_;
  o.steps = c.positions > 0 ? c.positions : 0;
  o.on_step = [&](int t) {
    set_activity("beam search: step " + std::to_string(t + 1));
    return !cancel_;
  };
  a->result = ds::beam_search(lm_.model, prompt, src, o);
  auto name = [&](int id) {
    if (a->text.count(id)) return;
    std::string s;
    if (lm_.tokenizer) try {
        s = lm_.tokenizer->piece(id);
      } catch (const ds::Error&) {
      }
    a->text[id] = s.empty() ? "#" + std::to_string(id) : s;
  };
  for (int id : prompt) name(id);
  for (auto& st : a->result.steps)
    for (auto& h : st.hyps)
      for (auto& cd : h.candidates) name(cd.token);
  beam_texts(*a, lm_.tokenizer.get());
  a->prompt = c.prompt;
  a->source = c.source;
  a->src = src;
  a->width = c.width;
  a->length_penalty = c.length_penalty;
  a->seconds = since(t0);
  emit(ev::Beam{std::move(a)});
}

namespace {

// Keeps what one token's trip through one layer published (BlockSnapshot): the selected
// position's row of every point, every position's keys and values, the selected head's
// whole score matrix.
class SnapshotCollector {
 public:
  SnapshotCollector(BlockSnapshot& s, int head) : s_(s), head_(head) {}
  void on(const ds::HookEvent& ev, const std::string& name) {
    const ds::TensorView& t = ev.t;
    const bool matrix = ev.point == ds::Point::AttnScores || ev.point == ds::Point::AttnPattern ||
                        ev.point == ds::Point::CrossScores || ev.point == ds::Point::CrossPattern;
    if (matrix && t.rank == 3) return attention(ev, name);
    const int rows = t.shape[0];
    if (rows <= 0) return;
    const int64_t width = t.size() / rows;
    const bool cross_kv = name == "cross_attn.k" || name == "cross_attn.v";
    if (cross_kv) {
      (name == "cross_attn.k" ? s_.cross_k : s_.cross_v).assign(t.data, t.data + t.size());
      s_.src_len = rows;
      return;
    }
    if (name == "attn.k" || name == "attn.v" || name == "attn.q") {
      std::vector<float>& dst = name == "attn.k" ? s_.k : name == "attn.v" ? s_.v : s_.q_all;
      dst.resize(size_t(ev.pos0 + rows) * size_t(width));
      std::copy(t.data, t.data + t.size(), dst.begin() + int64_t(ev.pos0) * width);
    }
    const int r = s_.pos - ev.pos0;
    if (r < 0 || r >= rows) return;
    s_.row[name].assign(t.data + int64_t(r) * width, t.data + int64_t(r + 1) * width);
    if (ev.point == ds::Point::AttnMask) s_.row[name].resize(std::max(size_t(width), size_t(s_.positions)), 0.0f);
  }

 private:
  // [H, T, S]: the selected row of every head; the selected head's rows of the scores.
  void attention(const ds::HookEvent& ev, const std::string& name) {
    const ds::TensorView& t = ev.t;
    const int H = t.shape[0], T = t.shape[1], S = t.shape[2];
    const int r = s_.pos - ev.pos0;
    // Self-attention rows are kept as wide as the whole prefix (keys not yet computed
    // when the row was: masked), so every row of the snapshot has the same keys.
    const bool self = ev.point == ds::Point::AttnScores || ev.point == ds::Point::AttnPattern;
    const int W = self ? std::max(S, s_.positions) : S;
    const float pad = ev.point == ds::Point::AttnScores ? -INFINITY : 0.0f;
    if (r >= 0 && r < T) {
      std::vector<float>& dst = s_.row[name];
      dst.assign(size_t(H) * W, pad);
      for (int h = 0; h < H; ++h) std::copy_n(t.data + (int64_t(h) * T + r) * S, S, dst.begin() + int64_t(h) * W);
    }
    if (name != "attn.scores" || head_ < 0 || head_ >= H) return;
    const int n = s_.positions;
    if (s_.scores_all.size() != size_t(n) * n) s_.scores_all.assign(size_t(n) * n, -INFINITY);
    s_.scores_all_head = head_;
    for (int i = 0; i < T && ev.pos0 + i < n; ++i)
      std::copy_n(t.data + (int64_t(head_) * T + i) * S, std::min(S, n),
                  s_.scores_all.begin() + int64_t(ev.pos0 + i) * n);
  }
  BlockSnapshot& s_;
  int head_;
};

void top_tokens(BlockSnapshot& s, const ds::Tokenizer* tok) {
  const std::vector<float>* lg = s.get("logits");
  if (!lg || lg->empty()) return;
  std::vector<int> ids(lg->size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int(i);
  const size_t k = std::min<size_t>(10, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + int64_t(k), ids.end(),
                    [&](int a, int b) { return (*lg)[size_t(a)] > (*lg)[size_t(b)]; });
  const double mx = (*lg)[size_t(ids[0])];
  double sum = 0;
  for (float v : *lg) sum += std::exp(double(v) - mx);
  for (size_t i = 0; i < k; ++i) {
    const int id = ids[i];
    s.top_ids.push_back(id);
    s.top_logits.push_back((*lg)[size_t(id)]);
    s.top_probs.push_back(float(std::exp(double((*lg)[size_t(id)]) - mx) / sum));
    std::string text;
    if (tok) try {
        text = tok->piece(id);
      } catch (const ds::Error&) {
      }
    s.top_text.push_back(text.empty() ? "#" + std::to_string(id) : text);
  }
}

}  // namespace

// Runs the prefix through a second engine with the layer's inner points subscribed, as
// the session ran it: positions 0 .. pos in one call (pos is its last row, so its logits
// come out), the rest of the prefix through the KV cache.
void Worker::handle(cmd::Inspect& c) {
  auto a = std::make_shared<BlockSnapshot>();
  a->key = c.key;
  a->layer = c.layer;
  a->pos = c.pos;
  a->positions = int(c.tokens.size());
  a->tokens = c.tokens;
  try {
    if (!lm_.model)
      throw ds::Error(
          "the Block and KV cache views need the model loaded: open the model this trace "
          "came from");
    const ds::Config& cfg = lm_.model->cfg;
    a->cfg = cfg;
    const int n = int(c.tokens.size());
    if (n == 0) throw ds::Error("there is no token yet: press Step");
    if (n > cfg.max_seq) throw ds::Error("the trace is longer than this model's context");
    if (c.layer < 0 || c.layer >= cfg.n_layers) throw ds::Error("no such layer");
    // The biases this layer's weights hold (a file may have some and not others).
    if (size_t(c.layer) < lm_.model->w.blocks.size()) {
      const ds::Block& b = lm_.model->w.blocks[size_t(c.layer)];
      a->biases = {b.attn.q.b.size() > 0, b.attn.k.b.size() > 0, b.attn.v.b.size() > 0,
                   b.attn.o.b.size() > 0, b.ffn.up.b.size() > 0, b.ffn.down.b.size() > 0};
    }
    if (c.pos < 0 || c.pos >= n) throw ds::Error("no such position");
    for (int id : c.tokens)
      if (id < 0 || id >= cfg.vocab_size) throw ds::Error("a token of the trace is outside this model's vocabulary");
    set_activity("running the prefix through layer " + std::to_string(c.layer));
    auto t0 = Clock::now();
    ds::Engine e(lm_.model);
    e.set_threads(std::max(1, c.threads));
    e.set_products(products_);
    for (auto [l, hh] : heads_off_)
      if (l >= 0 && l < cfg.n_layers && hh >= 0 && hh < cfg.n_heads) ds::zero_head(e.hooks(), l, hh, cfg.d_head);
    for (auto [l, hh] : cross_heads_off_)
      if (cfg.encoder_decoder && l >= 0 && l < cfg.n_layers && hh >= 0 && hh < cfg.n_heads)
        ds::zero_head(e.hooks(), l, hh, cfg.d_head, ds::HeadSite::Cross);
    SnapshotCollector col(*a, c.head);
    const std::string prefix = "blocks." + std::to_string(c.layer) + ".";
    for (const std::string& name : snapshot_hooks(cfg, c.layer)) {
      const std::string shortname = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
      try {
        e.hooks().subscribe(name, [&col, shortname](ds::HookEvent& ev) { col.on(ev, shortname); });
      } catch (const ds::Error&) {
        // A point this engine does not publish: the view says the number is missing.
      }
    }
    if (cfg.encoder_decoder) e.encode(c.src);
    e.forward(std::span<const int>(c.tokens.data(), size_t(c.pos) + 1));
    if (c.pos + 1 < n) e.forward(std::span<const int>(c.tokens.data() + c.pos + 1, size_t(n - c.pos - 1)));
    top_tokens(*a, lm_.tokenizer.get());
    a->seconds = since(t0);
  } catch (const std::exception& ex) {
    a->error = ex.what();
  }
  emit(ev::Inspect{std::move(a)});
}

void Worker::handle(cmd::Measure& c) {
  if (!lm_.model) throw ds::Error("measuring needs the model loaded");
  const int n = int(c.tokens.size()), prompt = std::clamp(c.prompt_len, 1, std::max(1, n));
  if (n == 0) throw ds::Error("there is no token yet: press Step");
  auto a = std::make_shared<MeasureAnswer>();
  a->version = c.version;
  for (bool kv : {true, false}) {
    ds::SessionOptions o;
    o.sampler.temperature = 0;
    o.kv_cache = kv;
    o.threads = std::max(1, c.threads);
    o.products = products_;
    ds::Session s(lm_.model, lm_.tokenizer, o);
    s.start(std::vector<int>(c.tokens.begin(), c.tokens.begin() + prompt), c.src);
    for (int k = prompt; k <= n && !s.done(); ++k) {
      if (cancel_) return;
      set_activity(std::string(kv ? "timing steps with the KV cache: " : "timing steps without the KV cache: ") +
                   std::to_string(k) + " of " + std::to_string(n));
      s.step(k < n ? c.tokens[size_t(k)] : -1);
    }
    auto& out = kv ? a->with : a->without;
    const auto& steps = s.trace().steps;
    for (size_t i = 1; i < steps.size(); ++i)
      out.push_back({steps[i].pos0 + int(steps[i].input.size()) - 1, steps[i].forward_ms});
  }
  emit(ev::Measure{std::move(a)});
}

void Worker::handle(cmd::Roles& c) {
  if (!lm_.model) throw ds::Error("the head detector needs a model loaded");
  set_activity("running the head detector's probe");
  auto a = std::make_shared<RolesAnswer>();
  a->spec = spec_;
  ds::HeadDetectOptions o;
  o.threads = std::max(1, c.threads);
  o.products = products_;
  o.exclude_bos = c.exclude_bos;
  if (lm_.tokenizer) {
    const ds::Tokenizer& tok = *lm_.tokenizer;
    o.avoid = ds::probe_avoid_ids(lm_.model->cfg, tok.vocab_size(), [&](int id) { return tok.piece(id); });
  }
  o.avoid.insert(o.avoid.end(), lm_.stop_ids.begin(), lm_.stop_ids.end());
  a->roles = ds::detect_heads(lm_.model, o);
  a->key = c.key;
  a->half = a->roles.half;
  for (int id : a->roles.probe) {
    std::string t;
    if (lm_.tokenizer) try {
        t = visible(lm_.tokenizer->piece(id));
      } catch (const ds::Error&) {
      }
    a->labels.push_back(t.empty() ? "#" + std::to_string(id) : t);
  }
  emit(ev::Roles{std::move(a)});
}

// Heads switched off alone (probe/ablation.h), with the progress on the status line; the
// window's Stop (cancel) ends it with an answer that says so.
void Worker::handle(cmd::Ablate& c) {
  if (!lm_.model) throw ds::Error("switching heads off needs a model loaded");
  auto a = std::make_shared<AblationAnswer>();
  a->key = c.key;
  a->step = c.across ? -1 : c.step;
  a->site = c.site, a->layer = c.layer, a->head = c.head;
  const auto t0 = Clock::now();
  const std::string what = c.across ? "switching the head off at each step: " : "switching each head off alone: ";
  auto progress = [&](int done, int total) {
    set_activity(what + std::to_string(done) + " of " + std::to_string(total));
    return !cancel_;
  };
  try {
    if (c.across) {
      a->across = ds::head_across_steps(lm_.model, c.trace, c.site, c.layer, c.head, c.threads, progress);
      std::stable_sort(a->across.begin(), a->across.end(), [](const ds::StepEffect& x, const ds::StepEffect& y) {
        return std::fabs(x.delta) > std::fabs(y.delta);
      });
    } else {
      a->ranked = ds::ablate_heads(lm_.model, ds::ablation_step(c.trace, c.step), c.threads, progress);
      ds::rank_by_effect(a->ranked.heads);
    }
  } catch (const ds::Cancelled&) {
    a->cancelled = true;
  }
  a->seconds = since(t0);
  emit(ev::Ablate{std::move(a)});
}

// Direct logit attribution (probe/attribution.h) and what one head writes.
void Worker::handle(cmd::Attribute& c) {
  if (!lm_.model) throw ds::Error("attribution needs a model loaded");
  set_activity("splitting the logit into what each head and MLP wrote");
  const auto t0 = Clock::now();
  auto a = std::make_shared<AttributionAnswer>();
  a->key = c.key;
  a->attr = ds::attribute(lm_.model, {c.tokens, c.src, c.pos, c.token, c.vs, std::max(1, c.threads)});
  if (c.layer >= 0) a->writes_part = ds::find_head_part(a->attr, c.site, c.layer, c.head);
  if (a->writes_part >= 0) a->writes = ds::part_writes(*lm_.model, a->attr, size_t(a->writes_part), c.top);
  a->attr.vectors.clear();
  a->attr.vectors.shrink_to_fit();
  std::vector<int> ids = {a->attr.token, a->attr.vs, a->attr.greedy};
  for (const auto& w : {a->writes.up, a->writes.down})
    for (const auto& p : w) ids.push_back(p.id);
  for (int id : ids) {
    if (id < 0) continue;
    std::string t;
    if (lm_.tokenizer) try {
        t = visible(lm_.tokenizer->piece(id));
      } catch (const ds::Error&) {
      }
    a->text[id] = t.empty() ? "#" + std::to_string(id) : t;
  }
  a->seconds = since(t0);
  emit(ev::Attribute{std::move(a)});
}

// Activation patching (patch_job.cpp), with the progress on the status line; Stop ends it
// with an answer that says so.
void Worker::handle(cmd::Patch& c) {
  auto a = run_patch(lm_, c, [&](int done, int total) {
    set_activity("patching from the clean run: " + std::to_string(done) + " of " + std::to_string(total));
    return !cancel_;
  });
  emit(ev::Patch{std::move(a)});
}

void Worker::handle(cmd::Step& c) {
  if (!session_) throw ds::Error("press Start first: there is no prompt yet");
  if (session_->done()) {  // nothing to take: say so, or the window would wait for a step
    emit(ev::Truncate{session_->steps_done(), true});
    return;
  }
  for (int i = 0; c.count < 0 || i < c.count; ++i) {
    if (cancel_ || session_->done()) break;
    set_activity("computing step " + std::to_string(session_->steps_done() + 1));
    auto t0 = Clock::now();
    const size_t k = size_t(session_->steps_done());
    session_->step(k < forced_.size() ? forced_[k] : -1);
    ev::Step e;
    e.seconds = since(t0);
    e.index = session_->steps_done() - 1;
    e.done = session_->done();
    e.step = session_->hand_over_last_step();
    emit(std::move(e));
  }
}

void Worker::handle(cmd::Rewind& c) {
  if (!session_) return;
  int k = std::clamp(c.keep, 0, session_->steps_done());
  // The steps from k on are drawn again with the current settings. With the seed step k
  // was drawn with, the random numbers repeat exactly (the same draw for the same
  // settings); with another seed, they start afresh from that seed.
  uint64_t used = sampler_.seed;
  const auto& steps = session_->trace().steps;
  if (k < int(steps.size()) && steps[k].sample) used = steps[k].sample->config.seed;
  session_->rewind(k);
  forced_.resize(std::min(forced_.size(), size_t(k)));  // steps taken again draw
  session_->set_sampler(sampler_);
  if (sampler_.seed != used) session_->sampler().reseed(sampler_.seed);
  // Rewinding to the end of a finished text leaves it finished.
  emit(ev::Truncate{k, session_->done()});
}

void Worker::handle(cmd::Sampler& c) {
  ds::validate(c.config);
  sampler_ = c.config;
  if (session_) session_->set_sampler(c.config);
}

void Worker::handle(cmd::Heads& c) {
  heads_off_ = c.self;
  cross_heads_off_ = c.cross;
  apply_heads();
}

void Worker::handle(cmd::Shape& c) {
  auto a = std::make_shared<ShapeAnswer>();
  a->step = c.step;
  a->version = c.version;
  a->config = c.config;
  try {
    if (!session_) throw ds::Error("there is no session");
    a->rec = session_->shape(c.step, c.config);
  } catch (const ds::Error& e) {
    a->error = e.what();
  }
  emit(ev::Shape{std::move(a)});
}

void Worker::handle(cmd::Lens& c) {
  if (!lm_.model) throw ds::Error("the logit lens needs the model loaded");
  set_activity("logit lens");
  ev::Lens e;
  e.lens.step = c.step;
  e.lens.version = c.version;
  e.lens.columns = lens_columns(c.columns);
  emit(std::move(e));
}

void Worker::handle(cmd::SaveTrace& c) {
  set_activity("saving " + c.path);
  const auto t0 = Clock::now();
  c.trace->save(c.path, c.progress);  // the logit lens is in the trace when the window recorded it
  emit(ev::Saved{c.path, since(t0)});
}

}  // namespace dsgui
