#pragma once
// Direct logit attribution: a token's logit split into what each part of the model
// wrote into the residual stream at one position.
//
// In a pre-norm model the residual stream that reaches the final norm is a sum:
//   x = embedding (+ position embedding)
//     + for every layer l: sum over heads h of Wo[:, h] z_h  +  bo
//                          (+ the same for the cross-attention of encoder-decoders)
//                          + the MLP's output
// The final norm is y = s * g * (x - mean(x)) + b (LayerNorm; RMSNorm: s * g * x), with
// s = 1 / sqrt(var(x) + eps) (or 1 / rms). Freezing s at the value the run computed (the
// standard choice), the logit u . y of a token with unembedding row u is linear in x:
//   logit = sum over parts c of  s * (g * u) . (c - mean(c))   +   u . b
// so each part's contribution is its vector read through the same map, and the
// contributions plus the final norm's bias term equal the logit. With two tokens, u is
// the difference of their rows and the sum is the difference of their logits.
//
// Post-norm and sandwich-norm blocks renormalise the stream (or each sub-layer's output)
// inside every block, so what a head wrote is not a term of the final stream: the
// attribution refuses them (attribution_refusal says why).
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "probe/interventions.h"

namespace ds {

enum class PartKind { Embed, PosEmbed, Head, AttnBias, CrossHead, CrossBias, Mlp };

// One term of the residual stream at the position.
struct AttributionPart {
  PartKind kind = PartKind::Embed;
  int layer = -1, head = -1;  // -1 where it does not apply
  double value = 0;           // its contribution to the logit (or the difference)
};

// "embedding", "position embedding", "L3 H5", "L3 attn bias", "L3 cross H5",
// "L3 cross bias", "MLP 3".
std::string part_label(const AttributionPart& p);

struct Attribution {
  int pos = 0;                         // the position read (its logits predict position pos + 1)
  int token = -1, vs = -1;             // the logit of token (minus that of vs when vs >= 0)
  int greedy = -1;                     // the model's most probable token at pos
  std::vector<AttributionPart> parts;  // forward order: embedding(s), then per layer heads, bias, cross, MLP
  std::vector<float> vectors;          // [parts, d_model] what each part wrote at pos
  int d_model = 0;
  double bias_term = 0;   // u . b of the final norm (LayerNorm with a bias), else 0
  double logit = 0;       // the model's logit of token (minus vs) at pos, before any soft-cap
  double logit_min = 0;   // the smallest and largest logit at pos (before any soft-cap)
  double logit_max = 0;   //   (the scale the contributions are read against)
  double scale = 1;       // the final norm's s at pos (1 when the model has no final norm)
  bool centered = false;  // LayerNorm: each part's mean is removed before the gain
  bool softcap = false;   // the model soft-caps its logits; the logit above is before the cap
  // The sum of the contributions and the bias term (equals logit up to rounding).
  double total() const;
  const float* vector(size_t part) const { return vectors.data() + part * size_t(d_model); }
};

// Why direct logit attribution is not defined for this model ("" when it is).
std::string attribution_refusal(const Config& c);

struct AttributionRequest {
  std::vector<int> tokens;  // positions 0 .. n-1
  std::vector<int> source;  // encoder-decoder models: the encoder's source
  int pos = -1;             // the position read; -1: the last
  int token = -1;           // -1: the model's most probable token at pos
  int vs = -1;              // >= 0: attribute logit(token) - logit(vs)
  int threads = 1;
};

// Runs tokens[0 .. pos] (the source encoded first) and splits the logit at pos.
// Throws ds::Error with attribution_refusal's text for post-norm and sandwich-norm
// models, and for positions, tokens or a source the model cannot take.
Attribution attribute(const std::shared_ptr<const Model>& m, const AttributionRequest& r);

// What part `part` of an attribution pushes up and down at its position: its vector
// read through the final norm (the run's scale, the gain, centering) and the
// unembedding, for every token; the k largest (most positive first) and the k smallest
// (most negative first).
struct TokenPush {
  int id = -1;
  double value = 0;
};
struct PartWrites {
  std::vector<TokenPush> up, down;
};
PartWrites part_writes(const Model& m, const Attribution& a, size_t part, int k);
// The index in a.parts of the head (site Self or Cross), or -1.
int find_head_part(const Attribution& a, HeadSite site, int layer, int head);

}  // namespace ds
