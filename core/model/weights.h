#pragma once
// Parameter tensors of a model. Linear layers store W as [out, in] row-major, so
// y = W x + b; this is also llama2.c's layout.
#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "perf/gemv.h"
#include "perf/mapped_file.h"

namespace ds {

// The largest weight magnitude a loader accepts. Trained models stay far below it:
// GPT-2's largest weights are about 30 in magnitude, and the outliers reported in
// large language models stay within a few thousand. Far above it the engine breaks
// without a NaN in sight: LayerNorm's variance of d_model values of size x overflows
// float32 once x^2 * d_model > 3.4e38, at x ~ 2e17 for d_model 10,000 (and logits
// made of products of two such weights overflow sooner), leaving all-zero logits that
// sample uniform-random ids. 1e10 keeps squares (1e20) times any width (1e5) at
// 1e25, 13 orders of magnitude below the overflow, and flags corrupted files (such
// as random bytes read as float32, up to 3.4e38) as such.
constexpr float kMaxWeightMagnitude = 1e10f;

// Whether a weight is finite and at most kMaxWeightMagnitude in magnitude: a test of
// the bits (NaN and infinity compare above the bound), branch-free over an array so
// that loaders can run it on every chunk they read while it is still in cache.
// bfloat16 is the top half of a float32; float16 stays below 65504, so only its
// infinities and NaNs (all exponent bits set) are out of range.
inline bool weight_in_range(float v) {
  return (std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu) <= std::bit_cast<uint32_t>(kMaxWeightMagnitude);
}
inline bool weight_in_range(uint16_t v, Precision p) {
  if (p == Precision::BF16) return (uint32_t{v} << 16 & 0x7FFFFFFFu) <= std::bit_cast<uint32_t>(kMaxWeightMagnitude);
  return (~v & 0x7C00) != 0;
}
bool weights_in_range(const float* v, int64_t n);
bool weights_in_range(const uint16_t* v, int64_t n, Precision p);

using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;

// Storage shared by the large weight matrices: one block of memory (see
// perf/memory.h) that stays alive while any matrix placed in it does.
using Keep = std::shared_ptr<void>;

// A float32 [rows, cols] row-major weight matrix. It is an Eigen::Map, so it takes
// part in Eigen expressions and element access like a MatRM, but its values can
// live in a block shared with the model's other matrices (Weights places them there
// in the order a token reads them, in huge pages), or in storage of its own.
// Copies are deep and own their storage; moves keep the placement. Assigning a value
// of the same shape writes in place, any other shape gets storage of its own.
class WMat : public Eigen::Map<MatRM> {
  using Base = Eigen::Map<MatRM>;

 public:
  WMat() : Base(nullptr, 0, 0) {}
  WMat(const WMat& o) : Base(nullptr, 0, 0) {
    assign(o);
    tiles_ = o.tiles_;
  }
  WMat(WMat&& o) noexcept : Base(o.data(), o.rows(), o.cols()), keep_(std::move(o.keep_)), tiles_(o.tiles_) {
    o.place(nullptr, 0, 0, {});
  }
  template <class D>
  WMat(const Eigen::DenseBase<D>& e) : Base(nullptr, 0, 0) {  // NOLINT: converts like MatRM
    assign(e);
  }
  WMat& operator=(const WMat& o) {
    if (this != &o) {
      assign(o);
      tiles_ = o.tiles_;
    }
    return *this;
  }
  WMat& operator=(WMat&& o) noexcept {
    if (this != &o) {
      const bool tiles = o.tiles_;
      place(o.data(), o.rows(), o.cols(), std::move(o.keep_));
      tiles_ = tiles;
      o.place(nullptr, 0, 0, {});
    }
    return *this;
  }
  template <class D>
  WMat& operator=(const Eigen::DenseBase<D>& e) {
    assign(e);
    return *this;
  }
  // New shape; the values are unspecified unless the size is unchanged.
  void resize(Index r, Index c);
  // Views [p, p + r*c) of a block that `keep` holds alive (row-major).
  void place(float* p, Index r, Index c, Keep keep);
  // Whether the values are stored in tiles (perf/gemv.h) rather than row-major: then
  // element access and Eigen expressions on the matrix do not see it as a matrix;
  // read it through view() (MatView::row, gemv_rows) or convert it back first.
  bool tiles() const { return tiles_; }
  void set_tiles(bool on) { tiles_ = on; }

