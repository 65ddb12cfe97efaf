#include "model/cost.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace ds {

namespace {

// The sizes the formulas of cost.h name.
struct Dims {
  double d, q, kv, F, V, f, L, E;
  bool cross;
  explicit Dims(const Config& c)
      : d(c.d_model),
        q(c.q_dim()),
        kv(c.kv_dim()),
        F(c.d_ff),
        V(c.vocab_size),
        f(c.gated() ? 3 : 2),
        L(c.n_layers),
        E(c.encoder_decoder ? c.n_enc_layers : 0),
        cross(c.encoder_decoder) {}
  double self_proj() const { return d * q + 2 * d * kv + q * d; }  // a row's q, k, v and output
  double cross_proj() const { return cross ? d * q + q * d : 0; }  // a row's cross q and output
  double ffn() const { return f * d * F; }
};

// The layers and the head of a step computing the n rows at positions p-n+1 .. p.
StepCost rows_cost(const Config& c, int p, int n, bool cached, const CostOptions& o) {
  if (p < 0) throw Error("a step's position must be 0 or more, not " + std::to_string(p));
  const Dims m(c);
  const double S = m.cross ? o.src_len : 0, rows = n;
  // Query row at position j reads keys 0..j: the sum of (j + 1) over the rows, and on a
  // sliding-window layer the last sliding_window of them: the sum of min(j + 1, window).
  const double first = p - n + 1, last = p;
  double keys = 0;  // over every decoder layer
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.sliding(l)) {
      keys += (first + 1 + last + 1) * rows / 2;
      continue;
    }
    for (int j = p - n + 1; j <= p; ++j) keys += std::min(j + 1, c.sliding_window);
  }
  StepCost s;
  s.rows = n;
  s.proj_macs = m.L * rows * (m.self_proj() + m.cross_proj());
  s.attn_macs = 2 * m.q * keys + m.L * rows * 2 * m.q * S;
  s.ffn_macs = m.L * rows * m.ffn();
  s.head_macs = m.V * m.d;
  s.weight_bytes = o.bytes_per_weight * (m.L * (m.self_proj() + m.cross_proj() + m.ffn()) + m.V * m.d);
  // The cached keys and values a step reads: p + 1 a layer, the window's on sliding layers.
  double cached_rows = 0;
  for (int l = 0; l < c.n_layers; ++l) cached_rows += c.sliding(l) ? std::min(p + 1, c.sliding_window) : p + 1.0;
  s.cache_bytes = cached ? o.bytes_per_value * 2 * cached_rows * m.kv : 0;
  s.cross_bytes = o.bytes_per_value * m.L * 2 * S * m.kv;
  return s;
}

}  // namespace

StepCost& StepCost::operator+=(const StepCost& o) {
  rows += o.rows;
  proj_macs += o.proj_macs;
  attn_macs += o.attn_macs;
  ffn_macs += o.ffn_macs;
  head_macs += o.head_macs;
  weight_bytes += o.weight_bytes;
  cache_bytes += o.cache_bytes;
  cross_bytes += o.cross_bytes;
  return *this;
}

StepCost cached_step_cost(const Config& c, int p, const CostOptions& o) { return rows_cost(c, p, 1, true, o); }

StepCost uncached_step_cost(const Config& c, int p, const CostOptions& o) { return rows_cost(c, p, p + 1, false, o); }

StepCost step_cost(const Config& c, int p, bool kv_cache, const CostOptions& o) {
  return kv_cache ? cached_step_cost(c, p, o) : uncached_step_cost(c, p, o);
}

StepCost encode_cost(const Config& c, int src_len, const CostOptions& o) {
  if (!c.encoder_decoder) throw Error("encode_cost: this model has no encoder");
  if (src_len < 1) throw Error("encode_cost: the source needs at least one position");
  const Dims m(c);
  const double S = src_len;
  StepCost s;
  s.rows = src_len;
  s.proj_macs = m.E * S * m.self_proj() + m.L * S * 2 * m.d * m.kv;
  s.attn_macs = m.E * 2 * m.q * S * S;
  s.ffn_macs = m.E * S * m.ffn();
  s.weight_bytes = o.bytes_per_weight * (m.E * (m.self_proj() + m.ffn()) + m.L * 2 * m.d * m.kv);
  return s;
}

StepCost generation_cost(const Config& c, int prompt, int positions, bool kv_cache, const CostOptions& o) {
  if (prompt < 1 || positions < prompt)
    throw Error("generation_cost: need 1 <= prompt <= positions, got " + std::to_string(prompt) + " and " +
                std::to_string(positions));
  StepCost total = uncached_step_cost(c, prompt - 1, o);
  for (int p = prompt; p < positions; ++p) total += step_cost(c, p, kv_cache, o);
  return total;
}

}  // namespace ds
