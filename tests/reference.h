#pragma once
// A naive reference implementation of the forward pass, written from the semantics
// comment at the end of core/model/config.h and independently of the engine: plain
// loops, double precision, std::vector<double>. It reads weight entries one by one
// (w.blocks[l].attn.q.W(i, j)) and uses no Eigen arithmetic. It is slow on purpose
// and only meant for tiny test models.
#include <cmath>
#include <cstddef>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ref {

using Row = std::vector<double>;
using Rows = std::vector<Row>;  // [position][feature]
// pattern[layer][head][query][key]
using Patterns = std::vector<std::vector<Rows>>;

// Attention patterns recorded by ref_logits (softmax probabilities, masked cells 0).
struct Trace {
  Patterns self;   // decoder self-attention, [n_layers][n_heads][T][T]
  Patterns cross;  // decoder cross-attention, [n_layers][n_heads][T][S] (enc-dec only)
  Patterns enc;    // encoder self-attention, [n_enc_layers][n_heads][S][S] (enc-dec only)
  Rows enc_out;    // encoder output [S][d_model] (enc-dec only)
};

namespace detail {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("reference: " + what);
}

// y = W x + b (b only when present).
inline Row linear(const ds::Linear& l, const Row& x) {
  const long rows = long(l.W.rows()), cols = long(l.W.cols());
  require(cols == long(x.size()), "linear input size mismatch");
  require(l.b.size() == 0 || long(l.b.size()) == rows, "linear bias size mismatch");
  Row y(size_t(rows), 0.0);
  for (long i = 0; i < rows; ++i) {
    double acc = 0.0;
    for (long j = 0; j < cols; ++j) acc += double(l.W(i, j)) * x[size_t(j)];
    if (l.b.size() != 0) acc += double(l.b(i));
    y[size_t(i)] = acc;
  }
  return y;
}

inline Row norm(const ds::Config& cfg, const ds::Norm& n, const Row& x) {
  const size_t d = x.size();
  require(size_t(n.g.size()) == d, "norm gain size mismatch");
  Row y(d);
  const double eps = double(cfg.norm_eps);
  if (cfg.norm == ds::NormKind::LayerNorm) {
    double mean = 0.0;
    for (double v : x) mean += v;
    mean /= double(d);
    double var = 0.0;
    for (double v : x) var += (v - mean) * (v - mean);
    var /= double(d);  // biased variance
    const double inv = 1.0 / std::sqrt(var + eps);
    for (size_t i = 0; i < d; ++i) {
      y[i] = (x[i] - mean) * inv * double(n.g(long(i)));
      if (n.b.size() != 0) y[i] += double(n.b(long(i)));
    }
  } else {
    double ms = 0.0;
    for (double v : x) ms += v * v;
    ms /= double(d);
    const double inv = 1.0 / std::sqrt(ms + eps);
    for (size_t i = 0; i < d; ++i) y[i] = x[i] * inv * double(n.g(long(i)));
  }
  return y;
}

inline Rows norm_rows(const ds::Config& cfg, const ds::Norm& n, const Rows& x) {
  Rows y;
  y.reserve(x.size());
  for (const Row& r : x) y.push_back(norm(cfg, n, r));
  return y;
}

inline void add_into(Rows& x, const Rows& delta) {
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = 0; j < x[i].size(); ++j) x[i][j] += delta[i][j];
}

inline Rows add(const Rows& a, const Rows& b) {
  Rows y = a;
  add_into(y, b);
  return y;
}

