#include "train/story_eval.h"

#include <algorithm>
#include <cmath>

#include "model/hooks.h"
#include "train/stories.h"
#include "util/error.h"

namespace ds::train {

// ------------------------------------------------------------------ Kneser-Ney trigram

KneserNeyTrigram::KneserNeyTrigram(int vocab_size, double discount)
    : V_(vocab_size), D_(discount), uni_cont_(size_t(std::max(vocab_size, 1)), 0) {
  if (vocab_size < 1 || vocab_size > (1 << 20)) throw Error("trigram: vocabulary size out of range");
  if (!(discount > 0 && discount < 1)) throw Error("trigram: the discount must lie in (0, 1)");
}

// One trigram u v w: the counts of each order, and the continuation counts of the
// lower orders when a type is seen for the first time.
void KneserNeyTrigram::count(int u, int v, int w) {
  if (++tri_[key(u, v, w)] > 1) {
    ++ctx_[key(u, v)];
    return;
  }
  ++ctx_[key(u, v)];
  ++ctx_types_[key(u, v)];
  // A new (u, v, w): one more distinct left context of v w.
  if (++bi_cont_[key(v, w)] == 1) {
    ++bi_ctx_types_[v];
    // A new bigram type v w: one more distinct left context of w.
    if (uni_cont_[size_t(w)]++ == 0) ++uni_types_;
    ++uni_total_;
  }
  ++bi_ctx_[v];
}

void KneserNeyTrigram::add(const std::vector<int>& seq) {
  if (seq.empty()) return;
  for (int id : seq)
    if (id < 0 || id >= V_) throw Error("trigram: id " + std::to_string(id) + " outside the vocabulary");
  int u = seq[0], v = seq[0];
  for (size_t t = 1; t < seq.size(); ++t) {
    count(u, v, seq[t]);
    u = v;
    v = seq[t];
  }
}

double KneserNeyTrigram::p_unigram(int w) const {
  const double uniform = 1.0 / V_;
  if (uni_total_ == 0) return uniform;
  return (std::max(uni_cont_[size_t(w)] - D_, 0.0) + D_ * uni_types_ * uniform) / double(uni_total_);
}

double KneserNeyTrigram::p_bigram(int v, int w) const {
  auto it = bi_ctx_.find(v);
  if (it == bi_ctx_.end()) return p_unigram(w);
  const double n = it->second;
  auto c = bi_cont_.find(key(v, w));
  const double cvw = c == bi_cont_.end() ? 0.0 : c->second;
  return (std::max(cvw - D_, 0.0) + D_ * bi_ctx_types_.at(v) * p_unigram(w)) / n;
}

double KneserNeyTrigram::prob(int u, int v, int w) const {
  auto it = ctx_.find(key(u, v));
  if (it == ctx_.end()) return p_bigram(v, w);
  const double n = it->second;
  auto c = tri_.find(key(u, v, w));
  const double cuvw = c == tri_.end() ? 0.0 : c->second;
  return (std::max(cuvw - D_, 0.0) + D_ * ctx_types_.at(key(u, v)) * p_bigram(v, w)) / n;
}

double KneserNeyTrigram::nll(const std::vector<int>& seq, long* count) const {
  double s = 0;
  long n = 0;
  if (!seq.empty()) {
    int u = seq[0], v = seq[0];
    for (size_t t = 1; t < seq.size(); ++t) {
      s -= std::log(prob(u, v, seq[t]));
      ++n;
      u = v;
      v = seq[t];
    }
  }
  if (count) *count = n;
  return s;
}

// ------------------------------------------------------------------ the model's figures

std::vector<std::vector<int>> training_stories(const TrainSpec& spec, int steps) {
  const Task task = Task::make(spec.task);
  if (task.kind() != TaskKind::Stories) throw Error("training_stories: the task is not stories");
  SplitMix rng(0);
  rng.state = stream_start(spec);
  std::vector<std::vector<int>> out;
  for (long k = 0; k < long(steps) * spec.batch; ++k) {
    Example ex = task.example(rng);
    if (ex.targets.empty() || ex.copy) continue;  // a copying exercise
    ex.tokens.push_back(ex.targets.back());       // </s>
    out.push_back(std::move(ex.tokens));
  }
  return out;
}

double mean_nll(const std::shared_ptr<const Model>& m, const std::vector<std::vector<int>>& seqs, long* count) {
  Engine e(m);
  double s = 0;
  long n = 0;
  for (const auto& seq : seqs) {
    if (seq.size() < 2) continue;
    if (int(seq.size()) > m->cfg.max_seq + 1) throw Error("a sequence longer than the model's context");
    e.reset();
    const auto lg = e.forward(std::span<const int>(seq.data(), seq.size() - 1), true);
    for (Eigen::Index t = 0; t < lg.rows(); ++t) {
      const auto row = lg.row(t);
      const double mx = double(row.maxCoeff());
      double z = 0;
      for (Eigen::Index v = 0; v < row.size(); ++v) z += std::exp(double(row(v)) - mx);
      s += mx + std::log(z) - double(row(seq[size_t(t) + 1]));
      ++n;
    }
  }
  if (count) *count = n;
  return n ? s / double(n) : 0.0;
}

namespace {

// An id drawn from softmax(logits / temperature).
int draw(const float* logits, int n, double temperature, SplitMix& rng) {
  const float mx = *std::max_element(logits, logits + n);
  std::vector<double> p(static_cast<size_t>(n));
  double z = 0;
  for (int v = 0; v < n; ++v) z += p[size_t(v)] = std::exp((double(logits[v]) - mx) / temperature);
  double u = rng.unit() * z;
  for (int v = 0; v < n; ++v) {
    u -= p[size_t(v)];
    if (u < 0) return v;
  }
  return n - 1;
}

}  // namespace

SampledStories sample_stories(const std::shared_ptr<const Model>& m, const Task& task, const std::string& prompt, int n,
                              double temperature, uint64_t seed) {
  if (!(temperature > 0)) throw Error("sampling needs a temperature above 0");
  Engine e(m);
  SplitMix rng(seed);
  SampledStories r;
  const int V = m->cfg.vocab_size;
  for (int k = 0; k < n; ++k) {
    e.reset();
    std::vector<int> ids = task.prompt_ids(prompt), feed = ids;
    bool ended = false;
    while (e.pos() + int(feed.size()) <= m->cfg.max_seq) {
      const auto lg = e.forward(feed);
      const int t = draw(lg.data(), V, temperature, rng);
      if (t == m->cfg.eos_id) {
        ended = true;
        break;
      }
      ids.push_back(t);
      feed.assign(1, t);
    }
    const std::string text = task.decode(ids);
    r.ended += ended;
    for (const std::string& s : split_sentences(text)) {
      ++r.sentences;
      r.grammatical += is_grammatical(s);
    }
    r.stories_ok += check_story(text).ok();
    r.texts.push_back(text);
  }
  return r;
}

NameCopying name_copying(const std::shared_ptr<const Model>& m, const Task& task,
                         const std::vector<TextSample>& stories, int max_prompts) {
  Engine e(m);
  NameCopying r;
  const auto& vocab = task.vocab();
  for (const TextSample& s : stories) {
    if (r.prompts >= max_prompts) break;
    const std::vector<int> ids = task.prompt_ids(s.answer);
    std::vector<size_t> at;  // positions of names said before
    for (size_t k = 1; k < ids.size(); ++k)
      if (is_story_name(vocab[size_t(ids[k])]) &&
          std::find(ids.begin() + 1, ids.begin() + long(k), ids[k]) != ids.begin() + long(k))
        at.push_back(k);
    if (at.empty()) continue;
    e.reset();
    const auto lg = e.forward(std::span<const int>(ids.data(), at.back()), true);
    for (size_t k : at) {
      if (r.prompts >= max_prompts) break;
      const auto row = lg.row(Eigen::Index(k) - 1);
      Eigen::Index best = 0;
      row.maxCoeff(&best);
      ++r.prompts;
      if (int(best) == ids[k]) {
        ++r.right;
      } else if (r.misses.size() < 10) {
        r.misses.push_back(task.decode(std::vector<int>(ids.begin(), ids.begin() + long(k))) + " -> " +
                           vocab[size_t(best)] + " (want " + vocab[size_t(ids[k])] + ")");
      }
    }
  }
  return r;
}

InductionScores induction_scores(const std::shared_ptr<const Model>& m, int span, int trials, uint64_t seed,
                                 int first_id) {
  const Config& c = m->cfg;
  if (span < 2 || 2 * span + 1 > c.max_seq || first_id < 0 || first_id >= c.vocab_size)
    throw Error("induction: span or first id out of range");
  Engine e(m);
  InductionScores r;
  r.n_layers = c.n_layers;
  r.n_heads = c.n_heads;
  const size_t nh = size_t(c.n_layers * c.n_heads);
  r.second_half.assign(nh, 0.0);
  r.tl.assign(nh, 0.0);
  r.tl_no_bos.assign(nh, 0.0);
  r.tl_no_bos_no_current.assign(nh, 0.0);
  std::vector<int> seq;
  e.hooks().subscribe("blocks.*.attn.pattern", [&](HookEvent& ev) {
    const int H = ev.t.shape[0], T = ev.t.shape[1], S = ev.t.shape[2];
    for (int h = 0; h < H; ++h) {
      const float* P = ev.t.data + size_t(h) * T * S;
      double second = 0, hit = 0, all = 0, all_no_bos = 0, all_no_bos_no_current = 0;
      for (int i = 0; i < T; ++i)
        for (int j = 0; j <= i && j < S; ++j) {
          const double a = P[size_t(i) * S + j];
          // TransformerLens's induction detection: j > 0 and seq[j - 1] == seq[i], j - 1 < i.
          const bool det = j > 0 && j - 1 < i && seq[size_t(j - 1)] == seq[size_t(i)];
          all += a;
          if (j > 0) all_no_bos += a;
          if (j > 0 && j != i) all_no_bos_no_current += a;
          if (det) hit += a;
          if (i > span && j == i - span + 1) second += a;
        }
      const size_t k = size_t(ev.layer * H + h);
      r.second_half[k] += second / span / trials;
      r.tl[k] += hit / all / trials;
      r.tl_no_bos[k] += (all_no_bos > 0 ? hit / all_no_bos : 0.0) / trials;
      r.tl_no_bos_no_current[k] += (all_no_bos_no_current > 0 ? hit / all_no_bos_no_current : 0.0) / trials;
    }
  });
  SplitMix rng(seed);
  for (int t = 0; t < trials; ++t) {
    seq.assign(1, c.bos_id >= 0 ? c.bos_id : 0);
    std::vector<int> s(static_cast<size_t>(span));
    for (int& id : s) id = rng.uniform(first_id, c.vocab_size - 1);
    for (int rep = 0; rep < 2; ++rep) seq.insert(seq.end(), s.begin(), s.end());
    e.reset();
    e.forward(seq);
  }
  r.best = int(std::max_element(r.second_half.begin(), r.second_half.end()) - r.second_half.begin());
  return r;
}

}  // namespace ds::train