 private:
  template <class D>
  void assign(const Eigen::DenseBase<D>& e) {
    const MatRM v = e;  // evaluated first: e may read this matrix
    resize(v.rows(), v.cols());
    if (v.size()) std::copy_n(v.data(), v.size(), data());
    tiles_ = false;
  }
  Keep keep_;
  bool tiles_ = false;
};

// 16-bit values of a Mat16, in a shared block or storage of their own.
class Buf16 {
 public:
  uint16_t* data() { return p_; }
  const uint16_t* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  uint16_t& operator[](size_t i) { return p_[i]; }
  uint16_t operator[](size_t i) const { return p_[i]; }
  const uint16_t* begin() const { return p_; }
  const uint16_t* end() const { return p_ + n_; }
  void place(uint16_t* p, size_t n, Keep keep) {
    p_ = p;
    n_ = n;
    keep_ = std::move(keep);
  }
  Buf16() = default;
  Buf16(const Buf16& o);
  Buf16& operator=(const Buf16& o);
  Buf16(Buf16&& o) noexcept { *this = std::move(o); }
  Buf16& operator=(Buf16&& o) noexcept {
    if (this != &o) {
      place(o.p_, o.n_, std::move(o.keep_));
      o.place(nullptr, 0, {});
    }
    return *this;
  }

 private:
  uint16_t* p_ = nullptr;
  size_t n_ = 0;
  Keep keep_;
};

// A [rows, cols] row-major matrix kept as 16-bit floats (bfloat16 or float16) to
// halve the bytes a token reads; the engine widens values as it multiplies.
struct Mat16 {
  Precision type = Precision::BF16;
  int64_t rows = 0, cols = 0;
  Buf16 data;
  bool tiles = false;  // stored in tiles (perf/gemv.h) rather than row-major
  bool empty() const { return data.empty(); }
  int64_t size() const { return rows * cols; }
  void row(int64_t r, float* out) const;  // widens one row
};

// A read-only view of a weight matrix in whichever storage it has.
inline MatView view(const WMat& m, const Mat16& h) {
  if (!h.empty()) return {h.data.data(), h.type, h.rows, h.cols, h.tiles ? tile_rows(h.rows) : 0};
  return {m.data(), Precision::F32, m.rows(), m.cols(), m.tiles() ? tile_rows(m.rows()) : 0};
}

// A matrix is in W (float32) or, after Weights::narrow, in W16; never both.
struct Linear {
  WMat W;     // [out, in]
  Vec b;      // [out], empty when the layer has no bias
  Mat16 W16;  // [out, in] when stored as 16-bit floats
  MatView view() const { return ds::view(W, W16); }
};

struct Norm {
  Vec g;  // [d]
  Vec b;  // [d], empty for RMSNorm or bias-free LayerNorm
};

struct Attention {
  Norm q_norm, k_norm;  // [d_head] gains, qk_norm models only
  Linear q;             // [n_heads*d_head, d_model]
  Linear k;             // [n_kv_heads*d_head, d_model]
  Linear v;             // [n_kv_heads*d_head, d_model]
  Linear o;             // [d_model, n_heads*d_head]
};

struct FeedForward {
  Linear up;    // [d_ff, d_model]   (llama2.c w3 for SwiGLU, GPT-2 c_fc)
  Linear gate;  // [d_ff, d_model]   SwiGLU only (llama2.c w1)
  Linear down;  // [d_model, d_ff]   (llama2.c w2, GPT-2 c_proj)
};

// Pre-norm: x += attn(ln1(x)); [x += cross(ln2(x))]; x += ffn(ln3(x)).
// Post-norm: x = ln1(x + attn(x)); [x = ln2(x + cross(x))]; x = ln3(x + ffn(x)).
struct Block {
  Norm ln1, ln2, ln3;        // ln2 only in decoder blocks of encoder-decoder models
  Norm post_attn, post_ffn;  // sandwich_norm models only: on each sub-layer's output
  Attention attn;
  Attention cross;  // decoder blocks of encoder-decoder models only
  FeedForward ffn;
};

struct Weights {
  WMat tok_embed;   // [vocab, d_model] decoder token embedding
  MatRM pos_embed;  // [max_seq, d_model] learned positions only
  std::vector<Block> blocks;
  Norm ln_final;
  WMat lm_head;  // [vocab, d_model]; empty when tied to tok_embed
  // 16-bit storage of the embedding and head (after narrow): these replace the
  // float32 matrices above, which are then empty.
  Mat16 tok_embed16, lm_head16, enc_tok_embed16;

  // Encoder (encoder-decoder models). Its token embedding is enc_tok_embed when
  // present, else shared with tok_embed.
  WMat enc_tok_embed;   // [vocab, d_model] or empty
  MatRM enc_pos_embed;  // [max_src, d_model] learned positions only
  std::vector<Block> enc_blocks;
  Norm enc_ln_final;

