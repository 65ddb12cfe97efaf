#include "model/config.h"

#include <cmath>
#include <sstream>

#include "util/error.h"

namespace ds {

const char* to_string(NormKind k) { return k == NormKind::LayerNorm ? "layernorm" : "rmsnorm"; }
const char* to_string(NormPlace k) { return k == NormPlace::Pre ? "pre" : "post"; }
const char* to_string(PosKind k) {
  switch (k) {
    case PosKind::None:
      return "none";
    case PosKind::Learned:
      return "learned";
    case PosKind::Sinusoidal:
      return "sinusoidal";
    case PosKind::Rotary:
      return "rotary";
  }
  return "?";
}
const char* to_string(FFNKind k) {
  switch (k) {
    case FFNKind::GELU:
      return "gelu";
    case FFNKind::GELUTanh:
      return "gelu_tanh";
    case FFNKind::ReLU:
      return "relu";
    case FFNKind::SwiGLU:
      return "swiglu";
    case FFNKind::GeGLU:
      return "geglu";
  }
  return "?";
}
const char* to_string(RopeStyle k) { return k == RopeStyle::Interleaved ? "interleaved" : "half"; }

float Config::score_scale() const { return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(float(d_head)); }

Config gpt2_config(int n_embd, int n_layer, int n_head, int n_positions, int vocab_size) {
  Config c;
  c.d_model = n_embd;
  c.n_layers = n_layer;
  c.n_enc_layers = 0;
  c.n_heads = c.n_kv_heads = n_head;
  c.d_head = n_head > 0 ? n_embd / n_head : 0;
  // Out-of-range sizes (from a corrupt config.json) must not overflow here;
  // validate() reports them.
  c.d_ff = n_embd > 0 && n_embd <= (1 << 24) ? 4 * n_embd : -1;
  c.vocab_size = vocab_size;
  c.max_seq = c.max_src = n_positions;
  c.norm = NormKind::LayerNorm;
  c.norm_place = NormPlace::Pre;
  c.pos = PosKind::Learned;
  c.ffn = FFNKind::GELUTanh;
  c.encoder_decoder = false;
  c.tied_head = true;
  c.attn_bias = c.ffn_bias = c.norm_bias = true;
  c.final_norm = true;
  c.enc_final_norm = false;
  c.scale_embed = false;
  c.norm_eps = 1e-5f;
  c.bos_id = c.eos_id = vocab_size > 0 ? vocab_size - 1 : -1;
  c.pad_id = -1;
  return c;
}

void Config::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("invalid model configuration: " + what);
  };
  // Limits keep every product of sizes far from overflowing int64 and memory sane.
  const int big = 1 << 20;
  need(d_model > 0 && d_model <= big,
       "d_model must be in 1.." + std::to_string(big) + ", is " + std::to_string(d_model));
  need(n_layers >= 0 && n_layers <= 4096, "n_layers must be in 0..4096, is " + std::to_string(n_layers));
  need(n_heads > 0 && n_heads <= 4096, "n_heads must be in 1..4096, is " + std::to_string(n_heads));
  need(n_kv_heads > 0 && n_kv_heads <= n_heads && n_heads % n_kv_heads == 0,
       "n_kv_heads (" + std::to_string(n_kv_heads) + ") must divide n_heads (" + std::to_string(n_heads) + ")");
  need(d_head > 0 && d_head <= big, "d_head must be positive, is " + std::to_string(d_head));
  need(pos != PosKind::Rotary || d_head % 2 == 0, "rotary positions need an even d_head, is " + std::to_string(d_head));
  need(pos != PosKind::Sinusoidal || d_model % 2 == 0, "sinusoidal positions need an even d_model");
  need(d_ff > 0 && d_ff <= 16 * big, "d_ff must be positive, is " + std::to_string(d_ff));
  need(vocab_size > 0 && vocab_size <= 16 * big, "vocab_size must be in 1..16777216, is " + std::to_string(vocab_size));
  need(max_seq > 0 && max_seq <= big, "max_seq must be in 1..1048576, is " + std::to_string(max_seq));
  need(!encoder_decoder || (n_enc_layers >= 0 && n_enc_layers <= 4096 && max_src > 0 && max_src <= big),
       "encoder sizes out of range");
  need(norm_eps >= 0 && norm_eps < 1, "norm_eps out of range");
  need(rope_theta > 0 && rope_theta_local > 0, "rope_theta must be positive");
  need(std::isfinite(rope_scale) && rope_scale > 0, "rope_scale must be positive");
  need(rope_freq_factors.empty() || int(rope_freq_factors.size()) == d_head / 2,
       "rope_freq_factors has " + std::to_string(rope_freq_factors.size()) +
           " entries, expected d_head / 2 = " + std::to_string(d_head / 2));
  for (float f : rope_freq_factors) need(std::isfinite(f) && f > 0, "rope_freq_factors must be positive and finite");
  need(sliding_window >= 0 && (sliding_layers.empty() || int(sliding_layers.size()) == n_layers),
       "sliding_layers must name every layer");
  need(std::isfinite(attn_scale) && attn_scale >= 0 && std::isfinite(logit_softcap) && logit_softcap >= 0,
       "attn_scale and logit_softcap must be finite and not negative");
  need(!sandwich_norm || norm_place == NormPlace::Pre, "sandwich norms need a pre-norm model");
  need(!(qk_norm || sandwich_norm) || !encoder_decoder, "q/k norms and sandwich norms are for decoder-only models");
  need(bos_id < vocab_size && eos_id < vocab_size && pad_id < vocab_size, "special token id outside the vocabulary");
}

std::string Config::describe() const {
  std::ostringstream o;
  o << (encoder_decoder ? "encoder-decoder" : "decoder-only") << ", d_model " << d_model << ", " << n_layers
    << " layers";
  if (encoder_decoder) o << " (+" << n_enc_layers << " encoder)";
  o << ", " << n_heads << " heads";
  if (n_kv_heads != n_heads) o << " (" << n_kv_heads << " kv heads)";
  o << " of " << d_head << ", d_ff " << d_ff << ", vocab " << vocab_size << ", context " << max_seq << "; "
    << to_string(norm) << " " << to_string(norm_place) << "-norm, " << to_string(pos) << " positions, "
    << to_string(ffn) << ", " << (tied_head ? "tied" : "separate") << " head";
  if (pos == PosKind::Rotary && rope_style == RopeStyle::Half) o << ", rotate-half rotary";
  if (!rope_freq_factors.empty()) o << ", rotary frequency factors";
  if (qk_norm) o << ", q/k norms";
  if (sandwich_norm) o << ", norms after each sub-layer";
  if (sliding_window > 0) o << ", sliding window " << sliding_window;
  if (logit_softcap > 0) o << ", logit soft-cap " << logit_softcap;
  return o.str();
}

}  // namespace ds
