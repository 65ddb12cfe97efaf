#include "model/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "perf/gemm.h"
#include "perf/memory.h"
#include "perf/vmath.h"
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
void check_block(const Config& c, const std::string& p, const Block& b, bool cross) {
  check_norm(p + ".ln1", b.ln1, c.d_model);
  check_norm(p + ".ln3", b.ln3, c.d_model);
  auto att = [&](const std::string& n, const Attention& a) {
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
  if (c.ffn == FFNKind::SwiGLU) check_linear(p + ".mlp.gate", b.ffn.gate, c.d_ff, c.d_model);
  check_linear(p + ".mlp.down", b.ffn.down, c.d_model, c.d_ff);
}

float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

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
}

static void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Scratch buffers, grown to the largest call seen; a one-token step after the first
// one never allocates.
struct Engine::Scratch {
  int T = 0, S = 0;
  std::vector<float> x, h, q, k, v, z, out, ff1, ff2, att, mask, pos, logits;
  std::vector<float> zpart;               // [threads, q_dim] partial mixes of one decode step
  std::vector<float> enc_out;             // [src_len, d_model]
  std::vector<float> wide;                // 16-bit weights widened for a matrix-matrix product
  std::vector<float> rope_cos, rope_sin;  // [max(max_seq,max_src), d_head/2]
  std::vector<float> sinus;               // [max(max_seq,max_src), d_model]
};

// Runs f(0..n-1), across nt threads when par. A serial loop never enters OpenMP,
// whose serialized regions allocate.
template <class F>
static void parallel_for(int n, int nt, bool par, F&& f) {
  if (!par || nt <= 1) {
    for (int i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int i = 0; i < n; ++i) f(i);
}

Engine::Engine(std::shared_ptr<const Model> model) : model_(std::move(model)), hooks_(model_->cfg) {
  const Config& c = model_->cfg;
  // One block for the whole cache (huge pages, as the weights): each decode step reads
  // every layer's keys and values up to its position, short streams that should not
  // also pay a page walk every 4 KB.
  const size_t per = size_t(c.max_seq) * size_t(c.kv_dim());
  kv_block_ = allocate_weight_block(2 * size_t(c.n_layers) * per * sizeof(float));
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
  int npos = std::max(c.max_seq, c.encoder_decoder ? c.max_src : 0);
  if (c.pos == PosKind::Rotary) {
    int half = c.d_head / 2;
    s_->rope_cos.resize(size_t(npos) * half);
    s_->rope_sin.resize(size_t(npos) * half);
    for (int p = 0; p < npos; ++p)
      for (int i = 0; i < half; ++i) {
        // The same float operations as llama2.c's run.c, so its outputs are reproduced.
        float freq = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(c.d_head));
        float val = float(p) * freq;
        s_->rope_cos[size_t(p) * half + i] = std::cos(val);
        s_->rope_sin[size_t(p) * half + i] = std::sin(val);
      }
  }
  if (c.pos == PosKind::Sinusoidal) {
    s_->sinus.resize(size_t(npos) * c.d_model);
    for (int p = 0; p < npos; ++p)
      for (int i = 0; i < c.d_model / 2; ++i) {
        double a = p / std::pow(10000.0, 2.0 * i / c.d_model);
        s_->sinus[size_t(p) * c.d_model + 2 * i] = float(std::sin(a));
        s_->sinus[size_t(p) * c.d_model + 2 * i + 1] = float(std::cos(a));
      }
  }
}

Engine::~Engine() = default;

void Engine::set_threads(int n) {
  threads_ = std::max(1, n);
  shares_ = std::make_unique<RowShare[]>(size_t(threads_));
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
  // Attention rows are sized for the longest key range this engine can see, so the
  // growing cache never reallocates them during decoding.
  const size_t smax = size_t(std::max({S, c.max_seq, src_len_}));
  grow(s.att, size_t(c.n_heads) * t * smax);
  grow(s.mask, t * smax);
  grow(s.zpart, size_t(std::max(1, threads_)) * c.q_dim());
}