// x_p = E[id] * (scale_embed ? sqrt(d_model) : 1) + P(p).
inline Rows embed(const ds::Config& cfg, const ds::MatRM& tok, const ds::MatRM& pos, const std::vector<int>& ids) {
  const int d = cfg.d_model;
  const double scale = cfg.scale_embed ? std::sqrt(double(d)) : 1.0;
  Rows x(ids.size(), Row(size_t(d), 0.0));
  for (size_t p = 0; p < ids.size(); ++p) {
    const int id = ids[p];
    require(id >= 0 && id < int(tok.rows()), "token id out of range");
    for (int c = 0; c < d; ++c) {
      double v = double(tok(id, c)) * scale;
      if (cfg.pos == ds::PosKind::Learned) {
        require(long(p) < long(pos.rows()), "position beyond the learned table");
        v += double(pos(long(p), c));
      } else if (cfg.pos == ds::PosKind::Sinusoidal) {
        const int i2 = c - (c % 2);  // 2i
        const double angle = double(p) / std::pow(10000.0, double(i2) / double(d));
        v += (c % 2 == 0) ? std::sin(angle) : std::cos(angle);
      }
      x[p][size_t(c)] = v;
    }
  }
  return x;
}

// Rotates each head of vec (n_heads_here heads of d_head) for absolute position p.
inline void rotate(const ds::Config& cfg, Row& vec, int n_heads_here, int p) {
  const int dh = cfg.d_head;
  for (int h = 0; h < n_heads_here; ++h) {
    for (int i = 0; i < dh / 2; ++i) {
      const double f = 1.0 / std::pow(double(cfg.rope_theta), double(2 * i) / double(dh));
      const double a = double(p) * f;
      const size_t iu = size_t(h * dh + 2 * i), iw = iu + 1;
      const double u = vec[iu], w = vec[iw];
      vec[iu] = u * std::cos(a) - w * std::sin(a);
      vec[iw] = u * std::sin(a) + w * std::cos(a);
    }
  }
}

// Multi-head attention of queries xq over keys/values xkv.
//   allowed[i][j]: may query i attend to key j
//   rotary: rotate q (position i) and k (position j)
//   zero_h: this head's z slice is set to zero before Wo (-1: none)
//   pat: if non-null, receives [n_heads][Tq][Tk]
inline Rows attention(const ds::Config& cfg, const ds::Attention& a, const Rows& xq, const Rows& xkv,
                      const std::vector<std::vector<bool>>& allowed, bool rotary, int zero_h, std::vector<Rows>* pat) {
  const int H = cfg.n_heads, KV = cfg.n_kv_heads, dh = cfg.d_head;
  require(KV > 0 && H % KV == 0, "n_heads must be a multiple of n_kv_heads");
  const int group = H / KV;
  const size_t Tq = xq.size(), Tk = xkv.size();
  Rows q(Tq), k(Tk), v(Tk);
  for (size_t i = 0; i < Tq; ++i) {
    q[i] = linear(a.q, xq[i]);
    require(int(q[i].size()) == H * dh, "q size mismatch");
    if (rotary) rotate(cfg, q[i], H, int(i));
  }
  for (size_t j = 0; j < Tk; ++j) {
    k[j] = linear(a.k, xkv[j]);
    v[j] = linear(a.v, xkv[j]);
    require(int(k[j].size()) == KV * dh && int(v[j].size()) == KV * dh, "k/v size mismatch");
    if (rotary) rotate(cfg, k[j], KV, int(j));
  }
  if (pat) pat->assign(size_t(H), Rows(Tq, Row(Tk, 0.0)));
  const double inv_sqrt = 1.0 / std::sqrt(double(dh));
  Rows z(Tq, Row(size_t(H * dh), 0.0));
  for (int h = 0; h < H; ++h) {
    const int kh = h / group;
    for (size_t i = 0; i < Tq; ++i) {
      Row s(Tk, 0.0);
      double mx = -INFINITY;
      bool any = false;
      for (size_t j = 0; j < Tk; ++j) {
        if (!allowed[i][j]) continue;
        double dot = 0.0;
        for (int c = 0; c < dh; ++c) dot += q[i][size_t(h * dh + c)] * k[j][size_t(kh * dh + c)];
        s[j] = dot * inv_sqrt;
        if (!any || s[j] > mx) mx = s[j];
        any = true;
      }
      require(any, "a query row has no allowed key");
      Row p(Tk, 0.0);
      double sum = 0.0;
      for (size_t j = 0; j < Tk; ++j) {
        if (!allowed[i][j]) continue;
        p[j] = std::exp(s[j] - mx);
        sum += p[j];
      }
      for (size_t j = 0; j < Tk; ++j) p[j] /= sum;
      if (pat) (*pat)[size_t(h)][i] = p;
      if (h == zero_h) continue;  // z slice stays zero
      for (int c = 0; c < dh; ++c) {
        double acc = 0.0;
        for (size_t j = 0; j < Tk; ++j) acc += p[j] * v[j][size_t(kh * dh + c)];
        z[i][size_t(h * dh + c)] = acc;
      }
    }
  }
  Rows out(Tq);
  for (size_t i = 0; i < Tq; ++i) out[i] = linear(a.o, z[i]);
  return out;
}

