// The binary trace format (".dstrace"; README "The binary trace format"): what a long
// generation of a real model records, saved and opened in seconds. Tensors are written
// as they are held (float16 values as raw 16-bit words, row norms and float32 values as
// raw floats), little-endian, after a JSON header with the model's config. The reader
// trusts nothing: every count and size is checked against the bytes left before
// anything is allocated from it, and every step goes through the same rules as a JSON
// trace (trace_rules.h: tensor names and shapes against the config and the step,
// positions, token ids, sampler settings).
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <streambuf>

#include "model/config_json.h"
#include "probe/trace.h"
#include "probe/trace_rules.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace ds {

static_assert(std::endian::native == std::endian::little, "the binary trace is written little-endian as held");

namespace {

using namespace trace_rules;

constexpr char kMagic[8] = {'D', 'S', 'T', 'R', 'A', 'C', 'E', '\x1a'};
constexpr char kEnd[8] = {'D', 'S', 'T', 'R', 'E', 'N', 'D', '\0'};
constexpr uint32_t kBinVersion = 1;
// flags bit 0: every sample record ends with what chose its token (SampleRecord::chosen).
// Files without it (written before the flag) read as before, with no choice recorded.
constexpr uint32_t kFlagChoices = 1;
// A JSON trace larger than this is refused (Trace::write_json): the binary format holds it.
constexpr uint64_t kJsonMaxBytes = 200ull << 20;

// ---- writing

// Bytes out through a sink, small fields gathered into a buffer, large arrays passed
// straight through (nothing the size of a tensor is copied). With no sink it only
// counts: the same code gives the file's size for the progress.
class Out {
 public:
  Out(std::function<void(const char*, size_t)> sink, const TraceProgress* progress, uint64_t total)
      : sink_(std::move(sink)), progress_(progress), total_(total) {}
  void raw(const void* p, size_t n) {
    bytes_ += n;
    if (!sink_) return;
    if (n >= (size_t(1) << 16)) {
      flush();
      sink_(static_cast<const char*>(p), n);
      report();
    } else {
      buf_.append(static_cast<const char*>(p), n);
      if (buf_.size() >= (size_t(1) << 20)) flush();
    }
  }
  template <class T>
  void pod(T v) {
    raw(&v, sizeof v);
  }
  void str(const std::string& s) {
    pod(uint32_t(s.size()));
    raw(s.data(), s.size());
  }
  void flush() {
    if (!buf_.empty() && sink_) sink_(buf_.data(), buf_.size());
    buf_.clear();
    report();
  }
  uint64_t bytes() const { return bytes_; }

