// The reference forward pass, to be read from top to bottom:
//
//   1. numbers:        weight(), linear()          y = W x + b
//   2. embedding:      sinusoid(), embed()         x_p = E[id] + P(p)
//   3. norms:          layer_norm(), rms_norm()
//   4. attention:      rotate(), heads_of(), attend_one(), attention()
//                      scores = q.k / sqrt(d_head), the mask, softmax, z = weights . V
//   5. feed-forward:   activation(), feed_forward()
//   6. a block:        block()                      pre-norm or post-norm, Add & Norm
//   7. whole model:    encode(), logits()
//
// Each block also hands back what it computed on the way (BlockRecord: the norms'
// outputs, q, k, v, the attention weights, each sub-layer's output), so the tests can
// compare every hook point of the engine with it.
// T is the number of decoder positions, S the number of source positions (encoder-
// decoder models), d = d_model. Every formula is the one written at the end of
// model/config.h; the mask rule is model/mask.h's, shared with the engine.
#include "model/reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
#include <string>

#include "model/mask.h"
#include "util/error.h"

namespace ds::ref {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw Error("reference forward pass: " + what);
}

// ---- 1. numbers

// Element (r, c) of a float32 weight matrix, wherever its storage keeps it.
double weight(const WMat& W, long r, long c) {
  const int64_t tiled_rows = W.tiles() ? tile_rows(W.rows()) : 0;
  return double(W.data()[element_index(r, c, W.cols(), tiled_rows)]);
}

// y = W x + b: [out] from [in] (b only when the layer has one).
Row linear(const Linear& l, const Row& x) {
  const long out = long(l.W.rows()), in = long(l.W.cols());
  require(out > 0 || l.W16.empty(), "the reference reads float32 weights (load the model in float32)");
  require(in == long(x.size()), "a linear layer's input has the wrong size");
  Row y(size_t(out), 0.0);  // [out]
  for (long i = 0; i < out; ++i) {
    double acc = l.b.size() ? double(l.b(i)) : 0.0;
    for (long j = 0; j < in; ++j) acc += weight(l.W, i, j) * x[size_t(j)];
    y[size_t(i)] = acc;
  }
  return y;
}

Rows add(Rows a, const Rows& b) {
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) a[i][j] += b[i][j];
  return a;
}

// ---- 2. embedding

// The sinusoidal position vector's feature c at position p:
// PE(p)[2i] = sin(p / 10000^(2i/d)), PE(p)[2i+1] = cos(p / 10000^(2i/d)).
double sinusoid(int p, int c, int d) {
  const int two_i = c - c % 2;
  const double angle = double(p) / std::pow(10000.0, double(two_i) / double(d));
  return c % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

// x_p = E[id_p] * (scale_embed ? sqrt(d) : 1) + P(p), P learned, sinusoidal or none
// (rotary positions act inside attention instead).
Rows embed(const Config& cfg, const WMat& tok, const MatRM& pos, const std::vector<int>& ids) {
  const int d = cfg.d_model;
  const double scale = cfg.scale_embed ? std::sqrt(double(d)) : 1.0;
  Rows x(ids.size(), Row(size_t(d)));  // x: [T][d]
  for (size_t p = 0; p < ids.size(); ++p) {
    require(ids[p] >= 0 && ids[p] < tok.rows(), "token id out of range");
    require(cfg.pos != PosKind::Learned || long(p) < pos.rows(), "position beyond the learned table");
    for (int c = 0; c < d; ++c) {
      double v = weight(tok, ids[p], c) * scale;
      if (cfg.pos == PosKind::Learned) v += double(pos(long(p), c));
      if (cfg.pos == PosKind::Sinusoidal) v += sinusoid(int(p), c, d);
      x[p][size_t(c)] = v;
    }
  }
  return x;
}

// ---- 3. norms

// LayerNorm(x) = (x - mean) / sqrt(var + eps) * g + b, with the biased variance.
Row layer_norm(const Norm& n, double eps, const Row& x) {
  const double d = double(x.size());
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v / d;
  for (double v : x) var += (v - mean) * (v - mean) / d;
  Row y(x.size());  // [d]
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = (x[i] - mean) / std::sqrt(var + eps) * double(n.g(long(i))) + (n.b.size() ? double(n.b(long(i))) : 0.0);
  return y;
}

// RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g.
Row rms_norm(const Norm& n, double eps, const Row& x) {
  double mean_sq = 0.0;
  for (double v : x) mean_sq += v * v / double(x.size());
  Row y(x.size());  // [d]
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(mean_sq + eps) * double(n.g(long(i)));
  return y;
}

// The config's norm applied to every row: [T][d] -> [T][d].
Rows norm(const Config& cfg, const Norm& n, const Rows& x) {
  require(n.g.size() == cfg.d_model, "a norm's gain has the wrong size");
  Rows y;  // [T][d]
  for (const Row& r : x)
    y.push_back(cfg.norm == NormKind::LayerNorm ? layer_norm(n, cfg.norm_eps, r) : rms_norm(n, cfg.norm_eps, r));
  return y;
}

// ---- 4. attention

// Rotary positions: each head's features are rotated in pairs (2i, 2i+1), or (i, i +
// d_head/2) for RopeStyle::Half, by the angle a = p / rope_theta^(2i / d_head) of
// absolute position p; on global layers a is also times rope_scale and divided by the
// frequency's factor, and sliding-window layers use rope_theta_local instead.
void rotate(const Config& cfg, Row& vec, int n_heads, int p, int layer) {
  const int dh = cfg.d_head;
  const bool local = cfg.sliding(layer);
  const double theta = local ? cfg.rope_theta_local : cfg.rope_theta;
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < dh / 2; ++i) {
      double a = double(p) / std::pow(theta, double(2 * i) / double(dh));
      if (!local) a *= double(cfg.rope_scale);
      if (!local && !cfg.rope_freq_factors.empty()) a /= double(cfg.rope_freq_factors[size_t(i)]);
      const bool half = cfg.rope_style == RopeStyle::Half;
      double& u = vec[size_t(h * dh + (half ? i : 2 * i))];
      double& w = vec[size_t(h * dh + (half ? i + dh / 2 : 2 * i + 1))];
      const double u0 = u, w0 = w;
      u = u0 * std::cos(a) - w0 * std::sin(a);
      w = u0 * std::sin(a) + w0 * std::cos(a);
    }
}

