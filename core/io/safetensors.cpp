#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "io/file_read.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace ds {

namespace {

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // 100 MB, as the reference implementation

using ojson = nlohmann::ordered_json;

// A name or message made safe for a one-line error: control bytes (and, with
// ascii_only, every byte >= 0x80) become \xHH.
std::string printable(const std::string& s, bool ascii_only = false) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F || (ascii_only && c >= 0x80)) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A tensor name from the file, quoted and cut short if long (util/excerpt.h).
std::string qname(const std::string& name) { return quoted_excerpt(name); }

// A JSON value for a message, cut short if long.
std::string brief(const nlohmann::ordered_json& j) {
  std::string s = j.dump(-1, ' ', true);
  if (s.size() > 80) s = s.substr(0, 80) + "...";
  return printable(s);
}

// Little-endian 16-bit values as host values, in place (nothing to do on little-endian hosts).
void le16_to_host(uint16_t* v, int64_t n) {
  if constexpr (std::endian::native == std::endian::big) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>((v[i] >> 8) | (v[i] << 8));
  } else {
    (void)v;
    (void)n;
  }
}
void le32_to_host(void* data, int64_t n) {
  if constexpr (std::endian::native == std::endian::big) {
    auto* v = static_cast<uint32_t*>(data);
    for (int64_t i = 0; i < n; ++i) v[i] = __builtin_bswap32(v[i]);
  } else {
    (void)data;
    (void)n;
  }
}

// Values per step when a conversion goes through a buffer.
constexpr int64_t kConvertChunk = int64_t{1} << 16;

// A non-negative JSON integer that fits int64.
bool as_count(const ojson& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return out <= static_cast<uint64_t>(INT64_MAX);
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace

int dtype_size(const std::string& d) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

int64_t SafeTensors::Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked when the file was opened
  return n;
}

SafeTensors::SafeTensors(SafeTensors&& o) noexcept { *this = std::move(o); }

