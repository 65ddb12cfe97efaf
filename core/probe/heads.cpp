#include "probe/heads.h"

#include <algorithm>
#include <numeric>

#include "sample/rng.h"
#include "util/error.h"

namespace ds {

namespace {

constexpr int kAutoHalfMax = 50;  // random tokens per half when the caller gives none

// The ids a probe may use: not BOS, EOS, pad or avoided, ascending.
std::vector<int> usable_ids(const Config& cfg, const std::vector<int>& avoid) {
  std::vector<char> bad(size_t(std::max(cfg.vocab_size, 0)), 0);
  auto mark = [&](int id) {
    if (id >= 0 && id < cfg.vocab_size) bad[size_t(id)] = 1;
  };
  mark(cfg.bos_id);
  mark(cfg.eos_id);
  mark(cfg.pad_id);
  for (int id : avoid) mark(id);
  std::vector<int> out;
  for (int id = 0; id < cfg.vocab_size; ++id)
    if (!bad[size_t(id)]) out.push_back(id);
  return out;
}

int max_half(const Config& cfg) { return (cfg.max_seq - (cfg.bos_id >= 0 ? 1 : 0)) / 2; }

void check_square(const MatRM& m, const char* what) {
  if (m.rows() != m.cols())
    throw Error(std::string(what) + " must be square, not [" + std::to_string(m.rows()) + ", " +
                std::to_string(m.cols()) + "]");
}

// Unsubscribes a hook handle when it goes out of scope.
struct Subscription {
  Hooks& hooks;
  int handle;
  ~Subscription() { hooks.unsubscribe(handle); }
};

// Collects one decoder layer's attention pattern rows [H, rows, S] from the hook
// events into per-head [T, T] matrices, and scores a layer once all T rows arrived.
class PatternCollector {
 public:
  PatternCollector(HeadRoles& r, int T) : r_(r), T_(T), pending_(size_t(r.n_layers) * r.n_heads), rows_(r.n_layers, 0) {
    for (auto& m : pending_) m = MatRM::Zero(T, T);
    detection_[kPreviousHead] = previous_token_detection(r.probe);
    detection_[kDuplicateHead] = duplicate_token_detection(r.probe);
    detection_[kInductionHead] = induction_detection(r.probe);
  }

  void on_pattern(const HookEvent& ev) {
    if (ev.stack != Stack::Decoder || ev.point != Point::AttnPattern || ev.layer < 0 || ev.layer >= r_.n_layers) return;
    const int H = ev.t.shape[0], rows = ev.t.shape[1], S = ev.t.shape[2];
    if (H != r_.n_heads || ev.pos0 < 0 || ev.pos0 + rows > T_ || S > T_)
      throw Error("the head detector got an attention pattern of an unexpected shape at layer " +
                  std::to_string(ev.layer));
    for (int h = 0; h < H; ++h) {
      MatRM& m = pending_[size_t(ev.layer) * H + h];
      const Eigen::Map<const MatRM> src(ev.t.data + size_t(h) * rows * S, rows, S);
      m.block(ev.pos0, 0, rows, S) = src;
    }
    rows_[size_t(ev.layer)] = std::max(rows_[size_t(ev.layer)], ev.pos0 + rows);
    if (rows_[size_t(ev.layer)] == T_) score_layer(ev.layer);
  }

  // Every layer scored (each exactly once).
  bool complete() const {
    return std::all_of(rows_.begin(), rows_.end(), [&](int n) { return n == T_; });
  }

 private:
  void score_layer(int layer) {
    const HeadDetectOptions& o = r_.options;
    for (int h = 0; h < r_.n_heads; ++h) {
      const size_t i = size_t(layer) * r_.n_heads + h;
      MatRM& m = pending_[i];
      r_.previous[i] = detection_score(m, detection_[kPreviousHead], o.exclude_bos, o.exclude_current_token);
      r_.duplicate[i] = detection_score(m, detection_[kDuplicateHead], o.exclude_bos, o.exclude_current_token);
      r_.induction[i] = detection_score(m, detection_[kInductionHead], o.exclude_bos, o.exclude_current_token);
      if (o.keep_patterns) r_.patterns[i] = std::move(m);
      m = MatRM();
    }
  }

