#include "io/model_folder.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "io/safetensors.h"
#include "model/config_json.h"
#include "perf/transpose.h"
#include "text/char_tokenizer.h"
#include "text/word_tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ds {

namespace {

constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;
// The KV cache the engine allocates for max_seq positions; a config asking for more
// is refused rather than exhausting memory later.
constexpr double kMaxKVCacheBytes = 16.0 * (1ull << 30);

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string list_names(const std::vector<std::string>& names) {
  std::string o;
  for (size_t i = 0; i < names.size() && i < 8; ++i) {
    json n = names[i];
    o += (i ? ", " : "") + excerpt(n.dump(-1, ' ', true, json::error_handler_t::replace));
  }
  if (names.size() > 8) o += " and " + std::to_string(names.size() - 8) + " more";
  return o;
}

json read_json_file(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw Error(path + ": cannot read (" + ec.message() + ")");
  if (size > kMaxConfigBytes)
    throw Error(path + ": file is " + std::to_string(size) + " bytes, more than a config may be (" +
                std::to_string(kMaxConfigBytes) + ")");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::string text(static_cast<size_t>(size), '\0');
  f.read(text.data(), static_cast<std::streamsize>(size));
  if (f.gcount() != static_cast<std::streamsize>(size)) throw Error(path + ": read failed");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    std::string what = shorten_json_error(e.what());
    for (char& c : what)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
    throw Error(path + ": not valid JSON: " + what);
  }
  if (!j.is_object()) throw Error(path + ": holds JSON " + std::string(j.type_name()) + ", not an object");
  return j;
}

// ------------------------------------------------------------------ reading tensors

// Where one tensor's values go: float32, or 16-bit floats of type `type`.
struct Dest {
  float* f32 = nullptr;
  uint16_t* h = nullptr;
  Precision type = Precision::F32;
  // A large matrix written in tiles (perf/gemv.h): its width and tile rows (0: row-major).
  int64_t cols = 0, pr = 0;
};
// tiles: write the matrix in tiles when its shape allows (Weights::mark_tiles's rule).
Dest dest_of(int64_t rows, int64_t cols, bool tiles, float* f32, uint16_t* h, Precision type) {
  const bool in_tiles = tiles && tiles_fit(rows, cols);
  return {f32, h, type, cols, in_tiles ? tile_rows(rows) : 0};
}
Dest dest_of(WMat& m, Mat16& h, bool tiles) {
  if (!h.empty()) return dest_of(h.rows, h.cols, tiles, nullptr, h.data.data(), h.type);
  return dest_of(m.rows(), m.cols(), tiles, m.data(), nullptr, Precision::F32);
}
Dest dest_of(Vec& v) { return {v.data(), nullptr, Precision::F32}; }
Dest dest_of(MatRM& m) { return {m.data(), nullptr, Precision::F32}; }
Dest dest_of(const Weights::TensorRef& t, bool tiles) {
  return dest_of(t.rows, t.cols, tiles && t.matrix, t.data, t.data16, t.type);
}

std::string number(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// dst[c * ld + r] = src[r * cols + c0 + c] for r < rows, c < width: columns c0 ..
// c0+width-1 of a row-major [rows, cols] block, transposed, 8x8 at a time.
template <class T>
void transpose_cols(const T* src, int64_t rows, int64_t cols, int64_t c0, int64_t width, T* dst, int64_t ld) {
  const int64_t r8 = rows / 8 * 8, w8 = width / 8 * 8;
  for (int64_t r = 0; r < r8; r += 8) {
    for (int64_t c = 0; c < w8; c += 8) {
      const T* s = src + r * cols + c0 + c;
      transpose8(s, cols, dst + c * ld + r, ld);
    }
  }
  // The edges: the last rows % 8 rows, and the last width % 8 columns.
  for (int64_t c = 0; c < width; ++c)
    for (int64_t r = (c < w8 ? r8 : 0); r < rows; ++r) dst[c * ld + r] = src[r * cols + c0 + c];
}

// The same into a destination [width, ld] matrix whose first pr rows are in tiles
// (perf/gemv.h): src holds its columns r0 .. r0+rows-1 (r0 a multiple of 8), and dst
// points at the matrix's start. Each 8x8 block of a group is contiguous there.
template <class T>
void transpose_cols_tiles(const T* src, int64_t rows, int64_t cols, int64_t c0, int64_t width, T* dst, int64_t ld,
                          int64_t r0, int64_t pr) {
  const int64_t r8 = rows / 8 * 8, w8 = std::min(width, pr) / 8 * 8;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < w8; c += 8) transpose8(src + r * cols + c0 + c, cols, dst + c * ld + (r0 + r) * 8, 8);
  for (int64_t c = 0; c < width; ++c)
    for (int64_t r = (c < w8 ? r8 : 0); r < rows; ++r) dst[element_index(c, r0 + r, ld, pr)] = src[r * cols + c0 + c];
}

// Reads tensors of one file into their destinations, a chunk at a time: values are
// converted to the destination's type as they are read and checked while they are
// still in cache.
class Filler {
 public:
  explicit Filler(const SafeTensors& st) : st_(st) {}