// RMSNorm of each head's d_head features with the gains g (q/k norms, Qwen3 and Gemma 3).
void norm_heads(const Config& cfg, const Norm& g, Row& vec, int n_heads) {
  const int dh = cfg.d_head;
  require(g.g.size() == dh, "a q/k norm's gain has the wrong size");
  for (int h = 0; h < n_heads; ++h) {
    double mean_sq = 0.0;
    for (int c = 0; c < dh; ++c) mean_sq += vec[size_t(h * dh + c)] * vec[size_t(h * dh + c)] / double(dh);
    for (int c = 0; c < dh; ++c)
      vec[size_t(h * dh + c)] = vec[size_t(h * dh + c)] / std::sqrt(mean_sq + double(cfg.norm_eps)) * double(g.g(c));
  }
}

// One projection (q, k or v) of every row, all heads side by side: [T][n_heads * d_head],
// each head normed first when head_norm is given, then rotated for its position when
// rotary (layer picks the rotary base: sliding-window layers have their own).
Rows heads_of(const Config& cfg, const Linear& l, const Rows& x, int n_heads, bool rotary, const Norm* head_norm,
              int layer) {
  Rows y;  // [T][n_heads * d_head]
  for (size_t p = 0; p < x.size(); ++p) {
    y.push_back(linear(l, x[p]));
    require(int(y.back().size()) == n_heads * cfg.d_head, "a q/k/v projection has the wrong size");
    if (head_norm) norm_heads(cfg, *head_norm, y.back(), n_heads);
    if (rotary) rotate(cfg, y.back(), n_heads, int(p), layer);
  }
  return y;
}

// Where a query may look: the mask rule, written once (model/mask.h).
struct Keys {
  AttnKind kind;
  std::span<const int> src;  // source ids (encoder and cross-attention), for pad masking
  int pad_id = -1;
  int layer = -1;  // the decoder layer (self-attention): its sliding window and rotary base
  int window = 0;  // > 0: a sliding-window layer's width
};

