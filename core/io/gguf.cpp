#include "io/gguf.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "io/file_read.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace ds {

namespace {

// The ggml types the engine reads, by ggml id.
struct TypeInfo {
  uint32_t id;
  const char* name;
  int block_elems;  // 0: a type the engine does not read (size unknown here)
  int block_bytes;
  Precision prec;
};
constexpr TypeInfo kTypes[] = {
    {0, "f32", 1, 4, Precision::F32},        {1, "f16", 1, 2, Precision::F16},
    {2, "q4_0", 32, 18, Precision::Q4_0},    {8, "q8_0", 32, 34, Precision::Q8_0},
    {12, "q4_K", 256, 144, Precision::Q4_K}, {13, "q5_K", 256, 176, Precision::Q5_K},
    {14, "q6_K", 256, 210, Precision::Q6_K}, {30, "bf16", 1, 2, Precision::BF16},
};
// Names of the other ggml types, for messages.
constexpr std::pair<uint32_t, const char*> kOtherTypes[] = {
    {3, "q4_1"},     {6, "q5_0"},    {7, "q5_1"},     {9, "q8_1"},   {10, "q2_K"},   {11, "q3_K"},  {15, "q8_K"},
    {16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"}, {19, "iq1_s"}, {20, "iq4_nl"}, {21, "iq3_s"}, {22, "iq2_s"},
    {23, "iq4_xs"},  {24, "i8"},     {25, "i16"},     {26, "i32"},   {27, "i64"},    {28, "f64"},   {29, "iq1_m"},
    {34, "tq1_0"},   {35, "tq2_0"},  {39, "mxfp4"},   {40, "nvfp4"}};

const TypeInfo* type_info(uint32_t id) {
  for (const TypeInfo& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

constexpr uint64_t kMaxKeyBytes = 65536;  // a key longer than this is not a key
constexpr int kMaxDims = 4;               // ggml's GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;         // arrays of arrays, nested at most this deep
constexpr uint64_t kMaxAlignment = 1 << 20;

const char* vtype_name(uint32_t t) {
  static const char* names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                "bool",  "string", "array",  "uint64", "int64",  "float64"};
  return t < 13 ? names[t] : "unknown";
}
int vtype_size(GgufFile::VType t) {
  switch (t) {
    case GgufFile::VType::U8:
    case GgufFile::VType::I8:
    case GgufFile::VType::Bool:
      return 1;
    case GgufFile::VType::U16:
    case GgufFile::VType::I16:
      return 2;
    case GgufFile::VType::U32:
    case GgufFile::VType::I32:
    case GgufFile::VType::F32:
      return 4;
    case GgufFile::VType::U64:
    case GgufFile::VType::I64:
    case GgufFile::VType::F64:
      return 8;
    default:
      return 0;  // string, array: variable
  }
}

// Reads the header through bounds-checked steps; every failure names the file, what was
// being read and the byte offset.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  uint64_t pos() const { return at_; }
  uint64_t left() const { return n_ - at_; }
  [[noreturn]] void fail(const std::string& what, uint64_t at) const {
    throw Error(path_ + ": " + what + " (byte " + std::to_string(at) + ")");
  }
  void need(uint64_t bytes, const std::string& what) const {
    if (bytes > left())
      fail(what + " needs " + std::to_string(bytes) + " bytes but the file has " + std::to_string(left()) +
               " left: the file is cut short or the header is damaged",
           at_);
  }
  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  void skip(uint64_t bytes, const std::string& what) {
    need(bytes, what);
    at_ += bytes;
  }
  // A string (uint64 length + bytes), at most max_len bytes long.
  std::string str(const std::string& what, uint64_t max_len) {
    const uint64_t at = at_;
    const uint64_t len = get<uint64_t>(what + "'s length");
    if (len > max_len)
      fail(what + " claims " + std::to_string(len) + " bytes, more than " + std::to_string(max_len), at);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + at_), size_t(len));
    at_ += len;
    return s;
  }
  // Skips a string and returns nothing (metadata strings are read later, in place).
  void skip_str(const std::string& what) {
    const uint64_t len = get<uint64_t>(what + "'s length");
    skip(len, what + " (" + std::to_string(len) + " bytes)");
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t at_ = 0;
  const std::string& path_;
};

// Skips one value of type t (checking it), arrays recursively.
void skip_value(Cursor& c, uint32_t t, const std::string& key, int depth);

void skip_array(Cursor& c, const std::string& key, int depth, GgufFile::Value* out) {
  if (depth >= kMaxArrayDepth) c.fail("metadata " + key + ": arrays nested more than 8 deep", c.pos());
  const uint64_t at = c.pos();
  const uint32_t et = c.get<uint32_t>("metadata " + key + "'s array type");
  if (et > 12) c.fail("metadata " + key + ": unknown array element type " + std::to_string(et), at);
  const uint64_t n = c.get<uint64_t>("metadata " + key + "'s array length");
  if (out) {
    out->elem = GgufFile::VType(et);
    out->count = n;
    out->offset = c.pos();
  }
  const int es = vtype_size(GgufFile::VType(et));
  // Every element takes at least 1 byte (strings: 8), so the count is checked against the
  // bytes left before any element is read.
  const uint64_t min_each = es ? uint64_t(es) : 8;
  if (n > c.left() / min_each)
    c.fail("metadata " + key + ": an array of " + std::to_string(n) + " " + vtype_name(et) +
               " values does not fit in the " + std::to_string(c.left()) + " bytes left",
           at);
  if (es) return c.skip(n * uint64_t(es), "metadata " + key);
  for (uint64_t i = 0; i < n; ++i) skip_value(c, et, key + "[" + std::to_string(i) + "]", depth + 1);
}

void skip_value(Cursor& c, uint32_t t, const std::string& key, int depth) {
  if (t == uint32_t(GgufFile::VType::String)) return c.skip_str("metadata " + key);
  if (t == uint32_t(GgufFile::VType::Array)) return skip_array(c, key, depth, nullptr);
  const int es = vtype_size(GgufFile::VType(t));
  if (es == 0) c.fail("metadata " + key + ": unknown value type " + std::to_string(t), c.pos());
  c.skip(uint64_t(es), "metadata " + key);
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + size_t(n) > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + size_t(k)]) >> 6) != 2) return false;
    i += size_t(n);
  }
  return true;
}