  HeadRoles& r_;
  int T_;
  std::vector<MatRM> pending_;
  std::vector<int> rows_;  // rows received, per layer
  MatRM detection_[kHeadKinds];
};

}  // namespace

const char* head_kind_name(int kind) {
  switch (kind) {
    case kPreviousHead:
      return "previous";
    case kDuplicateHead:
      return "duplicate";
    case kInductionHead:
      return "induction";
    default:
      throw Error("head kind " + std::to_string(kind) + " is not one of 0 (previous), 1 (duplicate), 2 (induction)");
  }
}

float HeadRoles::score(int kind, int layer, int head) const {
  if (layer < 0 || layer >= n_layers || head < 0 || head >= n_heads)
    throw Error("no head " + std::to_string(layer) + "." + std::to_string(head) + ": the model has " +
                std::to_string(n_layers) + " layers of " + std::to_string(n_heads) + " heads");
  const size_t i = size_t(layer) * n_heads + head;
  switch (kind) {
    case kPreviousHead:
      return previous.at(i);
    case kDuplicateHead:
      return duplicate.at(i);
    case kInductionHead:
      return induction.at(i);
    default:
      head_kind_name(kind);  // throws
      return 0;
  }
}

int HeadRoles::strongest(int kind) const {
  head_kind_name(kind);  // throws for a bad kind
  const std::vector<float>& v = kind == kPreviousHead ? previous : kind == kDuplicateHead ? duplicate : induction;
  if (v.empty()) return -1;
  return int(std::max_element(v.begin(), v.end()) - v.begin());
}

int auto_probe_half(const Config& cfg, const std::vector<int>& avoid) {
  const int fit = max_half(cfg);
  if (fit < 1)
    throw Error("the head detector's probe needs a context of at least " + std::to_string(cfg.bos_id >= 0 ? 3 : 2) +
                " positions; this model's is " + std::to_string(cfg.max_seq));
  const int usable = int(usable_ids(cfg, avoid).size());
  if (usable == 0) throw Error("the head detector's probe has no usable token id (all are special or avoided)");
  return std::min({kAutoHalfMax, fit, usable});
}

std::vector<int> head_probe(const Config& cfg, int half, uint64_t seed, const std::vector<int>& avoid) {
  if (half < 0) throw Error("the probe's half must be 0 (automatic) or more, not " + std::to_string(half));
  if (half == 0) half = auto_probe_half(cfg, avoid);
  if (half > max_half(cfg))
    throw Error("a probe of " + std::to_string(half) + " tokens repeated twice" +
                (cfg.bos_id >= 0 ? " after BOS" : "") + " does not fit this model's context of " +
                std::to_string(cfg.max_seq) + " positions (half at most " + std::to_string(max_half(cfg)) + ")");
  const std::vector<int> ids = usable_ids(cfg, avoid);
  if (ids.empty()) throw Error("the head detector's probe has no usable token id (all are special or avoided)");
  // Random permutations of the usable ids (Fisher-Yates with the platform-independent
  // Rng), one after another until the half is full.
  Rng rng(seed);
  std::vector<int> r, perm;
  while (int(r.size()) < half) {
    perm = ids;
    for (size_t i = perm.size(); i > 1; --i) {
      const size_t j = size_t(rng.uniform() * double(i));
      std::swap(perm[i - 1], perm[std::min(j, i - 1)]);
    }
    const size_t take = std::min(perm.size(), size_t(half) - r.size());
    r.insert(r.end(), perm.begin(), perm.begin() + ptrdiff_t(take));
  }
  std::vector<int> probe;
  if (cfg.bos_id >= 0) probe.push_back(cfg.bos_id);
  probe.insert(probe.end(), r.begin(), r.end());
  probe.insert(probe.end(), r.begin(), r.end());
  return probe;
}

std::vector<int> probe_avoid_ids(const Config& cfg, int tokenizer_vocab, const std::function<std::string(int)>& piece) {
  std::vector<int> out;
  for (int id = 0; id < cfg.vocab_size; ++id) {
    if (id >= tokenizer_vocab) {
      out.push_back(id);
      continue;
    }
    const std::string p = piece(id);
    const bool bracketed = p.size() > 2 && p.front() == '<' && p.back() == '>';
    const bool byte = p.size() == 6 && p.compare(0, 3, "<0x") == 0;
    if (p.empty() || (bracketed && !byte)) out.push_back(id);
  }
  return out;
}

MatRM previous_token_detection(const std::vector<int>& tokens) {
  const int T = int(tokens.size());
  MatRM d = MatRM::Zero(T, T);
  for (int i = 1; i < T; ++i) d(i, i - 1) = 1.0f;
  return d;
}

MatRM duplicate_token_detection(const std::vector<int>& tokens) {
  const int T = int(tokens.size());
  MatRM d = MatRM::Zero(T, T);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < i; ++j)
      if (tokens[size_t(j)] == tokens[size_t(i)]) d(i, j) = 1.0f;
  return d;
}