  // All of e, in its flat order, into d. A destination in tiles is read in whole
  // groups of rows, each chunk regrouped in place while it is still in cache.
  void copy(const SafeTensors::Entry& e, Dest d) {
    const int64_t n = e.numel();
    const int64_t chunk = d.pr ? std::max<int64_t>(8, kChunk / d.cols / 8 * 8) * d.cols : kChunk;
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t m = std::min(chunk, n - i0);
      if (d.type == Precision::F32) {
        st_.read_f32(e, i0, m, d.f32 + i0);
        check(e, i0, d.f32 + i0, m);
      } else {
        st_.read_16(e, i0, m, d.type, d.h + i0);
        check(e, i0, d.h + i0, m, d.type);
      }
      if (d.pr) {  // the rows of this chunk that lie in whole groups
        const int64_t rows = std::min(m / d.cols, std::max<int64_t>(0, d.pr - i0 / d.cols)) / 8 * 8;
        if (rows > 0)
          rows_to_tiles(d.f32 ? static_cast<void*>(d.f32 + i0) : static_cast<void*>(d.h + i0), precision_bytes(d.type),
                        rows, d.cols);
      }
    }
  }

  // e holds a row-major [rows, cols] matrix (a Conv1D weight, [in, out]). Its columns
  // are cut, in order, into parts of the given widths, and each part goes transposed
  // into its destination, a row-major [width, rows] matrix (a Linear W, [out, in]).
  void transpose(const SafeTensors::Entry& e, int64_t rows, int64_t cols,
                 const std::vector<std::pair<Dest, int64_t>>& parts) {
    const Precision p = parts.front().first.type;
    const int64_t step = std::max<int64_t>(8, kChunk / std::max<int64_t>(cols, 1) / 8 * 8);  // whole 8x8 blocks
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t m = std::min(step, rows - r0);
      if (p == Precision::F32) {
        f32_.resize(static_cast<size_t>(m * cols));
        st_.read_f32(e, r0 * cols, m * cols, f32_.data());
        check(e, r0 * cols, f32_.data(), m * cols);
      } else {
        h_.resize(static_cast<size_t>(m * cols));
        st_.read_16(e, r0 * cols, m * cols, p, h_.data());
        check(e, r0 * cols, h_.data(), m * cols, p);
      }
      int64_t c0 = 0;
      for (const auto& [d, width] : parts) {
        if (d.pr && p == Precision::F32)
          transpose_cols_tiles(f32_.data(), m, cols, c0, width, d.f32, rows, r0, d.pr);
        else if (d.pr)
          transpose_cols_tiles(h_.data(), m, cols, c0, width, d.h, rows, r0, d.pr);
        else if (p == Precision::F32)
          transpose_cols(f32_.data(), m, cols, c0, width, d.f32 + r0, rows);
        else
          transpose_cols(h_.data(), m, cols, c0, width, d.h + r0, rows);
        c0 += width;
      }
    }
  }

  // Checks the values of e where they lie (a mapped file's float32 values).
  void check_in_place(const SafeTensors::Entry& e, const float* v) const { check(e, 0, v, e.numel()); }

  // Whether tensors a and b hold the same values (as float32; both numel() long).
  bool same_values(const SafeTensors::Entry& a, const SafeTensors::Entry& b) {
    const int64_t n = a.numel();
    if (b.numel() != n) return false;
    f32_.resize(static_cast<size_t>(std::min(n, kChunk)));
    std::vector<float> other(f32_.size());
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      st_.read_f32(a, i0, m, f32_.data());
      st_.read_f32(b, i0, m, other.data());
      if (!std::equal(f32_.begin(), f32_.begin() + m, other.begin())) return false;
    }
    return true;
  }

 private:
  static constexpr int64_t kChunk = int64_t{1} << 18;  // values per read: 1 MB of float32

  void check(const SafeTensors::Entry& e, int64_t first, const float* v, int64_t n) const {
    if (weights_in_range(v, n)) return;
    for (int64_t i = 0; i < n; ++i)
      if (!weight_in_range(v[i])) bad_value(e, first + i, v[i], Precision::F32);
  }
  void check(const SafeTensors::Entry& e, int64_t first, const uint16_t* v, int64_t n, Precision p) const {
    if (weights_in_range(v, n, p)) return;
    for (int64_t i = 0; i < n; ++i)
      if (!weight_in_range(v[i], p)) bad_value(e, first + i, widen(v[i], p), p);
  }
  // Throws for the value at flat index i of e, which is `got` once stored as p.
  [[noreturn]] void bad_value(const SafeTensors::Entry& e, int64_t i, float got, Precision p) const {
    float file_value = got;
    if (p != Precision::F32) st_.read_f32(e, i, 1, &file_value);
    if (std::isfinite(file_value) && std::fabs(file_value) > kMaxWeightMagnitude)
      throw Error(st_.path() + ": tensor " + e.name + " holds " + number(file_value) + " at flat index " +
                  std::to_string(i) +
                  ", beyond the 1e10 in magnitude that any trained model stays far below (a corrupted file?)");
    if (std::isfinite(file_value))  // finite in the file, out of range once narrowed
      throw Error(st_.path() + ": tensor " + e.name + " holds " + number(file_value) + " at flat index " +
                  std::to_string(i) + ", beyond the range of " + precision_name(p) + " (load it as " +
                  (p == Precision::F16 ? "bfloat16 or float32)" : "float32)"));
    throw Error(st_.path() + ": tensor " + e.name + " holds " +
                (std::isnan(file_value) ? "a NaN" : "an infinite value") + " at flat index " + std::to_string(i));
  }

  const SafeTensors& st_;
  std::vector<float> f32_;
  std::vector<uint16_t> h_;
};

