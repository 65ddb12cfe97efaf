#include "probe/trace_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "probe/lens.h"
#include "sample/sampler.h"

namespace ds::trace_rules {

namespace {

// The shape hook point p of stack s publishes (hooks.h), for the sizes of a step (the
// encoder: T = S = the source length). logits: the first axis may be 1..T.
std::vector<int> hook_shape(const Config& c, Stack s, Point p, Sizes z) {
  if (s == Stack::Encoder) z.T = z.S = z.src;
  switch (p) {
    case Point::AttnQ:
    case Point::CrossQ:
      return {z.T, c.n_heads, c.d_head};
    case Point::AttnK:
    case Point::AttnV:
      return {z.T, c.n_kv_heads, c.d_head};
    case Point::CrossK:
    case Point::CrossV:
      return {z.src, c.n_kv_heads, c.d_head};
    case Point::AttnScores:
    case Point::AttnPattern:
      return {c.n_heads, z.T, z.S};
    case Point::CrossScores:
    case Point::CrossPattern:
      return {c.n_heads, z.T, z.src};
    case Point::AttnMask:
      return {z.T, z.S};
    case Point::CrossMask:
      return {z.T, z.src};
    case Point::AttnZ:
    case Point::CrossZ:
      return {z.T, c.q_dim()};
    case Point::MlpPre:
    case Point::MlpPost:
      return {z.T, c.d_ff};
    case Point::Logits:
      return {z.T, c.vocab_size};
    default:
      return {z.T, c.d_model};
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A logit-lens tensor (lens.h) of a step: H.lens.ids or H.lens.probs, [T, k] with
// 1 <= k <= vocab, for a source H the lens reads. Returns false for other names.
bool lens_shape(const Config& c, const std::string& name, int T, std::vector<int>& want, bool& ids) {
  for (const char* tail : {".lens.ids", ".lens.probs"}) {
    if (!ends_with(name, tail)) continue;
    const std::string hook = name.substr(0, name.size() - std::string(tail).size());
    for (auto& src : lens_sources(c))
      if (src.hook == hook) {
        ids = tail == std::string(".lens.ids");
        want = {T, -1};  // -1: any k in 1..vocab
        return true;
      }
  }
  return false;
}

std::string range(int64_t lo, int64_t hi) { return std::to_string(lo) + " to " + std::to_string(hi); }

}  // namespace

std::string dims(const std::vector<int>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

HookNames::HookNames(const Config& c) : cfg_(c) {
  Config one = c;
  one.n_layers = std::min(c.n_layers, 1);
  one.n_enc_layers = std::min(c.n_enc_layers, 1);
  for (auto& n : Hooks::names(one)) names_.insert(n);
}

bool HookNames::find(const std::string& name, Stack& s, int& layer, Point& p) const {
  if (!Hooks::parse(name, s, layer, p) || Hooks::name(s, layer, p) != name) return false;
  if (s == Stack::Encoder && !cfg_.encoder_decoder) return false;
  if (layer >= (s == Stack::Encoder ? cfg_.n_enc_layers : cfg_.n_layers)) return false;
  return names_.count(Hooks::name(s, std::min(layer, 0), p)) > 0;
}

TensorRule tensor_rule(const Config& c, const HookNames& hooks, const std::string& name, Sizes z, bool encoder,
                       const std::string& field, const Where& w) {
  TensorRule r;
  Stack s;
  int layer;
  Point p;
  if (hooks.find(name, s, layer, p)) {
    const bool source_side = s == Stack::Decoder && (p == Point::CrossK || p == Point::CrossV);
    if (encoder != (s == Stack::Encoder || source_side))
      w.bad(field, encoder ? "belongs in a step, not in \"encoder\"" : "belongs in \"encoder\", not in a step");
    r.want = hook_shape(c, s, p, z);
    r.logits = p == Point::Logits;
  } else if (encoder || !lens_shape(c, name, z.T, r.want, r.ids)) {
    w.bad(field, "is not a hook point of this model (" + std::to_string(c.n_layers) + " layers" +
                     (c.encoder_decoder ? ", " + std::to_string(c.n_enc_layers) + " encoder layers)" : ")"));
  }
  return r;
}

void check_shape(const std::vector<int64_t>& shape, const TensorRule& r, const Config& c, const std::string& field,
                 const Where& w) {
  const std::vector<int>& want = r.want;
  if (shape.size() != want.size())
    w.bad(field + " shape", "has " + std::to_string(shape.size()) + " dimensions, the model's is " + dims(want));
  std::vector<int> got;
  for (int64_t d : shape) {
    if (d < 1 || d > kMaxDim)
      w.bad(field + " shape", "is " + std::to_string(d) + " (must be " + range(1, kMaxDim) + ")");
    got.push_back(int(d));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = want[i] < 0 ? got[i] <= c.vocab_size : r.logits && !i ? got[i] <= want[i] : got[i] == want[i];
    if (!ok)
      w.bad(field + " shape", "is " + dims(got) + ", this model and step give " + dims(want) +
                                  " (config: " + std::to_string(c.n_heads) + " heads, d_model " +
                                  std::to_string(c.d_model) + ", vocab " + std::to_string(c.vocab_size) + ")");
  }
}

int64_t stored_values(const std::vector<int>& shape, bool row_norms) {
  int64_t n = 1;
  for (size_t i = 0; i + (row_norms ? 1 : 0) < shape.size(); ++i) n *= shape[i];
  return n;
}

void check_ids(const std::vector<float>& data, const Config& c, const std::string& field, const Where& w) {
  for (float f : data)
    if (!(f >= 0 && f < float(c.vocab_size) && f == std::floor(f)))
      w.bad(field + " data", "has " + std::to_string(f) + ", not a token id of the vocabulary (0 to " +
                                 std::to_string(c.vocab_size - 1) + ")");
}

void check_id(int64_t id, const std::string& field, const Config& c, const Where& w) {
  if (id < 0 || id >= c.vocab_size)
    w.bad(field, "is " + std::to_string(id) + ", outside the vocabulary (" + range(0, c.vocab_size - 1) + ")");
}

void check_positions(int64_t p0, int64_t n_input, int pos, const Config& c, const Where& w) {
  if (p0 < 0) w.bad("pos0", "is " + std::to_string(p0) + " (must be 0 or more)");
  if (p0 >= c.max_seq)
    w.bad("pos0", "is " + std::to_string(p0) + ", beyond the model's context of " + std::to_string(c.max_seq) +
                      " positions (max_seq)");
  if (p0 != pos)
    w.bad("pos0", "is " + std::to_string(p0) + ", but the steps before it fed " + std::to_string(pos) +
                      " tokens (pos0 must be " + std::to_string(pos) + "; steps out of order or repeated?)");
  if (n_input < 1) w.bad("input", "is empty (a step feeds at least one token)");
  const int64_t end = p0 + n_input;
  if (end > c.max_seq)
    w.bad("input", "takes positions " + std::to_string(p0) + " to " + std::to_string(end - 1) +
                       ", beyond the model's context of " + std::to_string(c.max_seq) + " (max_seq)");
}

void check_source(const Config& c, size_t n, const Where& w) {
  if (n > 0 && !c.encoder_decoder)
    w.bad("source", "has " + std::to_string(n) + " tokens, but the model has no encoder");
  if (int64_t(n) > c.max_src)
    w.bad("source", "has " + std::to_string(n) + " tokens, more than the encoder's " + std::to_string(c.max_src) +
                        " positions (max_src)");
}

void check_sample(const SampleRecord& r, const Config& c, const Where& w) {
  try {
    validate(r.config);
  } catch (const Error& e) {
    w.bad("sample", std::string("settings are invalid: ") + e.what());
  }
  if (r.u != -1 && !(r.u >= 0 && r.u < 1)) w.bad("sample u", "is " + std::to_string(r.u) + " (must be -1 or 0 to 1)");
  check_id(r.token, "sample token", c, w);
  if (r.rank < 0 || r.rank > c.vocab_size - 1)
    w.bad("sample rank", "is " + std::to_string(r.rank) + " (must be " + range(0, c.vocab_size - 1) + ")");
  if (r.n_kept < 0 || r.n_kept > c.vocab_size)
    w.bad("sample n_kept", "is " + std::to_string(r.n_kept) + " (must be " + range(0, c.vocab_size) + ")");
}

void check_forward_ms(double ms, const Where& w) {
  if (!std::isfinite(ms)) w.bad("forward_ms", "is not finite");
  if (ms < 0 && ms != -1) w.bad("forward_ms", "is negative (-1: not measured)");
}

}  // namespace ds::trace_rules
