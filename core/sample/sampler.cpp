#include "sample/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "perf/team.h"
#include "perf/vmath.h"
#include "util/error.h"

namespace ds {

namespace {

template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The passes over the vocabulary (exponentials, normalising) work on kChunks pieces
// whose bounds are multiples of 16, the same on any team, and the pieces' sums are
// added in order: the results have the same bits on one thread or several.
constexpr int kChunks = 8;
int64_t chunk_bound(int64_t n, int c) { return c >= kChunks ? n : (n * c / kChunks) & ~int64_t(15); }

// Strict total order: higher probability first, then lower id.
struct ByProbDesc {
  const float* p;
  bool operator()(int a, int b) const { return p[a] > p[b] || (p[a] == p[b] && a < b); }
};

// Packed sort key: ascending key = descending p, then ascending id. The bits of a
// float p >= 0 order like its value, so their complement orders the other way.
inline uint64_t pack(const float* p, int id) {
  return (static_cast<uint64_t>(~std::bit_cast<uint32_t>(p[id])) << 32) | static_cast<uint32_t>(id);
}
inline int unpack(uint64_t k) { return static_cast<int>(k & 0xFFFFFFFFu); }

template <typename V>
void size_to(V& v, int n) {
  if (v.capacity() < static_cast<size_t>(n)) v.reserve(static_cast<size_t>(n));
  v.resize(static_cast<size_t>(n));
}

// The p of a packed key.
inline float p_of(uint64_t k) { return std::bit_cast<float>(~static_cast<uint32_t>(k >> 32)); }

// Whether any of p[i0 .. i0 + 16) is >= t.
inline bool any_at_least(const float* p, int i0, float t) {
#if defined(__AVX2__)
  const __m256 tv = _mm256_set1_ps(t);
  return (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i0), tv, _CMP_GE_OQ)) |
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i0 + 8), tv, _CMP_GE_OQ))) != 0;
#else
  bool any = false;
  for (int i = i0; i < i0 + 16; ++i) any |= p[i] >= t;
  return any;
#endif
}

}  // namespace

void best_ids(const float* p, const int* ids, int n, int m, int* best, uint64_t* heap) {
  // A max-heap of the m best packed keys so far (its top: the worst of them). An id can
  // only displace it with p at least the top's p, so over every id (ids == nullptr)
  // blocks of 16 below that are skipped with one comparison each.
  auto id_at = [ids](int i) { return ids != nullptr ? ids[i] : i; };
  for (int i = 0; i < m; ++i) heap[i] = pack(p, id_at(i));
  std::make_heap(heap, heap + m);
  float worst = p_of(heap[0]);
  auto offer = [&](int i) {
    const uint64_t k = pack(p, id_at(i));
    if (k < heap[0]) {
      std::pop_heap(heap, heap + m);
      heap[m - 1] = k;
      std::push_heap(heap, heap + m);
      worst = p_of(heap[0]);
    }
  };
  int i0 = m;
  if (ids == nullptr)
    for (; i0 + 16 <= n; i0 += 16)
      if (any_at_least(p, i0, worst))
        for (int i = i0; i < i0 + 16; ++i) offer(i);
  for (; i0 < n; ++i0) offer(i0);
  std::sort(heap, heap + m);
  for (int i = 0; i < m; ++i) best[i] = unpack(heap[i]);
}

int rank_of(const float* p, int n, int id) {
  const float v = p[id];
  int r = 0;
  for (int i = 0; i < n; ++i) r += p[i] > v;
  for (int i = 0; i < id; ++i) r += p[i] == v;
  return r;
}

