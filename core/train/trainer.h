#pragma once
// Forward and hand-written backward pass of the built-in models, over one flat
// parameter vector.
//
// Supported (the layers the built-in models use; anything else is refused with a
// ds::Error): pre-norm and post-norm LayerNorm blocks (bias optional), token
// embeddings (scaled or not), learned or sinusoidal positions, multi-head attention
// with n_kv_heads == n_heads (causal decoder self-attention, bidirectional encoder
// self-attention and cross-attention, both with the <pad> key mask), GELU (exact erf)
// and ReLU feed-forward, biases optional, tied or separate output head, final norms
// optional (with either placement).
// The semantics are exactly those of core/model/config.h, so exported weights run in
// ds::Engine unchanged.
//
// The parameter vector holds the tensors in Weights::tensors() order under the same
// names, so to_weights()/from_weights() copy tensor by tensor.
#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "train/tasks.h"
#include "util/aligned.h"

namespace ds::train {

// Parameter and gradient vectors start on a cache line (util/aligned.h): Eigen's
// vectorised reductions peel a few elements until they reach alignment, so an arbitrary
// base address would change the summation order, and with it the last bits of a run.
template <class T>
using AVec = AlignedVector<T>;

struct ParamTensor {
  std::string name;
  size_t offset = 0;
  int64_t rows = 0, cols = 0;  // a vector has cols == 1
  bool decay = false;          // AdamW weight decay applies (matrices, not norms or biases)
  size_t size() const { return size_t(rows * cols); }
};

template <class T>
class Trainer {
 public:
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  static constexpr size_t npos = size_t(-1);

  // Throws ds::Error when cfg uses something this trainer does not implement.
  // separate_enc_embed: the encoder gets its own token embedding (encoder.tok_embed)
  // instead of sharing tok_embed.
  explicit Trainer(const Config& cfg, bool separate_enc_embed = false);

  const Config& config() const { return cfg_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t size() const { return theta_.size(); }
  AVec<T>& params() { return theta_; }
  const AVec<T>& params() const { return theta_; }

  // GPT-2 style: weights N(0, 0.02), residual output projections scaled by
  // 1/sqrt(2 * layers), biases 0, norm gains 1.
  void init(uint64_t seed);
  Weights to_weights() const;
  // Copies every tensor by name; throws ds::Error on a missing or misshaped tensor.
  void from_weights(const Weights& w);

  // Saved activations of one sequence (reused across calls to avoid allocations).
  struct Workspace;
  Workspace* new_workspace() const;
  static void delete_workspace(Workspace* ws);

  // Runs one sequence forward; returns the summed cross-entropy over the positions
  // whose target is >= 0 and sets *count to their number. When grad is non-null, runs
  // the backward pass too and adds grad_scale * d(sum CE)/d(theta) into grad. The
  // source may hold <pad> (cfg.pad_id) ids, which are masked as keys.
  double step(const Example& ex, Workspace& ws, T* grad, T grad_scale, int* count) const;
  // Logits [T, vocab] of every decoder position (after step-less forward).
  Mat logits(const Example& ex, Workspace& ws) const;

 private:
  struct Lin {
    size_t W = npos, b = npos;
    int out = 0, in = 0;
  };
  struct Nrm {
    size_t g = npos, b = npos;
  };
  struct Att {
    Lin q, k, v, o;
  };
  struct Blk {
    Nrm ln1, ln2, ln3;
    Att attn, cross;
    Lin up, down;
  };
  struct NormCache;
  struct AttnCache;
  struct BlockCache;

  size_t find(const std::string& name) const;
  Lin lin(const std::string& name, int out, int in) const;
  Nrm nrm(const std::string& name) const;
  Blk blk(const std::string& prefix, bool cross) const;

  void linear_fwd(const Lin& l, const Mat& X, Mat& Y) const;
  void linear_bwd(const Lin& l, const Mat& X, const Mat& dY, Mat* dX, T* g) const;
  void norm_fwd(const Nrm& n, const Mat& X, Mat& Y, NormCache& c) const;
  void norm_bwd(const Nrm& n, const NormCache& c, const Mat& dY, Mat& dX, T* g) const;
  void attn_fwd(const Att& a, const Mat& Xq, const Mat& Xkv, bool causal, const std::vector<int>* src, AttnCache& c,
                Mat& out) const;
  void attn_bwd(const Att& a, const AttnCache& c, const Mat& Xq, const Mat& Xkv, const Mat& dOut, Mat& dXq, Mat& dXkv,
                T* g) const;
  void ffn_fwd(const Blk& b, const Mat& X, BlockCache& c, Mat& out) const;
  void ffn_bwd(const Blk& b, const BlockCache& c, const Mat& X, const Mat& dOut, Mat& dX, T* g) const;
  void embed_fwd(size_t tok, size_t pos, const std::vector<int>& ids, Mat& X) const;
  void embed_bwd(size_t tok, size_t pos, const std::vector<int>& ids, const Mat& dX, T* g) const;
  template <class F>
  void sublayer_fwd(const Nrm& n, Mat& x, Mat& h, NormCache& nc, Mat& tmp, F&& f) const;
  template <class F>
  void sublayer_bwd(const Nrm& n, const NormCache& nc, Workspace& ws, Mat& dx, T* g, F&& f_bwd) const;
  void block_fwd(const Blk& b, BlockCache& c, bool decoder, const Example& ex, Workspace& ws, Mat& x) const;
  void block_bwd(const Blk& b, const BlockCache& c, bool decoder, Workspace& ws, Mat& dx, T* g) const;
  void forward(const Example& ex, Workspace& ws) const;

  Config cfg_;
  bool separate_enc_embed_ = false;
  std::vector<ParamTensor> tensors_;
  AVec<T> theta_;
  size_t tok_ = npos, pos_ = npos, head_ = npos, enc_tok_ = npos, enc_pos_ = npos;
  Nrm lnf_, enc_lnf_;
  std::vector<Blk> blocks_, enc_blocks_;
  Mat sinus_;  // [max(max_seq, max_src), d_model] sinusoidal table
};

extern template class Trainer<float>;
extern template class Trainer<double>;

}  // namespace ds::train
