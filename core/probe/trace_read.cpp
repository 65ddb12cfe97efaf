// Reading a saved trace (Trace::read_json). A trace is what a teacher prepares before
// class and the least checked input the program reads, so nothing in it is trusted:
// the version, every value's type, every tensor's shape against the model config the
// trace records, the steps' positions (from 0, each step after the tokens of the steps
// before it, within the context), every token id against the vocabulary, and every
// tensor's data against its shape. Nothing is allocated from a declared size: what is
// allocated is what the file holds. A bad trace ends in one ds::Error whose message
// names the step and the field ("trace step 2: pos0 is -5 (must be 0 or more)").
#include <algorithm>
#include <cmath>
#include <istream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "model/config_json.h"
#include "probe/lens.h"
#include "probe/trace.h"
#include "util/error.h"

namespace ds {

namespace {

using nlohmann::json;

// The one format version this program reads (and writes).
constexpr int kTraceVersion = 1;
// Deeper nesting than this is no trace (the deepest a trace has is 5).
constexpr int kMaxDepth = 32;
// Largest dimension of a recorded tensor.
constexpr int kMaxDim = 1 << 24;

// A value for a message: short, one line, never a whole array or object.
std::string shown(const json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  if (v.is_null()) return "null";
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return s;
}

// Where the values being read are ("trace step 2", "trace header"): every message
// starts with it and names the field.
struct Where {
  std::string at;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    throw Error(at + ": " + field + " " + what);
  }
};

const json& need(const json& obj, const char* key, const Where& w) {
  auto it = obj.find(key);
  if (it == obj.end()) w.bad(std::string("\"") + key + "\"", "is missing");
  return *it;
}
const json* maybe(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& v, const std::string& field, int64_t lo, int64_t hi, const Where& w) {
  if (!v.is_number_integer()) w.bad(field, "must be an integer, is " + shown(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    w.bad(field, "is " + shown(v) + " (must be " + std::to_string(lo) + " to " + std::to_string(hi) + ")");
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi)
    w.bad(field, "is " + std::to_string(i) + " (must be " + std::to_string(lo) + " to " + std::to_string(hi) + ")");
  return i;
}
// A token id: 0 .. vocab - 1.
int get_id(const json& v, const std::string& field, const Config& c, const Where& w) {
  if (!v.is_number_integer()) w.bad(field, "must be a token id (an integer), is " + shown(v));
  const bool neg = !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (neg || v.get<uint64_t>() >= uint64_t(c.vocab_size))
    w.bad(field, "is " + shown(v) + ", outside the vocabulary (0 to " + std::to_string(c.vocab_size - 1) + ")");
  return int(v.get<int64_t>());
}
double get_double(const json& v, const std::string& field, const Where& w) {
  if (!v.is_number()) w.bad(field, "must be a number, is " + shown(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) w.bad(field, "is not finite");
  return d;
}
float get_float(const json& v, const std::string& field, const Where& w) {
  const double d = get_double(v, field, w);
  if (std::fabs(d) > std::numeric_limits<float>::max()) w.bad(field, "is " + shown(v) + ", too large for a float");
  return float(d);
}
// A probability: a number in [0, 1].
float get_prob(const json& v, const std::string& field, const Where& w) {
  const float p = get_float(v, field, w);
  if (p < 0 || p > 1) w.bad(field, "is " + shown(v) + " (a probability must be 0 to 1)");
  return p;
}
bool get_bool(const json& v, const std::string& field, const Where& w) {
  if (!v.is_boolean()) w.bad(field, "must be true or false, is " + shown(v));
  return v.get<bool>();
}
std::string get_str(const json& v, const std::string& field, const Where& w) {
  if (!v.is_string()) w.bad(field, "must be a string, is " + shown(v));
  return v.get<std::string>();
}
const json& get_array(const json& v, const std::string& field, const Where& w) {
  if (!v.is_array()) w.bad(field, "must be an array, is " + shown(v));
  return v;
}
const json& get_object(const json& v, const std::string& field, const Where& w) {
  if (!v.is_object()) w.bad(field, "must be an object, is " + shown(v));
  return v;
}

// A tensor value: a number, or "inf", "-inf", "nan" (how non-finite values are written).
float tensor_value(const json& v, const std::string& field, const Where& w) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "-inf") return -std::numeric_limits<float>::infinity();
    if (s == "inf") return std::numeric_limits<float>::infinity();
    if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
  } else if (v.is_number()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max()) return float(d);
    w.bad(field, "has a value too large for a float: " + shown(v));
  }
  w.bad(field, "must hold numbers (or \"inf\", \"-inf\", \"nan\"), has " + shown(v));
}