void validate(const SamplerConfig& c) {
  if (!(c.temperature >= 0.0f))  // also rejects NaN
    throw Error("sampler: temperature must be >= 0 (got " + str(c.temperature) + ")");
  if (c.top_k < 0) throw Error("sampler: top_k must be >= 0, 0 = off (got " + str(c.top_k) + ")");
  if (!(c.top_p > 0.0f && c.top_p <= 1.0f))  // also rejects NaN
    throw Error("sampler: top_p must be in (0, 1], 1 = off (got " + str(c.top_p) + ")");
  if (!(c.repetition_penalty > 0.0f) || !std::isfinite(c.repetition_penalty))
    throw Error("sampler: repetition_penalty must be a number > 0, 1 = off (got " + str(c.repetition_penalty) + ")");
  if (!(c.penalty_alpha >= 0.0f && c.penalty_alpha <= 1.0f))  // also rejects NaN
    throw Error("sampler: penalty_alpha must be in [0, 1] (got " + str(c.penalty_alpha) + ")");
}

namespace {

// The repetition penalty in place; mark[0..vocab) is zero on entry and on return.
void penalise_row(float* x, int vocab, std::span<const int> seen, float r, uint8_t* mark) {
  for (const int id : seen)
    if (id < 0 || id >= vocab)
      throw Error("repetition penalty: token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(vocab) + ")");
  for (const int id : seen) {
    if (mark[id]) continue;
    mark[id] = 1;
    x[id] = x[id] > 0.0f ? x[id] / r : x[id] * r;
  }
  for (const int id : seen) mark[id] = 0;
}

}  // namespace

void apply_repetition_penalty(float* logits, int vocab, std::span<const int> seen, float r) {
  if (!(r > 0.0f) || !std::isfinite(r))
    throw Error("repetition penalty must be a number > 0, 1 = off (got " + str(r) + ")");
  if (r == 1.0f) return;
  std::vector<uint8_t> mark(static_cast<size_t>(std::max(vocab, 0)), 0);
  penalise_row(logits, vocab, seen, r, mark.data());
}

int argmax(const float* x, int n) {
  if (x == nullptr || n <= 0) throw Error("argmax: empty input");
  int best = 0;
  float best_v = x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] > best_v) {
      best_v = x[i];
      best = i;
    }
  }
  return best;
}

Sampler::Sampler(SamplerConfig c) : cfg_(c), rng_(c.seed) { validate(c); }

void Sampler::set_config(SamplerConfig c) {
  validate(c);
  if (c.seed != cfg_.seed) rng_ = Rng(c.seed);
  cfg_ = c;
}

void Sampler::reseed(uint64_t seed) {
  cfg_.seed = seed;
  rng_ = Rng(seed);
}

// body(c) for every chunk c, across the team when there is one and the row is long
// enough to be worth a fork and join.
template <class F>
void Sampler::over_chunks(int n, F&& body) const {
  if (team_ != nullptr && team_->size() > 1 && n >= kParallelMin) {
    team_->parallel_for(kChunks, true, body);
  } else {
    for (int c = 0; c < kChunks; ++c) body(c);
  }
}

// Fills w[i] = exp((x_i - xmax) / T) and returns their sum. Tokens equal to the maximum
// get exactly 1 (so +inf logits share the mass, and an all -inf row is uniform); tokens
// infinitely below the maximum get exp(-inf) = 0. T may be +inf: 1/T is then replaced by
// the smallest normal double, which keeps -inf * (1/T) = -inf (not NaN) and gives
// exp(~0) = 1 for every finite logit.
double Sampler::weights(const float* x, int n, float xmax, double T, double* w) const {
  const double inv_t = std::isinf(T) ? std::numeric_limits<double>::min() : 1.0 / T;
  std::array<double, kChunks> part{};
  over_chunks(n, [&](int c) {
    const int64_t b = chunk_bound(n, c), e = chunk_bound(n, c + 1);
    part[size_t(c)] = exp_weights(x + b, e - b, xmax, inv_t, w + b);
  });
  double sum = 0.0;
  for (const double v : part) sum += v;
  return sum;
}