void Engine::truncate(int p) {
  if (p < 0 || p > pos_) throw Error("cannot truncate the cache to position " + std::to_string(p));
  pos_ = p;
}

// y[out] = W x, split by output rows across threads (in blocks of 8 rows).
void Engine::matvec(const MatView& W, const float* x, float* y) const {
  const MatvecPart part{W, y};
  matvec_group({&part, 1}, x);
}

// Y[T, out] = X[T, in] W^T by matrix-matrix products. Float32 weights (row-major or in
// panels) are packed by gemm_nt directly; 16-bit weights, and panels without gemm_nt,
// are converted a block of rows at a time into float32 rows in scratch.
void Engine::matmul(const MatView& W, int T, const float* x, float* y) const {
  const int64_t out = W.rows, in = W.cols;
  MMap Y(y, T, out);
  CMap X(x, T, in);
  // Y[:, r0 .. r0 + n) from the float32 rows Wr[n, in], the first pr in panels (only
  // with gemm_nt).
  auto product = [&](const float* Wr, int64_t r0, int64_t n, int64_t pr) {
    if (gemm_nt_available())
      gemm_nt(x, T, in, Wr, n, y + r0, out, threads_, pr);
    else
      Y.middleCols(r0, n).noalias() = X * CMap(Wr, n, in).transpose();
  };
  if (W.type == Precision::F32 && (W.panel_rows == 0 || gemm_nt_available()))
    return product(static_cast<const float*>(W.data), 0, out, W.panel_rows);
  // 16-bit, or panels without gemm_nt: a block of rows at a time, as float32 rows.
  const int64_t block = std::max<int64_t>(64, std::min<int64_t>(out, (int64_t(1) << 20) / std::max<int64_t>(in, 1)));
  grow(s_->wide, size_t(block * in));
  for (int64_t r0 = 0; r0 < out; r0 += block) {
    const int64_t n = std::min(block, out - r0);
    W.rows_f32(r0, r0 + n, s_->wide.data());
    product(s_->wide.data(), r0, n, 0);
  }
}

// A thread's share of the rows of a matrix-vector product: [front, back) still to
// do, packed in one word so that the owner (taking rows from the front) and a thread
// that has finished its own share (taking rows from the back) claim disjoint rows.
struct Engine::RowShare {
  alignas(64) std::atomic<uint64_t> fb{0};
};

namespace {
// The keys a thread takes in a split decode attention: [S t / nt, S (t + 1) / nt).
std::pair<int, int> key_share(int S, int t, int nt) { return {S * t / nt, S * (t + 1) / nt}; }

// Loads n floats (one per cache line) so that they are in this core's cache.
void touch(const float* p, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; i += 16) s += p[i];
  volatile float sink = s;
  (void)sink;
}

// Claims rows of a share: a quarter of what is left (at least 8 rows, in multiples of
// 8), from the front or the back. Shares start on a multiple of 8 rows, and a claim
// from the back ends its piece on one too, so that pieces keep to whole groups of
// matrices in panels (perf/gemv.h) even when the share's length is not a multiple of
// 8. False when nothing is left.
bool claim_rows(std::atomic<uint64_t>& fb, bool front, int64_t& r0, int64_t& r1) {
  uint64_t cur = fb.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t f = uint32_t(cur >> 32), b = uint32_t(cur);
    if (f >= b) return false;
    uint32_t n = std::min(b - f, std::max<uint32_t>(8, (b - f) / 4 / 8 * 8));
    if (!front && b - n > f) n += (b - n) % 8;  // the new back on a multiple of 8
    const uint64_t next = front ? (uint64_t(f + n) << 32) | b : (uint64_t(f) << 32) | (b - n);
    if (fb.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      r0 = front ? f : b - n;
      r1 = front ? f + n : b;
      return true;
    }
  }
}
}  // namespace

