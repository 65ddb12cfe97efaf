#pragma once
// The transformer engine: decoder-only and encoder-decoder models from one Config.
//
// A Model is immutable (config + weights) and can be shared between engines. An
// Engine owns what one generation needs: the KV cache, the encoder output and its
// cross-attention keys and values, scratch buffers and the hook points.
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/hooks.h"
#include "model/weights.h"

namespace ds {

struct Model {
  Config cfg;
  Weights w;
  Model(Config c, Weights wt);  // validates shapes, throws ds::Error naming the tensor
};

class Engine {
 public:
  explicit Engine(std::shared_ptr<const Model> model);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Config& config() const { return model_->cfg; }
  const Model& model() const { return *model_; }
  std::shared_ptr<const Model> model_ptr() const { return model_; }
  Hooks& hooks() { return hooks_; }
  // Threads used by the matrix products of this engine (1 = no threading).
  void set_threads(int n);
  int threads() const { return threads_; }

  // Encoder-decoder models: runs the encoder once over the source (bidirectional,
  // source ids equal to pad_id masked as keys) and caches every decoder layer's
  // cross-attention keys and values. Resets the decoder cache.
  void encode(std::span<const int> src);
  int src_len() const { return src_len_; }

  // Runs `tokens` at positions pos() .. pos()+n-1, appending their keys and values to
  // the KV cache, and returns the logits: [n, vocab] if all_logits, else [1, vocab]
  // for the last row. The view stays valid until the next call.
  Eigen::Map<const MatRM> forward(std::span<const int> tokens, bool all_logits = false);
  // The full-sequence forward with no cache: clears the cache and runs every token
  // in one pass (prefill). Returns [n, vocab] logits.
  MatRM forward_full(std::span<const int> tokens);

  int pos() const { return pos_; }
  // Forgets cached positions >= p (step back, fork); p <= pos().
  void truncate(int p);
  void reset() { truncate(0); }

 private:
  struct Scratch;
  void ensure_scratch(int T, int S);
  void embed(Stack st, std::span<const int> ids, int pos0, float* x);
  void attention(Stack st, int layer, const Attention& a, int T, int pos0, const float* xin, float* out, bool cross);
  void ffn(Stack st, int layer, const FeedForward& f, int T, int pos0, const float* xin, float* out);
  void norm(const Norm& n, int T, const float* x, float* y) const;
  void linear(const Linear& l, int T, const float* x, float* y) const;
  // At most three layers.
  // Cache rows [0, rows) of K and V ([rows, width] each) that a decode step's
  // attention reads next: matvec_group's threads load them first (split as the
  // attention splits its keys, or all by the first thread when it does not), so the
  // attention finds them in cache instead of waiting on short reads from memory.
  struct CacheRows {
    const float* K = nullptr;
    const float* V = nullptr;
    int rows = 0, width = 0;
    bool split = false;
  };
  void linears(std::initializer_list<std::pair<const Linear*, float*>> ls, int T, const float* x,
               const CacheRows* warm = nullptr) const;
  // y = W x (+ bias), then GELU-tanh when gelu: the bias and the activation are applied
  // by whichever thread computed the rows, so they add no serial step.
  struct MatvecPart {
    MatView W;
    float* y;
    const float* bias = nullptr;
    bool gelu = false;
  };
  void matvec_group(std::span<const MatvecPart> parts, const float* x, const CacheRows* warm = nullptr) const;
  bool decode_split(int S) const;
  void matvec(const MatView& W, const float* x, float* y) const;
  void matmul(const MatView& W, int T, const float* x, float* y) const;

  std::shared_ptr<const Model> model_;
  Hooks hooks_;
  int threads_ = 1;
  int pos_ = 0;
  int src_len_ = 0;
  std::vector<int> src_ids_;
  // KV cache: per decoder layer [max_seq, kv_dim] for keys and values.
  std::shared_ptr<void> kv_block_;
  std::vector<float*> k_cache_, v_cache_;
  // Cross-attention keys/values per decoder layer [src_len, kv_dim].
  std::vector<MatRM> ck_, cv_;
  std::unique_ptr<Scratch> s_;
  struct RowShare;
  std::unique_ptr<RowShare[]> shares_;  // one per thread (matvec_group)
  mutable bool flip_ = false;           // matvec_group's share order alternates
};

}  // namespace ds
