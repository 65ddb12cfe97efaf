#pragma once
// safetensors files (Hugging Face's tensor container).
//
// Layout: an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON
// (an object; optional "__metadata__": string -> string; every other key names a
// tensor: {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}),
// then the data section. Offsets are relative to the start of the data section;
// tensors are little-endian, C (row-major) order.
//
// SafeTensors::open maps the file and checks all of it before anything is read: the
// header length against the file size (and a 100 MB cap), the JSON, every entry's
// types, its byte count against dtype size times the shape's product (in checked
// arithmetic), each range against the data section and the ranges against each
// other (no overlaps). Any problem throws ds::Error naming the file, the tensor and
// the byte offsets involved.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ds {

class SafeTensors {
 public:
  struct Entry {
    std::string name;
    std::string dtype;           // "F32", "F16", "BF16", "I64", ...
    std::vector<int64_t> shape;  // [] for a scalar
    uint64_t begin = 0, end = 0; // byte range, relative to the data section
    int64_t numel() const;       // product of shape (checked when opened)
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

  // Copies e's numel() values into out as float32, widening F16 and BF16 exactly
  // (subnormals, infinities and NaN included). Other dtypes throw
  // "unsupported dtype X for tensor NAME". With release_as_read, the pages already
  // copied are given back to the kernel as the copy goes (see release), so at most
  // a few MB of the file are resident at a time.
  void read_f32(const Entry& e, float* out, bool release_as_read = false) const;
  // madvise(MADV_DONTNEED) on the pages of e: the mapping stays valid (pages are
  // read again from the file if touched) but stops counting towards resident memory.
  void release(const Entry& e) const;

 private:
  SafeTensors() = default;
  void unmap();
  void release_bytes(uint64_t begin, uint64_t end) const;  // absolute file offsets

  std::string path_;
  const unsigned char* map_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_start_ = 0;  // 8 + N
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype, or 0 when the name is not a known
// whole-byte dtype.
int dtype_size(const std::string& dtype);

// Exact conversions between float32 and the 16-bit formats. Narrowing rounds to
// nearest, ties to even; overflow gives infinity; NaN stays a (quiet) NaN.
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);

struct SafeTensorOut {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) values
  std::string dtype = "F32";    // or "F16" / "BF16": narrowed with round-to-nearest-even
};

// Writes a safetensors file: tensors in the given order, contiguous, the header
// padded with spaces to a multiple of 8 bytes. Throws ds::Error on a duplicate or
// reserved name, a bad dtype or a write failure.
void save_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace ds
