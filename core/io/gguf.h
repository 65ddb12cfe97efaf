#pragma once
// GGUF files (llama.cpp's model container), versions 2 and 3.
//
// Layout (little-endian): "GGUF", uint32 version, uint64 tensor count, uint64 metadata
// count; the metadata, each a key (uint64 length + UTF-8 bytes), a uint32 value type
// and the value (integers and floats of 1 to 8 bytes, bool as one byte, string as
// uint64 length + bytes, array as uint32 element type + uint64 count + elements); the
// tensor infos, each a name, uint32 n_dims, n_dims uint64 dimensions (the first is the
// one that varies fastest: [cols, rows] for a matrix), uint32 ggml type and uint64
// offset relative to the data section; then padding to general.alignment (32 unless the
// key says otherwise) and the data section.
//
// GgufFile::open maps the file and checks all of it before anything is used: every
// count, string length and dimension against the bytes that remain (nothing is
// allocated from a declared count before the bytes it needs are known to be there),
// value types, array nesting, duplicate keys and names, the alignment, each tensor's
// type and byte size (checked arithmetic), its range inside the data section, aligned,
// and the ranges against each other (no overlaps). A problem throws ds::Error naming the
// file, the key or tensor, the byte offset and what is wrong.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perf/mapped_file.h"
#include "text/vocab_data.h"
#include "util/precision.h"

namespace ds {

class GgufFile {
 public:
  enum class VType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12
  };
  // A metadata value: where its bytes are in the file (checked), its type, and for an
  // array its element type and count.
  struct Value {
    VType type = VType::U8;
    VType elem = VType::U8;  // arrays only
    uint64_t count = 0;      // arrays only
    uint64_t offset = 0;     // the value's first byte (an array: its first element)
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;  // GGUF order: dims[0] varies fastest
    uint32_t ggml_type = 0;
    Precision type = Precision::F32;  // the engine's name for it (supported types only)
    uint64_t offset = 0;              // absolute, in the file
    uint64_t bytes = 0;
    int64_t numel() const;
    int64_t cols() const { return dims.empty() ? 1 : dims[0]; }
    int64_t rows() const { return numel() / (cols() ? cols() : 1); }
    std::string shape() const;  // "[512, 256]" as rows x cols for a matrix
  };

  // Maps and checks the whole file; in_place false reads it into memory instead
  // (MappedFile::copy). Throws ds::Error.
  static GgufFile open(const std::string& path, bool in_place = true);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_start() const { return data_start_; }
  uint32_t alignment() const { return alignment_; }
  const std::map<std::string, Value>& metadata() const { return meta_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;
  const std::shared_ptr<const MappedFile>& mapped() const { return map_; }
  const uint8_t* data(const Tensor& t) const { return reinterpret_cast<const uint8_t*>(map_->data()) + t.offset; }

  bool has(const std::string& key) const { return meta_.count(key) != 0; }
  // Typed reads; nullopt when the key is absent, ds::Error when it has another type.
  // Integers of any width are accepted where the value fits.
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;  // float32, float64 or an integer
  std::optional<bool> get_bool(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;  // empty when absent
  std::vector<float> get_floats(const std::string& key) const;
  std::vector<int32_t> get_ints(const std::string& key) const;
  // A value as short text, for `inspect` (arrays: their type and length).
  std::string describe(const std::string& key) const;

 private:
  std::string read_string_at(uint64_t offset) const;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t size_ = 0, data_start_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, Value> meta_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  std::shared_ptr<const MappedFile> map_;
};

// The ggml type's name ("q4_K", "iq2_xxs", ...) or "type N" for an unknown id.
std::string ggml_type_name(uint32_t ggml_type);

// The tokenizer the file's tokenizer.ggml.* keys describe (text/vocab_data.h).
VocabData gguf_vocab(const GgufFile& f);
// Opens a GGUF file (a vocabulary-only one too) and reads its tokenizer.
VocabData read_gguf_vocab(const std::string& path);
// Whether the file starts with the GGUF magic (false when it cannot be read).
bool is_gguf_file(const std::string& path);

}  // namespace ds