// One head, one query row i: scores s_j = q.k_j / sqrt(d_head) for the keys it may
// attend to (the others get -inf, the mask), weights = softmax(s) (masked keys get
// exactly 0), and z = sum_j weights_j v_j. Returns the weights [keys]; writes z [d_head].
Row attend_one(const Config& cfg, const Row& q, const Rows& k, const Rows& v, int qh, int kh, int i, const Keys& keys,
               double* z) {
  const int dh = cfg.d_head;
  Row s(k.size(), -INFINITY);  // scores: [keys]
  double max = -INFINITY;
  for (size_t j = 0; j < k.size(); ++j) {
    if (!may_attend(keys.kind, i, int(j), keys.src, keys.pad_id, keys.window)) continue;
    double dot = 0.0;
    for (int c = 0; c < dh; ++c) dot += q[size_t(qh * dh + c)] * k[j][size_t(kh * dh + c)];
    s[j] = cfg.attn_scale > 0 ? dot * double(cfg.attn_scale) : dot / std::sqrt(double(dh));
    max = std::max(max, s[j]);
  }
  require(max > -INFINITY, "a query may attend to no key at all");
  Row weights(k.size(), 0.0);  // softmax: [keys]
  double sum = 0.0;
  for (size_t j = 0; j < k.size(); ++j) {
    weights[j] = std::exp(s[j] - max);  // a masked key: exp(-inf) = 0
    sum += weights[j];
  }
  for (size_t j = 0; j < k.size(); ++j) {
    weights[j] /= sum;
    for (int c = 0; c < dh; ++c) z[c] += weights[j] * v[j][size_t(kh * dh + c)];
  }
  return weights;
}

// Multi-head attention of the rows xq over the rows xkv (the same rows for
// self-attention, the encoder's output for cross-attention). Query head h reads
// key/value head h / (n_heads / n_kv_heads) (grouped-query attention when n_kv_heads
// < n_heads). zero_head's z stays 0. seen receives q, k, v and the weights.
Rows attention(const Config& cfg, const Attention& a, const Rows& xq, const Rows& xkv, const Keys& keys, int zero_head,
               AttnRecord& seen) {
  const int H = cfg.n_heads, KV = cfg.n_kv_heads, dh = cfg.d_head;
  require(KV > 0 && H % KV == 0, "n_heads must be a multiple of n_kv_heads");
  const bool rotary = cfg.pos == PosKind::Rotary && keys.kind != AttnKind::Cross;
  const bool qkn = cfg.qk_norm && keys.kind != AttnKind::Cross;
  const Rows& q = seen.q = heads_of(cfg, a.q, xq, H, rotary, qkn ? &a.q_norm : nullptr, keys.layer);    // [Tq][H * dh]
  const Rows& k = seen.k = heads_of(cfg, a.k, xkv, KV, rotary, qkn ? &a.k_norm : nullptr, keys.layer);  // [Tk][KV * dh]
  const Rows& v = seen.v = heads_of(cfg, a.v, xkv, KV, false, nullptr, keys.layer);                     // [Tk][KV * dh]
  seen.pattern.assign(size_t(H), Rows(xq.size()));                                                      // [H][Tq][Tk]
  Rows out;                                                                                             // [Tq][d]
  for (size_t i = 0; i < xq.size(); ++i) {
    Row z(size_t(H * dh), 0.0);  // the heads' outputs side by side: [H * dh]
    for (int h = 0; h < H; ++h) {
      Row head_z(size_t(dh), 0.0);  // [dh]
      Row weights = attend_one(cfg, q[i], k, v, h, h / (H / KV), int(i), keys, head_z.data());
      if (h != zero_head) std::copy(head_z.begin(), head_z.end(), z.begin() + h * dh);
      seen.pattern[size_t(h)][i] = std::move(weights);
    }
    out.push_back(linear(a.o, z));  // the output projection Wo z + bo
  }
  return out;
}

// ---- 5. feed-forward