void read_metadata(Cursor& c, uint64_t count, std::map<std::string, GgufFile::Value>& meta) {
  // Each entry takes at least 8 (key length) + 4 (type) + 1 bytes.
  if (count > c.left() / 13)
    c.fail("the header claims " + std::to_string(count) + " metadata entries, more than the file can hold", 16);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t at = c.pos();
    const std::string key = c.str("metadata key " + std::to_string(i), kMaxKeyBytes);
    if (!valid_utf8(key)) c.fail("metadata key " + std::to_string(i) + " is not valid UTF-8", at);
    if (meta.count(key)) c.fail("metadata key " + key + " appears twice", at);
    const uint64_t tat = c.pos();
    const uint32_t t = c.get<uint32_t>("metadata " + key + "'s type");
    if (t > 12) c.fail("metadata " + key + ": unknown value type " + std::to_string(t), tat);
    GgufFile::Value v;
    v.type = GgufFile::VType(t);
    v.offset = c.pos();
    if (v.type == GgufFile::VType::Array)
      skip_array(c, key, 0, &v);
    else
      skip_value(c, t, key, 0);
    meta.emplace(key, v);
  }
}

// Checked product of a tensor's dimensions and its byte size.
void size_tensor(Cursor& c, GgufFile::Tensor& t, uint64_t at) {
  int64_t n = 1;
  for (int64_t d : t.dims) {
    if (d <= 0) c.fail("tensor " + t.name + " has a dimension of " + std::to_string(d), at);
    if (n > std::numeric_limits<int64_t>::max() / d) c.fail("tensor " + t.name + "'s size overflows", at);
    n *= d;
  }
  const TypeInfo* ti = type_info(t.ggml_type);
  if (!ti)
    c.fail("tensor " + t.name + " has type " + ggml_type_name(t.ggml_type) +
               ", which decoderscope does not read (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K: "
               "a Q4_K_M or Q8_0 file of the same model opens)",
           at);
  t.type = ti->prec;
  if (t.dims[0] % ti->block_elems != 0)
    c.fail("tensor " + t.name + " has rows of " + std::to_string(t.dims[0]) + " values, not a multiple of " + ti->name +
               "'s block of " + std::to_string(ti->block_elems),
           at);
  const uint64_t blocks = uint64_t(n) / uint64_t(ti->block_elems);
  if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(ti->block_bytes))
    c.fail("tensor " + t.name + "'s byte size overflows", at);
  t.bytes = blocks * uint64_t(ti->block_bytes);
}