// One tensor to read, with the memory it writes that may not have been touched yet.
struct ReadJob {
  const SafeTensors::Entry* e;
  std::function<void(const SafeTensors::Entry&)> run;
  std::vector<std::pair<void*, size_t>> fresh;  // (start, bytes)
};

// Works ahead of the reader on a second thread, so that what would make the reader
// wait happens while it copies and converts:
//  * the file: asks the kernel to read the next kAhead bytes after the tensor being
//    read into the page cache, so the disk keeps streaming;
//  * the memory: faults in the pages the next jobs will write. The first write to a
//    new page costs a page fault in which the kernel finds and zeroes the page; for a
//    whole model that is about as much work as copying it, and here it runs on
//    another core. It uses madvise(MADV_POPULATE_WRITE) (Linux 5.14), which maps
//    pages without writing to them, so it cannot disturb values the reader has
//    stored; where that is missing the reader takes the faults itself.
// Nothing is started for files below kMinBytes.
class ReadAhead {
 public:
  ReadAhead(const SafeTensors& st, const std::vector<ReadJob>& jobs) : st_(st), jobs_(jobs) {
    uint64_t bytes = 0;
    for (const ReadJob& j : jobs_) {
      bytes += j.e->end - j.e->begin;
      end_ = std::max(end_, j.e->end);
    }
    if (bytes >= kMinBytes) thread_ = std::thread([this] { run(); });
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  ~ReadAhead() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }
  // The reader has started jobs[k] (jobs are in file order).
  void reading(size_t k) { reader_.store(k, std::memory_order_relaxed); }

 private:
  static constexpr uint64_t kMinBytes = uint64_t{32} << 20;  // smaller files are read before a thread starts
  static constexpr uint64_t kAhead = uint64_t{128} << 20;    // page cache asked for ahead of the reader
  static constexpr uint64_t kFetchStep = uint64_t{1} << 20;  // about what the kernel reads per request
  static constexpr uintptr_t kFaultStep = uintptr_t{2} << 20;

  void run() {
    uint64_t fetched = jobs_.front().e->begin;
    while (!stop_.load(std::memory_order_relaxed)) {
      const size_t k = reader_.load(std::memory_order_relaxed);
      fetched = std::max(fetched, jobs_[k].e->begin);  // what the reader has reached needs no asking
      const uint64_t want = std::min(end_, jobs_[k].e->begin + kAhead);
      if (fetched < want) {
        const uint64_t to = std::min(want, fetched + kFetchStep);
        st_.prefetch(fetched, to);
        fetched = to;
      } else if (!fault_in_step(k)) {
        if (fetched >= end_) return;                                  // all asked for, all faulted in
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // until the reader moves on
      }
    }
  }

  // Faults in the next kFaultStep bytes of fresh memory of jobs k onwards; false when
  // there is none left (or it cannot be done).
  bool fault_in_step(size_t k) {
#ifdef MADV_POPULATE_WRITE
    if (!can_fault_in_) return false;
    if (job_ < k) {  // the reader got there first
      job_ = k;
      range_ = 0;
      done_ = 0;
    }
    while (job_ < jobs_.size()) {
      const auto& ranges = jobs_[job_].fresh;
      if (range_ >= ranges.size()) {
        ++job_;
        range_ = 0;
        done_ = 0;
        continue;
      }
      // Whole pages only; the partial pages at the ends are left to the reader.
      const uintptr_t start = reinterpret_cast<uintptr_t>(ranges[range_].first);
      const uintptr_t a = (start + page_ - 1) / page_ * page_ + done_;
      const uintptr_t b = (start + ranges[range_].second) / page_ * page_;
      if (a >= b) {
        ++range_;
        done_ = 0;
        continue;
      }
      const uintptr_t n = std::min(kFaultStep, b - a);
      if (::madvise(reinterpret_cast<void*>(a), n, MADV_POPULATE_WRITE) != 0) {
        can_fault_in_ = false;  // not supported, or no memory: the reader faults pages in as it writes
        return false;
      }
      done_ += n;
      return true;
    }
#else
    (void)k;
#endif
    return false;
  }

  const SafeTensors& st_;
  const std::vector<ReadJob>& jobs_;
  const uintptr_t page_ = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uint64_t end_ = 0;  // end of the last tensor, relative to the data section
  std::atomic<size_t> reader_{0};
  std::atomic<bool> stop_{false};
  // Where fault_in_step has got to: job, range of it, bytes of that range.
  size_t job_ = 0, range_ = 0;
  uintptr_t done_ = 0;
  bool can_fault_in_ = true;
  std::thread thread_;
};

// Reads in the order the tensors lie in the file, so the file streams from front to
// back whatever order the loader lists them in, with a ReadAhead working ahead.
void run_in_file_order(const SafeTensors& st, std::vector<ReadJob>& jobs) {
  if (jobs.empty()) return;
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const ReadJob& a, const ReadJob& b) { return a.e->begin < b.e->begin; });
  ReadAhead ahead(st, jobs);
  for (size_t k = 0; k < jobs.size(); ++k) {
    ahead.reading(k);
    jobs[k].run(*jobs[k].e);
  }
}