// Several matrix-vector products with the same input (q, k, v; gate, up) in one
// parallel region. The matrices sit one after another in the weights' block and the
// threads split their rows, taken in order, into contiguous shares, so each thread
// reads one sequential stream. Two threads rarely get the same bandwidth for long,
// so a thread that finishes its share takes rows from the back of the others' (the
// owner takes rows from the front, in shrinking pieces): at most a few rows of
// waiting at the join instead of the slower thread's lag.
void Engine::matvec_group(std::span<const MatvecPart> parts, const float* x, const CacheRows* warm) const {
  int64_t R = 0;
  for (const MatvecPart& p : parts) R += p.W.rows;
  const int nt = threads_;
  auto rows = [&](int64_t g0, int64_t g1) {
    int64_t base = 0;
    for (const MatvecPart& p : parts) {
      const int64_t a = std::max(g0, base), b = std::min(g1, base + p.W.rows);
      if (a < b) {
        float* y = p.y + (a - base);
        p.W.gemv(x, y, a - base, b - base);
        if (p.bias) VMap(y, b - a) += CVMap(p.bias + (a - base), b - a);
        if (p.gelu) gelu_tanh_inplace(y, b - a);
      }
      base += p.W.rows;
    }
  };
  if (nt <= 1 || R < 64) return rows(0, R);
  auto start = [&](int t) { return t == 0 ? int64_t(0) : t == nt ? R : R * t / nt / 8 * 8; };
  for (int t = 0; t < nt; ++t)
    shares_[t].fb.store((uint64_t(0) << 32) | uint64_t(start(t + 1) - start(t)), std::memory_order_relaxed);
  // Every other call the shares go to the threads in reverse order: the thread that
  // read the end of the last product's rows starts on the first rows of this one,
  // which sit right after them in memory (and are already on their way into its cache).
  flip_ = !flip_;
  parallel_for(nt, nt, true, [&](int t) {
    if (warm && warm->rows > 0) {
      // First the cache rows this thread's attention reads next: the other threads'
      // streaming covers the time, and take over rows of this thread's share.
      const auto [j0, j1] =
          warm->split ? key_share(warm->rows, t, nt) : std::pair<int, int>{0, t == 0 ? warm->rows : 0};
      const size_t a = size_t(j0) * warm->width, n = size_t(j1 - j0) * warm->width;
      touch(warm->K + a, n);
      touch(warm->V + a, n);
    }
    const int own = flip_ ? nt - 1 - t : t;
    int64_t r0, r1;
    while (claim_rows(shares_[own].fb, true, r0, r1)) rows(start(own) + r0, start(own) + r1);
    for (int k = 1; k < nt; ++k) {
      const int o = (own + k) % nt;
      while (claim_rows(shares_[o].fb, false, r0, r1)) rows(start(o) + r0, start(o) + r1);
    }
  });
}

// Whether a decode step's attention over S keys is split across the threads: once the
// cache holds 32768 values per layer (43 positions of GPT-2 small) the arithmetic
// outweighs the extra fork and join. Shorter caches are loaded by the first thread
// during the q/k/v products and read from its cache.
bool Engine::decode_split(int S) const { return threads_ > 1 && int64_t(S) * model_->cfg.kv_dim() >= 32768; }

// Linear layers sharing the input x[T, in]: at T == 1 one matvec_group, else one by one.
void Engine::linears(std::initializer_list<std::pair<const Linear*, float*>> ls, int T, const float* x,
                     const CacheRows* warm) const {
  if (T != 1) {
    for (auto [l, y] : ls) linear(*l, T, x, y);
    return;
  }
  MatvecPart parts[3];
  size_t n = 0;
  for (auto [l, y] : ls) parts[n++] = {l->view(), y, l->b.size() ? l->b.data() : nullptr};  // at most three
  matvec_group({parts, n}, x, warm);
}

