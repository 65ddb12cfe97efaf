#include "session/beam.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "session/session.h"
#include "util/error.h"

namespace ds {

void log_softmax(const float* x, int n, std::vector<double>& out) {
  out.resize(size_t(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) m = std::max(m, double(x[i]));
  if (!std::isfinite(m)) throw Error("beam search: the logits have no finite maximum (NaN or infinite weights?)");
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  const double lse = m + std::log(s);
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
}

namespace {

// A hypothesis being extended, with its own cache and next-token log-probabilities.
struct Running {
  std::vector<int> tokens;
  double sum = 0;
  std::vector<int> path;  // its hypothesis index at every earlier step
  KvCache cache;
  std::vector<double> lp;  // [vocab]
};

// A (hypothesis, candidate) pair of one step.
struct Pair {
  double sum;
  int hyp, cand;
};

// The finished hypotheses under Hugging Face's BeamHypotheses rule: at most W kept, a
// newcomer enters when there is room or it beats the worst. Every finished hypothesis
// stays in `all`; `alive` says which are kept.
class Finished {
 public:
  Finished(int width, double penalty) : width_(width), penalty_(penalty) {}

  // Returns the index in all() of the hypothesis added (or -1 when it did not enter).
  int add(BeamFinished f, int length) {
    f.score = f.sum / std::pow(double(std::max(1, length)), penalty_);
    if (count_ >= width_ && !(f.score > worst_)) return -1;
    all_.push_back(std::move(f));
    alive_.push_back(true);
    ++count_;
    const int idx = int(all_.size()) - 1;
    if (count_ > width_) {
      // Drop the worst (the earliest among equals) and take the next worst's score.
      std::vector<int> live;
      for (int i = 0; i < int(all_.size()); ++i)
        if (alive_[size_t(i)]) live.push_back(i);
      std::stable_sort(live.begin(), live.end(),
                       [&](int a, int b) { return all_[size_t(a)].score < all_[size_t(b)].score; });
      alive_[size_t(live[0])] = false;
      --count_;
      worst_ = all_[size_t(live[1])].score;
    } else {
      worst_ = std::min(worst_, all_.back().score);
    }
    return idx;
  }
  int count() const { return count_; }
  double worst() const { return worst_; }
  double penalty() const { return penalty_; }
  const std::vector<BeamFinished>& all() const { return all_; }
  bool alive(int i) const { return alive_[size_t(i)]; }

 private:
  int width_;
  double penalty_;
  int count_ = 0;
  double worst_ = 1e9;
  std::vector<BeamFinished> all_;
  std::vector<bool> alive_;
};

void check_inputs(const Config& c, const std::vector<int>& prompt, const std::vector<int>& source,
                  const BeamOptions& opt, int limit) {
  if (opt.width < 1) throw Error("beam search: the width must be at least 1 (got " + std::to_string(opt.width) + ")");
  if (!std::isfinite(opt.length_penalty)) throw Error("beam search: the length penalty must be a finite number");
  // Each hypothesis keeps a whole KV cache: refuse widths whose caches would not fit.
  const double cache = 2.0 * c.n_layers * double(c.max_seq) * c.kv_dim() * sizeof(float);
  const double limit_bytes = 4.0 * (1u << 30);
  if (cache * opt.width > limit_bytes)
    throw Error("beam search with width " + std::to_string(opt.width) + " would keep " +
                std::to_string(int(cache * opt.width / (1 << 20))) + " MB of KV caches (" +
                std::to_string(int(cache / (1 << 20) + 0.5)) +
                " MB a hypothesis); the limit is 4096 MB: use a width of at most " +
                std::to_string(std::max(1, int(limit_bytes / cache))));
  check_prompt(c, prompt, limit);
  if (c.encoder_decoder && source.empty()) throw Error("this is an encoder-decoder model: give it a source text");
  if (!c.encoder_decoder && !source.empty()) throw Error("this model is decoder-only: it takes no source");
  for (int id : source)
    if (id < 0 || id >= c.vocab_size)
      throw Error("source token id " + std::to_string(id) + " is outside the vocabulary");
}

// A hypothesis's best min(2W, vocab) tokens, best first (ties: lower id).
std::vector<BeamCandidate> best_tokens(const Running& r, int m) {
  const int V = int(r.lp.size());
  std::vector<int> ids(static_cast<size_t>(V));
  for (int i = 0; i < V; ++i) ids[size_t(i)] = i;
  m = std::min(m, V);
  std::partial_sort(ids.begin(), ids.begin() + m, ids.end(), [&](int a, int b) {
    return r.lp[size_t(a)] != r.lp[size_t(b)] ? r.lp[size_t(a)] > r.lp[size_t(b)] : a < b;
  });
  std::vector<BeamCandidate> out(static_cast<size_t>(m));
  for (int j = 0; j < m; ++j) {
    out[size_t(j)].token = ids[size_t(j)];
    out[size_t(j)].logprob = r.lp[size_t(ids[size_t(j)])];
    out[size_t(j)].sum = r.sum + out[size_t(j)].logprob;
  }
  return out;
}

// The step's 2W best pairs over every hypothesis, best first (ties: lower hypothesis,
// then lower token id).
std::vector<Pair> best_pairs(const BeamStep& st, int m) {
  std::vector<Pair> all;
  for (int h = 0; h < int(st.hyps.size()); ++h)
    for (int j = 0; j < int(st.hyps[size_t(h)].candidates.size()); ++j)
      all.push_back({st.hyps[size_t(h)].candidates[size_t(j)].sum, h, j});
  auto better = [&](const Pair& a, const Pair& b) {
    if (a.sum != b.sum) return a.sum > b.sum;
    if (a.hyp != b.hyp) return a.hyp < b.hyp;
    return st.hyps[size_t(a.hyp)].candidates[size_t(a.cand)].token <
           st.hyps[size_t(b.hyp)].candidates[size_t(b.cand)].token;
  };
  m = std::min(m, int(all.size()));
  std::partial_sort(all.begin(), all.begin() + m, all.end(), better);
  all.resize(size_t(m));
  return all;
}

// The next step's hypotheses: each takes its parent's cache, or a copy when the parent
// has already given its cache to an earlier child. Caches left over go to `spare`.
std::vector<Running> next_hyps(Engine& e, std::vector<Running>& cur, const std::vector<Pair>& kept, const BeamStep& st,
                               std::vector<KvCache>& spare) {
  std::vector<Running> next(kept.size());
  std::vector<int> owner(cur.size(), -1);  // the child that took the parent's cache
  for (size_t i = 0; i < kept.size(); ++i) {
    const Pair& p = kept[i];
    Running& n = next[i];
    n.tokens = cur[size_t(p.hyp)].tokens;
    n.tokens.push_back(st.hyps[size_t(p.hyp)].candidates[size_t(p.cand)].token);
    n.sum = p.sum;
    n.path = cur[size_t(p.hyp)].path;
    n.path.push_back(p.hyp);
    if (owner[size_t(p.hyp)] < 0) {
      owner[size_t(p.hyp)] = int(i);
      n.cache = std::move(cur[size_t(p.hyp)].cache);
    }
  }
  for (size_t h = 0; h < cur.size(); ++h)
    if (owner[h] < 0) spare.push_back(std::move(cur[h].cache));
  for (size_t i = 0; i < kept.size(); ++i) {
    if (next[i].cache.block) continue;
    if (spare.empty()) {
      next[i].cache = e.make_cache();
    } else {
      next[i].cache = std::move(spare.back());
      spare.pop_back();
    }
    e.copy_cache(next[size_t(owner[size_t(kept[i].hyp)])].cache, next[i].cache);
  }
  return next;
}

// Runs each hypothesis's last token on its own cache.
void advance(Engine& e, std::vector<Running>& hyps) {
  const int V = e.config().vocab_size;
  for (Running& r : hyps) {
    e.swap_cache(r.cache);
    const int tok = r.tokens.back();
    auto logits = e.forward({&tok, 1});
    log_softmax(logits.data(), V, r.lp);
    e.swap_cache(r.cache);
  }
}

// The finished list in the result's order (best score first, the earlier among equals),
// with every candidate's `finished` index mapped to it.
void finish(BeamResult& res, const Finished& fin) {
  std::vector<int> order;
  for (int i = 0; i < int(fin.all().size()); ++i)
    if (fin.alive(i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return fin.all()[size_t(a)].score > fin.all()[size_t(b)].score; });
  std::vector<int> where(fin.all().size(), -1);
  for (size_t k = 0; k < order.size(); ++k) {
    where[size_t(order[k])] = int(k);
    res.finished.push_back(fin.all()[size_t(order[k])]);
  }
  for (auto& st : res.steps)
    for (auto& h : st.hyps)
      for (auto& c : h.candidates)
        if (c.finished >= 0) c.finished = where[size_t(c.finished)];
}

}  // namespace

BeamResult beam_search(std::shared_ptr<const Model> model, const std::vector<int>& prompt,
                       const std::vector<int>& source, const BeamOptions& opt) {
  const Config& c = model->cfg;
  const int limit = (opt.steps <= 0 || opt.steps > c.max_seq) ? c.max_seq : opt.steps;
  check_inputs(c, prompt, source, opt, limit);
  // As in the session (and llama2.c's run.c -n): the token drawn at the last position
  // is generated but never fed, so `limit` positions give limit - prompt + 1 tokens.
  const int W = opt.width, max_new = limit - int(prompt.size()) + 1;
  auto is_eos = [&](int t) { return std::find(opt.eos_ids.begin(), opt.eos_ids.end(), t) != opt.eos_ids.end(); };

  Engine e(model);
  e.set_threads(opt.threads);
  e.set_products(opt.products);
  if (c.encoder_decoder) e.encode(source);
  std::vector<Running> cur(1);
  cur[0].cache = e.make_cache();
  e.swap_cache(cur[0].cache);
  {
    auto logits = e.forward(prompt);
    log_softmax(logits.data(), c.vocab_size, cur[0].lp);
  }
  e.swap_cache(cur[0].cache);  // the prompt's keys and values now belong to hypothesis 0

  BeamResult res;
  res.prompt = prompt;
  Finished fin(W, opt.length_penalty);
  std::vector<KvCache> spare;
  bool done = false;
  for (int t = 0; t < max_new; ++t) {
    if (opt.on_step && !opt.on_step(t) && t > 0) break;
    BeamStep& st = res.steps.emplace_back();
    for (size_t h = 0; h < cur.size(); ++h) {
      BeamHyp& bh = st.hyps.emplace_back();
      bh.tokens = cur[h].tokens;
      bh.sum = cur[h].sum;
      bh.parent = cur[h].path.empty() ? -1 : cur[h].path.back();
      bh.candidates = best_tokens(cur[h], 2 * W);
    }
    const std::vector<Pair> pairs = best_pairs(st, 2 * W);
    std::vector<Pair> kept;
    for (int r = 0; r < int(pairs.size()); ++r) {
      const Pair& p = pairs[size_t(r)];
      BeamCandidate& cd = st.hyps[size_t(p.hyp)].candidates[size_t(p.cand)];
      cd.rank = r;
      if (int(kept.size()) == W) continue;  // Pruned: the step already has W hypotheses
      if (is_eos(cd.token)) {
        if (r >= W) {
          cd.fate = BeamFate::Skipped;
          continue;
        }
        BeamFinished f;
        f.tokens = cur[size_t(p.hyp)].tokens;
        f.tokens.push_back(cd.token);
        f.sum = cd.sum;
        f.eos = true;
        f.step = t;
        f.path = cur[size_t(p.hyp)].path;
        f.path.push_back(p.hyp);
        cd.fate = BeamFate::Finished;
        cd.finished = fin.add(std::move(f), int(cur[size_t(p.hyp)].tokens.size()) + 1);
      } else {
        cd.fate = BeamFate::Kept;
        cd.child = int(kept.size());
        kept.push_back(p);
      }
    }
    // Early stopping (Hugging Face's early_stopping=False): no running hypothesis can
    // still beat the worst finished one, judged at the current length.
    done = fin.count() >= W && !pairs.empty() && fin.worst() >= pairs[0].sum / std::pow(double(t + 1), fin.penalty());
    cur = next_hyps(e, cur, kept, st, spare);
    if (done || cur.empty() || t + 1 == max_new) break;
    advance(e, cur);
  }
  if (!done) {
    for (Running& r : cur) {
      BeamFinished f;
      f.tokens = r.tokens;
      f.sum = r.sum;
      f.step = int(res.steps.size()) - 1;
      f.path = r.path;
      const int len = int(r.tokens.size());
      const int idx = fin.add(std::move(f), len);
      // The running hypothesis is the candidate kept at the last step.
      if (idx >= 0 && !res.steps.empty()) {
        BeamHyp& last = res.steps.back().hyps[size_t(r.path.back())];
        for (auto& cd : last.candidates)
          if (cd.fate == BeamFate::Kept && cd.token == r.tokens.back()) cd.finished = idx;
      }
    }
  }
  res.stopped_early = done;
  finish(res, fin);
  return res;
}

}  // namespace ds
