#include "session/session.h"

#include <algorithm>

#include "probe/lens.h"
#include "util/error.h"

namespace ds {

Session::Session(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer, SessionOptions opt)
    : tok_(std::move(tokenizer)), opt_(std::move(opt)), engine_(std::move(model)), sampler_(opt_.sampler) {
  const Config& c = engine_.config();
  engine_.set_threads(opt_.threads);
  steps_ = (opt_.steps <= 0 || opt_.steps > c.max_seq) ? c.max_seq : opt_.steps;
  trace_.config = c;
  TraceOptions to = opt_.trace_options;
  to.threads = engine_.threads();
  if (!opt_.record.empty() || to.lens_top_k != 0)
    recorder_ = std::make_unique<TraceRecorder>(engine_.hooks(), c, trace_, opt_.record, to, engine_.model_ptr());
}

Session::~Session() = default;

std::string Session::text_of(int id) const {
  if (!tok_) return "";
  try {
    return tok_->piece(id);
  } catch (const Error&) {
    return "";
  }
}

void Session::start(const std::vector<int>& prompt, const std::vector<int>& source) {
  const Config& c = engine_.config();
  if (prompt.empty()) throw Error("the prompt is empty: give at least one token");
  for (int id : prompt)
    if (id < 0 || id >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
  if (int(prompt.size()) > steps_)
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens but only " + std::to_string(steps_) +
                " positions are allowed (--steps, or the model's context of " + std::to_string(c.max_seq) + ")");
  trace_.clear();
  if (c.encoder_decoder) {
    if (source.empty()) throw Error("this is an encoder-decoder model: give a source (--source)");
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
  trace_.steps.resize(k);
  generated_.resize(k);
  sampler_.rng() = rng_before_[k];
  rng_before_.erase(rng_before_.begin() + k, rng_before_.end());
  stopped_ = false;
}

int Session::step() {
  if (done()) return -1;
  std::vector<int> feed;
  if (engine_.pos() == 0)
    feed = prompt_;
  else
    feed.push_back(generated_.back());
  TraceStep& ts = trace_.steps.emplace_back();
  ts.pos0 = engine_.pos();
  ts.input = feed;
  for (int id : feed) ts.input_text.push_back(text_of(id));

  auto logits = engine_.forward(feed);
  if (opt_.trace_options.lens_top_k > 0)
    for (int id : lens_token_ids(ts))
      if (std::string text = text_of(id); !text.empty()) ts.token_text[id] = std::move(text);
  const int V = engine_.config().vocab_size;
  rng_before_.push_back(sampler_.rng());
  int token = sampler_.sample(logits.data(), V, last_);
  generated_.push_back(token);

  // The candidate table: the most probable after temperature, plus the drawn token.
  SampleRecord rec;
  rec.config = sampler_.config();
  rec.greedy = last_.greedy;
  rec.u = last_.u;
  rec.token = token;
  rec.n_kept = last_.n_kept;
  const int n = std::min(V, std::max(1, opt_.candidates));
  std::vector<int> rows;
  if (last_.greedy) {
    // p_temp is one-hot on the token, so the ranking is the sampler's order: the
    // token, then every other id ascending.
    rec.rank = 0;
    rows.assign(last_.order.begin(), last_.order.begin() + n);
  } else {
    auto by_p = [&](int a, int b) {
      return last_.p_temp[a] != last_.p_temp[b] ? last_.p_temp[a] > last_.p_temp[b] : a < b;
    };
    by_p_.resize(size_t(V));
    for (int i = 0; i < V; ++i) by_p_[size_t(i)] = i;
    std::partial_sort(by_p_.begin(), by_p_.begin() + n, by_p_.end(), by_p);
    rec.rank = 0;
    for (int i = 0; i < V; ++i)
      if (by_p(i, token)) ++rec.rank;
    rows.assign(by_p_.begin(), by_p_.begin() + n);
  }
  if (std::find(rows.begin(), rows.end(), token) == rows.end()) rows.push_back(token);
  for (int id : rows) {
    Candidate cd;
    cd.id = id;
    cd.text = text_of(id);
    cd.p_raw = last_.p_raw[id];
    cd.p_temp = last_.p_temp[id];
    cd.p_topk = last_.p_topk[id];
    cd.p_final = last_.p_final[id];
    cd.removed = last_.removed[id];
    rec.candidates.push_back(std::move(cd));
  }
  ts.sample = std::move(rec);

  if (std::find(opt_.stop_ids.begin(), opt_.stop_ids.end(), token) != opt_.stop_ids.end()) stopped_ = true;
  return token;
}

}  // namespace ds