// The memory destinations of n values each span (not yet touched when they are
// large matrices from Weights::zeros, a fresh mapping).
std::vector<std::pair<void*, size_t>> fresh_memory(const std::vector<Dest>& ds, int64_t n_each) {
  std::vector<std::pair<void*, size_t>> out;
  for (const Dest& d : ds) {
    if (n_each <= 0) continue;
    if (d.f32)
      out.push_back({d.f32, static_cast<size_t>(n_each) * sizeof(float)});
    else if (d.h)
      out.push_back({d.h, static_cast<size_t>(n_each) * sizeof(uint16_t)});
  }
  return out;
}

const SafeTensors::Entry& need_tensor(const SafeTensors& st, const std::string& name, const Shape& shape) {
  const SafeTensors::Entry* e = st.find(name);
  if (!e) throw Error(st.path() + ": tensor " + name + " " + shape_str(shape) + " is missing");
  if (e->shape != shape)
    throw Error(st.path() + ": tensor " + name + " has shape " + shape_str(e->shape) + ", expected " +
                shape_str(shape));
  return *e;
}

// ------------------------------------------------------------------ GPT-2

Config gpt2_config_from(const json& j, const std::string& path) {
  Config c;
  try {
    if (j.contains("model_type")) {
      const std::string mt = json_string(j, "model_type");
      if (mt != "gpt2")
        throw Error("model_type " + excerpt(json(mt).dump(-1, ' ', true, json::error_handler_t::replace)) +
                    " is not supported (decoderscope reads GPT-2 folders and its own)");
    }
    const int d = json_int(j, "n_embd");
    const int n_layer = json_int(j, "n_layer");
    const int n_head = json_int(j, "n_head");
    const int n_pos =
        j.contains("n_positions") && !j["n_positions"].is_null() ? json_int(j, "n_positions") : json_int(j, "n_ctx");
    const int vocab = json_int(j, "vocab_size");
    if (d <= 0 || d > (1 << 20)) throw Error("field \"n_embd\" must be in 1..1048576, is " + std::to_string(d));
    if (n_head <= 0 || d % n_head != 0)
      throw Error("field \"n_head\" (" + std::to_string(n_head) + ") must divide n_embd (" + std::to_string(d) + ")");
    c = gpt2_config(d, n_layer, n_head, n_pos, vocab);
    c.d_ff = json_int(j, "n_inner", 4 * d);
    const std::string act = json_string(j, "activation_function", "gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
      c.ffn = FFNKind::GELUTanh;
    else if (act == "gelu")
      c.ffn = FFNKind::GELU;
    else if (act == "relu")
      c.ffn = FFNKind::ReLU;
    else
      throw Error("field \"activation_function\" " +
                  excerpt(json(act).dump(-1, ' ', true, json::error_handler_t::replace)) +
                  " is not supported (gelu_new, gelu, relu)");
    if (!json_bool(j, "scale_attn_weights", true))
      throw Error("field \"scale_attn_weights\" is false: unscaled attention is not supported");
    if (json_bool(j, "scale_attn_by_inverse_layer_idx", false))
      throw Error("field \"scale_attn_by_inverse_layer_idx\" is true: not supported");
    if (json_bool(j, "add_cross_attention", false))
      throw Error("field \"add_cross_attention\" is true: GPT-2 with cross-attention is not supported");
    c.norm_eps = json_float(j, "layer_norm_epsilon", 1e-5f);
    if (!(c.norm_eps > 0 && c.norm_eps < 1)) throw Error("field \"layer_norm_epsilon\" must be in (0, 1)");
    // <|endoftext|> (50256 in GPT-2's vocabulary) starts and ends texts; the config's
    // own ids win when they are valid.
    const int fallback = vocab > 0 ? vocab - 1 : -1;  // 50256 for GPT-2's 50257
    auto special = [&](const char* key) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number_integer()) return fallback;
      const int64_t id = it->get<int64_t>();
      return id >= 0 && id < vocab ? static_cast<int>(id) : fallback;
    };
    c.eos_id = special("eos_token_id");
    c.bos_id = special("bos_token_id");
    c.pad_id = -1;
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

// "h.<digits>.<rest>" after the prefix: the layer, or -1.
int layer_of(const std::string& name, const std::string& prefix, std::string& rest) {
  if (name.compare(0, prefix.size() + 2, prefix + "h.") != 0) return -1;
  size_t i = prefix.size() + 2, j = i;
  while (j < name.size() && j - i < 6 && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j >= name.size() || name[j] != '.') return -1;
  rest = name.substr(j + 1);
  return std::stoi(name.substr(i, j - i));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The name of a GPT-2 layer's tensor: prefix + "h.{l}." + rest.
std::string gpt2_layer_name(const std::string& prefix, int l, const char* rest) {
  return prefix + "h." + std::to_string(l) + "." + rest;
}

// Checks that the file holds every tensor a GPT-2 of config c has, with its shape, and
// no other weights, before anything is allocated. Returns lm_head.weight when present.
const SafeTensors::Entry* check_gpt2_tensors(const SafeTensors& st, const Config& c, const std::string& prefix,
                                             const std::string& st_path) {
  const int64_t d = c.d_model, ff = c.d_ff, V = c.vocab_size, P = c.max_seq;
  std::map<std::string, Shape> expect;
  expect[prefix + "wte.weight"] = {V, d};
  expect[prefix + "wpe.weight"] = {P, d};
  expect[prefix + "ln_f.weight"] = {d};
  expect[prefix + "ln_f.bias"] = {d};
  auto lname = [&](int l, const char* rest) { return gpt2_layer_name(prefix, l, rest); };
  for (int l = 0; l < c.n_layers; ++l) {
    expect[lname(l, "ln_1.weight")] = {d};
    expect[lname(l, "ln_1.bias")] = {d};
    expect[lname(l, "attn.c_attn.weight")] = {d, 3 * d};
    expect[lname(l, "attn.c_attn.bias")] = {3 * d};
    expect[lname(l, "attn.c_proj.weight")] = {d, d};
    expect[lname(l, "attn.c_proj.bias")] = {d};
    expect[lname(l, "ln_2.weight")] = {d};
    expect[lname(l, "ln_2.bias")] = {d};
    expect[lname(l, "mlp.c_fc.weight")] = {d, ff};
    expect[lname(l, "mlp.c_fc.bias")] = {ff};
    expect[lname(l, "mlp.c_proj.weight")] = {ff, d};
    expect[lname(l, "mlp.c_proj.bias")] = {d};
  }
  // Every expected tensor with its shape, before anything is allocated.
  for (auto& [name, shape] : expect) need_tensor(st, name, shape);
  const SafeTensors::Entry* lm_head = st.find("lm_head.weight");
  if (lm_head && lm_head->shape != Shape{V, d})
    throw Error(st_path + ": tensor lm_head.weight has shape " + shape_str(lm_head->shape) + ", expected " +
                shape_str({V, d}));
  std::vector<std::string> unknown;
  for (const auto& e : st.entries()) {
    if (expect.count(e.name) || e.name == "lm_head.weight") continue;
    std::string rest;
    if (layer_of(e.name, prefix, rest) >= 0 && (rest == "attn.bias" || rest == "attn.masked_bias")) continue;
    // Causal-mask buffers above; anything else that looks like a weight would be dropped.
    if (ends_with(e.name, ".weight") || ends_with(e.name, ".bias") || ends_with(e.name, "_weight") ||
        ends_with(e.name, "_bias"))
      unknown.push_back(e.name);
  }
  if (!unknown.empty())
    throw Error(st_path + ": holds weights a GPT-2 of this config does not have (n_layer " +
                std::to_string(c.n_layers) + "): " + list_names(unknown));

  return lm_head;
}

void load_gpt2(FolderModel& m, const json& j, const std::string& config_path, const std::string& st_path, Precision p,
               bool tiles) {
  m.format = "gpt2";
  m.tokenizer_kind = "gpt2-bpe";
  m.cfg = gpt2_config_from(j, config_path);
  Config& c = m.cfg;
  SafeTensors st = SafeTensors::open(st_path);

  std::string prefix;
  if (st.find("transformer.wte.weight"))
    prefix = "transformer.";
  else if (!st.find("wte.weight"))
    throw Error(st_path + ": has neither wte.weight nor transformer.wte.weight (not a GPT-2 checkpoint?)");

  const SafeTensors::Entry* lm_head = check_gpt2_tensors(st, c, prefix, st_path);
  const int64_t d = c.d_model, ff = c.d_ff, V = c.vocab_size;
  auto lname = [&](int l, const char* rest) { return gpt2_layer_name(prefix, l, rest); };
  m.w = Weights::zeros(c, p, true);
  Weights& w = m.w;
  Filler fill(st);
  std::vector<ReadJob> jobs;
  auto job = [&](const std::string& name, std::function<void(const SafeTensors::Entry&)> run,
                 std::vector<std::pair<void*, size_t>> fresh = {}) {
    jobs.push_back({st.find(name), std::move(run), std::move(fresh)});  // present: checked above
  };
  auto vec = [&](const std::string& name, Vec& v) {
    job(name, [&fill, &v](const SafeTensors::Entry& e) { fill.copy(e, dest_of(v)); });
  };
  // A Conv1D weight [in, out] into Linear weights [out, in], the columns split evenly.
  auto conv = [&](const std::string& name, int64_t in, int64_t out, const std::vector<Linear*>& parts) {
    std::vector<std::pair<Dest, int64_t>> dests;
    std::vector<Dest> all;
    for (Linear* l : parts) {
      dests.push_back({dest_of(l->W, l->W16, tiles), out / static_cast<int64_t>(parts.size())});
      all.push_back(dests.back().first);
    }
    job(
        name, [&fill, in, out, dests](const SafeTensors::Entry& e) { fill.transpose(e, in, out, dests); },
        fresh_memory(all, in * out / static_cast<int64_t>(parts.size())));
  };
  const Dest embed = dest_of(w.tok_embed, w.tok_embed16, tiles);
  job(
      prefix + "wte.weight", [&fill, embed](const SafeTensors::Entry& e) { fill.copy(e, embed); },
      fresh_memory({embed}, V * d));
  job(prefix + "wpe.weight", [&](const SafeTensors::Entry& e) { fill.copy(e, dest_of(w.pos_embed)); });
  for (int l = 0; l < c.n_layers; ++l) {
    Block& b = w.blocks[static_cast<size_t>(l)];
    vec(lname(l, "ln_1.weight"), b.ln1.g);
    vec(lname(l, "ln_1.bias"), b.ln1.b);
    conv(lname(l, "attn.c_attn.weight"), d, 3 * d, {&b.attn.q, &b.attn.k, &b.attn.v});  // q, k, v columns
    job(lname(l, "attn.c_attn.bias"), [&fill, &b, d](const SafeTensors::Entry& e) {
      Vec qkv(3 * d);
      fill.copy(e, dest_of(qkv));
      b.attn.q.b = qkv.segment(0, d);
      b.attn.k.b = qkv.segment(d, d);
      b.attn.v.b = qkv.segment(2 * d, d);
    });
    conv(lname(l, "attn.c_proj.weight"), d, d, {&b.attn.o});
    vec(lname(l, "attn.c_proj.bias"), b.attn.o.b);
    vec(lname(l, "ln_2.weight"), b.ln3.g);
    vec(lname(l, "ln_2.bias"), b.ln3.b);
    conv(lname(l, "mlp.c_fc.weight"), d, ff, {&b.ffn.up});
    vec(lname(l, "mlp.c_fc.bias"), b.ffn.up.b);
    conv(lname(l, "mlp.c_proj.weight"), ff, d, {&b.ffn.down});
    vec(lname(l, "mlp.c_proj.bias"), b.ffn.down.b);
  }
  vec(prefix + "ln_f.weight", w.ln_final.g);
  vec(prefix + "ln_f.bias", w.ln_final.b);
  if (lm_head) {
    // GPT2LMHeadModel ties lm_head to wte; a file whose head differs (compared as
    // float32 values, in the file) is loaded untied.
    const SafeTensors::Entry* wte = st.find(prefix + "wte.weight");
    job(lm_head->name, [&, wte](const SafeTensors::Entry& e) {
      if (fill.same_values(e, *wte)) return;
      Weights::allocate_matrix(p, w.lm_head, w.lm_head16, V, d);
      c.tied_head = false;
      fill.copy(e, dest_of(w.lm_head, w.lm_head16, tiles));
    });
  }
  run_in_file_order(st, jobs);
  if (tiles) w.mark_tiles();
}

// ------------------------------------------------------------------ decoderscope

bool is_vector_name(const std::string& name) { return ends_with(name, ".g") || ends_with(name, ".b"); }

// A lower bound on the parameters cfg implies (its matrices), in double so it cannot
// overflow: checked against the file before anything is allocated.
double matrix_params(const Config& c) {
  const double d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff, V = c.vocab_size;
  const double attn = 2 * q * d + 2 * kv * d;
  const double mlp = (c.gated() ? 3 : 2) * ff * d;
  double n = V * d + (c.pos == PosKind::Learned ? double(c.max_seq) * d : 0) + (c.tied_head ? 0 : V * d);
  n += c.n_layers * (attn * (c.encoder_decoder ? 2 : 1) + mlp);
  if (c.encoder_decoder) n += c.n_enc_layers * (attn + mlp) + (c.pos == PosKind::Learned ? double(c.max_src) * d : 0);
  return n;
}

// The "vocab" of a "chars" or "words" tokenizer block: an array of vocab_size strings
// that the tokenizer of that kind accepts (no duplicates, no empty entries, ...).
// Throws ds::Error naming the problem.
std::vector<std::string> checked_vocab(const json& tok, const Config& cfg, const std::string& kind) {
  if (!tok.contains("vocab") || !tok["vocab"].is_array())
    throw Error("field \"tokenizer\".\"vocab\" must be an array of strings");
  const json& v = tok["vocab"];
  if (static_cast<int64_t>(v.size()) != cfg.vocab_size)
    throw Error("field \"tokenizer\".\"vocab\" has " + std::to_string(v.size()) + " entries but vocab_size is " +
                std::to_string(cfg.vocab_size));
  std::vector<std::string> vocab;
  vocab.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_string())
      throw Error("field \"tokenizer\".\"vocab\" entry " + std::to_string(vocab.size()) + " is not a string");
    vocab.push_back(e.get<std::string>());
  }
  if (kind == "chars")
    CharTokenizer check(vocab, cfg.bos_id);  // throws on a bad vocabulary
  else
    WordTokenizer check(vocab, cfg.bos_id);
  return vocab;
}