 private:
  void report() {
    if (progress_ && *progress_) (*progress_)(bytes_, total_);
  }
  std::function<void(const char*, size_t)> sink_;
  const TraceProgress* progress_;
  uint64_t total_;
  std::string buf_;
  uint64_t bytes_ = 0;
};

void put_tensors(Out& o, const std::map<std::string, Tensor>& m) {
  o.pod(uint64_t(m.size()));
  for (auto& [name, t] : m) {
    o.str(name);
    o.pod(uint8_t(t.storage));
    o.pod(uint8_t(t.shape.size()));
    for (int d : t.shape) o.pod(int32_t(d));
    o.pod(uint64_t(t.half.size()));
    o.pod(uint64_t(t.data.size()));
    o.raw(t.half.data(), t.half.size() * sizeof(uint16_t));
    o.raw(t.data.data(), t.data.size() * sizeof(float));
  }
}

void put_sample(Out& o, const SampleRecord& r) {
  const SamplerConfig& c = r.config;
  o.pod(c.temperature);
  o.pod(int32_t(c.top_k));
  o.pod(c.top_p);
  o.pod(uint64_t(c.seed));
  o.pod(c.repetition_penalty);
  o.pod(uint8_t(c.contrastive));
  o.pod(c.penalty_alpha);
  o.pod(uint8_t(r.greedy));
  o.pod(r.u);
  o.pod(int32_t(r.token));
  o.pod(int32_t(r.rank));
  o.pod(int32_t(r.n_kept));
  o.pod(uint64_t(r.candidates.size()));
  for (auto& cd : r.candidates) {
    o.pod(int32_t(cd.id));
    o.str(cd.text);
    for (float p : {cd.p_raw, cd.p_rep, cd.p_temp, cd.p_topk, cd.p_final}) o.pod(p);
    o.pod(uint8_t(cd.repeated));
    o.pod(cd.removed);
    o.pod(uint8_t(cd.lookahead));
    for (float v : {cd.confidence, cd.degeneration, cd.score}) o.pod(v);
  }
  o.pod(uint8_t(r.chosen ? 1 : 0));  // kFlagChoices
  if (r.chosen) {
    const TokenChoice& ch = *r.chosen;
    o.str(ch.by);
    o.pod(int32_t(ch.width));
    for (double v : {ch.length_penalty, ch.logprob, ch.sum}) o.pod(v);
    o.pod(int32_t(ch.rank));
    o.pod(ch.score);
    o.pod(uint8_t(ch.final));
  }
}

void put_step(Out& o, const TraceStep& s) {
  o.pod(int64_t(s.pos0));
  o.pod(uint64_t(s.input.size()));
  for (int id : s.input) o.pod(int32_t(id));
  o.pod(uint64_t(s.input_text.size()));
  for (auto& t : s.input_text) o.str(t);
  o.pod(s.forward_ms);
  o.pod(uint8_t(s.kv_cache));
  o.pod(uint64_t(s.token_text.size()));
  for (auto& [id, text] : s.token_text) {
    o.pod(int32_t(id));
    o.str(text);
  }
  o.pod(uint8_t(s.sample ? 1 : 0));
  if (s.sample) put_sample(o, *s.sample);
  put_tensors(o, s.tensors);
}

void put_trace(Out& o, const Trace& t) {
  nlohmann::json h;
  h["format"] = "decoderscope-trace";
  h["version"] = 1;
  h["model"] = {{"name", t.model_name}, {"config", config_to_json(t.config)}};
  h["source"] = t.source;
  h["source_text"] = t.source_text;
  const std::string head = h.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  o.raw(kMagic, sizeof kMagic);
  o.pod(kBinVersion);
  o.pod(kFlagChoices);
  o.pod(uint64_t(head.size()));
  o.raw(head.data(), head.size());
  put_tensors(o, t.encoder);
  o.pod(uint64_t(t.steps.size()));
  for (auto& s : t.steps) put_step(o, s);
  o.raw(kEnd, sizeof kEnd);
  o.flush();
}

// ---- reading

// Bytes in from a stream of known length; every read is checked against what is left.
class In {
 public:
  In(std::istream& is, uint64_t size, const TraceProgress* progress) : is_(is), size_(size), progress_(progress) {}
  uint64_t left() const { return size_ - at_; }
  uint64_t at() const { return at_; }
  void raw(void* p, uint64_t n, const std::string& field, const Where& w) {
    if (n > left())
      w.bad(field, "needs " + std::to_string(n) + " bytes at byte " + std::to_string(at_) + ", but the file has " +
                       std::to_string(left()) + " left (cut short?)");
    if (n && !is_.read(static_cast<char*>(p), std::streamsize(n)))
      w.bad(field, "cannot be read at byte " + std::to_string(at_) + " (a read error)");
    at_ += n;
    if (progress_ && *progress_ && (n >= (uint64_t(1) << 16) || at_ - reported_ >= (uint64_t(1) << 20))) {
      reported_ = at_;
      (*progress_)(at_, size_);
    }
  }
  template <class T>
  T pod(const std::string& field, const Where& w) {
    T v;
    raw(&v, sizeof v, field, w);
    return v;
  }
  // A count of items of at least `min_bytes` each: never more than the bytes left hold.
  uint64_t count(uint64_t min_bytes, const std::string& field, const Where& w) {
    const uint64_t n = pod<uint64_t>(field + " count", w);
    if (n > left() / std::max<uint64_t>(min_bytes, 1))
      w.bad(field, "declares " + std::to_string(n) + " entries at byte " + std::to_string(at_ - 8) +
                       ", more than the " + std::to_string(left()) + " bytes left can hold");
    return n;
  }
  std::string str(const std::string& field, const Where& w) {
    const uint32_t n = pod<uint32_t>(field + " length", w);
    if (n > left())
      w.bad(field, "declares " + std::to_string(n) + " bytes at byte " + std::to_string(at_ - 4) + ", but only " +
                       std::to_string(left()) + " are left");
    std::string s(n, '\0');
    raw(s.data(), n, field, w);
    return s;
  }
  float finite(const std::string& field, const Where& w) {
    const float f = pod<float>(field, w);
    if (!std::isfinite(f)) w.bad(field, "is not finite");
    return f;
  }
  float prob(const std::string& field, const Where& w) {
    const float p = finite(field, w);
    if (p < 0 || p > 1) w.bad(field, "is " + std::to_string(p) + " (a probability must be 0 to 1)");
    return p;
  }
  bool flag(const std::string& field, const Where& w) {
    const uint8_t b = pod<uint8_t>(field, w);
    if (b > 1) w.bad(field, "is " + std::to_string(b) + " (must be 0 or 1)");
    return b == 1;
  }

