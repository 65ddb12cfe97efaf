#pragma once
// Reading the tensors of safetensors files into a model's weights, shared by the model
// folders' loaders (io/model_folder.h, io/hf_model.h): each value converted to its
// destination's type as it is read, checked (no NaN, no infinity, nothing beyond
// kMaxWeightMagnitude), matrices written in tiles when asked, the file read front to
// back with a second thread reading ahead.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/weights.h"

namespace ds {

using Shape = std::vector<int64_t>;

// "[a, b]".
std::string shape_str(const Shape& s);
// Up to 8 names, quoted and shortened, then "and N more".
std::string list_names(const std::vector<std::string>& names);
// A JSON object from a file of at most 64 MB; throws ds::Error naming the file. cb, when
// given, sees the parse as nlohmann::json::parse's callback does.
nlohmann::json read_json_file(const std::string& path, const nlohmann::json::parser_callback_t& cb = nullptr);

// Where one tensor's values go: float32, or 16-bit floats of type `type`.
struct Dest {
  float* f32 = nullptr;
  uint16_t* h = nullptr;
  Precision type = Precision::F32;
  // A large matrix written in tiles (perf/gemv.h): its width and tile rows (0: row-major).
  int64_t cols = 0, pr = 0;
};
// tiles: write the matrix in tiles when its shape allows (Weights::mark_tiles's rule).
Dest dest_of(int64_t rows, int64_t cols, bool tiles, float* f32, uint16_t* h, Precision type);
Dest dest_of(WMat& m, Mat16& h, bool tiles);
Dest dest_of(Vec& v);
Dest dest_of(MatRM& m);
Dest dest_of(const Weights::TensorRef& t, bool tiles);

// Reads tensors of one file into their destinations, a chunk at a time: values are
// converted to the destination's type as they are read and checked while they are
// still in cache.
class Filler {
 public:
  explicit Filler(const SafeTensors& st) : st_(st) {}

  // All of e, in its flat order, into d. A destination in tiles is read in whole
  // groups of rows, each chunk regrouped in place while it is still in cache.
  void copy(const SafeTensors::Entry& e, Dest d);

  // e holds a row-major [rows, cols] matrix (a Conv1D weight, [in, out]). Its columns
  // are cut, in order, into parts of the given widths, and each part goes transposed
  // into its destination, a row-major [width, rows] matrix (a Linear W, [out, in]).
  void transpose(const SafeTensors::Entry& e, int64_t rows, int64_t cols,
                 const std::vector<std::pair<Dest, int64_t>>& parts);

  // Checks the values of e where they lie (a mapped file's float32 values).
  void check_in_place(const SafeTensors::Entry& e, const float* v) const { check(e, 0, v, e.numel()); }

  // Whether tensors a and b hold the same values (as float32; both numel() long).
  bool same_values(const SafeTensors::Entry& a, const SafeTensors::Entry& b);

 private:
  static constexpr int64_t kChunk = int64_t{1} << 18;  // values per read: 1 MB of float32

  void check(const SafeTensors::Entry& e, int64_t first, const float* v, int64_t n) const;
  void check(const SafeTensors::Entry& e, int64_t first, const uint16_t* v, int64_t n, Precision p) const;
  // Throws for the value at flat index i of e, which is `got` once stored as p.
  [[noreturn]] void bad_value(const SafeTensors::Entry& e, int64_t i, float got, Precision p) const;

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

// Reads in the order the tensors lie in the file, so the file streams from front to
// back whatever order the loader lists them in, with a second thread reading ahead.
void run_in_file_order(const SafeTensors& st, std::vector<ReadJob>& jobs);

// The memory destinations of n values each span (not yet touched when they are
// large matrices from Weights::zeros, a fresh mapping).
std::vector<std::pair<void*, size_t>> fresh_memory(const std::vector<Dest>& ds, int64_t n_each);

// The tensor `name` of st, which must have this shape; throws ds::Error otherwise.
const SafeTensors::Entry& need_tensor(const SafeTensors& st, const std::string& name, const Shape& shape);

}  // namespace ds
