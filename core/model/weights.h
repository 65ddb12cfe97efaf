#pragma once
// Parameter tensors of a model. Linear layers store W as [out, in] row-major, so
// y = W x + b; this is also llama2.c's layout.
#include <Eigen/Core>
#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "model/config.h"
#include "perf/gemv.h"

namespace ds {

using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;

// An allocator that leaves new elements uninitialised (resize does not write them),
// so large buffers can be advised before their first touch.
template <class T>
struct UninitAlloc : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAlloc<U>;
  };
  UninitAlloc() = default;
  template <class U>
  UninitAlloc(const UninitAlloc<U>&) {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

// A [rows, cols] row-major matrix kept as 16-bit floats (bfloat16 or float16) to
// halve the bytes a token reads; the engine widens values as it multiplies.
struct Mat16 {
  Precision type = Precision::BF16;
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t, UninitAlloc<uint16_t>> data;
  bool empty() const { return data.empty(); }
  int64_t size() const { return rows * cols; }
  void resize(Precision p, int64_t r, int64_t c);
  void row(int64_t r, float* out) const;  // widens one row
};

// A read-only view of a weight matrix in whichever storage it has.
struct MatView {
  const void* data = nullptr;
  Precision type = Precision::F32;
  int64_t rows = 0, cols = 0;
  bool empty() const { return rows * cols == 0; }
  void row(int64_t r, float* out) const;
};
inline MatView view(const MatRM& m, const Mat16& h) {
  if (!h.empty()) return {h.data.data(), h.type, h.rows, h.cols};
  return {m.data(), Precision::F32, m.rows(), m.cols()};
}

// A matrix is in W (float32) or, after Weights::narrow, in W16; never both.
struct Linear {
  MatRM W;    // [out, in]
  Vec b;      // [out], empty when the layer has no bias
  Mat16 W16;  // [out, in] when stored as 16-bit floats
  MatView view() const { return ds::view(W, W16); }
};

struct Norm {
  Vec g;  // [d]
  Vec b;  // [d], empty for RMSNorm or bias-free LayerNorm
};

struct Attention {
  Linear q;  // [n_heads*d_head, d_model]
  Linear k;  // [n_kv_heads*d_head, d_model]
  Linear v;  // [n_kv_heads*d_head, d_model]
  Linear o;  // [d_model, n_heads*d_head]
};

struct FeedForward {
  Linear up;    // [d_ff, d_model]   (llama2.c w3 for SwiGLU, GPT-2 c_fc)
  Linear gate;  // [d_ff, d_model]   SwiGLU only (llama2.c w1)
  Linear down;  // [d_model, d_ff]   (llama2.c w2, GPT-2 c_proj)
};

// Pre-norm: x += attn(ln1(x)); [x += cross(ln2(x))]; x += ffn(ln3(x)).
// Post-norm: x = ln1(x + attn(x)); [x = ln2(x + cross(x))]; x = ln3(x + ffn(x)).
struct Block {
  Norm ln1, ln2, ln3;  // ln2 only in decoder blocks of encoder-decoder models
  Attention attn;
  Attention cross;  // decoder blocks of encoder-decoder models only
  FeedForward ffn;
};

struct Weights {
  MatRM tok_embed;  // [vocab, d_model] decoder token embedding
  MatRM pos_embed;  // [max_seq, d_model] learned positions only
  std::vector<Block> blocks;
  Norm ln_final;
  MatRM lm_head;  // [vocab, d_model]; empty when tied to tok_embed
  // 16-bit storage of the embedding and head (after narrow): these replace the
  // float32 matrices above, which are then empty.
  Mat16 tok_embed16, lm_head16, enc_tok_embed16;

  // Encoder (encoder-decoder models). Its token embedding is enc_tok_embed when
  // present, else shared with tok_embed.
  MatRM enc_tok_embed;  // [vocab, d_model] or empty
  MatRM enc_pos_embed;  // [max_src, d_model] learned positions only
  std::vector<Block> enc_blocks;
  Norm enc_ln_final;

  // Allocates every tensor at its shape for cfg, filled with zeros. With a 16-bit
  // precision the matrices narrow() would convert (linear layers, token embeddings,
  // head) are allocated as Mat16 instead, so a loader can fill them directly.
  static Weights zeros(const Config& cfg, Precision p = Precision::F32);
  // As zeros(), but the large matrices are allocated (and advised for huge pages)
  // without being written, so their values are unspecified: a loader's first write
  // faults them in, and no time goes into zeros that are overwritten anyway. Norm
  // gains are 1 and biases 0, as in zeros().
  static Weights uninitialized(const Config& cfg, Precision p = Precision::F32);
  // Allocates one large matrix the same way: m at float32, else h at p.
  static void allocate_matrix(Precision p, MatRM& m, Mat16& h, int64_t rows, int64_t cols);

 private:
  static Weights build(const Config& cfg, Precision p, bool zero);

 public:
  // Deterministic random init (normal, std scale) for tests and benchmarks;
  // norm gains start at 1 plus noise so that every parameter matters.
  static Weights random(const Config& cfg, uint64_t seed, float scale = 0.08f);

  // Float32 views (valid only while precision() is F32).
  const MatRM& head() const { return lm_head.size() ? lm_head : tok_embed; }
  const MatRM& enc_embed() const { return enc_tok_embed.size() ? enc_tok_embed : tok_embed; }
  // Views in any precision.
  MatView embed_view() const { return view(tok_embed, tok_embed16); }
  MatView head_view() const {
    return lm_head.size() || !lm_head16.empty() ? view(lm_head, lm_head16) : embed_view();
  }
  MatView enc_embed_view() const {
    return enc_tok_embed.size() || !enc_tok_embed16.empty() ? view(enc_tok_embed, enc_tok_embed16) : embed_view();
  }

  // The storage of the large matrices: F32, or the 16-bit type after narrow().
  Precision precision() const { return tok_embed16.empty() ? Precision::F32 : tok_embed16.type; }
  // Converts every linear layer's W, the token embeddings and the head to p (BF16
  // or F16), one tensor at a time, freeing the float32 copies. Norms, biases and
  // position tables stay float32. p == F32 with float32 weights does nothing;
  // narrowing 16-bit weights to another type throws.
  void narrow(Precision p);
  // Bytes of every parameter in its storage type.
  int64_t bytes() const;

  // Every non-empty parameter tensor with a stable name, e.g. "blocks.0.attn.q.W"
  // (used by checks, loaders, training and tests).
  struct TensorRef {
    std::string name;
    float* data;         // float32 storage, or null when the tensor is 16-bit
    int64_t rows, cols;  // a vector has cols == 1
    uint16_t* data16 = nullptr;  // 16-bit storage (type)
    Precision type = Precision::F32;
  };
  std::vector<TensorRef> tensors();
  int64_t parameter_count() const;
  // Throws ds::Error naming the first tensor that holds a NaN or infinity.
  void check_finite() const;
};

}  // namespace ds
