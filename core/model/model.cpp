#include "model/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "perf/gemm.h"
#include "perf/memory.h"
#include "perf/vmath.h"
#include "util/aligned.h"
#include "util/error.h"

namespace ds {

using CMap = Eigen::Map<const MatRM>;
using MMap = Eigen::Map<MatRM>;
using VMap = Eigen::Map<Eigen::VectorXf>;
using CVMap = Eigen::Map<const Eigen::VectorXf>;

namespace {

void check_shape(const std::string& name, const MatView& m, int64_t r, int64_t c) {
  if (m.rows != r || m.cols != c)
    throw Error("weight " + name + " has shape [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                "], expected [" + std::to_string(r) + ", " + std::to_string(c) + "]");
}
void check_shape(const std::string& name, const MatRM& m, int64_t r, int64_t c) {
  check_shape(name, MatView{m.data(), Precision::F32, m.rows(), m.cols()}, r, c);
}
void check_vec(const std::string& name, const Vec& v, int64_t n, bool optional) {
  if (optional && v.size() == 0) return;
  if (v.size() != n)
    throw Error("weight " + name + " has " + std::to_string(v.size()) + " entries, expected " + std::to_string(n));
}
void check_linear(const std::string& name, const Linear& l, int out, int in) {
  check_shape(name + ".W", l.view(), out, in);
  check_vec(name + ".b", l.b, out, true);
}
void check_norm(const std::string& name, const Norm& n, int d) {
  check_vec(name + ".g", n.g, d, false);
  check_vec(name + ".b", n.b, d, true);
}
bool cross_of(const std::string& name) { return name.find("cross_attn") != std::string::npos; }
void check_block(const Config& c, const std::string& p, const Block& b, bool cross) {
  check_norm(p + ".ln1", b.ln1, c.d_model);
  check_norm(p + ".ln3", b.ln3, c.d_model);
  if (c.sandwich_norm) {
    check_norm(p + ".post_attn", b.post_attn, c.d_model);
    check_norm(p + ".post_ffn", b.post_ffn, c.d_model);
  }
  auto att = [&](const std::string& n, const Attention& a) {
    if (c.qk_norm && !cross_of(n)) {
      check_norm(n + ".q_norm", a.q_norm, c.d_head);
      check_norm(n + ".k_norm", a.k_norm, c.d_head);
    }
    check_linear(n + ".q", a.q, c.q_dim(), c.d_model);
    check_linear(n + ".k", a.k, c.kv_dim(), c.d_model);
    check_linear(n + ".v", a.v, c.kv_dim(), c.d_model);
    check_linear(n + ".o", a.o, c.d_model, c.q_dim());
  };
  att(p + ".attn", b.attn);
  if (cross) {
    check_norm(p + ".ln2", b.ln2, c.d_model);
    att(p + ".cross_attn", b.cross);
  }
  check_linear(p + ".mlp.up", b.ffn.up, c.d_ff, c.d_model);
  if (c.gated()) check_linear(p + ".mlp.gate", b.ffn.gate, c.d_ff, c.d_model);
  check_linear(p + ".mlp.down", b.ffn.down, c.d_model, c.d_ff);
}

float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

// Rotary angles' cos and sin for positions 0 .. npos-1: [npos, d_head/2] each, for
// the base theta (global layers: with the config's scaling and frequency factors).
void rope_tables(const Config& c, int npos, float theta, bool global, AlignedVector<float>& cos_t,
                 AlignedVector<float>& sin_t) {
  const int half = c.d_head / 2;
  cos_t.resize(size_t(npos) * half);
  sin_t.resize(size_t(npos) * half);
  const bool plain = !global || (c.rope_freq_factors.empty() && c.rope_scale == 1.0f);
  for (int p = 0; p < npos; ++p)
    for (int i = 0; i < half; ++i) {
      if (plain) {
        // The same float operations as llama2.c's run.c, so its outputs are reproduced.
        const float freq = 1.0f / std::pow(theta, float(2 * i) / float(c.d_head));
        const float val = float(p) * freq;
        cos_t[size_t(p) * half + i] = std::cos(val);
        sin_t[size_t(p) * half + i] = std::sin(val);
        continue;
      }
      double a = double(p) * double(c.rope_scale) / std::pow(double(theta), double(2 * i) / double(c.d_head));
      if (!c.rope_freq_factors.empty()) a /= double(c.rope_freq_factors[size_t(i)]);
      cos_t[size_t(p) * half + i] = float(std::cos(a));
      sin_t[size_t(p) * half + i] = float(std::sin(a));
    }
}

// Sinusoidal position vectors for positions 0 .. npos-1: [npos, d_model].
void sinusoid_table(const Config& c, int npos, AlignedVector<float>& out) {
  out.resize(size_t(npos) * c.d_model);
  for (int p = 0; p < npos; ++p)
    for (int i = 0; i < c.d_model / 2; ++i) {
      const double a = p / std::pow(10000.0, 2.0 * i / c.d_model);
      out[size_t(p) * c.d_model + 2 * i] = float(std::sin(a));
      out[size_t(p) * c.d_model + 2 * i + 1] = float(std::cos(a));
    }
}

}  // namespace

Model::Model(Config c, Weights wt) : cfg(std::move(c)), w(std::move(wt)) {
  cfg.validate();
  check_shape("tok_embed", w.embed_view(), cfg.vocab_size, cfg.d_model);
  if (cfg.pos == PosKind::Learned) check_shape("pos_embed", w.pos_embed, cfg.max_seq, cfg.d_model);
  if (int(w.blocks.size()) != cfg.n_layers)
    throw Error("model has " + std::to_string(w.blocks.size()) + " decoder blocks, config says " +
                std::to_string(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l)
    check_block(cfg, "blocks." + std::to_string(l), w.blocks[l], cfg.encoder_decoder);
  if (cfg.final_norm) check_norm("ln_final", w.ln_final, cfg.d_model);
  if (!cfg.tied_head) check_shape("lm_head", w.head_view(), cfg.vocab_size, cfg.d_model);
  if (cfg.encoder_decoder) {
    check_shape("encoder.tok_embed", w.enc_embed_view(), cfg.vocab_size, cfg.d_model);
    if (cfg.pos == PosKind::Learned) check_shape("encoder.pos_embed", w.enc_pos_embed, cfg.max_src, cfg.d_model);
    if (int(w.enc_blocks.size()) != cfg.n_enc_layers)
      throw Error("model has " + std::to_string(w.enc_blocks.size()) + " encoder blocks, config says " +
                  std::to_string(cfg.n_enc_layers));
    for (int l = 0; l < cfg.n_enc_layers; ++l)
      check_block(cfg, "encoder.blocks." + std::to_string(l), w.enc_blocks[l], false);
    if (cfg.enc_final_norm) check_norm("encoder.ln_final", w.enc_ln_final, cfg.d_model);
  }
  // Written by now. Weights used in place have no block of their own (large_block then
  // holds the mapped file): the job reads the file into 2 MB folios where it is not.
  if (w.large_block && !w.mapped) huge_pages = std::make_shared<HugePageJob>(w.large_block);
  if (w.mapped && !w.mapped->copied()) huge_pages = std::make_shared<HugePageJob>(w.mapped);
}

static void grow(AlignedVector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Scratch buffers, grown to the largest call seen; a one-token step after the first
// one never allocates. T is the rows of the call, S the most keys any attention of
// this engine reads (max_seq, or the source length).
struct Engine::Scratch {
  int T = 0, S = 0;
  AlignedVector<float> x;                               // [T, d_model] the residual stream
  AlignedVector<float> h;                               // [T, d_model] a sub-layer's normed input
  AlignedVector<float> out;                             // [T, d_model] a sub-layer's output
  AlignedVector<float> pos;                             // [T, d_model] position vectors
  AlignedVector<float> q, z;                            // [T, q_dim] queries; the heads' outputs
  AlignedVector<float> k, v;                            // [T, kv_dim] keys and values of the encoder
  AlignedVector<float> ff1, ff2;                        // [T, d_ff] feed-forward hidden (ff2: SwiGLU's up)
  AlignedVector<float> att;                             // [n_heads, T, S] scores, then the pattern
  AlignedVector<float> mask;                            // [T, S] 1 where a query may read a key
  AlignedVector<float> logits;                          // [rows, vocab]
  AlignedVector<float> zpart;                           // [threads, q_dim] partial mixes of one decode step
  AlignedVector<float> enc_out;                         // [src_len, d_model]
  AlignedVector<float> wide;                            // [block, cols] 16-bit weights widened for a matrix product
  AlignedVector<float> xpack;                           // a matrix product's input packed once (perf/gemm.h)
  AlignedVector<float> rope_cos, rope_sin;              // [max(max_seq, max_src), d_head/2]
  AlignedVector<float> rope_cos_local, rope_sin_local;  // the same for sliding-window layers
  AlignedVector<float> sinus;                           // [max(max_seq, max_src), d_model]
};

Engine::Engine(std::shared_ptr<const Model> model) : model_(std::move(model)), hooks_(model_->cfg) {
  const Config& c = model_->cfg;
  // One block for the whole cache, in huge pages from the first touch. A decode step
  // reads every layer's cached rows, one short run of a page each in 4 KB pages, and
  // there the hardware prefetchers restart at every page: on a 1B model at 2 threads the
  // q/k/v products that load them took 0.2 ms a token longer (README "A decode step
  // beyond its products"). The price is paid once, at the first step: 2 x n_layers
  // regions of 2 MB zeroed (populate_kv).
  const size_t per = size_t(c.max_seq) * size_t(c.kv_dim());
  kv_block_ = allocate_weight_block(2 * size_t(c.n_layers) * per * sizeof(float), HugePages::AtFirstTouch);
  float* kv = static_cast<float*>(kv_block_.get());
  for (int l = 0; l < c.n_layers; ++l) {
    k_cache_.push_back(kv + 2 * size_t(l) * per);
    v_cache_.push_back(kv + (2 * size_t(l) + 1) * per);
  }
  if (c.encoder_decoder) {
    ck_.assign(c.n_layers, MatRM());
    cv_.assign(c.n_layers, MatRM());
  }
  s_ = std::make_unique<Scratch>();
  // Eigen's matrix products would otherwise use every core through OpenMP; an engine
  // uses the threads it is given (set_threads), one by default.
  Eigen::setNbThreads(threads_);
  const int npos = std::max(c.max_seq, c.encoder_decoder ? c.max_src : 0);
  if (c.pos == PosKind::Rotary) rope_tables(c, npos, c.rope_theta, true, s_->rope_cos, s_->rope_sin);
  if (c.pos == PosKind::Rotary && c.sliding_window > 0)
    rope_tables(c, npos, c.rope_theta_local, false, s_->rope_cos_local, s_->rope_sin_local);
  if (c.pos == PosKind::Sinusoidal) sinusoid_table(c, npos, s_->sinus);
}

Engine::~Engine() = default;

void Engine::set_threads(int n) {
  threads_ = std::max(1, n);
  team_.set_threads(threads_);
  Eigen::setNbThreads(threads_);
}

void Engine::ensure_scratch(int T, int S) {
  const Config& c = model_->cfg;
  Scratch& s = *s_;
  size_t t = size_t(T);
  grow(s.x, t * c.d_model);
  grow(s.h, t * c.d_model);
  grow(s.out, t * c.d_model);
  grow(s.pos, t * c.d_model);
  grow(s.q, t * c.q_dim());
  grow(s.z, t * c.q_dim());
  grow(s.k, t * c.kv_dim());  // encoder keys and values (T == S there)
  grow(s.v, t * c.kv_dim());
  grow(s.ff1, t * c.d_ff);
  grow(s.ff2, t * c.d_ff);
  // Attention rows [T, S]: a prompt's for the keys it reads (not the whole context: a
  // 512-token prompt of a 2048-position model would zero 4 times the memory), and at
  // least one row of the longest key range this engine can see, so that the growing
  // cache never reallocates them during decoding.
  const size_t smax = size_t(std::max({S, c.max_seq, src_len_}));
  const size_t cells = std::max(t * size_t(S), smax);
  grow(s.att, size_t(c.n_heads) * cells);
  grow(s.mask, cells);
  grow(s.zpart, size_t(std::max(1, threads_)) * c.q_dim());
}

KvCache Engine::make_cache() const {
  const Config& c = model_->cfg;
  const size_t per = size_t(c.max_seq) * size_t(c.kv_dim());
  const size_t bytes = 2 * size_t(c.n_layers) * per * sizeof(float);
  KvCache kv;
  // Small caches (many beams of a small model) are plain allocations; large ones a
  // block in huge pages, as the engine's own.
  kv.block =
      bytes >= (size_t(2) << 20) ? allocate_weight_block(bytes, HugePages::AtFirstTouch) : allocate_aligned(bytes);
  float* base = static_cast<float*>(kv.block.get());
  for (int l = 0; l < c.n_layers; ++l) {
    kv.k.push_back(base + 2 * size_t(l) * per);
    kv.v.push_back(base + (2 * size_t(l) + 1) * per);
  }
  return kv;
}

void Engine::swap_cache(KvCache& c) {
  if (c.k.size() != k_cache_.size() || c.v.size() != v_cache_.size())
    throw Error("swap_cache: the cache was made for another model");
  std::swap(kv_block_, c.block);
  std::swap(k_cache_, c.k);
  std::swap(v_cache_, c.v);
  std::swap(pos_, c.pos);
  std::swap(kv_ready_, c.ready);
}

// Maps the cache's pages for the positions up to `upto` and some way beyond, kKvAhead
// positions at a time, so that the steps writing them take no page faults
// (perf/memory.h, populate_for_write).
void Engine::populate_kv(int upto) {
  constexpr int kKvAhead = 256;
  if (upto <= kv_ready_) return;
  const Config& c = model_->cfg;
  const int to = std::min(c.max_seq, (upto + kKvAhead) / kKvAhead * kKvAhead);
  const size_t row = size_t(c.kv_dim()) * sizeof(float), at = size_t(kv_ready_) * row, n = size_t(to - kv_ready_) * row;
  for (int l = 0; l < c.n_layers; ++l) {
    populate_for_write(reinterpret_cast<char*>(k_cache_[size_t(l)]) + at, n);
    populate_for_write(reinterpret_cast<char*>(v_cache_[size_t(l)]) + at, n);
  }
  kv_ready_ = to;
}

void Engine::copy_cache(const KvCache& from, KvCache& to) const {
  const Config& c = model_->cfg;
  if (from.k.size() != size_t(c.n_layers) || to.k.size() != size_t(c.n_layers) || from.pos < 0 || from.pos > c.max_seq)
    throw Error("copy_cache: the caches were made for another model");
  const size_t n = size_t(from.pos) * size_t(c.kv_dim());
  for (int l = 0; l < c.n_layers; ++l) {
    std::copy_n(from.k[l], n, to.k[l]);
    std::copy_n(from.v[l], n, to.v[l]);
  }
  to.pos = from.pos;
}

void Engine::truncate(int p) {
  if (p < 0 || p > pos_) throw Error("cannot truncate the cache to position " + std::to_string(p));
  pos_ = p;
}

// ---- products

// y[out] = W x, split by output rows across the threads.
void Engine::matvec(const MatView& W, const float* x, float* y) const {
  const MatvecPart part{W, y};
  team_.run({&part, 1}, x);
}

// Y[T, out] = X[T, in] W^T by matrix-matrix products: the quantized or bfloat16 tiles
// with the fast products, else gemm_nt (matmul_gemm) where it is compiled in, else
// Eigen on float32 rows (16-bit and quantized weights, and tiles, converted a block of
// rows at a time into scratch).
void Engine::matmul(const MatView& W, int T, const float* x, float* y) const {
  const int64_t out = W.rows, in = W.cols;
  if (team_.fast_products(W)) return team_.run_fast_rows(W, T, x, y, out);
  if (gemm_nt_available()) return matmul_gemm(W, T, x, y);
  MMap Y(y, T, out);
  CMap X(x, T, in);
  if (W.type == Precision::F32 && W.tile_rows == 0) {
    Y.noalias() = X * CMap(static_cast<const float*>(W.data), out, in).transpose();
    return;
  }
  const int64_t block = std::max<int64_t>(64, std::min<int64_t>(out, (int64_t(1) << 20) / std::max<int64_t>(in, 1)));
  grow(s_->wide, size_t(block * in));
  for (int64_t r0 = 0; r0 < out; r0 += block) {
    const int64_t n = std::min(block, out - r0);
    W.rows_f32(r0, r0 + n, s_->wide.data());
    Y.middleCols(r0, n).noalias() = X * CMap(s_->wide.data(), n, in).transpose();
  }
}

// matmul with gemm_nt: X is packed once (its depth blocks across the team), then the
// team's threads take pieces of W's rows (multiples of 32, about 8 a thread) as each
// becomes free, and multiply each on their own: a thread slowed by something else on
// its core holds the others up by one piece at most. 16-bit rows are widened as the
// product packs them; quantized rows (and 16-bit ones in tiles) are widened into the
// thread's own part of the scratch, so that they are multiplied by the thread that
// wrote them, while they are in its cache. No second set of threads (OpenMP) runs
// beside the team's.
void Engine::matmul_gemm(const MatView& W, int T, const float* x, float* y) const {
  const int64_t out = W.rows, in = W.cols;
  const int nt = threads_;
  const bool f32 = W.type == Precision::F32;
  const bool b16 = (W.type == Precision::F16 || W.type == Precision::BF16) && W.tile_rows == 0;
  // Pieces: float32 tiles start on a multiple of 8 rows, widened ones fit the scratch.
  const int64_t by_threads = std::max<int64_t>(32, out / (8 * int64_t(nt)) / 32 * 32);
  const int64_t piece =
      f32 || b16 ? by_threads
                 : std::min(by_threads, std::max<int64_t>(32, (int64_t(1) << 19) / std::max<int64_t>(in, 1) / 32 * 32));
  if (!f32 && !b16) grow(s_->wide, size_t(nt * piece * in));
  grow(s_->xpack, size_t(gemm_packed_floats(T, in)));
  float* xp = s_->xpack.data();
  team_.parallel_for(gemm_depth_blocks(in), threads_ > 1, [&](int b) { gemm_pack_block(x, T, in, b, xp); });
  team_.parallel_claim(int((out + piece - 1) / piece), nt > 1, [&](int i, int t) {
    const int64_t a = i * piece, n = std::min(piece, out - a);
    if (f32) {
      const auto* w = static_cast<const float*>(W.data);
      gemm_nt_packed(xp, T, in, w + a * in, n, y + a, out, std::max<int64_t>(0, W.tile_rows - a));
    } else if (b16) {
      const auto* w = static_cast<const uint16_t*>(W.data);
      gemm_nt_packed16(xp, T, in, w + a * in, W.type, n, y + a, out);
    } else {
      float* buf = s_->wide.data() + size_t(t) * size_t(piece * in);
      W.rows_f32(a, a + n, buf);
      gemm_nt_packed(xp, T, in, buf, n, y + a, out, 0);
    }
  });
}

// Whether a decode step's attention over S keys is split across the threads: once the
// cache holds 32768 values per layer (43 positions of GPT-2 small) the arithmetic
// outweighs the extra fork and join. Shorter caches are loaded by the first thread
// during the q/k/v products and read from its cache.
bool Engine::decode_split(int S) const { return threads_ > 1 && int64_t(S) * model_->cfg.kv_dim() >= 32768; }

// Linear layers sharing the input x[T, in]: at T == 1 one group of products, else one
// by one.
void Engine::linears(std::initializer_list<std::pair<const Linear*, float*>> ls, int T, const float* x,
                     const CacheRows* warm) const {
  if (T != 1) {
    for (auto [l, y] : ls) linear(*l, T, x, y);
    return;
  }
  MatvecPart parts[3];
  size_t n = 0;
  for (auto [l, y] : ls) parts[n++] = {l->view(), y, l->b.size() ? l->b.data() : nullptr};  // at most three
  team_.run({parts, n}, x, warm);
}

// y[T, out] = x[T, in] W^T + b
void Engine::linear(const Linear& l, int T, const float* x, float* y) const {
  const MatView W = l.view();
  if (T == 1) {
    const MatvecPart part{W, y, l.b.size() ? l.b.data() : nullptr};
    team_.run({&part, 1}, x);
  } else {
    matmul(W, T, x, y);
    if (l.b.size()) MMap(y, T, int(W.rows)).rowwise() += l.b.transpose();
  }
}

// ---- the forward pass

// y[T, d] = norm(x[T, d]) (LayerNorm or RMSNorm, model/config.h).
void Engine::norm(const Norm& n, int T, const float* x, float* y) const {
  const Config& c = model_->cfg;
  const int d = c.d_model;
  for (int t = 0; t < T; ++t) {
    const float* xr = x + size_t(t) * d;
    float* yr = y + size_t(t) * d;
    if (c.norm == NormKind::RMSNorm) {
      rms_norm_row(xr, d, n.g.data(), c.norm_eps, yr);
    } else {
      layer_norm_row(xr, d, n.g.data(), n.b.size() ? n.b.data() : nullptr, c.norm_eps, yr);
    }
  }
}

// x[T, d] = E[ids] (* sqrt(d) when scaled) + the position vectors of pos0 .. pos0+T-1.
void Engine::embed(Stack st, std::span<const int> ids, int pos0, float* x) {
  const Config& c = model_->cfg;
  const Weights& w = model_->w;
  const int d = c.d_model, T = int(ids.size());
  const MatView E = st == Stack::Encoder ? w.enc_embed_view() : w.embed_view();
  const float sc = c.scale_embed ? std::sqrt(float(d)) : 1.0f;
  for (int t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= c.vocab_size)
      throw Error("token id " + std::to_string(ids[t]) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
    E.row(ids[t], x + size_t(t) * d);
    if (sc != 1.0f) VMap(x + size_t(t) * d, d) *= sc;
  }
  if (hooks_.active(st, -1, Point::Embed)) hooks_.fire(st, -1, Point::Embed, pos0, {x, 2, {T, d, 1}});
  if (c.pos != PosKind::Learned && c.pos != PosKind::Sinusoidal) return;  // rotary acts inside attention
  float* p = s_->pos.data();                                              // [T, d]
  for (int t = 0; t < T; ++t) {
    if (c.pos == PosKind::Learned) {
      const MatRM& P = st == Stack::Encoder ? w.enc_pos_embed : w.pos_embed;
      VMap(p + size_t(t) * d, d) = P.row(pos0 + t).transpose();
    } else {
      std::copy_n(s_->sinus.data() + size_t(pos0 + t) * d, d, p + size_t(t) * d);
    }
  }
  if (hooks_.active(st, -1, Point::PosEmbed)) hooks_.fire(st, -1, Point::PosEmbed, pos0, {p, 2, {T, d, 1}});
  MMap(x, T, d) += CMap(p, T, d);
}

// One sub-layer f with its residual add and norm; the norm's output is published at
// `normed`, the residual stream at `after`:
//   pre-norm:  x = x + f(norm(x))        post-norm:  x = norm(x + f(x))
// With sandwich norms (Gemma 3) the sub-layer's output is normed too: x = x + post(f(norm(x))).
template <class F>
void Engine::sublayer(Stack st, int layer, const Norm& n, const Norm* post, Point normed, Point after, int T, int pos0,
                      float* x, F&& f) {
  const int d = model_->cfg.d_model;
  const bool pre = model_->cfg.norm_place == NormPlace::Pre;
  float* y = pre ? s_->h.data() : x;  // the norm's output: the sub-layer's input, or the stream
  auto publish_norm = [&] {
    if (hooks_.active(st, layer, normed)) hooks_.fire(st, layer, normed, pos0, {y, 2, {T, d, 1}});
  };
  if (pre) {
    norm(n, T, x, y);
    publish_norm();
  }
  f(pre ? y : x, s_->out.data());
  if (post) norm(*post, T, s_->out.data(), s_->out.data());
  MMap(x, T, d) += CMap(s_->out.data(), T, d);
  if (!pre) {
    norm(n, T, x, x);
    publish_norm();
  }
  if (hooks_.active(st, layer, after)) hooks_.fire(st, layer, after, pos0, {x, 2, {T, d, 1}});
}

// One block of either stack on x[T, d]: self-attention, cross-attention (decoder
// blocks of encoder-decoder models), feed-forward, each a sub-layer.
void Engine::block(Stack st, int l, const Block& b, int T, int pos0, float* x) {
  const int d = model_->cfg.d_model;
  if (hooks_.active(st, l, Point::ResidPre)) hooks_.fire(st, l, Point::ResidPre, pos0, {x, 2, {T, d, 1}});
  const bool sandwich = model_->cfg.sandwich_norm && st == Stack::Decoder;
  sublayer(st, l, b.ln1, sandwich ? &b.post_attn : nullptr, Point::Ln1Normalized, Point::ResidMid, T, pos0, x,
           [&](const float* in, float* out) { attention(st, l, b.attn, T, pos0, in, out, false); });
  if (st == Stack::Decoder && model_->cfg.encoder_decoder)
    sublayer(st, l, b.ln2, nullptr, Point::Ln2Normalized, Point::ResidMidCross, T, pos0, x,
             [&](const float* in, float* out) { attention(st, l, b.cross, T, pos0, in, out, true); });
  sublayer(st, l, b.ln3, sandwich ? &b.post_ffn : nullptr, Point::Ln3Normalized, Point::ResidPost, T, pos0, x,
           [&](const float* in, float* out) { ffn(st, l, b.ffn, T, pos0, in, out); });
}

// out[T, d] = attention of the rows xin[T, d]: self-attention (decoder: causal over
// the cache; encoder: bidirectional with the padding mask) or cross-attention (the
// decoder's queries over the cached encoder keys).
void Engine::attention(Stack st, int layer, const Attention& a, int T, int pos0, const float* xin, float* out,
                       bool cross) {
  const Config& c = model_->cfg;
  const AttnPoints pts = cross ? AttnPoints{Point::CrossScores, Point::CrossMask, Point::CrossPattern,
                                            Point::CrossZ,      Point::CrossQ,    Point::CrossAttnOut}
                               : AttnPoints{Point::AttnScores, Point::AttnMask, Point::AttnPattern,
                                            Point::AttnZ,      Point::AttnQ,    Point::AttnOut};
  const Keys keys = project_qkv(st, layer, a, T, pos0, xin, cross);  // q: [T, q_dim]
  // This call's new key and value rows, [T, kv_dim] (cross-attention: none, encode()
  // made them).
  const bool enc = st == Stack::Encoder;
  const size_t at = size_t(pos0) * c.kv_dim();
  float* k_new = cross ? nullptr : enc ? s_->k.data() : k_cache_[layer] + at;
  float* v_new = cross ? nullptr : enc ? s_->v.data() : v_cache_[layer] + at;
  if (c.qk_norm && !cross) qk_norm(a, T, s_->q.data(), k_new);
  if (c.pos == PosKind::Rotary && !cross) rotate(st == Stack::Encoder ? -1 : layer, T, pos0, s_->q.data(), k_new);
  if (hooks_.active(st, layer, pts.q)) hooks_.fire(st, layer, pts.q, pos0, {s_->q.data(), 3, {T, c.n_heads, c.d_head}});
  if (!cross) {
    if (hooks_.active(st, layer, Point::AttnK))
      hooks_.fire(st, layer, Point::AttnK, pos0, {k_new, 3, {T, c.n_kv_heads, c.d_head}});
    if (hooks_.active(st, layer, Point::AttnV))
      hooks_.fire(st, layer, Point::AttnV, pos0, {v_new, 3, {T, c.n_kv_heads, c.d_head}});
  }
  if (hooks_.active(st, layer, pts.mask)) publish_mask(st, layer, pts.mask, T, pos0, keys);
  if (T == 1)
    attend_one_row(st, layer, pts, pos0, keys);
  else
    attend_rows(st, layer, pts, T, pos0, keys);
  if (hooks_.active(st, layer, pts.z)) hooks_.fire(st, layer, pts.z, pos0, {s_->z.data(), 2, {T, c.q_dim(), 1}});
  linear(a.o, T, s_->z.data(), out);  // the output projection
  if (hooks_.active(st, layer, pts.out)) hooks_.fire(st, layer, pts.out, pos0, {out, 2, {T, c.d_model, 1}});
}

// q[T, q_dim] = Wq x; k, v [T, kv_dim] appended to the layer's cache (decoder), in
// scratch (encoder), or already cached from the source (cross-attention).
Engine::Keys Engine::project_qkv(Stack st, int layer, const Attention& a, int T, int pos0, const float* xin,
                                 bool cross) {
  Scratch& s = *s_;
  const int kvd = model_->cfg.kv_dim();
  if (cross) {
    linear(a.q, T, xin, s.q.data());
    return {ck_[layer].data(), cv_[layer].data(), src_len_, AttnKind::Cross};
  }
  if (st == Stack::Encoder) {
    linears({{&a.q, s.q.data()}, {&a.k, s.k.data()}, {&a.v, s.v.data()}}, T, xin);
    return {s.k.data(), s.v.data(), T, AttnKind::Bidirectional};
  }
  float* kc = k_cache_[layer] + size_t(pos0) * kvd;
  float* vc = v_cache_[layer] + size_t(pos0) * kvd;
  // The rows before this step's, loaded by the thread(s) that will read them.
  const CacheRows warm{k_cache_[layer], v_cache_[layer], pos0, kvd, decode_split(pos0 + 1)};
  linears({{&a.q, s.q.data()}, {&a.k, kc}, {&a.v, vc}}, T, xin, T == 1 ? &warm : nullptr);
  const int window = model_->cfg.sliding(layer) ? model_->cfg.sliding_window : 0;
  return {k_cache_[layer], v_cache_[layer], pos0 + T, AttnKind::Causal, window};
}

// Rotary positions: q [T, q_dim] and k [T, kv_dim] of positions pos0 .. pos0+T-1,
// every head's features rotated in pairs.
void Engine::rotate(int layer, int T, int pos0, float* q, float* k) const {
  const Config& c = model_->cfg;
  const int dh = c.d_head, half = dh / 2, qd = c.q_dim(), kvd = c.kv_dim();
  const bool local = c.sliding(layer);
  const float* cos_t = local ? s_->rope_cos_local.data() : s_->rope_cos.data();
  const float* sin_t = local ? s_->rope_sin_local.data() : s_->rope_sin.data();
  for (int t = 0; t < T; ++t) {
    const float* cs = cos_t + size_t(pos0 + t) * half;
    const float* sn = sin_t + size_t(pos0 + t) * half;
    auto rot = [&](float* v, int width) {
      if (c.rope_style == RopeStyle::Half) {  // feature i with i + d_head/2, head by head
        for (int h0 = 0; h0 < width; h0 += dh)
          for (int j = 0; j < half; ++j) {
            const float v0 = v[h0 + j], v1 = v[h0 + j + half];
            v[h0 + j] = v0 * cs[j] - v1 * sn[j];
            v[h0 + j + half] = v0 * sn[j] + v1 * cs[j];
          }
        return;
      }
      for (int h0 = 0; h0 < width; h0 += dh)  // features 2j and 2j + 1 of each head
        for (int j = 0; j < half; ++j) {
          const float v0 = v[h0 + 2 * j], v1 = v[h0 + 2 * j + 1];
          v[h0 + 2 * j] = v0 * cs[j] - v1 * sn[j];
          v[h0 + 2 * j + 1] = v0 * sn[j] + v1 * cs[j];
        }
    };
    rot(q + size_t(t) * qd, qd);
    rot(k + size_t(t) * kvd, kvd);
  }
}

// q [T, q_dim] and k [T, kv_dim]: RMSNorm over each head's d_head features, with the
// gains q_norm and k_norm (Qwen3, Gemma 3).
void Engine::qk_norm(const Attention& a, int T, float* q, float* k) const {
  const Config& c = model_->cfg;
  const int dh = c.d_head;
  auto rms = [&](float* v, const Vec& g) {
    float ss = 0.0f;
    for (int j = 0; j < dh; ++j) ss += v[j] * v[j];
    const float inv = 1.0f / std::sqrt(ss / float(dh) + c.norm_eps);
    for (int j = 0; j < dh; ++j) v[j] = g[j] * (inv * v[j]);
  };
  for (int64_t r = 0; r < int64_t(T) * c.n_heads; ++r) rms(q + r * dh, a.q_norm.g);
  for (int64_t r = 0; r < int64_t(T) * c.n_kv_heads; ++r) rms(k + r * dh, a.k_norm.g);
}

bool Engine::may_read(const Keys& keys, int query_pos, int key) const {
  return may_attend(keys.kind, query_pos, key, src_ids_, model_->cfg.pad_id, keys.window);
}

// The mask [T, S]: 1 where a query may read a key, else 0.
void Engine::publish_mask(Stack st, int layer, Point p, int T, int pos0, const Keys& keys) {
  float* m = s_->mask.data();
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < keys.S; ++j) m[size_t(t) * keys.S + j] = may_read(keys, pos0 + t, j) ? 1.0f : 0.0f;
  hooks_.fire(st, layer, p, pos0, {m, 2, {T, keys.S, 1}});
}

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kBlock = 64;  // query rows per block of a long causal prompt
using CStrided = Eigen::Map<const MatRM, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<MatRM, 0, Eigen::OuterStride<>>;
}  // namespace

// Head h's scores [T, S] = Q_h K_h^T / sqrt(d_head), cells a query may not read -inf.
// A long causal prompt is computed in row blocks: block [t0, t1) reads keys
// 0 .. pos0 + t1 - 1 only, half the work; the cells past that are masked unread.
void Engine::head_scores(int h, int T, int pos0, const Keys& keys) {
  const Config& c = model_->cfg;
  const int dh = c.d_head, S = keys.S, g = h / (c.n_heads / c.n_kv_heads);
  const bool causal = keys.kind == AttnKind::Causal;
  float* att = s_->att.data();
  CStrided Qh(s_->q.data() + size_t(h) * dh, T, dh, Eigen::OuterStride<>(c.q_dim()));
  CStrided Kh(keys.K + size_t(g) * dh, S, dh, Eigen::OuterStride<>(c.kv_dim()));
  MMap A(att + size_t(h) * T * S, T, S);
  if (causal && T > kBlock) {
    for (int t0 = 0; t0 < T; t0 += kBlock) {
      const int nb = std::min(kBlock, T - t0), n_keys = pos0 + t0 + nb;
      A.block(t0, 0, nb, n_keys).noalias() = Qh.middleRows(t0, nb) * Kh.topRows(n_keys).transpose();
    }
  } else {
    A.noalias() = Qh * Kh.transpose();
  }
  const float scale = c.score_scale();
  for (int t = 0; t < T; ++t) {
    float* row = att + (size_t(h) * T + t) * S;
    if (causal) {  // keys lo .. pos0 + t, the others masked (loops the compiler vectorises)
      const int n = pos0 + t + 1, lo = keys.first(pos0 + t);
      std::fill(row, row + lo, kNegInf);
      for (int j = lo; j < n; ++j) row[j] *= scale;
      std::fill(row + n, row + S, kNegInf);
    } else {
      for (int j = 0; j < S; ++j) row[j] = may_read(keys, pos0 + t, j) ? row[j] * scale : kNegInf;
    }
  }
}

// Head h's pattern [T, S] = softmax of each row of its scores; masked cells get 0, and
// a row with every key masked reads nothing.
void Engine::head_softmax(int h, int T, int pos0, const Keys& keys) {
  const int S = keys.S;
  for (int t = 0; t < T; ++t) {
    float* row = s_->att.data() + (size_t(h) * T + t) * S;
    // Causal rows start (sliding window) and end in masked cells: exponentials only over
    // the keys read, the others exactly 0.
    const bool causal = keys.kind == AttnKind::Causal;
    const int n = causal ? pos0 + t + 1 : S, lo = causal ? keys.first(pos0 + t) : 0;
    float mx = kNegInf;
    for (int j = lo; j < n; ++j) mx = std::max(mx, row[j]);
    if (mx == kNegInf) {
      std::fill_n(row, S, 0.0f);
      continue;
    }
    std::fill(row, row + lo, 0.0f);
    const float inv = 1.0f / exp_shift_sum(row + lo, n - lo, mx);
    for (int j = lo; j < n; ++j) row[j] *= inv;
    std::fill(row + n, row + S, 0.0f);
  }
}

// Head h's output z_h [T, d_head] = pattern_h [T, S] V_h [S, d_head].
void Engine::head_mix(int h, int T, int pos0, const Keys& keys) {
  const Config& c = model_->cfg;
  const int dh = c.d_head, S = keys.S, g = h / (c.n_heads / c.n_kv_heads);
  CStrided Vh(keys.V + size_t(g) * dh, S, dh, Eigen::OuterStride<>(c.kv_dim()));
  Strided Zh(s_->z.data() + size_t(h) * dh, T, dh, Eigen::OuterStride<>(c.q_dim()));
  CMap A(s_->att.data() + size_t(h) * T * S, T, S);
  if (keys.kind == AttnKind::Causal && T > kBlock) {
    for (int t0 = 0; t0 < T; t0 += kBlock) {
      const int nb = std::min(kBlock, T - t0), n_keys = pos0 + t0 + nb;
      Zh.middleRows(t0, nb).noalias() = A.block(t0, 0, nb, n_keys) * Vh.topRows(n_keys);
    }
  } else {
    Zh.noalias() = A * Vh;
  }
}

namespace {
// Eigen's matrix products on one thread while it lives. Eigen splits a large product
// over OpenMP threads of its own (Eigen::setNbThreads); inside the team's threads,
// which already run one head each, that made two such splits at once on two cores,
// each waiting for its other half by spinning: a 512-token prompt's attention took
// 15 of its 23 seconds on a 1B model.
class EigenOneThread {
 public:
  explicit EigenOneThread(bool on) : was_(on ? Eigen::nbThreads() : 0) {
    if (on) Eigen::setNbThreads(1);
  }
  ~EigenOneThread() {
    if (was_ > 0) Eigen::setNbThreads(was_);
  }
  EigenOneThread(const EigenOneThread&) = delete;
  EigenOneThread& operator=(const EigenOneThread&) = delete;