// Leaves the float32 large matrices of `todo` where the mapped file holds them, once
// checked (the tiles their Dest may ask for do not apply); the rest are read as usual.
// Returns false, doing nothing, unless every large matrix is F32 in the file at a
// 4-byte boundary and the file can be mapped.
bool read_own_in_place(const SafeTensors& st, Weights& w,
                       const std::vector<std::tuple<const SafeTensors::Entry*, Dest, bool>>& todo) {
  if (std::endian::native != std::endian::little) return false;
  for (const auto& [e, dest, matrix] : todo)
    if (matrix && (e->dtype != "F32" || !dest.f32 || (st.data_start() + e->begin) % alignof(float) != 0)) return false;
  std::shared_ptr<const MappedFile> file;
  try {
    file = st.map();
  } catch (const Error&) {
    return false;  // a file that cannot be mapped (some network or special file systems) is read
  }
  char* base = const_cast<char*>(file->data()) + st.data_start();
  Filler fill(st);
  std::map<const float*, float*> where;
  std::vector<ReadJob> jobs;
  for (const auto& [e, dest, matrix] : todo) {
    if (!matrix) {
      jobs.push_back({e, [&fill, d = dest](const SafeTensors::Entry& en) { fill.copy(en, d); }, {}});
      continue;
    }
    const float* at = reinterpret_cast<const float*>(base + e->begin);
    where[dest.f32] = const_cast<float*>(at);
    jobs.push_back({e, [&fill, at](const SafeTensors::Entry& en) { fill.check_in_place(en, at); }, {}});
  }
  run_in_file_order(st, jobs);
  if (!file->intact()) throw Error(file->why_changed());
  w.use_mapped_file(file, where);  // the block Weights::zeros mapped for them, never touched, is given back
  return true;
}