// y[T, out] = x[T, in] W^T + b
void Engine::linear(const Linear& l, int T, const float* x, float* y) const {
  const MatView W = l.view();
  const int out = int(W.rows);
  if (T == 1) {
    const MatvecPart part{W, y, l.b.size() ? l.b.data() : nullptr};
    matvec_group({&part, 1}, x);
  } else {
    matmul(W, T, x, y);
    if (l.b.size()) MMap(y, T, out).rowwise() += l.b.transpose();
  }
}

void Engine::norm(const Norm& n, int T, const float* x, float* y) const {
  const Config& c = model_->cfg;
  const int d = c.d_model;
  for (int t = 0; t < T; ++t) {
    const float* xr = x + size_t(t) * d;
    float* yr = y + size_t(t) * d;
    if (c.norm == NormKind::RMSNorm) {
      float ss = 0.0f;
      for (int j = 0; j < d; ++j) ss += xr[j] * xr[j];
      ss /= float(d);
      ss += c.norm_eps;
      ss = 1.0f / std::sqrt(ss);
      for (int j = 0; j < d; ++j) yr[j] = n.g[j] * (ss * xr[j]);
    } else {
      layer_norm_row(xr, d, n.g.data(), n.b.size() ? n.b.data() : nullptr, c.norm_eps, yr);
    }
  }
}

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
  if (c.pos == PosKind::Learned || c.pos == PosKind::Sinusoidal) {
    float* p = s_->pos.data();
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
}

