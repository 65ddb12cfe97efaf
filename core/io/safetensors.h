#pragma once
// safetensors files (Hugging Face's tensor container).
//
// Layout: an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON
// (an object; optional "__metadata__": string -> string; every other key names a
// tensor: {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}),
// then the data section. Offsets are relative to the start of the data section;
// tensors are little-endian, C (row-major) order.
//
// SafeTensors::open reads the header and checks all of it before any tensor is read:
// the header length against the file size (and a 100 MB cap), the JSON, every
// entry's types, its byte count against dtype size times the shape's product (in
// checked arithmetic), each range against the data section and the ranges against
// each other (no overlaps). Any problem throws ds::Error naming the file, the tensor
// and the byte offsets involved.
//
// Tensors are read with pread() straight into the caller's memory (converting where
// the dtypes differ, through a small buffer): nothing of the file is mapped, so the
// file adds nothing to the process's resident memory, and reading in file order
// lets the kernel's read-ahead stream the file.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/precision.h"  // Precision and the 16-bit conversions

#include "perf/mapped_file.h"

namespace ds {

class SafeTensors {
 public:
  struct Entry {
    std::string name;
    std::string dtype;            // "F32", "F16", "BF16", "I64", ...
    std::vector<int64_t> shape;   // [] for a scalar
    uint64_t begin = 0, end = 0;  // byte range, relative to the data section
    int64_t numel() const;        // product of shape (checked when opened)
  };

  static SafeTensors open(const std::string& path);
  SafeTensors(SafeTensors&& o) noexcept;
  SafeTensors& operator=(SafeTensors&& o) noexcept;
  SafeTensors(const SafeTensors&) = delete;
  SafeTensors& operator=(const SafeTensors&) = delete;
  ~SafeTensors();

  const std::string& path() const { return path_; }
  // In the header's order.
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return size_; }
  // Where the data section starts in the file (Entry offsets are relative to it).
  uint64_t data_start() const { return data_start_; }
  // The whole file mapped into memory (perf/mapped_file.h), for values used in place.
  std::shared_ptr<const MappedFile> map() const;

  // Copies e's numel() values into out as float32, widening F16 and BF16 exactly
  // (subnormals, infinities and NaN included). Other dtypes throw
  // "unsupported dtype X for tensor NAME". release_as_read is accepted for older
  // callers and has no effect (see release).
  void read_f32(const Entry& e, float* out, bool release_as_read = false) const;
  // Values first .. first+count-1 of e (in flat order) into out as float32.
  void read_f32(const Entry& e, int64_t first, int64_t count, float* out) const;
  // Values first .. first+count-1 of e into out as 16-bit floats of type p (BF16 or
  // F16): the file's bits unchanged when e's dtype is p, else rounded to nearest
  // even from the float32 value (F32, or the other 16-bit type widened exactly).
  // NaN stays NaN; values beyond p's range become infinities.
  void read_16(const Entry& e, int64_t first, int64_t count, Precision p, uint16_t* out) const;
  void read_16(const Entry& e, Precision p, uint16_t* out) const { read_16(e, 0, e.numel(), p, out); }
  // Asks the kernel to start reading bytes [begin, end) of the data section (offsets
  // as in Entry) into the page cache (posix_fadvise WILLNEED), so that later reads of
  // them need not wait for the disk. The kernel reads at most about its read-ahead
  // size per request, so a long range is best asked for a megabyte or so at a time.
  // May block while the request is queued; failures are ignored.
  void prefetch(uint64_t begin, uint64_t end) const;
  // Has no effect: reads copy from the file into the caller's memory, so no page of
  // the file is held by this object. Kept for callers written for a mapped reader.
  void release(const Entry& e) const;

 private:
  SafeTensors() = default;
  void close_file();
  // Bytes [offset, offset+n) of e's data (offset relative to e.begin) into out.
  void read_bytes(const Entry& e, uint64_t offset, uint64_t n, void* out) const;
  // Checks that e's dtype can be read as floats and that [first, first+count) lies in e.
  void check_range(const Entry& e, int64_t first, int64_t count) const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t data_start_ = 0;  // 8 + N
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype, or 0 when the name is not a known
// whole-byte dtype.
int dtype_size(const std::string& dtype);

struct SafeTensorOut {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) values
  std::string dtype = "F32";    // or "F16" / "BF16": narrowed with round-to-nearest-even
  // Instead of data: product(shape) 16-bit values already in dtype ("F16" or "BF16"),
  // written unchanged.
  const uint16_t* data16 = nullptr;
};

// Writes a safetensors file: tensors in the given order, contiguous, the header
// padded with spaces to a multiple of 8 bytes. Throws ds::Error on a duplicate or
// reserved name, a bad dtype or a write failure. The file is replaced atomically
// (util/atomic_file.h): a failed save leaves the previous file as it was.
void save_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace ds
