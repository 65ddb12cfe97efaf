#include "session/session.h"

#include <algorithm>
#include <chrono>

#include "perf/memory.h"
#include "probe/lens.h"
#include "util/error.h"

namespace ds {

Session::Session(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer, SessionOptions opt)
    : tok_(std::move(tokenizer)), opt_(std::move(opt)), engine_(std::move(model)), sampler_(opt_.sampler) {
  const Config& c = engine_.config();
  engine_.set_threads(opt_.threads);
  engine_.set_products(opt_.products);
  sampler_.set_team(&engine_.thread_team());  // the sampler runs between forward calls
  steps_ = (opt_.steps <= 0 || opt_.steps > c.max_seq) ? c.max_seq : opt_.steps;
  trace_.config = c;
  TraceOptions to = opt_.trace_options;
  to.threads = engine_.threads();
  if (!opt_.record.empty() || to.lens_top_k != 0)
    recorder_ = std::make_unique<TraceRecorder>(engine_.hooks(), c, trace_, opt_.record, to, engine_.model_ptr());
  // The final hidden states, for contrastive search: ln_final, or the last layer's
  // output in a model with no final norm.
  const std::string last = c.final_norm ? "ln_final" : "blocks." + std::to_string(c.n_layers - 1) + ".resid_post";
  hidden_handle_ = engine_.hooks().subscribe(last, [this](HookEvent& ev) { on_hidden(ev); });
}

Session::~Session() { engine_.hooks().unsubscribe(hidden_handle_); }

void Session::on_hidden(const HookEvent& ev) {
  if (ev.stack != Stack::Decoder || ev.t.rank != 2) return;
  const int T = ev.t.shape[0], d = ev.t.shape[1];
  if (looking_ahead_) {
    ahead_.assign(ev.t.data + size_t(T - 1) * d, ev.t.data + size_t(T) * d);
    return;
  }
  const size_t need = size_t(ev.pos0 + T) * d;
  if (need > hidden_.capacity()) {
    // Room for at least 256 more positions, its pages mapped in one call rather than
    // faulting in as the copy and the steps write them (perf/memory.h).
    std::vector<float> more;
    more.reserve(std::max(need + size_t(256) * d, 2 * hidden_.capacity()));
    populate_for_write(more.data(), more.capacity() * sizeof(float));
    more.assign(hidden_.begin(), hidden_.end());
    hidden_.swap(more);
  }
  hidden_.resize(need);
  std::copy_n(ev.t.data, size_t(T) * d, hidden_.data() + size_t(ev.pos0) * d);
}

std::string Session::text_of(int id) const {
  if (!tok_) return "";
  try {
    return tok_->piece(id);
  } catch (const Error&) {
    return "";
  }
}

void check_prompt(const Config& c, const std::vector<int>& prompt, int limit) {
  if (prompt.empty()) throw Error("the prompt is empty: give at least one token");
  for (int id : prompt)
    if (id < 0 || id >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
  if (int(prompt.size()) > limit)
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens but only " + std::to_string(limit) +
                " positions are allowed (the steps asked for, or the model's context of " + std::to_string(c.max_seq) +
                ")");
}

void Session::start(const std::vector<int>& prompt, const std::vector<int>& source) {
  const Config& c = engine_.config();
  check_prompt(c, prompt, steps_);
  trace_.clear();
  if (c.encoder_decoder) {
    if (source.empty()) throw Error("this is an encoder-decoder model: give it a source text");
    trace_.source = source;
    for (int id : source) trace_.source_text.push_back(text_of(id));
    engine_.encode(source);
  } else {
    if (!source.empty()) throw Error("this model is decoder-only: it takes no source");
    engine_.reset();
  }
  prompt_ = prompt;
  generated_.clear();
  rng_before_.clear();
  hidden_.clear();
  kept_logits_.clear();
  first_kept_ = 0;
  started_ = true;
  stopped_ = false;
}

bool Session::done() const {
  if (!started_ || stopped_) return true;
  return engine_.pos() >= steps_;
}

void Session::rewind(int k) {
  if (!started_ || k < 0 || k > int(generated_.size()))
    throw Error("cannot rewind to step " + std::to_string(k) + " of " + std::to_string(generated_.size()));
  if (k == int(generated_.size())) return;
  engine_.truncate(trace_.steps[k].pos0);
  hidden_.resize(std::min(hidden_.size(), size_t(trace_.steps[k].pos0) * engine_.config().d_model));
  if (kept_logits_.size() > size_t(k)) kept_logits_.resize(size_t(k));
  first_kept_ = std::min(first_kept_, kept_logits_.size());
  trace_.steps.resize(k);
  generated_.resize(k);
  sampler_.rng() = rng_before_[k];
  rng_before_.erase(rng_before_.begin() + k, rng_before_.end());
  stopped_ = false;
}

int Session::step(int forced) {
  if (done()) return -1;
  if (forced >= engine_.config().vocab_size)
    throw Error("token id " + std::to_string(forced) + " is outside the vocabulary");
  std::vector<int> feed;
  if (engine_.pos() == 0)
    feed = prompt_;
  else
    feed.push_back(generated_.back());
  TraceStep& ts = trace_.steps.emplace_back();
  ts.pos0 = engine_.pos();
  ts.input = feed;
  for (int id : feed) ts.input_text.push_back(text_of(id));

  const int V = engine_.config().vocab_size;
  ts.kv_cache = opt_.kv_cache;
  const float* logits = run_forward(feed, ts.pos0, ts.forward_ms);
  if (opt_.trace_options.lens_top_k > 0)
    for (int id : lens_token_ids(ts))
      if (std::string text = text_of(id); !text.empty()) ts.token_text[id] = std::move(text);
  seq_ = prompt_;
  seq_.insert(seq_.end(), generated_.begin(), generated_.end());
  rng_before_.push_back(sampler_.rng());
  int token = sampler_.sample(logits, V, last_, seq_);
  scores_.clear();
  if (sampler_.config().contrastive) {
    const auto t0 = std::chrono::steady_clock::now();
    token = contrastive(scores_);
    trace_.steps.back().forward_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  if (forced >= 0) token = forced;
  generated_.push_back(token);
  trace_.steps.back().sample = record(last_, sampler_.config(), token, seq_, scores_, best_heap_);
  if (forced >= 0) trace_.steps.back().sample->chosen = TokenChoice{};  // given, not drawn
  keep_logits(logits);

  if (std::find(opt_.stop_ids.begin(), opt_.stop_ids.end(), token) != opt_.stop_ids.end()) stopped_ = true;
  return token;
}

TraceStep Session::hand_over_last_step() {
  if (trace_.steps.empty()) throw Error("there is no step to hand over: no step was taken");
  TraceStep& kept = trace_.steps.back();
  TraceStep out;
  out.pos0 = kept.pos0;
  out.input = kept.input;
  out.input_text = kept.input_text;
  out.tensors = std::move(kept.tensors);
  kept.tensors.clear();
  out.sample = kept.sample;
  out.token_text = std::move(kept.token_text);
  kept.token_text.clear();
  out.forward_ms = kept.forward_ms;
  out.kv_cache = kept.kv_cache;
  return out;
}

const float* Session::run_forward(const std::vector<int>& feed, int pos0, double& ms) {
  const int V = engine_.config().vocab_size;
  const auto t0 = std::chrono::steady_clock::now();
  const float* row = logits_.data();
  if (opt_.kv_cache) {
    auto logits = engine_.forward(feed);
    row = logits.data();
    if (sampler_.config().contrastive) {  // look-ahead forwards reuse the engine's buffer
      logits_.assign(logits.data(), logits.data() + V);
      row = logits_.data();
    }
  } else {
    // Every position so far from 0; the trace keeps the rows from pos0 on.
    const std::vector<int> all = sequence_at(int(trace_.steps.size()) - 1);
    if (recorder_) recorder_->set_first_row(pos0);
    const MatRM logits = engine_.forward_full(all, false);  // [1, vocab]
    if (recorder_) recorder_->set_first_row(0);
    logits_.assign(logits.data(), logits.data() + V);
    row = logits_.data();
  }
  ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return row;
}

int Session::contrastive(std::vector<ContrastiveScore>& scores) {
  const SamplerConfig& c = sampler_.config();
  const int pos = engine_.pos(), d = engine_.config().d_model;
  // With the context full there is no position to look ahead into: alpha 0's choice.
  if (pos >= engine_.config().max_seq || hidden_.size() != size_t(pos) * d) return last_.token;
  for (int id : last_.order) {
    ContrastiveScore sc;
    sc.id = id;
    sc.confidence = last_.p_temp[size_t(id)];  // contrastive search: p_temp is p(v), no temperature
    scores.push_back(sc);
  }
  if (recorder_) recorder_->set_paused(true);
  looking_ahead_ = true;
  auto resume = [&] {
    engine_.truncate(pos);
    looking_ahead_ = false;
    if (recorder_) recorder_->set_paused(false);
  };
  std::vector<int> ahead_seq = seq_;  // without the cache: every token so far, then the candidate
  ahead_seq.push_back(0);
  try {
    for (ContrastiveScore& sc : scores) {
      const int v = sc.id;
      ahead_.clear();
      if (opt_.kv_cache) {
        engine_.forward(std::span<const int>(&v, 1));
      } else {
        ahead_seq.back() = v;
        engine_.forward_full(ahead_seq, false);
      }
      engine_.truncate(pos);
      if (ahead_.size() != size_t(d)) throw Error("contrastive search: the look-ahead published no hidden state");
      sc.degeneration = degeneration_penalty(ahead_.data(), hidden_.data(), pos, d);
    }
  } catch (...) {
    resume();
    throw;
  }
  resume();
  const int best = contrastive_choice(scores, c.penalty_alpha);
  // Alpha 0 and a single candidate are greedy: the first maximum of the logits, as the
  // sampler already chose it.
  if (c.penalty_alpha == 0.0f || scores.size() <= 1 || best < 0) return last_.token;
  return scores[size_t(best)].id;
}

// The candidate table: the most probable after temperature, plus the drawn token and,
// for contrastive search, every candidate with its scores.
SampleRecord Session::record(const SampleResult& r, const SamplerConfig& c, int token, std::span<const int> seq,
                             const std::vector<ContrastiveScore>& scores, std::vector<uint64_t>& heap) const {
  const int V = engine_.config().vocab_size;
  SampleRecord rec;
  rec.config = c;
  rec.greedy = r.greedy;
  rec.u = r.u;
  rec.token = token;
  rec.n_kept = r.n_kept;
  rec.rank = 0;
  const int n = std::min(V, std::max(1, opt_.candidates));
  std::vector<int> rows;
  {
    // Ranked by p_temp; greedy steps (p_temp one-hot) by the model's own distribution
    // (after the repetition penalty), whose first maximum is the token.
    const std::vector<float>& key = !r.greedy ? r.p_temp : r.p_rep.empty() ? r.p_raw : r.p_rep;
    heap.resize(size_t(n));
    rows.resize(size_t(n));
    best_ids(key.data(), nullptr, V, n, rows.data(), heap.data());
    if (token >= 0) {  // rows[i] has rank i in the same order
      const auto at = std::find(rows.begin(), rows.end(), token);
      rec.rank = at != rows.end() ? int(at - rows.begin()) : rank_of(key.data(), V, token);
    }
  }
  auto add = [&](int id) {
    if (id >= 0 && std::find(rows.begin(), rows.end(), id) == rows.end()) rows.push_back(id);
  };
  add(token);
  for (const ContrastiveScore& sc : scores) add(sc.id);
  const bool penalised = c.repetition_penalty != 1.0f && !r.p_rep.empty();
  for (int id : rows) {
    Candidate cd;
    cd.id = id;
    cd.text = text_of(id);
    cd.p_raw = r.p_raw[id];
    cd.p_rep = penalised ? r.p_rep[id] : cd.p_raw;
    cd.repeated = penalised && std::find(seq.begin(), seq.end(), id) != seq.end();
    cd.p_temp = r.p_temp[id];
    cd.p_topk = r.p_topk[id];
    cd.p_final = r.p_final[id];
    cd.removed = r.removed[id];
    for (const ContrastiveScore& sc : scores)
      if (sc.id == id) {
        cd.lookahead = true;
        cd.confidence = float(sc.confidence);
        cd.degeneration = float(sc.degeneration);
        cd.score = float(sc.score);
      }
    rec.candidates.push_back(std::move(cd));
  }
  return rec;
}

void Session::keep_logits(const float* logits) {
  const size_t V = size_t(engine_.config().vocab_size);
  const size_t row = V * sizeof(float);
  const size_t max_rows = opt_.keep_logits_bytes / row;
  if (max_rows == 0) return;
  kept_logits_.emplace_back(logits, logits + V);
  while (kept_logits_.size() - first_kept_ > max_rows) std::vector<float>().swap(kept_logits_[first_kept_++]);
}

bool Session::has_logits(int k) const {
  return k >= 0 && size_t(k) < kept_logits_.size() && !kept_logits_[size_t(k)].empty();
}

std::vector<int> Session::sequence_at(int k) const {
  std::vector<int> seq;
  for (int i = 0; i <= k && i < int(trace_.steps.size()); ++i)
    seq.insert(seq.end(), trace_.steps[size_t(i)].input.begin(), trace_.steps[size_t(i)].input.end());
  return seq;
}

SampleRecord Session::shape(int k, const SamplerConfig& c) const {
  if (!has_logits(k))
    throw Error("the logits of step " + std::to_string(k + 1) +
                " are no longer kept: draw it again to see other settings on it");
  Sampler s(c);
  SampleResult r;
  const std::vector<int> seq = sequence_at(k);
  const std::vector<float>& logits = kept_logits_[size_t(k)];
  s.shape(logits.data(), int(logits.size()), r, seq);
  std::vector<uint64_t> scratch;
  return record(r, c, -1, seq, {}, scratch);
}

}  // namespace ds