inline double act(ds::FFNKind kind, double x) {
  switch (kind) {
    case ds::FFNKind::GELU:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ds::FFNKind::GELUTanh: {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case ds::FFNKind::ReLU:
      return x > 0.0 ? x : 0.0;
    case ds::FFNKind::SwiGLU:
      return x / (1.0 + std::exp(-x));  // silu, applied to the gate
  }
  return x;
}

inline Rows ffn(const ds::Config& cfg, const ds::FeedForward& f, const Rows& x) {
  Rows out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    Row up = linear(f.up, x[i]);
    Row h(up.size());
    if (cfg.ffn == ds::FFNKind::SwiGLU) {
      Row gate = linear(f.gate, x[i]);
      require(gate.size() == up.size(), "gate/up size mismatch");
      for (size_t c = 0; c < h.size(); ++c) h[c] = act(cfg.ffn, gate[c]) * up[c];
    } else {
      for (size_t c = 0; c < h.size(); ++c) h[c] = act(cfg.ffn, up[c]);
    }
    out[i] = linear(f.down, h);
  }
  return out;
}

// One block. enc: encoder output for cross-attention (null: no cross-attention).
inline Rows block(const ds::Config& cfg, const ds::Block& b, Rows x, const std::vector<std::vector<bool>>& self_allowed,
                  const Rows* enc, const std::vector<std::vector<bool>>* cross_allowed, int zero_h,
                  std::vector<Rows>* self_pat, std::vector<Rows>* cross_pat) {
  const bool rotary = cfg.pos == ds::PosKind::Rotary;
  if (cfg.norm_place == ds::NormPlace::Pre) {
    add_into(x, attention(cfg, b.attn, norm_rows(cfg, b.ln1, x), norm_rows(cfg, b.ln1, x), self_allowed, rotary, zero_h,
                          self_pat));
    if (enc) {
      add_into(x, attention(cfg, b.cross, norm_rows(cfg, b.ln2, x), *enc, *cross_allowed, false, -1, cross_pat));
    }
    add_into(x, ffn(cfg, b.ffn, norm_rows(cfg, b.ln3, x)));
  } else {
    x = norm_rows(cfg, b.ln1, add(x, attention(cfg, b.attn, x, x, self_allowed, rotary, zero_h, self_pat)));
    if (enc) {
      x = norm_rows(cfg, b.ln2, add(x, attention(cfg, b.cross, x, *enc, *cross_allowed, false, -1, cross_pat)));
    }
    x = norm_rows(cfg, b.ln3, add(x, ffn(cfg, b.ffn, x)));
  }
  return x;
}

}  // namespace detail