void load_own(FolderModel& m, const json& j, const std::string& config_path, const std::string& st_path, Precision p,
              bool tiles, bool in_place) {
  m.format = "decoderscope";
  try {
    const int version = json_int(j, "version");
    if (version != 1)
      throw Error("field \"version\" is " + std::to_string(version) + "; this decoderscope reads version 1");
    m.cfg = config_from_json(j);
    if (!j.contains("tokenizer") || !j["tokenizer"].is_object())
      throw Error("field \"tokenizer\" must be an object {\"kind\": \"chars\" | \"words\" | \"gpt2-bpe\", ...}");
    const json& tok = j["tokenizer"];
    m.tokenizer_kind = json_string(tok, "kind");
    if (m.tokenizer_kind == "chars") {
      m.chars_vocab = checked_vocab(tok, m.cfg, "chars");
    } else if (m.tokenizer_kind == "words") {
      m.words_vocab = checked_vocab(tok, m.cfg, "words");
    } else if (m.tokenizer_kind != "gpt2-bpe") {
      throw Error("field \"tokenizer\".\"kind\" must be \"chars\", \"words\" or \"gpt2-bpe\", is " +
                  excerpt(json(m.tokenizer_kind).dump(-1, ' ', true, json::error_handler_t::replace)));
    }
    if (j.contains("training")) m.training = j["training"].dump();
    const Config& c = m.cfg;
    const double kv_bytes = 2.0 * 4.0 * c.n_layers * double(c.max_seq) * c.kv_dim();
    if (kv_bytes > kMaxKVCacheBytes)
      throw Error("max_seq " + std::to_string(c.max_seq) + " would need a " + std::to_string(kv_bytes / (1 << 30)) +
                  " GiB KV cache");
  } catch (const Error& e) {
    throw Error(config_path + ": " + e.what());
  }
  const Config& c = m.cfg;
  SafeTensors st = SafeTensors::open(st_path);
  double held = 0;
  for (const auto& e : st.entries()) held += double(e.numel());
  if (matrix_params(c) > held)
    throw Error(config_path + ": describes a model of at least " + std::to_string(int64_t(matrix_params(c))) +
                " parameters but " + st_path + " holds only " + std::to_string(int64_t(held)) + " values");

  m.w = Weights::zeros(c, p, true);
  Weights& w = m.w;
  if (c.encoder_decoder && st.find("encoder.tok_embed")) {
    Weights::allocate_matrix(p, w.enc_tok_embed, w.enc_tok_embed16, c.vocab_size, c.d_model);
  }
  // Every tensor present with its shape, and nothing else, before any is read.
  std::set<std::string> used;
  std::vector<std::tuple<const SafeTensors::Entry*, Dest, bool>> todo;  // tensor, where it goes, a large matrix
  for (auto& t : w.tensors()) {
    const Shape shape = is_vector_name(t.name) ? Shape{t.rows} : Shape{t.rows, t.cols};
    todo.push_back({&need_tensor(st, t.name, shape), dest_of(t, tiles), t.matrix});
    used.insert(t.name);
  }
  std::vector<std::string> unknown;
  for (const auto& e : st.entries())
    if (!used.count(e.name)) unknown.push_back(e.name);
  if (!unknown.empty())
    throw Error(st_path + ": holds tensors this configuration does not use: " + list_names(unknown));
  if (in_place && p == Precision::F32 && read_own_in_place(st, w, todo)) return;  // else as asked, tiles or rows
  Filler fill(st);
  std::vector<ReadJob> jobs;
  for (auto& [e, dest, matrix] : todo)
    jobs.push_back(
        {e, [&fill, d = dest](const SafeTensors::Entry& en) { fill.copy(en, d); }, fresh_memory({dest}, e->numel())});
  run_in_file_order(st, jobs);
  if (tiles) w.mark_tiles();
}

}  // namespace