float Sampler::max_nan(const float* x, int n, bool* nan) {
  static_assert(std::tuple_size_v<decltype(piece_max_)> == kChunks);
  std::array<float, kChunks>& m = piece_max_;
  std::array<uint8_t, kChunks> bad{};
  over_chunks(n, [&](int c) {
    const int64_t b = chunk_bound(n, c), e = chunk_bound(n, c + 1);
    bool nc = false;
    m[size_t(c)] = max_and_nan(x + b, e - b, &nc);
    bad[size_t(c)] = nc;
  });
  float xmax = -std::numeric_limits<float>::infinity();
  *nan = false;
  for (int c = 0; c < kChunks; ++c) {
    xmax = std::max(xmax, m[size_t(c)]);
    *nan = *nan || bad[size_t(c)];
  }
  return xmax;
}

int Sampler::first_max(const float* x, int n, float xmax) const {
  for (int c = 0; c < kChunks; ++c)
    if (piece_max_[size_t(c)] == xmax) {
      const int64_t b = chunk_bound(n, c), e = chunk_bound(n, c + 1);
      return int(b + first_equal(x + b, e - b, xmax));
    }
  return int(first_equal(x, n, xmax));  // not reached: xmax is some piece's maximum
}

// p[i] = w[i] / sum as float.
void Sampler::normalise(const double* w, int n, double sum, float* p) const {
  const double s = 1.0 / sum;
  over_chunks(n, [&](int c) {
    const int64_t b = chunk_bound(n, c), e = chunk_bound(n, c + 1);
    scale_to_float(w + b, e - b, s, p + b);
  });
}

// Sizes out's tables and the scratch once per vocabulary, so later calls do not
// allocate. Returns the one-hot id a greedy step left in out (SampleResult::one_hot,
// with nothing marked removed), or -1 after marking every id kept; out.one_hot is -1
// until a greedy step sets it again.
int Sampler::prepare(int vocab, SampleResult& out) {
  const size_t V = static_cast<size_t>(vocab);
  const bool sized = out.p_temp.size() == V && out.p_topk.size() == V && out.p_final.size() == V &&
                     out.removed.size() == V && out.one_hot < vocab;
  const int hot = sized ? out.one_hot : -1;
  out.one_hot = -1;
  size_to(out.p_raw, vocab);
  size_to(out.p_temp, vocab);
  size_to(out.p_topk, vocab);
  size_to(out.p_final, vocab);
  size_to(out.removed, vocab);
  if (out.order.capacity() < V) out.order.reserve(V);
  size_to(w_, vocab);
  size_to(idx_, vocab);
  size_to(sel_, vocab);
  if (keys_.capacity() < V) keys_.reserve(V);
  if (keys2_.capacity() < V) keys2_.reserve(V);
  if (hot < 0) std::fill(out.removed.begin(), out.removed.end(), kKept);
  return hot;
}

// Temperature 0: the first maximum, one-hot everywhere downstream, no draw. Only the
// argmax is kept (n_kept = 1); the other ids keep removed = kKept with p_final 0.
// hot >= 0: out already holds the one-hot rows of a greedy step at hot.
int Sampler::greedy(const float* logits, int vocab, float xmax, int hot, SampleResult& out) {
  const int tok = first_max(logits, vocab, xmax);  // argmax: the first maximum
  const size_t t = static_cast<size_t>(tok);
  if (hot >= 0) {
    const size_t h = static_cast<size_t>(hot);
    out.p_temp[h] = out.p_topk[h] = out.p_final[h] = 0.0f;
    out.p_temp[t] = out.p_topk[t] = out.p_final[t] = 1.0f;
  } else {
    std::fill(out.p_temp.begin(), out.p_temp.end(), 0.0f);
    out.p_temp[t] = 1.0f;
    out.p_topk = out.p_temp;
    out.p_final = out.p_temp;
  }
  out.one_hot = tok;
  out.order.assign(1, tok);
  out.n_kept = 1;
  out.greedy = true;
  out.u = -1.0;
  out.token = tok;
  return tok;
}

