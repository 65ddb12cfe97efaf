#include "probe/attribution.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "util/error.h"

namespace ds {

std::string part_label(const AttributionPart& p) {
  const std::string l = std::to_string(p.layer), h = std::to_string(p.head);
  switch (p.kind) {
    case PartKind::Embed:
      return "embedding";
    case PartKind::PosEmbed:
      return "position embedding";
    case PartKind::Head:
      return "L" + l + " H" + h;
    case PartKind::AttnBias:
      return "L" + l + " attn bias";
    case PartKind::CrossHead:
      return "L" + l + " cross H" + h;
    case PartKind::CrossBias:
      return "L" + l + " cross bias";
    case PartKind::Mlp:
      return "MLP " + l;
  }
  return "?";
}

double Attribution::total() const {
  double s = bias_term;
  for (const AttributionPart& p : parts) s += p.value;
  return s;
}

std::string attribution_refusal(const Config& c) {
  if (c.norm_place == NormPlace::Post)
    return "direct logit attribution is defined for pre-norm models: this model's blocks are post-norm (Add & Norm "
           "renormalises the residual stream inside every block), so the final stream is not a sum of what each "
           "head and MLP wrote";
  if (c.sandwich_norm)
    return "direct logit attribution is defined for pre-norm models: this model also normalises each sub-layer's "
           "output before adding it (sandwich norms), so a head's share of that output is not a term of the final "
           "stream";
  return "";
}

namespace {

// The rows at the position read, as the forward pass publishes them.
struct Captured {
  std::vector<float> embed, pos_embed, final_in, final_out;             // [d_model]
  std::vector<std::vector<float>> z, attn_out, cz, cross_out, mlp_out;  // per layer
};

void check_request(const Config& c, const AttributionRequest& r, int pos) {
  if (r.tokens.empty()) throw Error("attribution needs at least one token");
  if (pos < 0 || pos >= int(r.tokens.size()))
    throw Error("position " + std::to_string(pos) + " is outside the " + std::to_string(r.tokens.size()) + " tokens");
  if (pos + 1 > c.max_seq)
    throw Error("position " + std::to_string(pos) + " is past the model's context of " + std::to_string(c.max_seq));
  for (int id : r.tokens)
    if (id < 0 || id >= c.vocab_size) throw Error("token " + std::to_string(id) + " is outside the vocabulary");
  for (int id : {r.token, r.vs})
    if (id >= c.vocab_size) throw Error("token " + std::to_string(id) + " is outside the vocabulary");
  if (c.encoder_decoder && r.source.empty()) throw Error("an encoder-decoder model needs a source to attribute");
}

// Subscribes to every point the attribution reads, keeping row `pos`.
std::vector<int> subscribe_all(Hooks& hk, const Config& c, int pos, Captured& cap) {
  std::vector<int> handles;
  auto keep = [&](Stack s, int layer, Point p, std::vector<float>& into) {
    handles.push_back(hk.subscribe(Hooks::name(s, layer, p), [&into, pos](HookEvent& ev) {
      const int t = pos - ev.pos0;
      if (t < 0 || t >= ev.t.shape[0]) return;
      const int64_t w = ev.t.size() / ev.t.shape[0];
      into.assign(ev.t.data + t * w, ev.t.data + (t + 1) * w);
    }));
  };
  const Stack D = Stack::Decoder;
  keep(D, -1, Point::Embed, cap.embed);
  if (c.pos == PosKind::Learned || c.pos == PosKind::Sinusoidal) keep(D, -1, Point::PosEmbed, cap.pos_embed);
  const size_t L = size_t(c.n_layers);
  cap.z.resize(L), cap.attn_out.resize(L), cap.cz.resize(L), cap.cross_out.resize(L), cap.mlp_out.resize(L);
  for (int l = 0; l < c.n_layers; ++l) {
    keep(D, l, Point::AttnZ, cap.z[size_t(l)]);
    keep(D, l, Point::AttnOut, cap.attn_out[size_t(l)]);
    if (c.encoder_decoder) {
      keep(D, l, Point::CrossZ, cap.cz[size_t(l)]);
      keep(D, l, Point::CrossAttnOut, cap.cross_out[size_t(l)]);
    }
    keep(D, l, Point::MlpOut, cap.mlp_out[size_t(l)]);
  }
  keep(D, c.n_layers - 1, Point::ResidPost, cap.final_in);
  if (c.final_norm) keep(D, -1, Point::LnFinal, cap.final_out);
  return handles;
}

// The readout direction of one token row u: what a residual vector is dotted with to
// give its share of the logit (s * g * u, centred for LayerNorm).
struct Readout {
  std::vector<double> v;  // [d_model]
  double bias = 0;        // u . b
};

Readout readout(const Model& m, const std::vector<double>& u, double s) {
  const Config& c = m.cfg;
  const int d = c.d_model;
  Readout r;
  r.v = u;
  if (!c.final_norm) return r;
  const Norm& n = m.w.ln_final;
  double mean = 0;
  for (int j = 0; j < d; ++j) {
    r.v[size_t(j)] = s * double(n.g[j]) * u[size_t(j)];
    mean += r.v[size_t(j)] / d;
    if (n.b.size()) r.bias += u[size_t(j)] * double(n.b[j]);
  }
  if (c.norm == NormKind::LayerNorm)
    for (double& x : r.v) x -= mean;  // (c - mean(c)) . v == c . (v - mean(v))
  return r;
}

// The final norm's scale at the row x.
double norm_scale(const Config& c, const std::vector<float>& x) {
  if (!c.final_norm) return 1.0;
  const double d = double(x.size());
  double mean = 0, var = 0;
  for (float v : x) mean += double(v) / d;
  if (c.norm == NormKind::RMSNorm) {
    for (float v : x) var += double(v) * double(v) / d;
  } else {
    for (float v : x) var += (double(v) - mean) * (double(v) - mean) / d;
  }
  return 1.0 / std::sqrt(var + double(c.norm_eps));
}

std::vector<double> token_row(const Model& m, int id) {
  std::vector<float> row(size_t(m.cfg.d_model));
  m.w.head_view().row(id, row.data());
  return std::vector<double>(row.begin(), row.end());
}

// Every head's output Wo[:, h] z_h ([n_heads][d_model]) of one attention at the row z.
std::vector<std::vector<float>> head_outputs(const Config& c, const Linear& o, const std::vector<float>& z) {
  const int d = c.d_model, H = c.n_heads, dh = c.d_head;
  std::vector<std::vector<float>> out(static_cast<size_t>(H), std::vector<float>(static_cast<size_t>(d)));
  std::vector<float> row(size_t(c.q_dim()));
  const MatView W = o.view();  // [d_model, q_dim]
  for (int r = 0; r < d; ++r) {
    W.row(r, row.data());
    for (int h = 0; h < H; ++h) {
      double acc = 0;
      for (int k = 0; k < dh; ++k) acc += double(row[size_t(h * dh + k)]) * double(z[size_t(h * dh + k)]);
      out[size_t(h)][size_t(r)] = float(acc);
    }
  }
  return out;
}

void add_part(Attribution& a, PartKind kind, int layer, int head, const float* vec) {
  a.parts.push_back({kind, layer, head, 0.0});
  a.vectors.insert(a.vectors.end(), vec, vec + a.d_model);
}

// One attention's heads and bias as parts (cross: the cross-attention).
void add_attention(Attribution& a, const Config& c, const Attention& at, int l, const std::vector<float>& z,
                   bool cross) {
  if (z.size() != size_t(c.q_dim()))
    throw Error("the forward pass published no head outputs at layer " + std::to_string(l));
  const auto outs = head_outputs(c, at.o, z);
  for (int h = 0; h < c.n_heads; ++h)
    add_part(a, cross ? PartKind::CrossHead : PartKind::Head, l, h, outs[size_t(h)].data());
  if (at.o.b.size()) add_part(a, cross ? PartKind::CrossBias : PartKind::AttnBias, l, -1, at.o.b.data());
}

void collect_parts(Attribution& a, const Model& m, const Captured& cap) {
  const Config& c = m.cfg;
  add_part(a, PartKind::Embed, -1, -1, cap.embed.data());
  if (!cap.pos_embed.empty()) add_part(a, PartKind::PosEmbed, -1, -1, cap.pos_embed.data());
  for (int l = 0; l < c.n_layers; ++l) {
    const Block& b = m.w.blocks[size_t(l)];
    add_attention(a, c, b.attn, l, cap.z[size_t(l)], false);
    if (c.encoder_decoder) add_attention(a, c, b.cross, l, cap.cz[size_t(l)], true);
    add_part(a, PartKind::Mlp, l, -1, cap.mlp_out[size_t(l)].data());
  }
}

}  // namespace

Attribution attribute(const std::shared_ptr<const Model>& m, const AttributionRequest& r) {
  if (!m) throw Error("no model");
  const Config& c = m->cfg;
  if (const std::string why = attribution_refusal(c); !why.empty()) throw Error(why);
  const int pos = r.pos < 0 ? int(r.tokens.size()) - 1 : r.pos;
  check_request(c, r, pos);
  Engine e(m);
  e.set_threads(std::max(1, r.threads));
  if (c.encoder_decoder) e.encode(r.source);
  Captured cap;
  subscribe_all(e.hooks(), c, pos, cap);
  const MatRM logits = e.forward_full(std::span<const int>(r.tokens.data(), size_t(pos) + 1), false);  // [1, vocab]
  Attribution a;
  a.pos = pos;
  a.d_model = c.d_model;
  a.softcap = c.logit_softcap > 0;
  Eigen::Index best = 0;
  logits.row(0).maxCoeff(&best);
  a.greedy = int(best);
  a.token = r.token >= 0 ? r.token : a.greedy;
  a.vs = r.vs;
  std::vector<double> u = token_row(*m, a.token);
  if (a.vs >= 0) {
    const std::vector<double> w = token_row(*m, a.vs);
    for (size_t j = 0; j < u.size(); ++j) u[j] -= w[j];
  }
  a.scale = norm_scale(c, cap.final_in);
  a.centered = c.final_norm && c.norm == NormKind::LayerNorm;
  const Readout ro = readout(*m, u, a.scale);
  a.bias_term = ro.bias;
  collect_parts(a, *m, cap);
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const float* v = a.vector(i);
    double s = 0;
    for (int j = 0; j < c.d_model; ++j) s += double(v[j]) * ro.v[size_t(j)];
    a.parts[i].value = s;
  }
  // The logit as the model computed it: the head's row(s) dotted with the final norm's
  // output (before any soft-cap), and the range of all logits at pos.
  const std::vector<float>& y = c.final_norm ? cap.final_out : cap.final_in;
  a.logit = 0;
  for (int j = 0; j < c.d_model; ++j) a.logit += u[size_t(j)] * double(y[size_t(j)]);
  auto raw = [&](float l) {  // undoes the soft-cap c * tanh(l / c)
    if (!a.softcap) return double(l);
    const double cap_v = c.logit_softcap, t = std::clamp(double(l) / cap_v, -0.999999, 0.999999);
    return cap_v * std::atanh(t);
  };
  a.logit_min = raw(logits.row(0).minCoeff());
  a.logit_max = raw(logits.row(0).maxCoeff());
  return a;
}