SafeTensors& SafeTensors::operator=(SafeTensors&& o) noexcept {
  if (this != &o) {
    close_file();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = std::exchange(o.size_, 0);
    data_start_ = std::exchange(o.data_start_, 0);
    entries_ = std::move(o.entries_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafeTensors::~SafeTensors() { close_file(); }

void SafeTensors::close_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  size_ = 0;
}

namespace {

// One tensor's entry of the header, checked: a known dtype, a shape whose byte count
// fits 64 bits, and data offsets that hold exactly those bytes inside the data section.
SafeTensors::Entry parse_entry(const std::string& file, const std::string& key, const ojson& val, uint64_t data_size,
                               uint64_t data_start) {
  using Entry = SafeTensors::Entry;
  const std::string t = "tensor " + qname(key);
  if (!val.is_object()) throw Error(file + t + ": entry is " + val.type_name() + ", not an object");
  Entry e;
  e.name = key;
  auto dt = val.find("dtype");
  if (dt == val.end() || !dt->is_string()) throw Error(file + t + ": missing or non-string \"dtype\"");
  e.dtype = dt->get<std::string>();
  const int esize = dtype_size(e.dtype);
  if (esize == 0)
    throw Error(file + "unsupported dtype " + qname(e.dtype) + " for " + t +
                " (not a whole-byte safetensors dtype decoderscope knows)");
  auto sh = val.find("shape");
  if (sh == val.end() || !sh->is_array()) throw Error(file + t + ": missing or non-array \"shape\"");
  uint64_t count = 1;
  bool overflow = false;
  for (auto& d : *sh) {
    uint64_t v;
    if (!as_count(d, v))
      throw Error(file + t + ": shape " + brief(*sh) + " holds a value that is not a non-negative integer");
    e.shape.push_back(static_cast<int64_t>(v));
    overflow = overflow || __builtin_mul_overflow(count, v, &count);
  }
  uint64_t bytes = 0;
  overflow = overflow || count > static_cast<uint64_t>(INT64_MAX) ||
             __builtin_mul_overflow(count, static_cast<uint64_t>(esize), &bytes);
  if (overflow) throw Error(file + t + ": shape " + brief(*sh) + " overflows a 64-bit byte count");
  auto off = val.find("data_offsets");
  if (off == val.end() || !off->is_array() || off->size() != 2 || !as_count((*off)[0], e.begin) ||
      !as_count((*off)[1], e.end))
    throw Error(file + t + ": \"data_offsets\" must be two non-negative integers [begin, end]");
  if (e.end < e.begin)
    throw Error(file + t + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                "] end before they begin");
  if (e.end - e.begin != bytes)
    throw Error(file + t + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " +
                std::to_string(e.end - e.begin) + " bytes but " + e.dtype + " " + brief(*sh) + " needs " +
                std::to_string(bytes));
  if (e.end > data_size)
    throw Error(file + t + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                "] run past the end of the data section (" + std::to_string(data_size) + " bytes from file offset " +
                std::to_string(data_start) + "; truncated?)");
  return e;
}

// No two tensors may share bytes.
void check_no_overlap(const std::string& file, const std::vector<SafeTensors::Entry>& entries) {
  using Entry = SafeTensors::Entry;
  std::vector<const Entry*> by_begin;
  for (const Entry& e : entries)
    if (e.end > e.begin) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const Entry& a = *by_begin[i - 1];
    const Entry& b = *by_begin[i];
    if (b.begin < a.end)
      throw Error(file + "tensors " + qname(a.name) + " [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                  "] and " + qname(b.name) + " [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
                  "] overlap in the data section");
  }
}

}  // namespace

SafeTensors SafeTensors::open(const std::string& path) {
  SafeTensors st;
  st.path_ = path;
  st.fd_ = open_regular_file(path, st.size_);  // from here on the destructor closes it, also when a check throws
  const std::string file = path + ": ";
  if (st.size_ < 8)
    throw Error(file + "file is " + std::to_string(st.size_) +
                " bytes, shorter than the 8-byte length that starts a safetensors file");
  unsigned char len[8];
  if (std::string why = pread_exact(st.fd_, len, 8, 0); !why.empty())
    throw Error(file + "cannot read the header length: " + why);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeader)
    throw Error(file + "safetensors header length " + std::to_string(n) + " (bytes 0-7) exceeds the " +
                std::to_string(kMaxHeader) + "-byte limit (not a safetensors file?)");
  if (n > st.size_ - 8)
    throw Error(file + "safetensors header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(st.size_) + " bytes; truncated?)");
  if (n < 2) throw Error(file + "safetensors header length " + std::to_string(n) + " is too short for a JSON object");
  st.data_start_ = 8 + n;
  const uint64_t data_size = st.size_ - st.data_start_;

  // Parse, remembering duplicate top-level keys (the JSON library keeps only one).
  std::string duplicate;
  std::set<std::string> seen;
  ojson::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, ojson& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  std::string text(static_cast<size_t>(n), '\0');  // n <= kMaxHeader and <= the file size
  if (std::string why = pread_exact(st.fd_, text.data(), n, 8); !why.empty())
    throw Error(file + "cannot read the header (bytes 8-" + std::to_string(8 + n) + "): " + why);
  ojson header;
  try {
    header = ojson::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    throw Error(file + "safetensors header (bytes 8-" + std::to_string(8 + n) +
                ") is not valid JSON: " + printable(shorten_json_error(e.what()), true));
  }
  if (!header.is_object()) throw Error(file + "safetensors header is JSON but not an object");
  if (!duplicate.empty()) throw Error(file + "safetensors header names " + qname(duplicate) + " twice");

  for (auto& [key, val] : header.items()) {
    if (key == "__metadata__") {
      if (!val.is_object()) throw Error(file + "__metadata__ is not an object");
      for (auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          throw Error(file + "__metadata__ entry " + qname(mk) + " is not a string (it is " + mv.type_name() + ")");
        st.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    Entry e = parse_entry(file, key, val, data_size, st.data_start_);
    st.index_[e.name] = st.entries_.size();
    st.entries_.push_back(std::move(e));
  }

  check_no_overlap(file, st.entries_);
  return st;
}

const SafeTensors::Entry* SafeTensors::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafeTensors::release(const Entry&) const {}

std::shared_ptr<const MappedFile> SafeTensors::map() const {
  if (fd_ < 0) throw Error(path_ + ": mapping a closed file");
  return MappedFile::map(fd_, static_cast<size_t>(size_), path_);
}

void SafeTensors::prefetch(uint64_t begin, uint64_t end) const {
  if (fd_ < 0 || end <= begin || data_start_ + begin >= size_) return;
  const uint64_t a = data_start_ + begin, b = std::min(size_, data_start_ + end);
  ::posix_fadvise(fd_, static_cast<off_t>(a), static_cast<off_t>(b - a), POSIX_FADV_WILLNEED);
}

void SafeTensors::read_bytes(const Entry& e, uint64_t offset, uint64_t n, void* out) const {
  if (n == 0) return;
  if (fd_ < 0) throw Error(path_ + ": reading tensor " + qname(e.name) + " from a closed file");
  // open() checked e's range against the file size; offset and n lie inside it.
  const uint64_t at = data_start_ + e.begin + offset;
  if (std::string why = pread_exact(fd_, out, n, at); !why.empty())
    throw Error(path_ + ": cannot read tensor " + qname(e.name) + " (bytes " + std::to_string(at) + "-" +
                std::to_string(at + n) + " of the file): " + why);
}

void SafeTensors::check_range(const Entry& e, int64_t first, int64_t count) const {
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16")
    throw Error(path_ + ": unsupported dtype " + e.dtype + " for tensor " + qname(e.name) +
                " (decoderscope reads F32, F16 and BF16)");
  if (first < 0 || count < 0 || first > e.numel() || count > e.numel() - first)
    throw Error(path_ + ": tensor " + qname(e.name) + " has " + std::to_string(e.numel()) + " values; cannot read " +
                std::to_string(count) + " from index " + std::to_string(first));
}

void SafeTensors::read_f32(const Entry& e, float* out, bool) const { read_f32(e, 0, e.numel(), out); }

void SafeTensors::read_f32(const Entry& e, int64_t first, int64_t count, float* out) const {
  check_range(e, first, count);
  if (count == 0) return;
  if (e.dtype == "F32") {
    read_bytes(e, static_cast<uint64_t>(first) * 4, static_cast<uint64_t>(count) * 4, out);
    le32_to_host(out, count);
    return;
  }
  const bool f16 = e.dtype == "F16";
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(count, kConvertChunk)));
  for (int64_t i0 = 0; i0 < count; i0 += kConvertChunk) {
    const int64_t m = std::min(kConvertChunk, count - i0);
    read_bytes(e, static_cast<uint64_t>(first + i0) * 2, static_cast<uint64_t>(m) * 2, buf.data());
    le16_to_host(buf.data(), m);
    float* o = out + i0;
    if (f16)
      for (int64_t i = 0; i < m; ++i) o[i] = f16_to_f32(buf[static_cast<size_t>(i)]);
    else
      for (int64_t i = 0; i < m; ++i) o[i] = bf16_to_f32(buf[static_cast<size_t>(i)]);
  }
}