// What the steps and the source say about the sizes every tensor must have.
struct Sizes {
  int T = 0;    // the step's rows (its input tokens)
  int S = 0;    // the keys as of the step (its positions)
  int src = 0;  // the source length
};

std::string dims(const std::vector<int>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

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

// The hook points of the model: a name is one when it is spelled as the model names
// it, its layer exists, and a one-layer model of the same config has that point.
class HookNames {
 public:
  explicit HookNames(const Config& c) : cfg_(c) {
    Config one = c;
    one.n_layers = std::min(c.n_layers, 1);
    one.n_enc_layers = std::min(c.n_enc_layers, 1);
    for (auto& n : Hooks::names(one)) names_.insert(n);
  }
  bool find(const std::string& name, Stack& s, int& layer, Point& p) const {
    if (!Hooks::parse(name, s, layer, p) || Hooks::name(s, layer, p) != name) return false;
    if (s == Stack::Encoder && !cfg_.encoder_decoder) return false;
    if (layer >= (s == Stack::Encoder ? cfg_.n_enc_layers : cfg_.n_layers)) return false;
    return names_.count(Hooks::name(s, std::min(layer, 0), p)) > 0;
  }

 private:
  const Config& cfg_;
  std::set<std::string> names_;
};

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

// Reads one tensor's values after its shape is checked: data must hold exactly the
// values the shape declares (one norm a row for "row_norms").
Tensor read_tensor_data(const json& j, std::vector<int> shape, const std::string& field, const Where& w) {
  Tensor t;
  t.shape = std::move(shape);
  const json* st = maybe(j, "storage");
  if (st && get_str(*st, field + " storage", w) != "row_norms")
    w.bad(field + " storage", "is " + shown(*st) + " (must be \"row_norms\" or absent)");
  if (st) t.storage = Storage::RowNorms;
  const json& d = get_array(need(j, "data", w), field + " data", w);
  int64_t want = 1;
  for (size_t i = 0; i + (st ? 1 : 0) < t.shape.size(); ++i) want *= t.shape[i];
  if (int64_t(d.size()) != want)
    w.bad(field + " data",
          "has " + std::to_string(d.size()) + " values, its shape " + dims(t.shape) + " needs " + std::to_string(want));
  t.data.reserve(d.size());
  for (auto& v : d) t.data.push_back(tensor_value(v, field + " data", w));
  return t;
}

// The declared shape: 1 to 3 dimensions of 1..2^24, each equal to the one the config
// and the step's sizes give (want; -1: any k of a lens, 1..vocab; logits: 1..T rows).
std::vector<int> read_shape(const json& j, const std::vector<int>& want, bool logits, const Config& c,
                            const std::string& field, const Where& w) {
  const json& sj = get_array(need(get_object(j, field, w), "shape", w), field + " shape", w);
  if (sj.size() != want.size())
    w.bad(field + " shape", "has " + std::to_string(sj.size()) + " dimensions, the model's is " + dims(want));
  std::vector<int> shape;
  for (auto& v : sj) shape.push_back(int(get_int(v, field + " shape", 1, kMaxDim, w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = want[i] < 0 ? shape[i] <= c.vocab_size : logits && !i ? shape[i] <= want[i] : shape[i] == want[i];
    if (!ok)
      w.bad(field + " shape", "is " + dims(shape) + ", this model and step give " + dims(want) +
                                  " (config: " + std::to_string(c.n_heads) + " heads, d_model " +
                                  std::to_string(c.d_model) + ", vocab " + std::to_string(c.vocab_size) + ")");
  }
  return shape;
}

// The tensors of a step (encoder = false) or of the encoder map (true).
std::map<std::string, Tensor> read_tensors(const json& j, const Config& c, const HookNames& hooks, Sizes z,
                                           bool encoder, const Where& w) {
  std::map<std::string, Tensor> out;
  for (auto& [name, v] : get_object(j, encoder ? "encoder" : "tensors", w).items()) {
    const std::string field = "tensor \"" + name + "\"";
    Stack s;
    int layer;
    Point p;
    std::vector<int> want;
    bool ids = false, logits = false;
    if (hooks.find(name, s, layer, p)) {
      const bool source_side = s == Stack::Decoder && (p == Point::CrossK || p == Point::CrossV);
      if (encoder != (s == Stack::Encoder || source_side))
        w.bad(field, encoder ? "belongs in a step, not in \"encoder\"" : "belongs in \"encoder\", not in a step");
      want = hook_shape(c, s, p, z);
      logits = p == Point::Logits;
    } else if (encoder || !lens_shape(c, name, z.T, want, ids)) {
      w.bad(field, "is not a hook point of this model (" + std::to_string(c.n_layers) + " layers" +
                       (c.encoder_decoder ? ", " + std::to_string(c.n_enc_layers) + " encoder layers)" : ")"));
    }
    Tensor t = read_tensor_data(v, read_shape(v, want, logits, c, field, w), field, w);
    if (ids)
      for (float f : t.data)
        if (!(f >= 0 && f < float(c.vocab_size) && f == std::floor(f)))
          w.bad(field + " data", "has " + std::to_string(f) + ", not a token id of the vocabulary (0 to " +
                                     std::to_string(c.vocab_size - 1) + ")");
    out.emplace(name, std::move(t));
  }
  return out;
}

std::vector<int> read_ids(const json& j, const std::string& field, const Config& c, const Where& w) {
  std::vector<int> out;
  out.reserve(get_array(j, field, w).size());
  for (auto& v : j) out.push_back(get_id(v, field + "[" + std::to_string(out.size()) + "]", c, w));
  return out;
}
std::vector<std::string> read_texts(const json& j, const std::string& field, size_t n, const Where& w) {
  std::vector<std::string> out;
  out.reserve(get_array(j, field, w).size());
  if (!j.empty() && j.size() != n)
    w.bad(field, "has " + std::to_string(j.size()) + " entries for " + std::to_string(n) + " tokens");
  for (auto& v : j) out.push_back(get_str(v, field + "[" + std::to_string(out.size()) + "]", w));
  return out;
}

// A step's token_text: {"284": " of", ...}.
std::map<int, std::string> read_token_text(const json& j, const Config& c, const Where& w) {
  std::map<int, std::string> m;
  for (auto& [k, v] : get_object(j, "token_text", w).items()) {
    char* end = nullptr;
    const long id = std::strtol(k.c_str(), &end, 10);
    if (k.empty() || *end || id < 0 || id >= c.vocab_size)
      w.bad("token_text:", "'" + k.substr(0, 20) + "' is not a token id (the vocabulary is 0 to " +
                               std::to_string(c.vocab_size - 1) + ")");
    m[int(id)] = get_str(v, "token_text \"" + k + "\"", w);
  }
  return m;
}

// Fields added after version 1's first traces (repetition penalty, contrastive
// search) are optional: older traces read with them off.
Candidate read_candidate(const json& c, const Config& cfg, const std::string& f, const Where& w) {
  get_object(c, f, w);
  Candidate cd;
  cd.id = get_id(need(c, "id", w), f + " id", cfg, w);
  if (const json* v = maybe(c, "text")) cd.text = get_str(*v, f + " text", w);
  cd.p_raw = get_prob(need(c, "p_raw", w), f + " p_raw", w);
  const json* rep = maybe(c, "p_rep");
  cd.p_rep = rep ? get_prob(*rep, f + " p_rep", w) : cd.p_raw;
  if (const json* v = maybe(c, "repeated")) cd.repeated = get_bool(*v, f + " repeated", w);
  cd.p_temp = get_prob(need(c, "p_temp", w), f + " p_temp", w);
  cd.p_topk = get_prob(need(c, "p_topk", w), f + " p_topk", w);
  cd.p_final = get_prob(need(c, "p_final", w), f + " p_final", w);
  const std::string rm = c.contains("removed") ? get_str(c.at("removed"), f + " removed", w) : "";
  if (rm != "" && rm != "top_k" && rm != "top_p")
    w.bad(f + " removed", "is \"" + rm.substr(0, 20) + "\" (must be \"\", \"top_k\" or \"top_p\")");
  cd.removed = rm.empty() ? 0 : rm == "top_k" ? 1 : 2;
  if (maybe(c, "score")) {
    cd.lookahead = true;
    cd.confidence = get_float(need(c, "confidence", w), f + " confidence", w);
    cd.degeneration = get_float(need(c, "degeneration_penalty", w), f + " degeneration_penalty", w);
    cd.score = get_float(need(c, "score", w), f + " score", w);
  }
  return cd;
}

SampleRecord read_sample(const json& r, const Config& c, const Where& w) {
  get_object(r, "sample", w);
  SampleRecord rec;
  SamplerConfig& s = rec.config;
  s.temperature = get_float(need(r, "temperature", w), "sample temperature", w);
  s.top_k = int(get_int(need(r, "top_k", w), "sample top_k", 0, std::numeric_limits<int>::max(), w));
  s.top_p = get_float(need(r, "top_p", w), "sample top_p", w);
  const json& seed = need(r, "seed", w);
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    w.bad("sample seed", "must be an integer of 0 or more, is " + shown(seed));
  s.seed = seed.get<uint64_t>();
  if (const json* v = maybe(r, "repetition_penalty"))
    s.repetition_penalty = get_float(*v, "sample repetition_penalty", w);
  if (const json* v = maybe(r, "contrastive")) s.contrastive = get_bool(*v, "sample contrastive", w);
  if (const json* v = maybe(r, "penalty_alpha")) s.penalty_alpha = get_float(*v, "sample penalty_alpha", w);
  try {
    validate(s);
  } catch (const Error& e) {
    w.bad("sample", std::string("settings are invalid: ") + e.what());
  }
  rec.greedy = get_bool(need(r, "greedy", w), "sample greedy", w);
  rec.u = get_double(need(r, "u", w), "sample u", w);
  if (rec.u != -1 && !(rec.u >= 0 && rec.u < 1))
    w.bad("sample u", "is " + shown(r.at("u")) + " (must be -1 or 0 to 1)");
  rec.token = get_id(need(r, "token", w), "sample token", c, w);
  rec.rank = int(get_int(need(r, "rank", w), "sample rank", 0, c.vocab_size - 1, w));
  rec.n_kept = int(get_int(need(r, "n_kept", w), "sample n_kept", 0, c.vocab_size, w));
  const json& cands = get_array(need(r, "candidates", w), "sample candidates", w);
  rec.candidates.reserve(cands.size());
  for (auto& cj : cands)
    rec.candidates.push_back(
        read_candidate(cj, c, "sample candidates[" + std::to_string(rec.candidates.size()) + "]", w));
  return rec;
}

// One step; pos is where it must start (the tokens of the steps before it).
TraceStep read_step(const json& o, const Trace& t, const HookNames& hooks, int pos, const Where& w) {
  get_object(o, "the step", w);
  const Config& c = t.config;
  TraceStep s;
  const int64_t p0 =
      get_int(need(o, "pos0", w), "pos0", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), w);
  if (p0 < 0) w.bad("pos0", "is " + std::to_string(p0) + " (must be 0 or more)");
  if (p0 >= c.max_seq)
    w.bad("pos0", "is " + std::to_string(p0) + ", beyond the model's context of " + std::to_string(c.max_seq) +
                      " positions (max_seq)");
  s.pos0 = int(p0);
  if (s.pos0 != pos)
    w.bad("pos0", "is " + std::to_string(s.pos0) + ", but the steps before it fed " + std::to_string(pos) +
                      " tokens (pos0 must be " + std::to_string(pos) + "; steps out of order or repeated?)");
  s.input = read_ids(need(o, "input", w), "input", c, w);
  if (s.input.empty()) w.bad("input", "is empty (a step feeds at least one token)");
  const int64_t end = int64_t(s.pos0) + int64_t(s.input.size());
  if (end > c.max_seq)
    w.bad("input", "takes positions " + std::to_string(s.pos0) + " to " + std::to_string(end - 1) +
                       ", beyond the model's context of " + std::to_string(c.max_seq) + " (max_seq)");
  if (const json* v = maybe(o, "input_text")) s.input_text = read_texts(*v, "input_text", s.input.size(), w);
  const Sizes z{int(s.input.size()), int(end), int(t.source.size())};
  s.tensors = read_tensors(need(o, "tensors", w), c, hooks, z, false, w);
  if (const json* v = maybe(o, "token_text")) s.token_text = read_token_text(*v, c, w);
  // Optional (older traces have neither): -1 = not measured, and the cache was used.
  if (const json* v = maybe(o, "forward_ms")) {
    s.forward_ms = get_double(*v, "forward_ms", w);
    if (s.forward_ms < 0 && s.forward_ms != -1) w.bad("forward_ms", "is negative (-1: not measured)");
  }
  if (const json* v = maybe(o, "kv_cache")) s.kv_cache = get_bool(*v, "kv_cache", w);
  if (const json* v = maybe(o, "sample")) s.sample = read_sample(*v, c, w);
  return s;
}

// The format, the version, the model and the source.
Trace read_header(const json& j) {
  const Where w{"trace"};
  if (!j.is_object())
    throw Error("not a decoderscope trace: the file holds " + shown(j) +
                ", a trace is an object with \"format\": \"decoderscope-trace\"");
  const json* fmt = maybe(j, "format");
  if (!fmt) throw Error("not a decoderscope trace: the \"format\" field is missing");
  if (!fmt->is_string() || fmt->get_ref<const std::string&>() != "decoderscope-trace")
    throw Error("not a decoderscope trace: \"format\" is " + shown(*fmt) + ", not \"decoderscope-trace\"");
  const json& ver = need(j, "version", w);
  if (!ver.is_number_integer() || ver.get<int64_t>() != kTraceVersion)
    throw Error("trace version " + shown(ver) + " is not one this program reads (it reads version " +
                std::to_string(kTraceVersion) + ")");
  Trace t;
  const json& model = get_object(need(j, "model", w), "\"model\"", w);
  if (const json* v = maybe(model, "name")) t.model_name = get_str(*v, "model name", w);
  const json& config = need(model, "config", w);
  try {
    t.config = config_from_json(config);
  } catch (const Error& e) {
    throw Error(std::string("trace model config: ") + e.what());
  }
  const Config& c = t.config;
  const Where ws{"trace source"};
  if (const json* v = maybe(j, "source")) t.source = read_ids(*v, "source", c, ws);
  if (!t.source.empty() && !c.encoder_decoder)
    ws.bad("source", "has " + std::to_string(t.source.size()) + " tokens, but the model has no encoder");
  if (int64_t(t.source.size()) > c.max_src)
    ws.bad("source", "has " + std::to_string(t.source.size()) + " tokens, more than the encoder's " +
                         std::to_string(c.max_src) + " positions (max_src)");
  if (const json* v = maybe(j, "source_text")) t.source_text = read_texts(*v, "source_text", t.source.size(), ws);
  return t;
}

// Parses the text; a syntax error says where (byte offset) and what, in words.
json parse_text(const std::string& text) {
  json::parser_callback_t depth_limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth)
      throw Error("the trace is not valid JSON: values nested deeper than " + std::to_string(kMaxDepth) + " levels");
    return true;
  };
  try {
    return json::parse(text, depth_limit);
  } catch (const json::parse_error& e) {
    const size_t at = std::min<size_t>(e.byte, text.size());  // the parser counts the end as one past
    std::string what;
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      what = "the file is empty";
    else if (at >= text.size())
      what = "the text ends early (cut short?)";
    else {
      const unsigned char ch = static_cast<unsigned char>(text[at > 0 ? at - 1 : 0]);
      what = ch >= 32 && ch < 127 ? std::string("unexpected '") + char(ch) + "'"
                                  : "unexpected byte " + std::to_string(int(ch));
    }
    throw Error("the trace is not valid JSON (byte " + std::to_string(at) + ": " + what + ")");
  } catch (const json::exception&) {
    throw Error("the trace is not valid JSON (it cannot be read as JSON text)");
  }
}

}  // namespace

Trace Trace::read_json(std::istream& is) {
  const std::string text{std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>()};
  if (is.bad()) throw Error("cannot read the trace");
  const json j = parse_text(text);
  try {
    Trace t = read_header(j);
    const Where w{"trace"};
    const HookNames hooks(t.config);
    const Sizes z{0, 0, int(t.source.size())};
    if (const json* v = maybe(j, "encoder"))
      t.encoder = read_tensors(*v, t.config, hooks, z, true, Where{"trace encoder"});
    const json& steps = get_array(need(j, "steps", w), "\"steps\"", w);
    if (steps.empty()) throw Error("the trace has no steps (\"steps\" is empty): nothing to replay");
    t.steps.reserve(steps.size());
    int pos = 0;
    for (auto& o : steps) {
      const Where ws{"trace step " + std::to_string(t.steps.size() + 1)};
      t.steps.push_back(read_step(o, t, hooks, pos, ws));
      pos += int(t.steps.back().input.size());
    }
    return t;
  } catch (const json::exception&) {
    // Every access above checks its type first; this is a last guard against raw
    // library text in a message.
    throw Error("the trace is malformed (a value has an unexpected type)");
  }
}

}  // namespace ds
