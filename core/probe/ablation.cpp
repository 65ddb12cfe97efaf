#include "probe/ablation.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "util/error.h"

namespace ds {

double token_logprob(const float* logits, int vocab, int token) {
  if (token < 0 || token >= vocab) throw Error("token " + std::to_string(token) + " is outside the vocabulary");
  double mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return double(logits[token]) - mx - std::log(sum);
}

AblationStep ablation_step(const Trace& t, int s) {
  if (s < 0 || s >= int(t.steps.size()))
    throw Error("there is no step " + std::to_string(s + 1) + " (the trace has " + std::to_string(t.steps.size()) +
                ")");
  const TraceStep& ts = t.steps[size_t(s)];
  if (!ts.sample) throw Error("step " + std::to_string(s + 1) + " drew no token");
  AblationStep st;
  for (int i = 0; i <= s; ++i)
    st.tokens.insert(st.tokens.end(), t.steps[size_t(i)].input.begin(), t.steps[size_t(i)].input.end());
  st.pos0 = ts.pos0;
  st.source = t.source;
  st.token = ts.sample->token;
  st.kv_cache = ts.kv_cache;
  return st;
}

namespace {

void check_step(const Config& c, const AblationStep& st) {
  if (st.pos0 < 0 || st.pos0 >= int(st.tokens.size())) throw Error("the step feeds no token");
  if (int(st.tokens.size()) > c.max_seq)
    throw Error("the step runs " + std::to_string(st.tokens.size()) + " positions, past the model's context of " +
                std::to_string(c.max_seq));
  for (int id : st.tokens)
    if (id < 0 || id >= c.vocab_size) throw Error("token " + std::to_string(id) + " is outside the vocabulary");
  if (st.token < 0 || st.token >= c.vocab_size)
    throw Error("the chosen token " + std::to_string(st.token) + " is outside the vocabulary");
}

// The heads an ablation switches off, one at a time, in layer, head order (self first).
std::vector<HeadEffect> all_heads(const Config& c) {
  std::vector<HeadEffect> v;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h) v.push_back({HeadSite::Self, l, h});
  if (c.encoder_decoder)
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h) v.push_back({HeadSite::Cross, l, h});
  return v;
}

// The step's input run on an engine whose cache holds the prefix [0, pos0) (a whole
// recompute when the step did not read the cache); the cache is left at pos0.
double run_step(Engine& e, const AblationStep& st) {
  const std::span<const int> all(st.tokens);
  const int V = e.config().vocab_size;
  if (!st.kv_cache) {
    const MatRM out = e.forward_full(all, false);
    e.reset();  // the cache holds what this run computed, the head perhaps off: not a prefix to keep
    return token_logprob(out.data(), V, st.token);
  }
  const auto out = e.forward(all.subspan(size_t(st.pos0)));
  const double lp = token_logprob(out.data(), V, st.token);
  e.truncate(st.pos0);
  return lp;
}

// The step with one head off; the engine's cache is at pos0 before and after.
double run_with_head_off(Engine& e, const AblationStep& st, HeadSite site, int layer, int head) {
  const int hd = zero_head(e.hooks(), layer, head, e.config().d_head, site);
  try {
    const double lp = run_step(e, st);
    e.hooks().unsubscribe(hd);
    return lp;
  } catch (...) {
    e.hooks().unsubscribe(hd);
    throw;
  }
}

// Brings the engine's cache to the step's prefix, every head on: the positions it
// lacks are run (a cache past pos0 starts over).
void run_prefix(Engine& e, const AblationStep& st) {
  if (!st.kv_cache) return;  // the step recomputes every position
  if (e.pos() > st.pos0) e.reset();
  if (e.pos() < st.pos0) e.forward(std::span<const int>(st.tokens.data() + e.pos(), size_t(st.pos0 - e.pos())));
}

}  // namespace

HeadAblation ablate_heads(const std::shared_ptr<const Model>& m, const AblationStep& st, int threads,
                          const AblationProgress& progress) {
  if (!m) throw Error("no model");
  const Config& c = m->cfg;
  check_step(c, st);
  Engine e(m);
  e.set_threads(std::max(1, threads));
  if (c.encoder_decoder) e.encode(st.source);
  e.reset();
  HeadAblation r;
  r.token = st.token;
  r.heads = all_heads(c);
  const int total = int(r.heads.size()) + 1;
  run_prefix(e, st);
  r.logp = run_step(e, st);
  if (progress && !progress(1, total)) throw Cancelled();
  for (size_t i = 0; i < r.heads.size(); ++i) {
    HeadEffect& h = r.heads[i];
    h.logp = run_with_head_off(e, st, h.site, h.layer, h.head);
    h.delta = h.logp - r.logp;
    if (progress && !progress(int(i) + 2, total)) throw Cancelled();
  }
  return r;
}

void rank_by_effect(std::vector<HeadEffect>& heads) {
  std::stable_sort(heads.begin(), heads.end(),
                   [](const HeadEffect& a, const HeadEffect& b) { return std::fabs(a.delta) > std::fabs(b.delta); });
}

std::vector<StepEffect> head_across_steps(const std::shared_ptr<const Model>& m, const Trace& t, HeadSite site,
                                          int layer, int head, int threads, const AblationProgress& progress) {
  if (!m) throw Error("no model");
  const Config& c = m->cfg;
  if (layer < 0 || layer >= c.n_layers || head < 0 || head >= c.n_heads || site == HeadSite::Encoder ||
      (site == HeadSite::Cross && !c.encoder_decoder))
    throw Error("this model has no such head to switch off");
  Engine e(m);
  e.set_threads(std::max(1, threads));
  if (c.encoder_decoder) e.encode(t.source);
  e.reset();
  std::vector<StepEffect> out;
  const int n = int(t.steps.size());
  for (int s = 0; s < n; ++s) {
    if (!t.steps[size_t(s)].sample) continue;
    const AblationStep st = ablation_step(t, s);
    check_step(c, st);
    run_prefix(e, st);
    StepEffect r;
    r.step = s;
    r.token = st.token;
    r.logp = run_step(e, st);
    r.delta = run_with_head_off(e, st, site, layer, head) - r.logp;
    out.push_back(r);
    if (progress && !progress(s + 1, n)) throw Cancelled();
  }
  return out;
}

}  // namespace ds
