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
#include "probe/trace_rules.h"
#include "util/error.h"

namespace ds {

namespace {

using nlohmann::json;
using namespace trace_rules;

// The one format version this program reads (and writes).
constexpr int kTraceVersion = 1;
// Deeper nesting than this is no trace (the deepest a trace has is 5).
constexpr int kMaxDepth = 32;

// A value for a message: short, one line, never a whole array or object.
std::string shown(const json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  if (v.is_null()) return "null";
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return s;
}

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
  if (v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t(c.vocab_size))
    w.bad(field, "is " + shown(v) + ", outside the vocabulary (0 to " + std::to_string(c.vocab_size - 1) + ")");
  check_id(v.get<int64_t>(), field, c, w);
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
  const int64_t want = stored_values(t.shape, st != nullptr);
  if (int64_t(d.size()) != want)
    w.bad(field + " data",
          "has " + std::to_string(d.size()) + " values, its shape " + dims(t.shape) + " needs " + std::to_string(want));
  t.data.reserve(d.size());
  for (auto& v : d) t.data.push_back(tensor_value(v, field + " data", w));
  return t;
}

// The declared shape, checked against the rule (trace_rules.h).
std::vector<int> read_shape(const json& j, const TensorRule& r, const Config& c, const std::string& field,
                            const Where& w) {
  const json& sj = get_array(need(get_object(j, field, w), "shape", w), field + " shape", w);
  std::vector<int64_t> shape;
  for (auto& v : sj) shape.push_back(get_int(v, field + " shape", 1, kMaxDim, w));
  check_shape(shape, r, c, field, w);
  return std::vector<int>(shape.begin(), shape.end());
}

// The tensors of a step (encoder = false) or of the encoder map (true).
std::map<std::string, Tensor> read_tensors(const json& j, const Config& c, const HookNames& hooks, Sizes z,
                                           bool encoder, const Where& w) {
  std::map<std::string, Tensor> out;
  for (auto& [name, v] : get_object(j, encoder ? "encoder" : "tensors", w).items()) {
    const std::string field = "tensor \"" + name + "\"";
    const TensorRule r = tensor_rule(c, hooks, name, z, encoder, field, w);
    Tensor t = read_tensor_data(v, read_shape(v, r, c, field, w), field, w);
    if (r.ids) check_ids(t.data, c, field, w);
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

// Who chose a token that was given, not drawn (SampleRecord::chosen).
TokenChoice read_choice(const json& v, const Where& w) {
  const json& o = get_object(v, "sample chosen", w);
  TokenChoice ch;
  ch.by = get_str(need(o, "by", w), "sample chosen by", w);
  if (const json* x = maybe(o, "width")) ch.width = int(get_int(*x, "sample chosen width", 0, 1 << 16, w));
  if (const json* x = maybe(o, "length_penalty")) ch.length_penalty = get_double(*x, "sample chosen length_penalty", w);
  if (const json* x = maybe(o, "logprob")) ch.logprob = get_double(*x, "sample chosen logprob", w);
  if (const json* x = maybe(o, "sum")) ch.sum = get_double(*x, "sample chosen sum", w);
  if (const json* x = maybe(o, "rank")) ch.rank = int(get_int(*x, "sample chosen rank", -1, 1 << 16, w));
  if (const json* x = maybe(o, "score")) ch.score = get_double(*x, "sample chosen score", w);
  if (const json* x = maybe(o, "final")) ch.final = get_bool(*x, "sample chosen final", w);
  return ch;
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
  rec.greedy = get_bool(need(r, "greedy", w), "sample greedy", w);
  rec.u = get_double(need(r, "u", w), "sample u", w);
  rec.token = get_id(need(r, "token", w), "sample token", c, w);
  rec.rank = int(get_int(need(r, "rank", w), "sample rank", 0, c.vocab_size - 1, w));
  rec.n_kept = int(get_int(need(r, "n_kept", w), "sample n_kept", 0, c.vocab_size, w));
  const json& cands = get_array(need(r, "candidates", w), "sample candidates", w);
  rec.candidates.reserve(cands.size());
  for (auto& cj : cands)
    rec.candidates.push_back(
        read_candidate(cj, c, "sample candidates[" + std::to_string(rec.candidates.size()) + "]", w));
  if (const json* v = maybe(r, "chosen")) rec.chosen = read_choice(*v, w);
  check_sample(rec, c, w);
  return rec;
}

// One step; pos is where it must start (the tokens of the steps before it).
TraceStep read_step(const json& o, const Trace& t, const HookNames& hooks, int pos, const Where& w) {
  get_object(o, "the step", w);
  const Config& c = t.config;
  TraceStep s;
  const int64_t p0 =
      get_int(need(o, "pos0", w), "pos0", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), w);
  if (p0 < 0 || p0 >= c.max_seq || p0 != pos) check_positions(p0, 1, pos, c, w);
  s.pos0 = int(p0);
  s.input = read_ids(need(o, "input", w), "input", c, w);
  check_positions(p0, int64_t(s.input.size()), pos, c, w);
  const int64_t end = int64_t(s.pos0) + int64_t(s.input.size());
  if (const json* v = maybe(o, "input_text")) s.input_text = read_texts(*v, "input_text", s.input.size(), w);
  const Sizes z{int(s.input.size()), int(end), int(t.source.size())};
  s.tensors = read_tensors(need(o, "tensors", w), c, hooks, z, false, w);
  if (const json* v = maybe(o, "token_text")) s.token_text = read_token_text(*v, c, w);
  // Optional (older traces have neither): -1 = not measured, and the cache was used.
  if (const json* v = maybe(o, "forward_ms")) {
    s.forward_ms = get_double(*v, "forward_ms", w);
    check_forward_ms(s.forward_ms, w);
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
  check_source(c, t.source.size(), ws);
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

Trace trace_rules::trace_header_from_json(const std::string& text) {
  try {
    return read_header(parse_text(text));
  } catch (const json::exception&) {
    throw Error("the trace's header is malformed (a value has an unexpected type)");
  }
}

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