double activation(FFNKind kind, double x) {
  switch (kind) {
    case FFNKind::GELU:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case FFNKind::GELUTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    case FFNKind::ReLU:
      return x > 0.0 ? x : 0.0;
    case FFNKind::SwiGLU:
      return x / (1.0 + std::exp(-x));  // silu, applied to the gate
    case FFNKind::GeGLU:                // GELU-tanh, applied to the gate
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

// Each row: h = act(up x) (SwiGLU, GeGLU: h = act(gate x) * up x), out = down h.
Rows feed_forward(const Config& cfg, const FeedForward& f, const Rows& x) {
  Rows out;  // [T][d]
  for (const Row& r : x) {
    Row h = linear(f.up, r);  // [d_ff]
    if (cfg.gated()) {
      const Row gate = linear(f.gate, r);  // [d_ff]
      require(gate.size() == h.size(), "the gate and up projections differ in size");
      for (size_t c = 0; c < h.size(); ++c) h[c] *= activation(cfg.ffn, gate[c]);
    } else {
      for (double& v : h) v = activation(cfg.ffn, v);
    }
    out.push_back(linear(f.down, h));
  }
  return out;
}

// ---- 6. a block

// What one block needs besides its input: where its queries may look, and the
// encoder's output for the cross-attention sub-layer (decoder blocks of encoder-decoder
// models only).
struct BlockInputs {
  Keys self;
  const Rows* enc = nullptr;  // [S][d]
  Keys cross{AttnKind::Cross, {}, -1};
  int zero_head = -1;
};

// Pre-norm:  x += attn(ln1(x));  [x += cross(ln2(x), enc)];  x += ffn(ln3(x))
// Post-norm: x = ln1(x + attn(x));  [x = ln2(x + cross(x, enc))];  x = ln3(x + ffn(x))
// r receives each norm's output and each sub-layer's (r.ln1 = ..., r.attn_out = ...).
Rows block(const Config& cfg, const Block& b, Rows x, const BlockInputs& in, BlockRecord& r) {
  r.resid_pre = x;
  if (cfg.sandwich_norm) {  // Gemma 3: each sub-layer's output normed too before it is added
    const Rows& h1 = r.ln1 = norm(cfg, b.ln1, x);
    r.attn_out = attention(cfg, b.attn, h1, h1, in.self, in.zero_head, r.attn);
    x = r.resid_mid = add(x, norm(cfg, b.post_attn, r.attn_out));
    r.mlp_out = feed_forward(cfg, b.ffn, r.ln3 = norm(cfg, b.ln3, x));
    return r.resid_post = add(x, norm(cfg, b.post_ffn, r.mlp_out));
  }
  if (cfg.norm_place == NormPlace::Pre) {
    const Rows& h1 = r.ln1 = norm(cfg, b.ln1, x);
    x = r.resid_mid = add(x, r.attn_out = attention(cfg, b.attn, h1, h1, in.self, in.zero_head, r.attn));
    if (in.enc) {
      const Rows& h2 = r.ln2 = norm(cfg, b.ln2, x);
      x = r.resid_mid_cross = add(x, r.cross_attn_out = attention(cfg, b.cross, h2, *in.enc, in.cross, -1, r.cross));
    }
    return r.resid_post = add(x, r.mlp_out = feed_forward(cfg, b.ffn, r.ln3 = norm(cfg, b.ln3, x)));
  }
  x = r.resid_mid = r.ln1 =
      norm(cfg, b.ln1, add(x, r.attn_out = attention(cfg, b.attn, x, x, in.self, in.zero_head, r.attn)));
  if (in.enc)
    x = r.resid_mid_cross = r.ln2 =
        norm(cfg, b.ln2, add(x, r.cross_attn_out = attention(cfg, b.cross, x, *in.enc, in.cross, -1, r.cross)));
  return r.resid_post = r.ln3 = norm(cfg, b.ln3, add(x, r.mlp_out = feed_forward(cfg, b.ffn, x)));
}

}  // namespace

// ---- 7. the whole model

Rows encode(const Config& cfg, const Weights& w, const std::vector<int>& src, Patterns* enc_patterns,
            std::vector<BlockRecord>* blocks) {
  require(cfg.encoder_decoder, "encode needs an encoder-decoder model");
  require(!src.empty(), "the source is empty");
  Rows x = embed(cfg, w.enc_embed(), w.enc_pos_embed, src);  // [S][d]
  std::vector<BlockRecord> seen(size_t(cfg.n_enc_layers));   // what each block computed
  for (int l = 0; l < cfg.n_enc_layers; ++l) {
    const BlockInputs in{.self = {AttnKind::Bidirectional, src, cfg.pad_id}};
    x = block(cfg, w.enc_blocks[size_t(l)], std::move(x), in, seen[size_t(l)]);
  }
  if (enc_patterns) {
    enc_patterns->clear();
    for (auto& b : seen) enc_patterns->push_back(b.attn.pattern);
  }
  if (blocks) *blocks = std::move(seen);
  return cfg.enc_final_norm ? norm(cfg, w.enc_ln_final, x) : x;
}

Rows logits(const Config& cfg, const Weights& w, const std::vector<int>& tokens, const std::vector<int>& src,
            int zero_layer, int zero_head, Recorded* rec) {
  require(!tokens.empty(), "the token list is empty");
  Rows enc;  // [S][d]
  if (cfg.encoder_decoder) enc = encode(cfg, w, src, rec ? &rec->enc : nullptr, rec ? &rec->enc_blocks : nullptr);
  Rows x = embed(cfg, w.tok_embed, w.pos_embed, tokens);  // [T][d]
  std::vector<BlockRecord> seen(size_t(cfg.n_layers));    // what each block computed
  for (int l = 0; l < cfg.n_layers; ++l) {
    const Keys self{AttnKind::Causal, {}, -1, l, cfg.sliding(l) ? cfg.sliding_window : 0};
    BlockInputs in{.self = self, .zero_head = l == zero_layer ? zero_head : -1};
    if (cfg.encoder_decoder) in.enc = &enc, in.cross = {AttnKind::Cross, src, cfg.pad_id};
    x = block(cfg, w.blocks[size_t(l)], std::move(x), in, seen[size_t(l)]);
  }
  if (rec) {
    rec->enc_out = enc, rec->self.clear(), rec->cross.clear();
    for (auto& b : seen) {
      rec->self.push_back(b.attn.pattern);
      if (cfg.encoder_decoder) rec->cross.push_back(b.cross.pattern);
    }
    rec->blocks = std::move(seen);
  }
  if (cfg.final_norm) x = norm(cfg, w.ln_final, x);
  const WMat& head = cfg.tied_head ? w.tok_embed : w.lm_head;  // [vocab][d]
  require(head.rows() == cfg.vocab_size && head.cols() == cfg.d_model, "the output head has the wrong shape");
  Rows out(x.size(), Row(size_t(cfg.vocab_size), 0.0));  // logits: [T][vocab]
  for (size_t i = 0; i < x.size(); ++i)
    for (long v = 0; v < cfg.vocab_size; ++v)
      for (long c = 0; c < cfg.d_model; ++c) out[i][size_t(v)] += weight(head, v, c) * x[i][size_t(c)];
  if (cfg.logit_softcap > 0)  // c * tanh(logit / c)
    for (Row& r : out)
      for (double& v : r) v = double(cfg.logit_softcap) * std::tanh(v / double(cfg.logit_softcap));
  return out;
}

// ---- 8. one activation replaced (activation patching)

Rows logits_with_resid_pre(const Config& cfg, const Weights& w, const std::vector<int>& tokens,
                           const std::vector<int>& src, int layer, int pos, const Row& value) {
  require(!tokens.empty(), "the token list is empty");
  require(layer >= 0 && layer < cfg.n_layers && pos >= 0 && pos < int(tokens.size()), "no such site to patch");
  require(int(value.size()) == cfg.d_model, "the patched value is not d_model wide");
  Rows enc;  // [S][d]
  if (cfg.encoder_decoder) enc = encode(cfg, w, src);
  Rows x = embed(cfg, w.tok_embed, w.pos_embed, tokens);  // [T][d]
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (l == layer) x[size_t(pos)] = value;  // the patch
    const Keys self{AttnKind::Causal, {}, -1, l, cfg.sliding(l) ? cfg.sliding_window : 0};
    BlockInputs in{.self = self};
    if (cfg.encoder_decoder) in.enc = &enc, in.cross = {AttnKind::Cross, src, cfg.pad_id};
    BlockRecord seen;
    x = block(cfg, w.blocks[size_t(l)], std::move(x), in, seen);
  }
  if (cfg.final_norm) x = norm(cfg, w.ln_final, x);
  const WMat& head = cfg.tied_head ? w.tok_embed : w.lm_head;  // [vocab][d]
  Rows out(x.size(), Row(size_t(cfg.vocab_size), 0.0));        // logits: [T][vocab]
  for (size_t i = 0; i < x.size(); ++i)
    for (long v = 0; v < cfg.vocab_size; ++v)
      for (long c = 0; c < cfg.d_model; ++c) out[i][size_t(v)] += weight(head, v, c) * x[i][size_t(c)];
  if (cfg.logit_softcap > 0)  // c * tanh(logit / c)
    for (Row& r : out)
      for (double& v : r) v = double(cfg.logit_softcap) * std::tanh(v / double(cfg.logit_softcap));
  return out;
}

}  // namespace ds::ref