GgufFile::Tensor read_tensor_info(Cursor& c, uint64_t i) {
  const uint64_t at = c.pos();
  GgufFile::Tensor t;
  t.name = c.str("tensor " + std::to_string(i) + "'s name", kMaxKeyBytes);
  if (t.name.empty() || !valid_utf8(t.name))
    c.fail("tensor " + std::to_string(i) + " has an empty or non-UTF-8 name", at);
  const uint32_t nd = c.get<uint32_t>("tensor " + t.name + "'s dimension count");
  if (nd == 0 || nd > uint32_t(kMaxDims))
    c.fail("tensor " + t.name + " has " + std::to_string(nd) + " dimensions (1 to 4 allowed)", at);
  for (uint32_t d = 0; d < nd; ++d) {
    const uint64_t v = c.get<uint64_t>("tensor " + t.name + "'s dimensions");
    if (v > uint64_t(std::numeric_limits<int64_t>::max())) c.fail("tensor " + t.name + "'s dimension overflows", at);
    t.dims.push_back(int64_t(v));
  }
  t.ggml_type = c.get<uint32_t>("tensor " + t.name + "'s type");
  t.offset = c.get<uint64_t>("tensor " + t.name + "'s offset");
  size_tensor(c, t, at);
  return t;
}

}  // namespace

std::string ggml_type_name(uint32_t id) {
  if (const TypeInfo* t = type_info(id)) return t->name;
  for (auto [i, n] : kOtherTypes)
    if (i == id) return n;
  return "type " + std::to_string(id);
}

int64_t GgufFile::Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string GgufFile::Tensor::shape() const {
  std::string s = "[";
  for (size_t i = dims.size(); i-- > 0;) s += std::to_string(dims[i]) + (i ? ", " : "");
  return s + "]";
}