// top-k: exactly the k best by p_temp (ties: lower id) survive; they are left in
// idx_[0..k) and renormalised into p_topk.
void Sampler::top_k(int vocab, int k, SampleResult& out) {
  const double* w = w_.data();
  uint8_t* removed = out.removed.data();
  float* p_topk = out.p_topk.data();
  int* idx = idx_.data();
  select_best(nullptr, vocab, k, out.p_temp.data(), idx);
  std::fill(out.removed.begin(), out.removed.end(), kRemovedTopK);
  double sum_k = 0.0;
  for (int i = 0; i < k; ++i) {
    removed[idx[i]] = kKept;
    sum_k += w[idx[i]];
  }
  std::fill(out.p_topk.begin(), out.p_topk.end(), 0.0f);
  const double inv = 1.0 / sum_k;
  for (int i = 0; i < k; ++i) p_topk[idx[i]] = static_cast<float>(w[idx[i]] * inv);
}

// top-p: ranks the candidates cand[0..n_cand) (nullptr: every id) by p_topk (ties:
// lower id) into sel_ and returns the length of the shortest prefix whose cumulative
// p_topk reaches top_p. Peaked rows usually stop inside a first chunk of the best 64;
// otherwise every candidate is ranked.
int Sampler::top_p_prefix(const int* cand, int n_cand, SampleResult& out) {
  const float* p_topk = out.p_topk.data();
  const double p = cfg_.top_p;
  auto prefix = [&](const int* ranked, int n) {  // length of the kept prefix, or -1
    double cum = 0.0;
    for (int i = 0; i < n; ++i) {
      cum += static_cast<double>(p_topk[ranked[i]]);
      if (cum >= p) return i + 1;
    }
    return -1;
  };
  constexpr int kChunk = 64;
  int* ranked = sel_.data();
  if (n_cand >= 8 * kChunk) {
    select_best(cand, n_cand, kChunk, p_topk, ranked);
    std::sort(ranked, ranked + kChunk, ByProbDesc{p_topk});
    if (const int keep = prefix(ranked, kChunk); keep >= 0) return keep;
  }
  if (cand == nullptr) {
    std::iota(ranked, ranked + n_cand, 0);
  } else {
    std::copy(cand, cand + n_cand, ranked);
  }
  rank(ranked, n_cand, p_topk);
  const int keep = prefix(ranked, n_cand);
  return keep < 0 ? n_cand : keep;  // rounding kept the total below top_p: keep all
}

// Keeps the top-p prefix: p_final renormalised over it, the rest marked removed, and
// out.order the kept ids by p_final.
void Sampler::top_p(const int* cand, int n_cand, int vocab, SampleResult& out) {
  const int keep = top_p_prefix(cand, n_cand, out);
  const double* w = w_.data();
  uint8_t* removed = out.removed.data();
  float* p_final = out.p_final.data();
  int* ranked = sel_.data();
  for (int i = 0; i < vocab; ++i)
    if (removed[i] == kKept) removed[i] = kRemovedTopP;
  double sum_p = 0.0;
  for (int i = 0; i < keep; ++i) {
    removed[ranked[i]] = kKept;
    sum_p += w[ranked[i]];
  }
  std::fill(out.p_final.begin(), out.p_final.end(), 0.0f);
  const double inv = 1.0 / sum_p;
  for (int i = 0; i < keep; ++i) p_final[ranked[i]] = static_cast<float>(w[ranked[i]] * inv);
  // ranked[0..keep) is in p_topk order; renormalising from the double weights can
  // only reorder neighbours that tie in one of the two roundings, so an insertion
  // sort by p_final finishes the order in near-linear time.
  const ByProbDesc by_final{p_final};
  for (int i = 1; i < keep; ++i) {
    const int v = ranked[i];
    int j = i;
    for (; j > 0 && by_final(v, ranked[j - 1]); --j) ranked[j] = ranked[j - 1];
    ranked[j] = v;
  }
  out.order.assign(ranked, ranked + keep);
}