  // The block the large matrices live in (Weights::zeros, narrow()), which Model
  // advises for huge pages once the weights are written (perf/memory.h).
  Keep large_block;
  // The model file the large matrices view in place (a float32 llama2.c checkpoint,
  // io/llama2c.h), or null when they hold their own storage. The engine checks after
  // each forward pass that the file has not changed under them (perf/mapped_file.h).
  std::shared_ptr<const MappedFile> mapped;

  // Allocates every tensor at its shape for cfg, filled with zeros. The large
  // matrices (linear layers, token embeddings, head) are placed in one block in the
  // order a token reads them (see perf/memory.h); the block is a fresh mapping that
  // reads as zeros and is faulted in by its first write, so a loader pays for no
  // zeroing. With a 16-bit precision those matrices are allocated as Mat16 instead,
  // so a loader can fill them directly. Norm gains are 1, biases 0.
  // check_memory (the loaders): refuses, with a message that says how much the weights
  // need and suggests bfloat16, when the large matrices need more than the memory the
  // system has available (weights_memory_shortfall), instead of mapping a block the
  // kernel would fail to give once the loader writes into it.
  static Weights zeros(const Config& cfg, Precision p = Precision::F32, bool check_memory = false);
  // Moves the float32 large matrices found in `where` (by their current data) to the
  // places it gives inside the mapped file, row-major; the others stay as they are.
  // The file becomes `mapped` and the large block (its storage until then, given back
  // when nothing else holds it).
  void use_mapped_file(const std::shared_ptr<const MappedFile>& file, const std::map<const float*, float*>& where);
  // Allocates one large matrix in a block of its own: m at float32, else h at p.
  static void allocate_matrix(Precision p, WMat& m, Mat16& h, int64_t rows, int64_t cols);

 public:
  // Deterministic random init (normal, std scale) for tests and benchmarks;
  // norm gains start at 1 plus noise so that every parameter matters.
  static Weights random(const Config& cfg, uint64_t seed, float scale = 0.08f);

  // Float32 views (valid only while precision() is F32).
  const WMat& head() const { return lm_head.size() ? lm_head : tok_embed; }
  const WMat& enc_embed() const { return enc_tok_embed.size() ? enc_tok_embed : tok_embed; }
  // Views in any precision.
  MatView embed_view() const { return view(tok_embed, tok_embed16); }
  MatView head_view() const { return lm_head.size() || !lm_head16.empty() ? view(lm_head, lm_head16) : embed_view(); }
  MatView enc_embed_view() const {
    return enc_tok_embed.size() || !enc_tok_embed16.empty() ? view(enc_tok_embed, enc_tok_embed16) : embed_view();
  }

  // The storage of the large matrices: F32, or the 16-bit type after narrow().
  Precision precision() const { return tok_embed16.empty() ? Precision::F32 : tok_embed16.type; }
  // Converts every linear layer's W, the token embeddings and the head to p (BF16
  // or F16) into a new block in reading order, then frees the float32 matrices (at
  // the peak both copies are held). Norms, biases and
  // position tables stay float32. p == F32 with float32 weights does nothing;
  // narrowing 16-bit weights to another type throws.
  void narrow(Precision p);
  // Bytes of every parameter in its storage type.
  int64_t bytes() const;
  // Stores every large matrix whose shape allows it (tiles_fit) in tiles, for
  // decoding (perf/gemv.h), in place; to_rows() converts back. Loaded models are kept
  // in tiles; Eigen code and element access (training, tests' references) need rows.
  void to_tiles();
  void to_rows();
  // For loaders that wrote the values of every large matrix whose shape allows it in
  // tiles already: marks them so, converting nothing.
  void mark_tiles();
  bool in_tiles();  // whether any matrix is in tiles

  // Every non-empty parameter tensor with a stable name, e.g. "blocks.0.attn.q.W"
  // (used by checks, loaders, training and tests).
  struct TensorRef {
    std::string name;
    float* data;                 // float32 storage, or null when the tensor is 16-bit
    int64_t rows, cols;          // a vector has cols == 1
    uint16_t* data16 = nullptr;  // 16-bit storage (type)
    Precision type = Precision::F32;
    bool matrix = false;  // one of the large matrices (linear layers, embeddings, head)
  };
  std::vector<TensorRef> tensors();
  int64_t parameter_count() const;
  // Throws ds::Error naming the first tensor that holds a NaN, an infinity or a value
  // beyond kMaxWeightMagnitude, and its flat index.
  void check_finite() const;
};

// Why weights of `need` bytes stored as p cannot be loaded with `available` bytes of
// memory free (0: unknown, never refused), or "" when they fit.
std::string weights_memory_shortfall(size_t need, size_t available, Precision p);

}  // namespace ds