GgufFile GgufFile::open(const std::string& path, bool in_place) {
  GgufFile f;
  f.path_ = path;
  uint64_t size = 0;
  const int fd = open_regular_file(path, size);
  f.size_ = size;
  if (size < 24) {
    ::close(fd);
    throw Error(path + ": " + std::to_string(size) + " bytes is too short for a GGUF file (24-byte header)");
  }
  try {
    f.map_ = in_place ? MappedFile::map(fd, size_t(size), path) : MappedFile::copy(fd, size_t(size), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const auto* p = reinterpret_cast<const uint8_t*>(f.map_->data());
  Cursor c(p, size, path);
  if (std::memcmp(p, "GGUF", 4) != 0) c.fail("not a GGUF file (it does not start with \"GGUF\")", 0);
  c.skip(4, "magic");
  f.version_ = c.get<uint32_t>("version");
  if (f.version_ != 2 && f.version_ != 3)
    c.fail("GGUF version " + std::to_string(f.version_) + " is not supported (versions 2 and 3 are)", 4);
  const uint64_t n_tensors = c.get<uint64_t>("tensor count");
  const uint64_t n_meta = c.get<uint64_t>("metadata count");
  read_metadata(c, n_meta, f.meta_);
  if (auto a = f.get_int("general.alignment")) {
    if (*a <= 0 || uint64_t(*a) > kMaxAlignment || (*a & (*a - 1)) != 0)
      c.fail("general.alignment is " + std::to_string(*a) + ", not a power of two up to 1 MB", 0);
    f.alignment_ = uint32_t(*a);
  }
  // Each tensor info takes at least 8 + 1 + 4 + 8 + 4 + 8 bytes.
  if (n_tensors > c.left() / 33)
    c.fail("the header claims " + std::to_string(n_tensors) + " tensors, more than the file can hold", 8);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Tensor t = read_tensor_info(c, i);
    if (f.index_.count(t.name)) c.fail("tensor " + t.name + " appears twice", c.pos());
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }
  const uint64_t end_of_header = c.pos();
  f.data_start_ = (end_of_header + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (n_tensors > 0 && f.data_start_ > size)
    throw Error(path + ": the data section would start at byte " + std::to_string(f.data_start_) +
                ", past the end of the file (" + std::to_string(size) + " bytes)");
  std::vector<const Tensor*> order;
  for (Tensor& t : f.tensors_) {
    const uint64_t rel = t.offset;
    if (rel % f.alignment_ != 0)
      throw Error(path + ": tensor " + t.name + "'s data at offset " + std::to_string(rel) + " is not aligned to " +
                  std::to_string(f.alignment_) + " bytes");
    if (rel > size - f.data_start_ || t.bytes > size - f.data_start_ - rel)
      throw Error(path + ": tensor " + t.name + " " + t.shape() + " " + ggml_type_name(t.ggml_type) + " needs bytes " +
                  std::to_string(f.data_start_ + rel) + " to " + std::to_string(f.data_start_ + rel + t.bytes) +
                  ", past the end of the file (" + std::to_string(size) + " bytes)");
    t.offset = f.data_start_ + rel;
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const Tensor* a, const Tensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->offset + order[i - 1]->bytes > order[i]->offset)
      throw Error(path + ": tensors " + order[i - 1]->name + " and " + order[i]->name + " overlap (bytes " +
                  std::to_string(order[i]->offset) + " to " +
                  std::to_string(order[i - 1]->offset + order[i - 1]->bytes) + ")");
  return f;
}

const GgufFile::Tensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::read_string_at(uint64_t offset) const {
  uint64_t len;
  std::memcpy(&len, map_->data() + offset, 8);  // checked when the file was opened
  return std::string(map_->data() + offset + 8, size_t(len));
}

namespace {

template <class T>
T load_at(const char* base, uint64_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof(T));
  return v;
}

// An integer value of type t at off, or nullopt for a non-integer type.
std::optional<int64_t> int_at(const char* b, GgufFile::VType t, uint64_t off, bool& fits) {
  fits = true;
  switch (t) {
    case GgufFile::VType::U8:
      return load_at<uint8_t>(b, off);
    case GgufFile::VType::I8:
      return load_at<int8_t>(b, off);
    case GgufFile::VType::U16:
      return load_at<uint16_t>(b, off);
    case GgufFile::VType::I16:
      return load_at<int16_t>(b, off);
    case GgufFile::VType::U32:
      return load_at<uint32_t>(b, off);
    case GgufFile::VType::I32:
      return load_at<int32_t>(b, off);
    case GgufFile::VType::I64:
      return load_at<int64_t>(b, off);
    case GgufFile::VType::U64: {
      const uint64_t v = load_at<uint64_t>(b, off);
      fits = v <= uint64_t(std::numeric_limits<int64_t>::max());
      return int64_t(fits ? v : 0);
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  if (it->second.type != VType::String)
    throw Error(path_ + ": metadata " + key + " is a " + vtype_name(uint32_t(it->second.type)) + ", expected a string");
  return read_string_at(it->second.offset);
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  bool fits = true;
  auto v = int_at(map_->data(), it->second.type, it->second.offset, fits);
  if (!v || !fits)
    throw Error(path_ + ": metadata " + key + " is a " + vtype_name(uint32_t(it->second.type)) +
                (v ? " too large for this engine" : ", expected an integer"));
  return v;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  if (it->second.type == VType::F32) return double(load_at<float>(map_->data(), it->second.offset));
  if (it->second.type == VType::F64) return load_at<double>(map_->data(), it->second.offset);
  bool fits = true;
  if (auto v = int_at(map_->data(), it->second.type, it->second.offset, fits)) return double(*v);
  throw Error(path_ + ": metadata " + key + " is a " + vtype_name(uint32_t(it->second.type)) + ", expected a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  if (it->second.type != VType::Bool)
    throw Error(path_ + ": metadata " + key + " is a " + vtype_name(uint32_t(it->second.type)) + ", expected a bool");
  return map_->data()[it->second.offset] != 0;
}

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return {};
  const Value& v = it->second;
  if (v.type != VType::Array || v.elem != VType::String)
    throw Error(path_ + ": metadata " + key + " is not an array of strings");
  std::vector<std::string> out;
  out.reserve(size_t(v.count));  // checked against the file's bytes when it was opened
  uint64_t off = v.offset;
  for (uint64_t i = 0; i < v.count; ++i) {
    out.push_back(read_string_at(off));
    off += 8 + out.back().size();
  }
  return out;
}

std::vector<float> GgufFile::get_floats(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return {};
  const Value& v = it->second;
  if (v.type != VType::Array || v.elem != VType::F32)
    throw Error(path_ + ": metadata " + key + " is not an array of float32");
  std::vector<float> out(size_t(v.count));
  if (v.count) std::memcpy(out.data(), map_->data() + v.offset, size_t(v.count) * 4);
  return out;
}

std::vector<int32_t> GgufFile::get_ints(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return {};
  const Value& v = it->second;
  if (v.type != VType::Array) throw Error(path_ + ": metadata " + key + " is not an array");
  std::vector<int32_t> out;
  out.reserve(size_t(v.count));
  const int es = vtype_size(v.elem);
  for (uint64_t i = 0; i < v.count; ++i) {
    bool fits = true;
    auto x = es ? int_at(map_->data(), v.elem, v.offset + i * uint64_t(es), fits) : std::nullopt;
    if (!x || !fits || *x < std::numeric_limits<int32_t>::min() || *x > std::numeric_limits<int32_t>::max())
      throw Error(path_ + ": metadata " + key + " is not an array of 32-bit integers");
    out.push_back(int32_t(*x));
  }
  return out;
}

std::string GgufFile::describe(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return "";
  const Value& v = it->second;
  switch (v.type) {
    case VType::String:
      return quoted_excerpt(read_string_at(v.offset), 200);
    case VType::Array:
      return std::string("array of ") + std::to_string(v.count) + " " + vtype_name(uint32_t(v.elem));
    case VType::Bool:
      return *get_bool(key) ? "true" : "false";
    case VType::F32:
    case VType::F64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", *get_float(key));
      return buf;
    }
    default:
      return std::to_string(*get_int(key));
  }
}

VocabData gguf_vocab(const GgufFile& f) {
  VocabData v;
  const std::string at = f.path() + ": ";
  v.model = f.get_string("tokenizer.ggml.model").value_or("");
  if (v.model.empty()) throw Error(at + "no tokenizer (tokenizer.ggml.model is missing)");
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("");
  v.tokens = f.get_strings("tokenizer.ggml.tokens");
  v.scores = f.get_floats("tokenizer.ggml.scores");
  v.types = f.get_ints("tokenizer.ggml.token_type");
  v.merges = f.get_strings("tokenizer.ggml.merges");
  auto id = [&](const char* key) {
    auto x = f.get_int(key);
    // 0xFFFFFFFF (as uint32) or -1 mean "none" in files written by llama.cpp's tools.
    if (!x || *x < 0 || *x >= int64_t(v.tokens.size())) return -1;
    return int(*x);
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  v.eot_id = id("tokenizer.ggml.eot_token_id");
  auto flag = [&](const char* key) {
    auto b = f.get_bool(key);
    return b ? int(*b) : -1;
  };
  v.add_bos = flag("tokenizer.ggml.add_bos_token");
  v.add_eos = flag("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = flag("tokenizer.ggml.add_space_prefix");
  v.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return v;
}

VocabData read_gguf_vocab(const std::string& path) { return gguf_vocab(GgufFile::open(path)); }

bool is_gguf_file(const std::string& path) {
  uint64_t size = 0;
  int fd = -1;
  try {
    fd = open_regular_file(path, size);
  } catch (const Error&) {
    return false;
  }
  char magic[4] = {};
  const bool ok = size >= 4 && pread_exact(fd, magic, 4, 0).empty() && std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

}  // namespace ds