// Self-attention (decoder: causal over the cache; encoder: bidirectional with the
// padding mask) or cross-attention (decoder queries over the cached encoder keys).
void Engine::attention(Stack st, int layer, const Attention& a, int T, int pos0, const float* xin, float* out,
                       bool cross) {
  const Config& c = model_->cfg;
  Scratch& s = *s_;
  const int H = c.n_heads, dh = c.d_head, qd = c.q_dim(), kvd = c.kv_dim();
  const int group = H / c.n_kv_heads;
  const bool enc = st == Stack::Encoder;
  const Point pScores = cross ? Point::CrossScores : Point::AttnScores;
  const Point pMask = cross ? Point::CrossMask : Point::AttnMask;
  const Point pPattern = cross ? Point::CrossPattern : Point::AttnPattern;
  const Point pZ = cross ? Point::CrossZ : Point::AttnZ;

  const float* K;
  const float* V;
  int S;
  if (cross) {
    linear(a.q, T, xin, s.q.data());
    K = ck_[layer].data();
    V = cv_[layer].data();
    S = src_len_;
  } else if (enc) {
    linears({{&a.q, s.q.data()}, {&a.k, s.k.data()}, {&a.v, s.v.data()}}, T, xin);
    K = s.k.data();
    V = s.v.data();
    S = T;
  } else {
    float* kc = k_cache_[layer] + size_t(pos0) * kvd;
    float* vc = v_cache_[layer] + size_t(pos0) * kvd;
    // The rows before this step's, loaded by the thread(s) that will read them.
    const CacheRows warm{k_cache_[layer], v_cache_[layer], pos0, kvd, decode_split(pos0 + 1)};
    linears({{&a.q, s.q.data()}, {&a.k, kc}, {&a.v, vc}}, T, xin, T == 1 ? &warm : nullptr);
    K = k_cache_[layer];
    V = v_cache_[layer];
    S = pos0 + T;
  }
  if (c.pos == PosKind::Rotary && !cross) {
    const int half = dh / 2;
    float* kk = enc ? s.k.data() : k_cache_[layer] + size_t(pos0) * kvd;
    for (int t = 0; t < T; ++t) {
      const float* cs = s.rope_cos.data() + size_t(pos0 + t) * half;
      const float* sn = s.rope_sin.data() + size_t(pos0 + t) * half;
      auto rot = [&](float* v, int width) {
        for (int i = 0; i < width; i += 2) {
          int j = (i % dh) / 2;
          float v0 = v[i], v1 = v[i + 1];
          v[i] = v0 * cs[j] - v1 * sn[j];
          v[i + 1] = v0 * sn[j] + v1 * cs[j];
        }
      };
      rot(s.q.data() + size_t(t) * qd, qd);
      rot(kk + size_t(t) * kvd, kvd);
    }
  }

  // Which keys a query row may read.
  const int* src = src_ids_.data();
  const int pad = c.pad_id;
  auto allowed = [&](int t, int j) -> bool {
    if (cross || enc) return !(pad >= 0 && src[j] == pad);
    return j <= pos0 + t;
  };
  if (hooks_.active(st, layer, pMask)) {
    float* m = s.mask.data();
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < S; ++j) m[size_t(t) * S + j] = allowed(t, j) ? 1.0f : 0.0f;
    hooks_.fire(st, layer, pMask, pos0, {m, 2, {T, S, 1}});
  }

  const float scale = 1.0f / std::sqrt(float(dh));
  const float ninf = -std::numeric_limits<float>::infinity();
  float* att = s.att.data();
  // Scores for every head: [H, T, S], masked cells -inf. Per head, Q_h K_h^T and
  // P_h V_h are matrix products over strided views of the q/k/v rows.
  using CStrided = Eigen::Map<const MatRM, 0, Eigen::OuterStride<>>;
  constexpr int kBlock = 64;
  const bool causal = !cross && !enc;  // decoder self-attention: key j is read by row t iff j <= pos0 + t
  const bool causal_blocks = causal && T > kBlock;
  using Strided = Eigen::Map<MatRM, 0, Eigen::OuterStride<>>;
  auto scores = [&](int h) {
    const int g = h / group;
    CStrided Qh(s.q.data() + size_t(h) * dh, T, dh, Eigen::OuterStride<>(qd));
    CStrided Kh(K + size_t(g) * dh, S, dh, Eigen::OuterStride<>(kvd));
    MMap A(att + size_t(h) * T * S, T, S);
    if (causal_blocks) {
      // Row block [t0, t1) reads keys 0 .. pos0 + t1 - 1 only: half the work of a
      // long prompt. Cells past that are masked below without being computed.
      for (int t0 = 0; t0 < T; t0 += kBlock) {
        const int nb = std::min(kBlock, T - t0), keys = pos0 + t0 + nb;
        A.block(t0, 0, nb, keys).noalias() = Qh.middleRows(t0, nb) * Kh.topRows(keys).transpose();
      }
    } else {
      A.noalias() = Qh * Kh.transpose();
    }
    for (int t = 0; t < T; ++t) {
      float* row = att + (size_t(h) * T + t) * S;
      if (causal) {  // keys 0 .. pos0 + t, then masked (two loops the compiler vectorises)
        const int n = pos0 + t + 1;
        for (int j = 0; j < n; ++j) row[j] *= scale;
        std::fill(row + n, row + S, ninf);
      } else {
        for (int j = 0; j < S; ++j) row[j] = allowed(t, j) ? row[j] * scale : ninf;
      }
    }
  };
  auto softmax = [&](int h) {
    for (int t = 0; t < T; ++t) {
      float* row = att + (size_t(h) * T + t) * S;
      // Causal rows end in masked cells: exponentials only up to the last key read.
      const int n = causal ? pos0 + t + 1 : S;
      float mx = ninf;
      for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
      if (mx == ninf) {  // every key masked: the row reads nothing
        std::fill_n(row, S, 0.0f);
        continue;
      }
      const float sum = exp_shift_sum(row, n, mx);
      const float inv = 1.0f / sum;
      for (int j = 0; j < n; ++j) row[j] *= inv;
      std::fill(row + n, row + S, 0.0f);
    }
  };
  auto mix = [&](int h) {
    const int g = h / group;
    CStrided Vh(V + size_t(g) * dh, S, dh, Eigen::OuterStride<>(kvd));
    Strided Zh(s.z.data() + size_t(h) * dh, T, dh, Eigen::OuterStride<>(qd));
    CMap A(att + size_t(h) * T * S, T, S);
    if (causal_blocks) {
      for (int t0 = 0; t0 < T; t0 += kBlock) {
        const int nb = std::min(kBlock, T - t0), keys = pos0 + t0 + nb;
        Zh.middleRows(t0, nb).noalias() = A.block(t0, 0, nb, keys) * Vh.topRows(keys);
      }
    } else {
      Zh.noalias() = A * Vh;
    }
  };
  const bool par = threads_ > 1 && int64_t(T) * S * H >= 4096;
  const bool hs = hooks_.active(st, layer, pScores), hp = hooks_.active(st, layer, pPattern);
  const int nt = threads_;
  if (T == 1) {
    // Decoding: one query row. The cache is read a key row (every head) at a time, so
    // it streams sequentially; with threads, each takes a contiguous range of keys
    // (and the mixes it adds up are summed at the end) once the cache is long enough
    // to be worth a fork and join.
    const float* qv = s.q.data();
    const bool split = decode_split(S);
    auto by_keys = [&](auto&& f) {
      if (!split) return f(0, 0, S);
      parallel_for(nt, nt, true, [&](int t) {
        const auto [j0, j1] = key_share(S, t, nt);
        f(t, j0, j1);
      });
    };
    by_keys([&](int, int j0, int j1) {
      for (int j = j0; j < j1; ++j) {
        if (allowed(0, j)) {
          head_dots(qv, K + size_t(j) * kvd, H, group, dh, scale, att + j, S);
        } else {
          for (int h = 0; h < H; ++h) att[size_t(h) * S + j] = ninf;
        }
      }
    });
    if (hs) hooks_.fire(st, layer, pScores, pos0, {att, 3, {H, T, S}});
    for (int h = 0; h < H; ++h) softmax(h);
    if (hp) hooks_.fire(st, layer, pPattern, pos0, {att, 3, {H, T, S}});
    by_keys([&](int t, int j0, int j1) {
      float* z = split ? s.zpart.data() + size_t(t) * qd : s.z.data();
      std::fill_n(z, qd, 0.0f);
      for (int j = j0; j < j1; ++j) head_axpys(att + j, S, V + size_t(j) * kvd, H, group, dh, z);
    });
    if (split) {
      VMap z(s.z.data(), qd);
      z = CVMap(s.zpart.data(), qd);
      for (int t = 1; t < nt; ++t) z += CVMap(s.zpart.data() + size_t(t) * qd, qd);
    }
  } else if (!hs && !hp) {
    parallel_for(H, nt, par, [&](int h) {
      scores(h);
      softmax(h);
      mix(h);
    });
  } else {
    parallel_for(H, nt, par, scores);
    if (hs) hooks_.fire(st, layer, pScores, pos0, {att, 3, {H, T, S}});
    parallel_for(H, nt, par, softmax);
    if (hp) hooks_.fire(st, layer, pPattern, pos0, {att, 3, {H, T, S}});
    parallel_for(H, nt, par, mix);
  }
  if (hooks_.active(st, layer, pZ)) hooks_.fire(st, layer, pZ, pos0, {s.z.data(), 2, {T, qd, 1}});
  linear(a.o, T, s.z.data(), out);
}

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
  if (c.ffn == FFNKind::SwiGLU) {
    linears({{&f.gate, a}, {&f.up, s.ff2.data()}}, T, xin);
  } else if (fused) {
    const MatvecPart part{f.up.view(), a, f.up.b.size() ? f.up.b.data() : nullptr, true};
    matvec_group({&part, 1}, xin);
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
    }
  }
  if (hooks_.active(st, layer, Point::MlpPost)) hooks_.fire(st, layer, Point::MlpPost, pos0, {a, 2, {T, F, 1}});
  linear(f.down, T, a, out);
}