void SafeTensors::read_16(const Entry& e, int64_t first, int64_t count, Precision p, uint16_t* out) const {
  if (p == Precision::F32) throw Error(path_ + ": read_16 of tensor " + qname(e.name) + " needs BF16 or F16");
  check_range(e, first, count);
  if (count == 0) return;
  const char* want = p == Precision::BF16 ? "BF16" : "F16";
  if (e.dtype == want) {  // the file's bits, unchanged
    read_bytes(e, static_cast<uint64_t>(first) * 2, static_cast<uint64_t>(count) * 2, out);
    le16_to_host(out, count);
    return;
  }
  // Through float32: exact for the widening, one rounding to p.
  std::vector<float> buf(static_cast<size_t>(std::min(count, kConvertChunk)));
  for (int64_t i0 = 0; i0 < count; i0 += kConvertChunk) {
    const int64_t m = std::min(kConvertChunk, count - i0);
    read_f32(e, first + i0, m, buf.data());
    uint16_t* o = out + i0;  // the conversions are defined in this file, so these loops inline them
    if (p == Precision::BF16)
      for (int64_t i = 0; i < m; ++i) o[i] = f32_to_bf16(buf[static_cast<size_t>(i)]);
    else
      for (int64_t i = 0; i < m; ++i) o[i] = f32_to_f16(buf[static_cast<size_t>(i)]);
  }
}

void save_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson md = ojson::object();
    for (auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = std::move(md);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> counts;
  for (const SafeTensorOut& t : tensors) {
    const std::string what = path + ": cannot save tensor " + qname(t.name) + ": ";
    if (t.name == "__metadata__") throw Error(what + "the name is reserved");
    if (header.contains(t.name)) throw Error(what + "the name is used twice");
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
      throw Error(what + "dtype " + qname(t.dtype) + " is not F32, F16 or BF16");
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count)) throw Error(what + "bad shape");
    }
    if (t.data && t.data16) throw Error(what + "both float32 and 16-bit data given");
    if (t.data16 && t.dtype == "F32") throw Error(what + "16-bit data needs dtype F16 or BF16, not F32");
    if (count > 0 && !t.data && !t.data16) throw Error(what + "no data");
    const uint64_t bytes = count * static_cast<uint64_t>(dtype_size(t.dtype));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    counts.push_back(count);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": cannot save: a tensor name or metadata string is not valid UTF-8");
  }
  while ((8 + text.size()) % 8 != 0) text += ' ';

  save_file(path, [&](SaveFile& f) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((uint64_t{text.size()} >> (8 * i)) & 0xFF);
    f.write(len, 8);
    f.write(text);
    std::vector<unsigned char> buf;
    constexpr uint64_t kChunk = uint64_t{1} << 18;
    auto put16 = [&](uint16_t u) {
      buf.push_back(static_cast<unsigned char>(u & 0xFF));
      buf.push_back(static_cast<unsigned char>(u >> 8));
    };
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
      const SafeTensorOut& t = tensors[ti];
      for (uint64_t i0 = 0; i0 < counts[ti]; i0 += kChunk) {
        const uint64_t m = std::min(kChunk, counts[ti] - i0);
        buf.clear();
        for (uint64_t i = i0; i < i0 + m; ++i) {
          if (t.data16) {
            put16(t.data16[i]);
          } else if (t.dtype == "F32") {
            const uint32_t u = std::bit_cast<uint32_t>(t.data[i]);
            for (int b = 0; b < 4; ++b) buf.push_back(static_cast<unsigned char>((u >> (8 * b)) & 0xFF));
          } else {
            put16(t.dtype == "F16" ? f32_to_f16(t.data[i]) : f32_to_bf16(t.data[i]));
          }
        }
        f.write(buf.data(), buf.size());
      }
    }
  });
}

}  // namespace ds