 private:
  int was_;
};
}  // namespace

// Several query rows (a prompt, the encoder): per head, scores, softmax and mix as
// matrix products, the heads across the threads (each head's products on its thread).
void Engine::attend_rows(Stack st, int layer, const AttnPoints& pts, int T, int pos0, const Keys& keys) {
  const int H = model_->cfg.n_heads, S = keys.S, nt = threads_;
  const bool par = nt > 1 && int64_t(T) * S * H >= 4096;
  const EigenOneThread serial(par);
  const bool hs = hooks_.active(st, layer, pts.scores), hp = hooks_.active(st, layer, pts.pattern);
  if (!hs && !hp) {
    team_.parallel_for(H, par, [&](int h) {
      head_scores(h, T, pos0, keys);
      head_softmax(h, T, pos0, keys);
      head_mix(h, T, pos0, keys);
    });
    return;
  }
  float* att = s_->att.data();
  team_.parallel_for(H, par, [&](int h) { head_scores(h, T, pos0, keys); });
  if (hs) hooks_.fire(st, layer, pts.scores, pos0, {att, 3, {H, T, S}});
  team_.parallel_for(H, par, [&](int h) { head_softmax(h, T, pos0, keys); });
  if (hp) hooks_.fire(st, layer, pts.pattern, pos0, {att, 3, {H, T, S}});
  team_.parallel_for(H, par, [&](int h) { head_mix(h, T, pos0, keys); });
}

// Decoding: one query row over S keys. The cache is read a key row (every head) at a
// time, so it streams sequentially; once the cache is long enough (decode_split) each
// thread takes a contiguous range of keys and the mixes they add up are summed.
void Engine::attend_one_row(Stack st, int layer, const AttnPoints& pts, int pos0, const Keys& keys) {
  const Config& c = model_->cfg;
  const int H = c.n_heads, dh = c.d_head, qd = c.q_dim(), kvd = c.kv_dim(), S = keys.S;
  const int group = H / c.n_kv_heads, nt = threads_;
  const float scale = c.score_scale();
  const bool split = decode_split(S);
  float* att = s_->att.data();                        // [H, 1, S]
  const bool causal = keys.kind == AttnKind::Causal;  // reads the keys keys.first(pos0) .. pos0
  team_.over_key_shares(S, split, [&](int, int j0, int j1) {
    const int lo = causal ? std::clamp(keys.first(pos0), j0, j1) : j0, hi = causal ? std::clamp(pos0 + 1, lo, j1) : j1;
    auto mask = [&](int j) {
      for (int h = 0; h < H; ++h) att[size_t(h) * S + j] = kNegInf;
    };
    for (int j = j0; j < lo; ++j) mask(j);
    head_dots(s_->q.data(), keys.K, kvd, lo, hi, H, group, dh, scale, att, S);
    for (int j = hi; j < j1; ++j) mask(j);
    if (!causal)
      for (int j = j0; j < j1; ++j)
        if (!may_read(keys, pos0, j)) mask(j);
  });
  if (hooks_.active(st, layer, pts.scores)) hooks_.fire(st, layer, pts.scores, pos0, {att, 3, {H, 1, S}});
  for (int h = 0; h < H; ++h) head_softmax(h, 1, pos0, keys);
  if (hooks_.active(st, layer, pts.pattern)) hooks_.fire(st, layer, pts.pattern, pos0, {att, 3, {H, 1, S}});
  team_.over_key_shares(S, split, [&](int t, int j0, int j1) {
    float* z = split ? s_->zpart.data() + size_t(t) * qd : s_->z.data();  // [q_dim]
    std::fill_n(z, qd, 0.0f);
    // Keys before a sliding window have weight 0: not read.
    head_axpys(att, S, keys.V, kvd, std::max(j0, keys.first(pos0)), j1, H, group, dh, z);
  });
  if (!split) return;
  VMap z(s_->z.data(), qd);
  z = CVMap(s_->zpart.data(), qd);
  for (int t = 1; t < nt; ++t) z += CVMap(s_->zpart.data() + size_t(t) * qd, qd);
}

// out[T, d] = down(act(up(x))) (SwiGLU: down(silu(gate x) * up x)).
void Engine::ffn(Stack st, int layer, const FeedForward& f, int T, int pos0, const float* xin, float* out) {
  const Config& c = model_->cfg;
  Scratch& s = *s_;
  const int F = c.d_ff;
  const size_t n = size_t(T) * F;
  float* a = s.ff1.data();
  const bool pre_hook = hooks_.active(st, layer, Point::MlpPre);
  // Decoding GPT-2's MLP with nobody watching the pre-activations: the threads of the
  // product apply GELU to their rows.
  const bool fused = T == 1 && c.ffn == FFNKind::GELUTanh && !pre_hook;
  if (c.gated()) {
    linears({{&f.gate, a}, {&f.up, s.ff2.data()}}, T, xin);
  } else if (fused) {
    const MatvecPart part{f.up.view(), a, f.up.b.size() ? f.up.b.data() : nullptr, true};
    team_.run({&part, 1}, xin);
  } else {
    linear(f.up, T, xin, a);
  }
  if (pre_hook) hooks_.fire(st, layer, Point::MlpPre, pos0, {a, 2, {T, F, 1}});
  if (!fused) {
    switch (c.ffn) {
      case FFNKind::GELU:
        for (size_t i = 0; i < n; ++i) a[i] = gelu(a[i]);
        break;
      case FFNKind::GELUTanh:
        gelu_tanh_inplace(a, int64_t(n));
        break;
      case FFNKind::ReLU:
        for (size_t i = 0; i < n; ++i) a[i] = std::max(a[i], 0.0f);
        break;
      case FFNKind::SwiGLU:
        silu_mul_inplace(a, s.ff2.data(), int64_t(n));
        break;
      case FFNKind::GeGLU:
        gelu_tanh_inplace(a, int64_t(n));
        for (size_t i = 0; i < n; ++i) a[i] *= s.ff2[i];
        break;
    }
  }
  if (hooks_.active(st, layer, Point::MlpPost)) hooks_.fire(st, layer, Point::MlpPost, pos0, {a, 2, {T, F, 1}});
  linear(f.down, T, a, out);
  if (hooks_.active(st, layer, Point::MlpOut)) hooks_.fire(st, layer, Point::MlpOut, pos0, {out, 2, {T, c.d_model, 1}});
}

void Engine::encode(std::span<const int> src) {
  const Config& c = model_->cfg;
  const Weights& w = model_->w;
  if (!c.encoder_decoder) throw Error("this model has no encoder: a source text is only for encoder-decoder models");
  const int S = int(src.size());
  if (S == 0) throw Error("the source is empty");
  if (S > c.max_src)
    throw Error("the source has " + std::to_string(S) + " tokens, the encoder takes at most " +
                std::to_string(c.max_src));
  src_ids_.assign(src.begin(), src.end());
  src_len_ = S;
  ensure_scratch(S, S);
  Scratch& s = *s_;
  const int d = c.d_model;
  float* x = s.x.data();
  embed(Stack::Encoder, src, 0, x);
  for (int l = 0; l < c.n_enc_layers; ++l) block(Stack::Encoder, l, w.enc_blocks[l], S, 0, x);
  s.enc_out.resize(size_t(S) * d);
  if (c.enc_final_norm) {
    norm(w.enc_ln_final, S, x, s.enc_out.data());
    if (hooks_.active(Stack::Encoder, -1, Point::LnFinal))
      hooks_.fire(Stack::Encoder, -1, Point::LnFinal, 0, {s.enc_out.data(), 2, {S, d, 1}});
  } else {
    std::copy_n(x, size_t(S) * d, s.enc_out.data());
  }
  for (int l = 0; l < c.n_layers; ++l) {
    ck_[l].resize(S, c.kv_dim());
    cv_[l].resize(S, c.kv_dim());
    linear(w.blocks[l].cross.k, S, s.enc_out.data(), ck_[l].data());
    linear(w.blocks[l].cross.v, S, s.enc_out.data(), cv_[l].data());
    // Published under the decoder block that reads them, once per source.
    const Stack D = Stack::Decoder;
    if (hooks_.active(D, l, Point::CrossK))
      hooks_.fire(D, l, Point::CrossK, 0, {ck_[l].data(), 3, {S, c.n_kv_heads, c.d_head}});
    if (hooks_.active(D, l, Point::CrossV))
      hooks_.fire(D, l, Point::CrossV, 0, {cv_[l].data(), 3, {S, c.n_kv_heads, c.d_head}});
  }
  pos_ = 0;
}

Eigen::Map<const MatRM> Engine::forward(std::span<const int> tokens, bool all_logits) {
  const Config& c = model_->cfg;
  const Weights& w = model_->w;
  const int T = int(tokens.size());
  if (T == 0) throw Error("forward needs at least one token");
  if (pos_ + T > c.max_seq)
    throw Error("the sequence would reach " + std::to_string(pos_ + T) + " positions; this model's context is " +
                std::to_string(c.max_seq));
  if (c.encoder_decoder && src_len_ == 0) throw Error("encoder-decoder model: encode a source first");
  const int pos0 = pos_;
  ensure_scratch(T, std::max(pos0 + T, src_len_));
  populate_kv(pos0 + T);
  Scratch& s = *s_;
  const int d = c.d_model;
  float* x = s.x.data();
  embed(Stack::Decoder, tokens, pos0, x);
  const Stack D = Stack::Decoder;
  for (int l = 0; l < c.n_layers; ++l) block(D, l, w.blocks[l], T, pos0, x);
  float* fin = x;
  if (c.final_norm) {
    norm(w.ln_final, T, x, s.h.data());
    fin = s.h.data();
    if (hooks_.active(D, -1, Point::LnFinal)) hooks_.fire(D, -1, Point::LnFinal, pos0, {fin, 2, {T, d, 1}});
  }
  const int rows = all_logits ? T : 1;
  const float* in = all_logits ? fin : fin + size_t(T - 1) * d;
  grow(s.logits, size_t(rows) * c.vocab_size);
  const MatView Wh = w.head_view();
  if (rows == 1)
    matvec(Wh, in, s.logits.data());
  else
    matmul(Wh, rows, in, s.logits.data());
  if (c.logit_softcap > 0.0f)
    for (size_t i = 0; i < size_t(rows) * c.vocab_size; ++i)
      s.logits[i] = c.logit_softcap * std::tanh(s.logits[i] / c.logit_softcap);
  if (hooks_.active(D, -1, Point::Logits))
    hooks_.fire(D, -1, Point::Logits, all_logits ? pos0 : pos0 + T - 1, {s.logits.data(), 2, {rows, c.vocab_size, 1}});
  if (w.mapped && !w.mapped->intact()) throw Error(w.mapped->why_changed());  // weights read from a changed file
  pos_ += T;
  return Eigen::Map<const MatRM>(s.logits.data(), rows, c.vocab_size);
}

std::span<const float> Engine::decode_products(std::vector<float>& buf) const {
  const Config& c = model_->cfg;
  const Weights& w = model_->w;
  const size_t wide = size_t(std::max({c.d_model, c.q_dim(), c.kv_dim(), c.d_ff}));
  buf.resize(4 * wide + size_t(c.vocab_size));
  std::fill_n(buf.data(), wide, kDecodeProductsInput);
  const float* x = buf.data();
  float *a = buf.data() + wide, *b = a + wide, *v = b + wide, *logits = v + wide;
  for (const Block& blk : w.blocks) {
    linears({{&blk.attn.q, a}, {&blk.attn.k, b}, {&blk.attn.v, v}}, 1, x);
    linear(blk.attn.o, 1, x, a);
    if (c.encoder_decoder) {  // the cross-attention's keys and values come from the encoder, once
      linear(blk.cross.q, 1, x, a);
      linear(blk.cross.o, 1, x, a);
    }
    if (c.gated()) {
      linears({{&blk.ffn.gate, a}, {&blk.ffn.up, b}}, 1, x);
    } else {
      const MatvecPart part{blk.ffn.up.view(), a, blk.ffn.up.b.size() ? blk.ffn.up.b.data() : nullptr,
                            c.ffn == FFNKind::GELUTanh};
      team_.run({&part, 1}, x);
    }
    linear(blk.ffn.down, 1, x, a);
  }
  matvec(w.head_view(), x, logits);
  return {logits, size_t(c.vocab_size)};
}

MatRM Engine::forward_full(std::span<const int> tokens, bool all_logits) {
  pos_ = 0;
  return MatRM(forward(tokens, all_logits));
}

}  // namespace ds