int find_head_part(const Attribution& a, HeadSite site, int layer, int head) {
  const PartKind k = site == HeadSite::Cross ? PartKind::CrossHead : PartKind::Head;
  for (size_t i = 0; i < a.parts.size(); ++i)
    if (a.parts[i].kind == k && a.parts[i].layer == layer && a.parts[i].head == head) return int(i);
  return -1;
}

PartWrites part_writes(const Model& m, const Attribution& a, size_t part, int k) {
  const Config& c = m.cfg;
  if (part >= a.parts.size() || a.d_model != c.d_model) throw Error("no such part of the attribution");
  const int d = c.d_model, V = c.vocab_size;
  // The part's vector through the final norm's linear map: s * g * (v - mean(v)).
  const float* v = a.vector(part);
  double mean = 0;
  for (int j = 0; j < d; ++j) mean += double(v[j]) / d;
  std::vector<double> y(static_cast<size_t>(d));
  for (int j = 0; j < d; ++j) {
    const double x = a.centered ? double(v[j]) - mean : double(v[j]);
    y[size_t(j)] = c.final_norm ? a.scale * double(m.w.ln_final.g[j]) * x : x;
  }
  std::vector<TokenPush> all(static_cast<size_t>(V));
  const MatView W = m.w.head_view();
  const int block = 256;
  std::vector<float> rows(size_t(block) * d);
  for (int r0 = 0; r0 < V; r0 += block) {
    const int n = std::min(block, V - r0);
    W.rows_f32(r0, r0 + n, rows.data());
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < d; ++j) s += double(rows[size_t(i) * d + j]) * y[size_t(j)];
      all[size_t(r0 + i)] = {r0 + i, s};
    }
  }
  const size_t kk = size_t(std::clamp(k, 0, V));
  PartWrites w;
  auto higher = [](const TokenPush& x, const TokenPush& z) {
    return x.value > z.value || (x.value == z.value && x.id < z.id);
  };
  auto lower = [](const TokenPush& x, const TokenPush& z) {
    return x.value < z.value || (x.value == z.value && x.id < z.id);
  };
  std::partial_sort(all.begin(), all.begin() + long(kk), all.end(), higher);
  w.up.assign(all.begin(), all.begin() + long(kk));
  std::partial_sort(all.begin(), all.begin() + long(kk), all.end(), lower);
  w.down.assign(all.begin(), all.begin() + long(kk));
  return w;
}

}  // namespace ds