 private:
  std::istream& is_;
  uint64_t size_, at_ = 0, reported_ = 0;
  const TraceProgress* progress_;
};

// The storage byte and the value counts against the shape: F32 holds every value,
// F16 every value as 16 bits (and, for scores, one float offset a row, or none),
// RowNorms one float a row.
void check_counts(Tensor& t, uint8_t storage, uint64_t n_half, uint64_t n_data, const std::string& field,
                  const Where& w) {
  if (storage > uint8_t(Storage::RowNorms))
    w.bad(field + " storage", "is " + std::to_string(storage) + " (0 float32, 1 float16, 2 row norms)");
  t.storage = Storage(storage);
  const uint64_t all = uint64_t(stored_values(t.shape, false));
  const uint64_t rows = uint64_t(stored_values(t.shape, true));
  const bool ok = t.storage == Storage::F32   ? n_half == 0 && n_data == all
                  : t.storage == Storage::F16 ? n_half == all && (n_data == 0 || n_data == rows)
                                              : n_half == 0 && n_data == rows;
  if (!ok)
    w.bad(field + " data", "has " + std::to_string(n_half) + " 16-bit and " + std::to_string(n_data) +
                               " 32-bit values, its shape " + dims(t.shape) + " holds " + std::to_string(all) +
                               " values in " + std::to_string(rows) + " rows");
}

std::map<std::string, Tensor> get_tensors(In& in, const Config& c, const HookNames& hooks, Sizes z, bool encoder,
                                          const Where& w) {
  std::map<std::string, Tensor> out;
  const uint64_t n = in.count(22, "tensors", w);  // the smallest tensor record is 22 bytes
  for (uint64_t i = 0; i < n; ++i) {
    const std::string name = in.str("tensor " + std::to_string(i) + " name", w);
    const std::string field = "tensor \"" + name.substr(0, 80) + "\"";
    if (out.count(name)) w.bad(field, "appears twice");
    const TensorRule r = tensor_rule(c, hooks, name, z, encoder, field, w);
    const uint8_t storage = in.pod<uint8_t>(field + " storage", w);
    const uint8_t rank = in.pod<uint8_t>(field + " rank", w);
    if (rank != r.want.size())
      w.bad(field + " shape", "has " + std::to_string(rank) + " dimensions, the model's is " + dims(r.want));
    std::vector<int64_t> shape;
    for (uint8_t d = 0; d < rank; ++d) shape.push_back(in.pod<int32_t>(field + " shape", w));
    check_shape(shape, r, c, field, w);
    Tensor t;
    t.shape.assign(shape.begin(), shape.end());
    const uint64_t n_half = in.pod<uint64_t>(field + " 16-bit count", w);
    const uint64_t n_data = in.pod<uint64_t>(field + " 32-bit count", w);
    check_counts(t, storage, n_half, n_data, field, w);
    if (n_half * 2 + n_data * 4 > in.left())
      w.bad(field + " data", "needs " + std::to_string(n_half * 2 + n_data * 4) + " bytes, but the file has " +
                                 std::to_string(in.left()) + " left (cut short?)");
    t.half.resize(n_half);
    in.raw(t.half.data(), n_half * 2, field + " data", w);
    t.data.resize(n_data);
    in.raw(t.data.data(), n_data * 4, field + " data", w);
    if (r.ids) {
      if (!t.has_values()) w.bad(field, "keeps only row norms, a lens's token ids need their values");
      std::vector<float> v(size_t(t.size()));
      t.values(0, t.size(), v.data());
      check_ids(v, c, field, w);
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

// What chose a token that was given, not drawn (kFlagChoices).
TokenChoice get_choice(In& in, const Where& w) {
  TokenChoice ch;
  ch.by = in.str("sample chosen by", w);
  if (ch.by.empty() || ch.by.size() > 64) w.bad("sample chosen by", "is not a method's name");
  ch.width = in.pod<int32_t>("sample chosen width", w);
  if (ch.width < 0 || ch.width > (1 << 16)) w.bad("sample chosen width", "is " + std::to_string(ch.width));
  ch.length_penalty = in.pod<double>("sample chosen length_penalty", w);
  ch.logprob = in.pod<double>("sample chosen logprob", w);
  ch.sum = in.pod<double>("sample chosen sum", w);
  ch.rank = in.pod<int32_t>("sample chosen rank", w);
  if (ch.rank < -1 || ch.rank > (1 << 16)) w.bad("sample chosen rank", "is " + std::to_string(ch.rank));
  ch.score = in.pod<double>("sample chosen score", w);
  ch.final = in.flag("sample chosen final", w);
  for (double v : {ch.length_penalty, ch.logprob, ch.sum, ch.score})
    if (!std::isfinite(v)) w.bad("sample chosen", "holds a number that is not finite");
  return ch;
}

SampleRecord get_sample(In& in, const Config& c, bool choices, const Where& w) {
  SampleRecord r;
  SamplerConfig& s = r.config;
  s.temperature = in.finite("sample temperature", w);
  s.top_k = in.pod<int32_t>("sample top_k", w);
  if (s.top_k < 0) w.bad("sample top_k", "is " + std::to_string(s.top_k) + " (must be 0 or more)");
  s.top_p = in.finite("sample top_p", w);
  s.seed = in.pod<uint64_t>("sample seed", w);
  s.repetition_penalty = in.finite("sample repetition_penalty", w);
  s.contrastive = in.flag("sample contrastive", w);
  s.penalty_alpha = in.finite("sample penalty_alpha", w);
  r.greedy = in.flag("sample greedy", w);
  r.u = in.pod<double>("sample u", w);
  r.token = in.pod<int32_t>("sample token", w);
  r.rank = in.pod<int32_t>("sample rank", w);
  r.n_kept = in.pod<int32_t>("sample n_kept", w);
  check_sample(r, c, w);
  const uint64_t n = in.count(43, "sample candidates", w);  // the smallest candidate is 43 bytes
  r.candidates.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const std::string f = "sample candidates[" + std::to_string(i) + "]";
    Candidate cd;
    cd.id = in.pod<int32_t>(f + " id", w);
    check_id(cd.id, f + " id", c, w);
    cd.text = in.str(f + " text", w);
    for (float* p : {&cd.p_raw, &cd.p_rep, &cd.p_temp, &cd.p_topk, &cd.p_final}) *p = in.prob(f + " probability", w);
    cd.repeated = in.flag(f + " repeated", w);
    cd.removed = in.pod<uint8_t>(f + " removed", w);
    if (cd.removed > 2) w.bad(f + " removed", "is " + std::to_string(cd.removed) + " (0 kept, 1 top-k, 2 top-p)");
    cd.lookahead = in.flag(f + " lookahead", w);
    cd.confidence = in.finite(f + " confidence", w);
    cd.degeneration = in.finite(f + " degeneration_penalty", w);
    cd.score = in.finite(f + " score", w);
    r.candidates.push_back(std::move(cd));
  }
  if (choices && in.flag("sample chosen flag", w)) r.chosen = get_choice(in, w);
  return r;
}

TraceStep get_step(In& in, const Trace& t, const HookNames& hooks, int pos, bool choices, const Where& w) {
  const Config& c = t.config;
  TraceStep s;
  const int64_t p0 = in.pod<int64_t>("pos0", w);
  const uint64_t n_in = in.count(4, "input", w);
  check_positions(p0, int64_t(std::min<uint64_t>(n_in, uint64_t(c.max_seq) + 1)), pos, c, w);
  s.pos0 = int(p0);
  for (uint64_t i = 0; i < n_in; ++i) {
    const int32_t id = in.pod<int32_t>("input", w);
    check_id(id, "input[" + std::to_string(i) + "]", c, w);
    s.input.push_back(id);
  }
  const uint64_t n_text = in.count(4, "input_text", w);
  if (n_text && n_text != n_in)
    w.bad("input_text", "has " + std::to_string(n_text) + " entries for " + std::to_string(n_in) + " tokens");
  for (uint64_t i = 0; i < n_text; ++i) s.input_text.push_back(in.str("input_text[" + std::to_string(i) + "]", w));
  s.forward_ms = in.pod<double>("forward_ms", w);
  check_forward_ms(s.forward_ms, w);
  s.kv_cache = in.flag("kv_cache", w);
  const uint64_t n_tt = in.count(8, "token_text", w);
  for (uint64_t i = 0; i < n_tt; ++i) {
    const int32_t id = in.pod<int32_t>("token_text id", w);
    check_id(id, "token_text id", c, w);
    s.token_text[id] = in.str("token_text \"" + std::to_string(id) + "\"", w);
  }
  if (in.flag("sample flag", w)) s.sample = get_sample(in, c, choices, w);
  const Sizes z{int(s.input.size()), s.pos0 + int(s.input.size()), int(t.source.size())};
  s.tensors = get_tensors(in, c, hooks, z, false, w);
  return s;
}

Trace get_trace(In& in) {
  const Where w{"binary trace"};
  char magic[8];
  if (in.left() < sizeof magic) throw Error("not a decoderscope binary trace: the file is too short for its header");
  in.raw(magic, sizeof magic, "magic", w);
  if (std::memcmp(magic, kMagic, sizeof magic) != 0)
    throw Error("not a decoderscope binary trace: the file does not start with DSTRACE");
  const uint32_t version = in.pod<uint32_t>("version", w);
  if (version != kBinVersion)
    throw Error("binary trace version " + std::to_string(version) +
                " is not one this program reads (it reads version " + std::to_string(kBinVersion) + ")");
  const uint32_t flags = in.pod<uint32_t>("flags", w);
  if (flags & ~kFlagChoices)
    w.bad("flags", "are " + std::to_string(flags) + " (this program knows only bit 0, the tokens' choices)");
  const uint64_t n_head = in.pod<uint64_t>("header length", w);
  if (n_head > in.left())
    w.bad("header length", "is " + std::to_string(n_head) + " bytes, but the file has " + std::to_string(in.left()) +
                               " left (cut short?)");
  std::string head(n_head, '\0');
  in.raw(head.data(), n_head, "header", w);
  Trace t = trace_header_from_json(head);
  const HookNames hooks(t.config);
  t.encoder = get_tensors(in, t.config, hooks, Sizes{0, 0, int(t.source.size())}, true, Where{"trace encoder"});
  const uint64_t n_steps = in.count(50, "steps", w);  // the smallest step is 50 bytes
  if (n_steps == 0) throw Error("the trace has no steps: nothing to replay");
  int pos = 0;
  for (uint64_t i = 0; i < n_steps; ++i) {
    t.steps.push_back(
        get_step(in, t, hooks, pos, (flags & kFlagChoices) != 0, Where{"trace step " + std::to_string(i + 1)}));
    pos += int(t.steps.back().input.size());
  }
  char end[8];
  in.raw(end, sizeof end, "end marker", w);
  if (std::memcmp(end, kEnd, sizeof end) != 0 || in.left() != 0)
    w.bad("end", "is not where the steps end (damaged, or bytes after the last step)");
  return t;
}

// A read-only stream over bytes in memory.
class MemBuf : public std::streambuf {
 public:
  MemBuf(const char* p, size_t n) { setg(const_cast<char*>(p), const_cast<char*>(p), const_cast<char*>(p) + n); }
};

bool has_suffix(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

uint64_t Trace::binary_bytes() const {
  Out o(nullptr, nullptr, 0);
  put_trace(o, *this);
  return o.bytes();
}

uint64_t Trace::json_bytes_estimate() const {
  // At least 8 characters a value ("-0.0123," is typical; float16 values print longer).
  uint64_t n = 0;
  auto count = [&](const std::map<std::string, Tensor>& m) {
    for (auto& [k, t] : m) n += 64 + k.size() + 8 * (t.storage == Storage::F16 ? t.half.size() : t.data.size());
  };
  count(encoder);
  for (auto& s : steps) {
    count(s.tensors);
    n += 64 + 12 * s.input.size();
    if (s.sample) n += 160 * s.sample->candidates.size();
  }
  return n;
}

void Trace::check_json_size() const {
  const uint64_t n = json_bytes_estimate();
  if (n > kJsonMaxBytes)
    throw Error("the trace is too large for JSON (about " + std::to_string(n >> 20) + " MB of text, the limit is " +
                std::to_string(kJsonMaxBytes >> 20) + " MB): save it in the binary format, a .dstrace file (" +
                std::to_string(binary_bytes() >> 20) + " MB)");
}

void Trace::write_binary(std::ostream& os, const TraceProgress& progress) const {
  const uint64_t total = progress ? binary_bytes() : 0;
  Out o([&](const char* p, size_t n) { os.write(p, std::streamsize(n)); }, &progress, total);
  put_trace(o, *this);
  if (!os) throw Error("cannot write the binary trace (a write error)");
}

Trace Trace::read_binary(std::istream& is, uint64_t size, const TraceProgress& progress) {
  In in(is, size, &progress);
  Trace t = get_trace(in);
  if (progress) progress(size, size);
  return t;
}

Trace Trace::read_binary(const void* data, size_t size) {
  MemBuf buf(static_cast<const char*>(data), size);
  std::istream is(&buf);
  return read_binary(is, size);
}

bool Trace::is_binary(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  return f.read(magic, sizeof magic) && std::memcmp(magic, kMagic, sizeof magic) == 0;
}

// Written to a temporary file renamed over path (util/atomic_file.h): a save that
// fails or is killed halfway leaves the previous trace file as it was.
void Trace::save(const std::string& path, const TraceProgress& progress) const {
  if (has_suffix(path, ".json")) {
    check_json_size();
    save_file(path, [&](SaveFile& f) { write_json(f.stream()); });
    return;
  }
  const uint64_t total = binary_bytes();
  save_file(path, [&](SaveFile& f) {
    Out o([&](const char* p, size_t n) { f.write(p, n); }, &progress, total);
    put_trace(o, *this);
  });
}

Trace Trace::load(const std::string& path, const TraceProgress& progress) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open trace file " + path);
  try {
    char magic[8] = {};
    f.read(magic, sizeof magic);
    const std::streamsize got = f.gcount();
    const bool binary = got == sizeof magic && std::memcmp(magic, kMagic, sizeof magic) == 0;
    // Neither format: a binary trace starts with its mark, a JSON trace (after any
    // white space) with '{'. Say so, rather than where JSON parsing broke.
    std::streamsize lead = 0;
    while (lead < got && std::strchr(" \t\r\n", magic[lead]) && magic[lead] != '\0') ++lead;
    if (!binary && got > 0 && lead < got && magic[lead] != '{')
      throw Error(
          "not a decoderscope trace: a trace is a .dstrace file (it starts with the mark DSTRACE) or a "
          "JSON file starting with '{', and this file is neither");
    f.clear();
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    f.seekg(0);
    if (!f || size < 0) throw Error("cannot read the file's size");
    return binary ? read_binary(f, uint64_t(size), progress) : read_json(f);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace ds
