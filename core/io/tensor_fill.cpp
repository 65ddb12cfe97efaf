#include "io/tensor_fill.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "perf/gemv.h"
#include "perf/transpose.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ds {

namespace {

constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;

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

}  // namespace

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

json read_json_file(const std::string& path, const json::parser_callback_t& cb) {
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
    j = json::parse(text, cb);
  } catch (const json::exception& e) {
    std::string what = shorten_json_error(e.what());
    for (char& c : what)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
    throw Error(path + ": not valid JSON: " + what);
  }
  if (!j.is_object()) throw Error(path + ": holds JSON " + std::string(j.type_name()) + ", not an object");
  return j;
}

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

void Filler::copy(const SafeTensors::Entry& e, Dest d) {
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

void Filler::transpose(const SafeTensors::Entry& e, int64_t rows, int64_t cols,
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

bool Filler::same_values(const SafeTensors::Entry& a, const SafeTensors::Entry& b) {
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

void Filler::check(const SafeTensors::Entry& e, int64_t first, const float* v, int64_t n) const {
  if (weights_in_range(v, n)) return;
  for (int64_t i = 0; i < n; ++i)
    if (!weight_in_range(v[i])) bad_value(e, first + i, v[i], Precision::F32);
}

void Filler::check(const SafeTensors::Entry& e, int64_t first, const uint16_t* v, int64_t n, Precision p) const {
  if (weights_in_range(v, n, p)) return;
  for (int64_t i = 0; i < n; ++i)
    if (!weight_in_range(v[i], p)) bad_value(e, first + i, widen(v[i], p), p);
}

void Filler::bad_value(const SafeTensors::Entry& e, int64_t i, float got, Precision p) const {
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
  throw Error(st_.path() + ": tensor " + e.name + " holds " + (std::isnan(file_value) ? "a NaN" : "an infinite value") +
              " at flat index " + std::to_string(i));
}

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

}  // namespace ds