FolderModel load_model_folder(const std::string& dir, Precision precision, bool tiles, bool in_place) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir + ": not a folder");
  const fs::path d(dir);
  const std::string config_path = (d / "config.json").string();
  const std::string st_path = (d / "model.safetensors").string();
  if (!fs::exists(st_path, ec)) {
    if (fs::exists(d / "pytorch_model.bin", ec))
      throw Error(dir +
                  " holds pytorch_model.bin only; decoderscope reads model.safetensors (download it from the "
                  "same model page)");
    if (fs::exists(d / "model.safetensors.index.json", ec))
      throw Error(dir +
                  " holds a sharded checkpoint (model.safetensors.index.json); decoderscope reads a single "
                  "model.safetensors");
    throw Error(dir + ": no model.safetensors (a model folder holds config.json and model.safetensors)");
  }
  if (!fs::exists(config_path, ec))
    throw Error(dir + ": no config.json (a model folder holds config.json and model.safetensors)");
  const json j = read_json_file(config_path);

  FolderModel m;
  m.dir = dir;
  if (j.contains("format")) {
    std::string format;
    try {
      format = json_string(j, "format");
    } catch (const Error& e) {
      throw Error(config_path + ": " + e.what());
    }
    if (format != "decoderscope")
      throw Error(config_path + ": field \"format\" is " +
                  excerpt(json(format).dump(-1, ' ', true, json::error_handler_t::replace)) +
                  ", expected \"decoderscope\"");
    load_own(m, j, config_path, st_path, precision, tiles, in_place);
  } else {
    load_gpt2(m, j, config_path, st_path, precision, tiles);
  }
  return m;
}