// Encoder output [S][d_model] for an encoder-decoder model.
inline Rows ref_encode(const ds::Config& cfg, const ds::Weights& w, const std::vector<int>& src,
                       Patterns* enc_patterns = nullptr) {
  using namespace detail;
  require(cfg.encoder_decoder, "ref_encode needs an encoder-decoder model");
  require(!src.empty(), "empty source");
  const ds::MatRM& tok = w.enc_tok_embed.size() ? w.enc_tok_embed : w.tok_embed;
  Rows x = embed(cfg, tok, w.enc_pos_embed, src);
  const size_t S = src.size();
  std::vector<std::vector<bool>> allowed(S, std::vector<bool>(S, true));
  for (size_t i = 0; i < S; ++i)
    for (size_t j = 0; j < S; ++j) allowed[i][j] = !(cfg.pad_id >= 0 && src[j] == cfg.pad_id);
  if (enc_patterns) enc_patterns->assign(size_t(cfg.n_enc_layers), {});
  for (int l = 0; l < cfg.n_enc_layers; ++l)
    x = block(cfg, w.enc_blocks[size_t(l)], x, allowed, nullptr, nullptr, -1,
              enc_patterns ? &(*enc_patterns)[size_t(l)] : nullptr, nullptr);
  if (cfg.enc_final_norm) x = norm_rows(cfg, w.enc_ln_final, x);
  return x;
}

// Logits [T][vocab] at every decoder position of `tokens` (positions 0..T-1).
// src: the encoder source (encoder-decoder models). zero_layer/zero_head: that
// decoder self-attention head's z slice is zeroed before Wo. trace: if non-null,
// receives the attention patterns.
inline Rows ref_logits(const ds::Config& cfg, const ds::Weights& w, const std::vector<int>& tokens,
                       const std::vector<int>& src = {}, int zero_layer = -1, int zero_head = -1,
                       Trace* trace = nullptr) {
  using namespace detail;
  require(!tokens.empty(), "empty token list");
  Rows enc;
  std::vector<std::vector<bool>> cross_allowed;
  if (cfg.encoder_decoder) {
    enc = ref_encode(cfg, w, src, trace ? &trace->enc : nullptr);
    if (trace) trace->enc_out = enc;
    cross_allowed.assign(tokens.size(), std::vector<bool>(src.size(), true));
    for (size_t i = 0; i < tokens.size(); ++i)
      for (size_t j = 0; j < src.size(); ++j) cross_allowed[i][j] = !(cfg.pad_id >= 0 && src[j] == cfg.pad_id);
  }
  const size_t T = tokens.size();
  std::vector<std::vector<bool>> causal(T, std::vector<bool>(T, false));
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j <= i; ++j) causal[i][j] = true;

  Rows x = embed(cfg, w.tok_embed, w.pos_embed, tokens);
  if (trace) {
    trace->self.assign(size_t(cfg.n_layers), {});
    trace->cross.assign(cfg.encoder_decoder ? size_t(cfg.n_layers) : 0, {});
  }
  for (int l = 0; l < cfg.n_layers; ++l) {
    x = block(cfg, w.blocks[size_t(l)], x, causal, cfg.encoder_decoder ? &enc : nullptr,
              cfg.encoder_decoder ? &cross_allowed : nullptr, l == zero_layer ? zero_head : -1,
              trace ? &trace->self[size_t(l)] : nullptr,
              (trace && cfg.encoder_decoder) ? &trace->cross[size_t(l)] : nullptr);
  }
  if (cfg.final_norm) x = norm_rows(cfg, w.ln_final, x);
  const ds::MatRM& head = cfg.tied_head ? w.tok_embed : w.lm_head;
  require(head.rows() == cfg.vocab_size && head.cols() == cfg.d_model, "head shape mismatch");
  Rows logits(T, Row(size_t(cfg.vocab_size), 0.0));
  for (size_t i = 0; i < T; ++i)
    for (int v = 0; v < cfg.vocab_size; ++v) {
      double acc = 0.0;
      for (int c = 0; c < cfg.d_model; ++c) acc += double(head(v, c)) * x[i][size_t(c)];
      logits[i][size_t(v)] = acc;
    }
  return logits;
}

}  // namespace ref