// Draws u and walks out.order accumulating p_final until it passes u.
int Sampler::draw(SampleResult& out) {
  const double u = rng_.uniform();
  int tok = -1;
  int last_pos = -1;
  double cum = 0.0;
  for (const int id : out.order) {
    const double q = out.p_final[static_cast<size_t>(id)];
    if (q > 0.0) last_pos = id;
    cum += q;
    if (cum > u) {
      tok = id;
      break;
    }
  }
  if (tok < 0) tok = last_pos >= 0 ? last_pos : out.order.front();
  out.greedy = false;
  out.u = u;
  out.token = tok;
  return tok;
}

// The repetition penalty: logits' into pen_, p_rep = softmax(logits'), and w_ left
// holding its weights at temperature 1. Returns logits', and their maximum in xmax.
const float* Sampler::penalise(const float* logits, int vocab, std::span<const int> seen, SampleResult& out,
                               float& xmax) {
  size_to(pen_, vocab);
  std::copy_n(logits, vocab, pen_.data());
  if (seen_.size() < static_cast<size_t>(vocab)) seen_.assign(static_cast<size_t>(vocab), 0);
  penalise_row(pen_.data(), vocab, seen, cfg_.repetition_penalty, seen_.data());
  size_to(out.p_rep, vocab);
  bool nan = false;  // none: the logits were checked, and the penalty multiplies by a finite r > 0
  xmax = max_nan(pen_.data(), vocab, &nan);
  double* w = w_.data();
  normalise(w, vocab, weights(pen_.data(), vocab, xmax, 1.0, w), out.p_rep.data());
  return pen_.data();
}

int Sampler::sample(const float* logits, int vocab, SampleResult& out, std::span<const int> seen) {
  return filter(logits, vocab, out, seen, true);
}

void Sampler::shape(const float* logits, int vocab, SampleResult& out, std::span<const int> seen) {
  filter(logits, vocab, out, seen, false);
}

// The whole pipeline (header); draws u only when draw_token.
int Sampler::filter(const float* logits, int vocab, SampleResult& out, std::span<const int> seen, bool draw_token) {
  if (logits == nullptr || vocab <= 0) throw Error("sampler: empty logits (vocab = " + str(vocab) + ")");
  bool nan = false;
  float xmax = max_nan(logits, vocab, &nan);  // maximum and NaN check in one pass
  if (nan) throw Error("logits contain NaN");
  const int hot = prepare(vocab, out);
  double* w = w_.data();
  normalise(w, vocab, weights(logits, vocab, xmax, 1.0, w), out.p_raw.data());  // p_raw
  if (cfg_.repetition_penalty != 1.0f) {
    logits = penalise(logits, vocab, seen, out, xmax);
  } else {
    out.p_rep.clear();
  }
  const bool contrastive = cfg_.contrastive;
  if (!contrastive && cfg_.temperature == 0.0f) return greedy(logits, vocab, xmax, hot, out);

  // p_temp (w keeps the temperature weights from here on). Contrastive search uses no
  // temperature.
  const double T = contrastive ? 1.0 : cfg_.temperature;
  if (T == 1.0) {
    out.p_temp = out.p_rep.empty() ? out.p_raw : out.p_rep;
  } else {
    normalise(w, vocab, weights(logits, vocab, xmax, T, w), out.p_temp.data());
  }
  const int k = contrastive ? std::max(1, cfg_.top_k) : cfg_.top_k;
  const bool use_k = k > 0 && k < vocab;
  const int* cand = use_k ? idx_.data() : nullptr;  // the candidates of top-p; nullptr = every id
  const int n_cand = use_k ? k : vocab;
  if (use_k) {
    top_k(vocab, k, out);
  } else {
    out.p_topk = out.p_temp;
  }
  if (cfg_.top_p < 1.0f && !contrastive) {
    top_p(cand, n_cand, vocab, out);
  } else {
    out.p_final = out.p_topk;
    if (use_k) {
      out.order.assign(cand, cand + n_cand);
    } else {
      out.order.resize(static_cast<size_t>(vocab));
      std::iota(out.order.begin(), out.order.end(), 0);
    }
    rank(out.order.data(), static_cast<int>(out.order.size()), out.p_final.data());
  }
  out.n_kept = static_cast<int>(out.order.size());
  if (contrastive || !draw_token) {
    // No draw: contrastive search's alpha-0 choice (the first maximum of logits', as
    // greedy takes it), or the most probable kept token when only shaping.
    out.token = contrastive ? static_cast<int>(first_equal(logits, vocab, xmax)) : out.order.front();
    out.greedy = false;
    out.u = -1.0;
    return out.token;
  }
  return draw(out);
}