void save_model_folder(const std::string& dir, const Config& cfg, const Weights& w, const json& tokenizer,
                       const json& extra, const std::string& dtype) {
  cfg.validate();
  // tensors() is non-const; nothing is written. Matrices in tiles are saved row-major.
  std::optional<Weights> in_rows;
  if (const_cast<Weights&>(w).in_tiles()) {
    in_rows.emplace(w);
    in_rows->to_rows();
  }
  Weights& wm = in_rows ? *in_rows : const_cast<Weights&>(w);
  // The tensors cfg implies, by name and shape.
  std::map<std::string, std::pair<int64_t, int64_t>> want;
  {
    Weights z = Weights::zeros(cfg, Precision::F32);  // large matrices never written: address space only
    for (auto& t : z.tensors()) want[t.name] = {t.rows, t.cols};
    if (cfg.encoder_decoder) want["encoder.tok_embed"] = {cfg.vocab_size, cfg.d_model};
  }
  std::vector<SafeTensorOut> out;
  for (auto& t : wm.tensors()) {
    auto it = want.find(t.name);
    if (it == want.end())
      throw Error(dir + ": cannot save: tensor " + t.name + " does not belong to this configuration");
    if (it->second != std::pair<int64_t, int64_t>{t.rows, t.cols})
      throw Error(dir + ": cannot save: tensor " + t.name + " is " + std::to_string(t.rows) + "x" +
                  std::to_string(t.cols) + ", expected " + std::to_string(it->second.first) + "x" +
                  std::to_string(it->second.second));
    want.erase(it);
    SafeTensorOut o;
    o.name = t.name;
    o.shape = is_vector_name(t.name) ? Shape{t.rows} : Shape{t.rows, t.cols};
    if (t.data) {
      o.data = t.data;
      o.dtype = dtype;
    } else {  // kept as 16-bit floats: written in their own type, unchanged
      o.data16 = t.data16;
      o.dtype = t.type == Precision::BF16 ? "BF16" : "F16";
    }
    out.push_back(std::move(o));
  }
  want.erase("encoder.tok_embed");  // optional
  if (!want.empty()) throw Error(dir + ": cannot save: tensor " + want.begin()->first + " is missing");

  if (!tokenizer.is_object() || !tokenizer.contains("kind") || !tokenizer["kind"].is_string())
    throw Error(dir + ": cannot save: the tokenizer must be {\"kind\": \"chars\" | \"words\" | \"gpt2-bpe\", ...}");
  const std::string kind = tokenizer["kind"].get<std::string>();
  if (kind == "chars" || kind == "words") {
    try {
      checked_vocab(tokenizer, cfg, kind);
    } catch (const Error& e) {
      throw Error(dir + ": cannot save: a " + kind + " tokenizer: " + e.what());
    }
  } else if (kind != "gpt2-bpe") {
    throw Error(dir + ": cannot save: tokenizer kind must be \"chars\", \"words\" or \"gpt2-bpe\"");
  }

  nlohmann::ordered_json conf = nlohmann::ordered_json::object();
  conf["format"] = "decoderscope";
  conf["version"] = 1;
  const json fields = config_to_json(cfg);
  for (auto it = fields.begin(); it != fields.end(); ++it) conf[it.key()] = *it;
  conf["tokenizer"] = tokenizer;
  if (!extra.is_null()) {
    if (!extra.is_object()) throw Error(dir + ": cannot save: extra config keys must be a JSON object");
    for (auto& [k, v] : extra.items()) {
      if (conf.contains(k)) throw Error(dir + ": cannot save: extra key \"" + k + "\" would replace a format key");
      conf[k] = v;
    }
  }
  std::string text;
  try {
    text = conf.dump(2) + "\n";
  } catch (const json::exception&) {
    throw Error(dir + ": cannot save: a string in the config or vocabulary is not valid UTF-8");
  }

  // Both files are written into a temporary folder that then replaces dir (keeping
  // dir's other files): a failed save leaves the previous model whole.
  save_folder(dir, [&](const std::string& temp) {
    const fs::path d(temp);
    save_safetensors((d / "model.safetensors").string(), out, {{"format", "pt"}, {"producer", "decoderscope"}});
    save_file((d / "config.json").string(), text);
  });
}

}  // namespace ds
