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
#include "model/mask.h"
#include "model/weights.h"
#include "perf/memory.h"
#include "perf/parallel.h"

namespace ds {

// A decoder KV cache apart from an engine: every decoder layer's keys and values of
// positions [0, pos). Engine::swap_cache exchanges it with the engine's own, so one
// engine can carry several continuations of the same prefix (beam search) without
// recomputing the prefix or copying it at every step.
struct KvCache {
  std::shared_ptr<void> block;
  std::vector<float*> k, v;  // per decoder layer [max_seq, kv_dim]
  int pos = 0;
  int ready = 0;  // positions whose pages are mapped (Engine::populate_kv)
};

struct Model {
  Config cfg;
  Weights w;
  // Moves w.large_block into huge pages in the background, once the weights are
  // written, or reads a mapped file used in place into the page cache's 2 MB folios
  // (perf/memory.h); null for weights of neither kind.
  std::shared_ptr<HugePageJob> huge_pages;
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
  // The threads of the products, idle between forward calls: the caller's own thread
  // may run other work on them (one caller at a time, as with the engine itself).
  ThreadTeam& thread_team() { return team_.pool(); }
  // The products with quantized weights (perf/quant_fast.h): Exact (the default, a
  // float32 engine on the decoded weights) or Fast (activations rounded to 8 bits per
  // block, integer dot products: what llama.cpp computes on the quantized file).
  // Weights that are not quantized multiply float32 activations either way.
  void set_products(Products p) { team_.set_products(p); }
  Products products() const { return team_.products(); }

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
  // in one pass (prefill). Returns [n, vocab] logits, or with all_logits false only
  // the last row's [1, vocab] (what a generation without the KV cache samples from).
  MatRM forward_full(std::span<const int> tokens, bool all_logits = true);

  // Every matrix-vector product of one decode step, with its threads, grouping and
  // order, on a constant input, and nothing else (no norms, attention, cache or
  // hooks): what the products alone cost, for the bench to set against whole steps.
  // The input is kDecodeProductsInput in every element; returns the last product's
  // output, the head's [vocab] logits of that input. buf is scratch the caller keeps
  // between calls (the result points into it).
  static constexpr float kDecodeProductsInput = 0.01f;
  std::span<const float> decode_products(std::vector<float>& buf) const;

  int pos() const { return pos_; }
  // Forgets cached positions >= p (step back, fork); p <= pos().
  void truncate(int p);
  void reset() { truncate(0); }

  // An empty cache of this model's shape ([max_seq, kv_dim] keys and values a layer).
  KvCache make_cache() const;
  // Exchanges the engine's cache (and its position) with c; the encoder's output and
  // the cross-attention keys and values stay (they depend on the source only).
  void swap_cache(KvCache& c);
  // Copies the rows [0, from.pos) of every layer, and the position, into `to` (both
  // made by make_cache of an engine of this model).
  void copy_cache(const KvCache& from, KvCache& to) const;

 private:
  struct Scratch;
  // Where an attention's keys and values are ([S, kv_dim] each) and which of them a
  // query may read (model/mask.h).
  struct Keys {
    const float* K = nullptr;
    const float* V = nullptr;
    int S = 0;
    AttnKind kind = AttnKind::Causal;
    int window = 0;  // sliding-window layers: how many positions a query reads (model/mask.h)
    // The first key a causal query at query_pos reads (0, or the start of its window).
    int first(int query_pos) const { return window > 0 && query_pos >= window ? query_pos - window + 1 : 0; }
  };
  // The hook points of a self- or cross-attention (k and v: AttnK, AttnV or, published
  // by encode(), CrossK, CrossV).
  struct AttnPoints {
    Point scores, mask, pattern, z, q, out;
  };
  void ensure_scratch(int T, int S);

  // The forward pass, in the order of the math.
  void embed(Stack st, std::span<const int> ids, int pos0, float* x);
  void block(Stack st, int layer, const Block& b, int T, int pos0, float* x);
  template <class F>
  void sublayer(Stack st, int layer, const Norm& n, const Norm* post, Point normed, Point after, int T, int pos0,
                float* x, F&& f);
  void attention(Stack st, int layer, const Attention& a, int T, int pos0, const float* xin, float* out, bool cross);
  void ffn(Stack st, int layer, const FeedForward& f, int T, int pos0, const float* xin, float* out);
  void norm(const Norm& n, int T, const float* x, float* y) const;
  void linear(const Linear& l, int T, const float* x, float* y) const;

  // The steps of attention.
  Keys project_qkv(Stack st, int layer, const Attention& a, int T, int pos0, const float* xin, bool cross);
  void rotate(int layer, int T, int pos0, float* q, float* k) const;
  void qk_norm(const Attention& a, int T, float* q, float* k) const;
  bool may_read(const Keys& keys, int query_pos, int key) const;
  void publish_mask(Stack st, int layer, Point p, int T, int pos0, const Keys& keys);
  void attend_one_row(Stack st, int layer, const AttnPoints& pts, int pos0, const Keys& keys);
  void attend_rows(Stack st, int layer, const AttnPoints& pts, int T, int pos0, const Keys& keys);
  void head_scores(int h, int T, int pos0, const Keys& keys);
  void head_softmax(int h, int T, int pos0, const Keys& keys);
  void head_mix(int h, int T, int pos0, const Keys& keys);

  // Products: linear layers sharing an input (at most three), at T == 1 in one group.
  void linears(std::initializer_list<std::pair<const Linear*, float*>> ls, int T, const float* x,
               const CacheRows* warm = nullptr) const;
  bool decode_split(int S) const;
  void matvec(const MatView& W, const float* x, float* y) const;
  void matmul(const MatView& W, int T, const float* x, float* y) const;
  void matmul_gemm(const MatView& W, int T, const float* x, float* y) const;

  std::shared_ptr<const Model> model_;
  Hooks hooks_;
  int threads_ = 1;
  int pos_ = 0;
  int src_len_ = 0;
  std::vector<int> src_ids_;
  // KV cache: per decoder layer [max_seq, kv_dim] for keys and values.
  std::shared_ptr<void> kv_block_;
  std::vector<float*> k_cache_, v_cache_;
  int kv_ready_ = 0;  // positions of the cache whose pages are mapped (populate_kv)
  void populate_kv(int upto);
  // Cross-attention keys/values per decoder layer [src_len, kv_dim].
  std::vector<MatRM> ck_, cv_;
  std::unique_ptr<Scratch> s_;
  mutable MatvecTeam team_;  // the threads of the matrix-vector products
};

}  // namespace ds