void Engine::encode(std::span<const int> src) {
  const Config& c = model_->cfg;
  const Weights& w = model_->w;
  if (!c.encoder_decoder) throw Error("this model has no encoder; --source is for encoder-decoder models");
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
  for (int l = 0; l < c.n_enc_layers; ++l) {
    const Block& b = w.enc_blocks[l];
    if (hooks_.active(Stack::Encoder, l, Point::ResidPre))
      hooks_.fire(Stack::Encoder, l, Point::ResidPre, 0, {x, 2, {S, d, 1}});
    const bool pre = c.norm_place == NormPlace::Pre;
    if (pre) norm(b.ln1, S, x, s.h.data());
    attention(Stack::Encoder, l, b.attn, S, 0, pre ? s.h.data() : x, s.out.data(), false);
    MMap(x, S, d) += CMap(s.out.data(), S, d);
    if (!pre) norm(b.ln1, S, x, x);
    if (hooks_.active(Stack::Encoder, l, Point::ResidMid))
      hooks_.fire(Stack::Encoder, l, Point::ResidMid, 0, {x, 2, {S, d, 1}});
    if (pre) norm(b.ln3, S, x, s.h.data());
    ffn(Stack::Encoder, l, b.ffn, S, 0, pre ? s.h.data() : x, s.out.data());
    MMap(x, S, d) += CMap(s.out.data(), S, d);
    if (!pre) norm(b.ln3, S, x, x);
    if (hooks_.active(Stack::Encoder, l, Point::ResidPost))
      hooks_.fire(Stack::Encoder, l, Point::ResidPost, 0, {x, 2, {S, d, 1}});
  }
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
  Scratch& s = *s_;
  const int d = c.d_model;
  float* x = s.x.data();
  embed(Stack::Decoder, tokens, pos0, x);
  const bool pre = c.norm_place == NormPlace::Pre;
  const Stack D = Stack::Decoder;
  for (int l = 0; l < c.n_layers; ++l) {
    const Block& b = w.blocks[l];
    if (hooks_.active(D, l, Point::ResidPre)) hooks_.fire(D, l, Point::ResidPre, pos0, {x, 2, {T, d, 1}});
    if (pre) norm(b.ln1, T, x, s.h.data());
    attention(D, l, b.attn, T, pos0, pre ? s.h.data() : x, s.out.data(), false);
    MMap(x, T, d) += CMap(s.out.data(), T, d);
    if (!pre) norm(b.ln1, T, x, x);
    if (hooks_.active(D, l, Point::ResidMid)) hooks_.fire(D, l, Point::ResidMid, pos0, {x, 2, {T, d, 1}});
    if (c.encoder_decoder) {
      if (pre) norm(b.ln2, T, x, s.h.data());
      attention(D, l, b.cross, T, pos0, pre ? s.h.data() : x, s.out.data(), true);
      MMap(x, T, d) += CMap(s.out.data(), T, d);
      if (!pre) norm(b.ln2, T, x, x);
      if (hooks_.active(D, l, Point::ResidMidCross)) hooks_.fire(D, l, Point::ResidMidCross, pos0, {x, 2, {T, d, 1}});
    }
    if (pre) norm(b.ln3, T, x, s.h.data());
    ffn(D, l, b.ffn, T, pos0, pre ? s.h.data() : x, s.out.data());
    MMap(x, T, d) += CMap(s.out.data(), T, d);
    if (!pre) norm(b.ln3, T, x, x);
    if (hooks_.active(D, l, Point::ResidPost)) hooks_.fire(D, l, Point::ResidPost, pos0, {x, 2, {T, d, 1}});
  }
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
  if (hooks_.active(D, -1, Point::Logits))
    hooks_.fire(D, -1, Point::Logits, all_logits ? pos0 : pos0 + T - 1, {s.logits.data(), 2, {rows, c.vocab_size, 1}});
  pos_ += T;
  return Eigen::Map<const MatRM>(s.logits.data(), rows, c.vocab_size);
}

MatRM Engine::forward_full(std::span<const int> tokens) {
  pos_ = 0;
  return MatRM(forward(tokens, true));
}

}  // namespace ds