MatRM induction_detection(const std::vector<int>& tokens) {
  const MatRM dup = duplicate_token_detection(tokens);
  const int T = int(tokens.size());
  MatRM d = MatRM::Zero(T, T);
  // Shifted one column right, column 0 empty, then lower-triangular (j <= i).
  for (int i = 0; i < T; ++i)
    for (int j = 1; j <= i; ++j) d(i, j) = dup(i, j - 1);
  return d;
}

float detection_score(const MatRM& attention, const MatRM& detection, bool exclude_bos, bool exclude_current_token) {
  check_square(attention, "the attention pattern");
  check_square(detection, "the detection pattern");
  if (attention.rows() != detection.rows())
    throw Error("the attention pattern has " + std::to_string(attention.rows()) +
                " positions and the detection pattern " + std::to_string(detection.rows()));
  double num = 0, den = 0;
  for (Eigen::Index i = 0; i < attention.rows(); ++i)
    for (Eigen::Index j = 0; j < attention.cols(); ++j) {
      if ((exclude_bos && j == 0) || (exclude_current_token && i == j)) continue;
      const double a = attention(i, j);
      num += a * double(detection(i, j));
      den += a;
    }
  return den != 0 ? float(num / den) : 0.0f;
}

HeadRoles detect_heads(Engine& e, const HeadDetectOptions& o) {
  const Config& c = e.config();
  HeadRoles r;
  r.n_layers = c.n_layers;
  r.n_heads = c.n_heads;
  r.options = o;
  r.options.half = o.half == 0 ? auto_probe_half(c, o.avoid) : o.half;
  r.half = r.options.half;
  r.bos = c.bos_id >= 0;
  r.probe = head_probe(c, r.half, o.seed, o.avoid);
  const size_t n = size_t(c.n_layers) * c.n_heads;
  r.previous.assign(n, 0.0f);
  r.duplicate.assign(n, 0.0f);
  r.induction.assign(n, 0.0f);
  if (o.keep_patterns) r.patterns.resize(n);
  if (c.n_layers == 0) return r;
  if (c.encoder_decoder) {
    r.source.assign(r.probe.begin() + (r.bos ? 1 : 0), r.probe.end());
    if (int(r.source.size()) > c.max_src) r.source.resize(size_t(c.max_src));
    e.encode(r.source);
  }
  const int T = int(r.probe.size());
  PatternCollector col(r, T);
  {
    Subscription sub{e.hooks(),
                     e.hooks().subscribe("blocks.*.attn.pattern", [&](HookEvent& ev) { col.on_pattern(ev); })};
    e.forward_full(r.probe, false);
  }
  if (!col.complete()) throw Error("the head detector did not see every layer's attention pattern");
  return r;
}

HeadRoles detect_heads(const std::shared_ptr<const Model>& m, const HeadDetectOptions& o) {
  if (!m) throw Error("the head detector needs a model");
  Engine e(m);
  e.set_threads(o.threads);
  e.set_products(o.products);
  return detect_heads(e, o);
}

}  // namespace ds