// Writes the best m of ids[0..n) (ids == nullptr: the ids 0..n-1) by p descending,
// ties lower id first, to dst[0..m); 0 < m < n. Small m scan once with best_ids' heap
// (most ids fail the first comparison); large m use nth_element on the packed keys.
void Sampler::select_best(const int* ids, int n, int m, const float* p, int* dst) {
  if (static_cast<int64_t>(m) * 8 <= n) {
    keys2_.resize(static_cast<size_t>(m));
    best_ids(p, ids, n, m, dst, keys2_.data());
    return;
  }
  keys_.resize(static_cast<size_t>(n));
  uint64_t* k = keys_.data();
  for (int i = 0; i < n; ++i) k[i] = pack(p, ids != nullptr ? ids[i] : i);
  std::nth_element(k, k + m, k + n);
  for (int i = 0; i < m; ++i) dst[i] = unpack(k[i]);
}

// Sorts ids[0..n) by p descending, ties lower id first. Small sets use std::sort;
// large ones (e.g. the whole vocabulary with no filter) an LSD radix sort on the
// packed keys, 11 bits a pass (three passes over a probability's 32 bits). Digits
// shared by every key are skipped, and so are the id's bits when the ids come in
// ascending order (the sort is stable).
void Sampler::rank(int* ids, int n, const float* p) {
  constexpr int kRadixMin = 1024, kBits = kRadixBits, kBuckets = 1 << kBits;
  if (n < kRadixMin) {
    std::sort(ids, ids + n, ByProbDesc{p});
    return;
  }
  keys_.resize(static_cast<size_t>(n));
  keys2_.resize(static_cast<size_t>(n));
  uint64_t* src = keys_.data();
  uint64_t* dst = keys2_.data();
  const int lo = std::is_sorted(ids, ids + n) ? 32 : 0;  // the lowest bit to sort on
  const int passes = (64 - lo + kBits - 1) / kBits;
  hist_.assign(static_cast<size_t>(passes), {});
  auto digit = [&](uint64_t k, int d) { return static_cast<size_t>((k >> (lo + kBits * d)) & (kBuckets - 1)); };
  for (int i = 0; i < n; ++i) {
    const uint64_t k = pack(p, ids[i]);
    src[i] = k;
    for (int d = 0; d < passes; ++d) ++hist_[static_cast<size_t>(d)][digit(k, d)];
  }
  for (int d = 0; d < passes; ++d) {
    auto& h = hist_[static_cast<size_t>(d)];
    if (h[digit(src[0], d)] == n) continue;  // constant digit: order unchanged
    int pos = 0;
    for (int& c : h) {
      const int cnt = c;
      c = pos;
      pos += cnt;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t k = src[i];
      dst[h[digit(k, d)]++] = k;
    }
    std::swap(src, dst);
  }
  for (int i = 0; i < n; ++i) ids[i] = unpack(src[i]);
}

}  // namespace ds
