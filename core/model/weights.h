#pragma once
// Parameter tensors of a model. Linear layers store W as [out, in] row-major, so
// y = W x + b; this is also llama2.c's layout.
#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace ds {

using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;

struct Linear {
  MatRM W;  // [out, in]
  Vec b;    // [out], empty when the layer has no bias
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

  // Encoder (encoder-decoder models). Its token embedding is enc_tok_embed when
  // present, else shared with tok_embed.
  MatRM enc_tok_embed;  // [vocab, d_model] or empty
  MatRM enc_pos_embed;  // [max_src, d_model] learned positions only
  std::vector<Block> enc_blocks;
  Norm enc_ln_final;

  // Allocates every tensor at its shape for cfg, filled with zeros.
  static Weights zeros(const Config& cfg);
  // Deterministic random init (normal, std scale) for tests and benchmarks;
  // norm gains start at 1 plus noise so that every parameter matters.
  static Weights random(const Config& cfg, uint64_t seed, float scale = 0.08f);

  const MatRM& head() const { return lm_head.size() ? lm_head : tok_embed; }
  const MatRM& enc_embed() const { return enc_tok_embed.size() ? enc_tok_embed : tok_embed; }

  // Every non-empty parameter tensor with a stable name, e.g. "blocks.0.attn.q.W"
  // (used by checks, loaders, training and tests).
  struct TensorRef {
    std::string name;
    float* data;
    int64_t rows, cols;  // a vector has cols == 1
  };
  std::vector<TensorRef> tensors();
  int64_t parameter_count() const;
  // Throws ds::Error naming the first tensor that holds a NaN or infinity.
  void check_finite() const;
};

}  // namespace ds
