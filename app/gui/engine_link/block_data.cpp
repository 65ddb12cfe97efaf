#include "engine_link/block_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/mask.h"
#include "probe/trace.h"

namespace dsgui {

namespace {

// core/model/reference.cpp as a string literal, generated at build time
// (scripts/embed_text.cmake).
const char kReference[] =
#include "reference_source.inc"
    ;

std::string L(int layer) { return "blocks." + std::to_string(layer) + "."; }

const char* act_equation(ds::FFNKind k) {
  switch (k) {
    case ds::FFNKind::ReLU:
      return "a = ReLU(h) = max(0, h)";
    case ds::FFNKind::GELU:
      return "a = GELU(h) = h \u00b7 \u03a6(h) = \u00bd h (1 + erf(h / \u221a2))";
    case ds::FFNKind::GELUTanh:
      return "a = \u00bd h (1 + tanh(\u221a(2/\u03c0) (h + 0.044715 h\u00b3)))";
    case ds::FFNKind::SwiGLU:
      return "a = silu(x W_gate) \u2299 (x W_up),  silu(g) = g / (1 + e\u207b\u1d4d)";
    case ds::FFNKind::GeGLU:
      return "a = gelu_tanh(x W_gate) \u2299 (x W_up),  gelu_tanh(g) = \u00bd g (1 + tanh(\u221a(2/\u03c0) (g + "
             "0.044715 g\u00b3)))";
  }
  return "";
}

// " + b_Q" when the map has a bias, else "".
std::string plus_bias(bool has, const char* name) { return has ? std::string(" + ") + name : std::string(); }

// The width of a layer's sliding window, 0 for a global layer.
int window_of(const ds::Config& c, int layer) { return c.sliding(layer) ? c.sliding_window : 0; }

Stage qkv_stage(const ds::Config& c, bool cross, const Biases& b) {
  const std::string p = cross ? "cross_attn" : "attn";
  const bool rotary = c.pos == ds::PosKind::Rotary && !cross;
  const bool qkn = c.qk_norm && !cross;  // rotary then comes after the q/k norm, in its own stage
  Stage s;
  s.group = cross ? 1 : 0;
  s.kind = StageKind::QKV;
  s.id = p + ".qkv";
  s.label = "Q  K  V";
  s.title = cross ? "Queries from the output, keys and values from the source" : "Queries, keys and values";
  s.equation = (cross ? "q = x W_Q" + plus_bias(b.q, "b_Q") + ",   K = enc W_K" + plus_bias(b.k, "b_K") +
                            ",   V = enc W_V" + plus_bias(b.v, "b_V")
                      : "q = x W_Q" + plus_bias(b.q, "b_Q") + ",   k = x W_K" + plus_bias(b.k, "b_K") +
                            ",   v = x W_V" + plus_bias(b.v, "b_V"));
  if (c.n_kv_heads < c.n_heads)
    s.equation +=
        "   (" + std::to_string(c.n_heads) + " query heads share " + std::to_string(c.n_kv_heads) + " key/value heads)";
  s.explain = cross ? "The output token asks a question (its query q); every source token offers a key to match "
                      "and a value to hand over, computed once from the encoder's output."
                    : std::string(
                          "Three linear maps turn the token's vector into a query (what it looks for), a key "
                          "(what it offers to be found by) and a value (what it hands over), one of each per "
                          "head") +
                          (qkn      ? "; q and k are then normalised head by head (next stage)."
                           : rotary ? "; q and k are then rotated by an angle set by the position (rotary positions)."
                                    : ".");
  s.functions = {"heads_of", "linear"};
  if (rotary && !qkn) s.functions.push_back("rotate");
  // With a q/k norm the engine publishes q and k after it (and rotary): only v is this
  // stage's own output.
  s.hook = qkn ? p + ".v" : p + ".q";
  return s;
}

// Qwen3 and Gemma 3: RMSNorm over each head's q and k, then rotary.
Stage qk_norm_stage(const ds::Config& c) {
  const bool rotary = c.pos == ds::PosKind::Rotary;
  Stage s;
  s.group = 0;
  s.kind = StageKind::QKNorm;
  s.id = "attn.qk_norm";
  s.label = "q,k norm";
  s.title = rotary ? "Each head's q and k normalised, then rotated" : "Each head's q and k normalised";
  s.equation = "q_h = q_h / \u221a(mean(q_h\u00b2) + \u03b5) \u2299 \u03b3_q,   k_h likewise with \u03b3_k   (" +
               std::to_string(c.d_head) + " features a head)";
  if (rotary) s.equation += ",  then rotated by the position";
  s.explain = std::string(
                  "Every head's query and key are scaled to the same root-mean-square before they are compared, "
                  "so no head's scores can grow without bound") +
              (rotary ? "; then they are rotated by an angle set by the position (rotary positions)." : ".");
  s.functions = {"norm_heads", "heads_of"};
  if (rotary) s.functions.push_back("rotate");
  s.hook = "attn.q";
  return s;
}

Stage scores_stage(const ds::Config& c, bool cross) {
  Stage s;
  s.group = cross ? 1 : 0;
  s.kind = StageKind::Scores;
  s.id = std::string(cross ? "cross_attn" : "attn") + ".scores";
  char scale[48];
  std::snprintf(scale, sizeof scale, "%.4g", double(c.attn_scale));
  const bool own = c.attn_scale > 0;  // a scale of the model's own instead of 1/sqrt(d_head)
  s.label = own ? "q\u00b7k \u00d7 scale" : "q\u00b7k / \u221ad";
  s.title = "Scores: how well the query matches each key";
  s.equation = own ? std::string("s_j = q \u00b7 k_j \u00d7 ") + scale : "s_j = q \u00b7 k_j / \u221ad_head";
  s.explain = own ? std::string(
                        "The query is multiplied with every key; a large dot product means a good match. "
                        "This model scales the scores by ") +
                        scale + " instead of 1/\u221ad_head."
                  : "The query is multiplied with every key; a large dot product means a good match. Dividing by "
                    "\u221ad_head keeps the scores in a range where the softmax still has a gradient.";
  s.functions = {"attend_one"};
  s.hook = std::string(cross ? "cross_attn" : "attn") + ".scores";
  return s;
}

Stage mask_stage(const ds::Config& c, bool cross, int layer) {
  Stage s;
  s.group = cross ? 1 : 0;
  s.kind = StageKind::Mask;
  s.id = std::string(cross ? "cross_attn" : "attn") + ".mask";
  s.label = "+ mask";
  s.functions = {"attend_one"};
  s.hook = std::string(cross ? "cross_attn" : "attn") + ".mask";
  if (cross) {
    s.title = "The padding mask";
    s.equation = "s_j + M_j,   M_j = 0 for a source token, \u2212\u221e for padding";
    s.explain = "Padding in the source is no word at all: adding \u2212\u221e to its score gives it weight 0.";
    return s;
  }
  if (const int w = window_of(c, layer); w > 0) {
    const std::string n = std::to_string(w), n1 = std::to_string(w - 1);
    s.label = "+ window mask";
    s.title = "The causal mask with a sliding window of " + n;
    s.equation = "s_j + M_j,   M_j = 0 if i \u2212 " + n1 + " \u2264 j \u2264 i,  \u2212\u221e otherwise";
    s.explain = "This layer has a sliding window of " + n + ": the token at position p reads keys p\u2212" + n1 +
                "..p only. Tokens after it and tokens further back get \u2212\u221e added, which the softmax turns "
                "into a weight of exactly 0.";
    return s;
  }
  s.title = "The causal mask";
  s.equation = "s_j + M_j,   M_j = 0 if j \u2264 i,  \u2212\u221e if j > i";
  s.explain =
      "A token may not read tokens that come after it: their scores get \u2212\u221e added, which the softmax "
      "turns into a weight of exactly 0.";
  if (c.sliding_window > 0) s.explain += " (This is one of the model's global layers: no sliding window here.)";
  return s;
}

void attention_stages(const ds::Config& c, bool cross, int layer, const Biases& b, std::vector<Stage>& out) {
  const std::string p = cross ? "cross_attn" : "attn";
  const int g = cross ? 1 : 0;
  out.push_back(qkv_stage(c, cross, b));
  if (c.qk_norm && !cross) out.push_back(qk_norm_stage(c));
  out.push_back(scores_stage(c, cross));
  out.push_back(mask_stage(c, cross, layer));

  Stage s;
  s.group = g;
  s.kind = StageKind::Softmax;
  s.id = p + ".softmax";
  s.label = "softmax";
  s.title = "Softmax: scores become weights";
  s.equation = "w_j = exp(s_j + M_j) / \u03a3_k exp(s_k + M_k)";
  s.explain =
      "Exponentiating and dividing by the sum turns the scores into weights that are positive and add up "
      "to 1: this row is the attention pattern.";
  s.functions = {"attend_one"};
  s.hook = p + ".pattern";
  out.push_back(s);

  s = Stage{};
  s.group = g;
  s.kind = StageKind::Mix;
  s.id = p + ".z";
  s.label = "\u03a3 w\u00b7v";
  s.title = "The weighted sum of the values";
  s.equation = "z = \u03a3_j w_j v_j";
  s.explain =
      "Each head hands back a mix of the values, in the proportions of its weights: what this token "
      "gathered from the tokens it read.";
  s.functions = {"attend_one"};
  s.hook = p + ".z";
  out.push_back(s);

  s = Stage{};
  s.group = g;
  s.kind = StageKind::OutProj;
  s.id = p + ".out";
  s.label = "W_O";
  s.title = "The output projection";
  s.equation = "out = concat(z_1, \u2026, z_h) W_O" + plus_bias(b.o, "b_O");
  s.explain = "The heads' outputs are put side by side and mapped back to the width of the residual stream.";
  s.functions = {"attention"};
  s.hook = cross ? "cross_attn_out" : "attn_out";
  out.push_back(s);
}

// n: the norm as the seeds number it (1, 2, 3); engine: the engine's own number, its
// hook's name (a decoder-only block's second norm is the engine's ln3).
Stage norm_stage(const ds::Config& c, int n, int engine) {
  Stage s;
  s.kind = StageKind::Norm;
  s.norm = n;
  s.id = "ln" + std::to_string(n);
  const bool ln = c.norm == ds::NormKind::LayerNorm;
  const bool post = c.norm_place == ds::NormPlace::Post;
  s.label = std::string(ln ? "LayerNorm" : "RMSNorm") + " LN" + std::to_string(n);
  s.title = std::string(post ? "Add & Norm: " : "") + (ln ? "LayerNorm" : "RMSNorm") + " (LN" + std::to_string(n) + ")";
  s.equation = ln ? "LN(x) = (x \u2212 \u03bc) / \u221a(\u03c3\u00b2 + \u03b5) \u2299 \u03b3 + \u03b2"
                  : "RMSNorm(x) = x / \u221a(mean(x\u00b2) + \u03b5) \u2299 \u03b3";
  if (ln && !c.norm_bias) s.equation = "LN(x) = (x \u2212 \u03bc) / \u221a(\u03c3\u00b2 + \u03b5) \u2299 \u03b3";
  s.explain = post ? "After the residual add the vector is normalised (the original Transformer's \"Add & Norm\"): "
                     "its length stays the same from layer to layer."
                   : "Before the sub-layer reads it, a copy of the stream is normalised; the stream itself keeps "
                     "growing (pre-norm, as in GPT-2).";
  s.functions = {ln ? "layer_norm" : "rms_norm"};
  s.hook = "ln" + std::to_string(engine) + ".normalized";
  return s;
}

// Gemma 3's norm of a sub-layer's output (n = 1: after attention, 3: after the FFN).
// The engine publishes no point between it and the add, so its output is derived:
// the stream after the add minus the stream before it.
Stage sub_norm_stage(int n) {
  Stage s;
  s.kind = StageKind::SubNorm;
  s.norm = n;
  s.id = n == 1 ? "post_attn" : "post_ffn";
  s.label = n == 1 ? "RMSNorm post_attn" : "RMSNorm post_ffn";
  s.title = n == 1 ? "RMSNorm of the attention's output (post_attn)" : "RMSNorm of the FFN's output (post_ffn)";
  s.equation = std::string("RMSNorm(") + (n == 1 ? "attn_out" : "mlp_out") +
               ") = out / \u221a(mean(out\u00b2) + \u03b5) \u2299 \u03b3";
  s.explain =
      "Sandwich norms (Gemma 3): the sub-layer's output is normalised too before it is added to the stream, so no "
      "sub-layer can write a correction larger than its gains allow.";
  s.functions = {"block", "rms_norm"};
  s.hook = n == 1 ? "resid_mid" : "resid_post";  // minus the stream before the add
  return s;
}

// n: the engine's sub-layer (1 self-attention, 2 cross-attention, 3 FFN); the id counts
// the adds of the block (a decoder-only block's FFN add is add2).
Stage add_stage(const ds::Config& c, int n) {
  Stage s;
  s.kind = StageKind::Add;
  s.id = "add" + std::to_string(n == 3 && !c.encoder_decoder ? 2 : n);
  s.label = "+";
  s.title = "The residual connection";
  const char* f = n == 1 ? "SelfAttention" : n == 2 ? "CrossAttention" : "FFN";
  const bool post = c.norm_place == ds::NormPlace::Post;
  const bool sandwich = c.sandwich_norm && n != 2;
  s.equation = post       ? std::string("x + ") + f + "(x)   (then the norm)"
               : sandwich ? std::string("x + RMSNorm(") + f + "(RMSNorm(x)))"
                          : std::string("x + ") + f + "(LN(x))";
  s.explain =
      "The sub-layer's output is added to the stream it read from: each sub-layer only writes a "
      "correction, and the original vector flows on unchanged beside it.";
  s.functions = {"block", "add"};
  s.hook = post ? "" : (n == 1 ? "resid_mid" : n == 2 ? "resid_mid_cross" : "resid_post");
  return s;
}

void ffn_stages(const ds::Config& c, const Biases& b, std::vector<Stage>& out) {
  const bool gated = c.gated();
  const std::string dims = "   (d_model " + std::to_string(c.d_model) + " \u2192 d_ff " + std::to_string(c.d_ff) + ")";
  Stage s;
  s.group = 2;
  s.kind = StageKind::FFNUp;
  s.id = "mlp.up";
  s.label = gated ? "x W_gate, x W_up" : "x W\u2081" + plus_bias(b.up, "b\u2081");
  s.title = "Up: into the wide hidden layer";
  s.equation = gated ? "g = x W_gate,   u = x W_up" + dims : "h = x W\u2081" + plus_bias(b.up, "b\u2081") + dims;
  s.explain = gated ? "The feed-forward network works on each token alone: two maps take the vector to a wider "
                      "layer, one number per hidden neuron: a gate g that decides how much each neuron lets "
                      "through, and the value u it lets through."
                    : "The feed-forward network works on each token alone: first it maps the vector to a layer "
                      "about four times wider, one number per hidden neuron.";
  s.functions = {"feed_forward"};
  s.hook = "mlp.pre";  // gated: the gate's pre-activation
  out.push_back(s);

  s = Stage{};
  s.group = 2;
  s.kind = StageKind::FFNAct;
  s.id = "mlp.act";
  s.label = c.ffn == ds::FFNKind::ReLU     ? "ReLU"
            : c.ffn == ds::FFNKind::SwiGLU ? "SwiGLU"
            : c.ffn == ds::FFNKind::GeGLU  ? "GELU-tanh gate"
                                           : "GELU";
  s.title = gated ? "The gate: which neurons fire, and how much" : "The activation: which neurons fire";
  s.equation = act_equation(c.ffn);
  s.explain = gated ? "The gate goes through a smooth non-linear function and multiplies the value, neuron by "
                      "neuron: the neurons whose gate is open for this token pass their value on."
                    : "A non-linear function lets only positive (or large) inputs through: the neurons that fire "
                      "for this token. Without it the two linear maps would collapse into one.";
  s.functions = {"activation", "feed_forward"};
  s.hook = "mlp.post";
  out.push_back(s);

  s = Stage{};
  s.group = 2;
  s.kind = StageKind::FFNDown;
  s.id = "mlp.down";
  s.label = gated ? "a W_down" : "a W\u2082" + plus_bias(b.down, "b\u2082");
  s.title = "Down: back to the stream's width";
  s.equation =
      gated ? "FFN(x) = a W_down" + plus_bias(b.down, "b_down") : "FFN(x) = a W\u2082" + plus_bias(b.down, "b\u2082");
  s.explain = "The firing neurons each add their own direction back into a vector of the stream's width.";
  s.functions = {"feed_forward"};
  s.hook = "mlp_out";
  out.push_back(s);
}

void final_stages(const ds::Config& c, int layer, std::vector<Stage>& out) {
  Stage s;
  if (layer + 1 < c.n_layers) {
    s.kind = StageKind::Output;
    s.id = "output";
    s.label = "to block " + std::to_string(layer + 1);
    s.title = "The block's output";
    s.equation = "x\u2097\u208a\u2081 = Block\u2097(x\u2097)";
    s.explain = "The same shape as the input: the next block reads it and adds its own corrections.";
    s.functions = {"block"};
    s.hook = "resid_post";
    out.push_back(s);
    return;
  }
  if (c.final_norm) {
    s.kind = StageKind::FinalNorm;
    s.id = "ln_final";
    s.label = c.norm == ds::NormKind::LayerNorm ? "final LayerNorm" : "final RMSNorm";
    s.title = "The final norm";
    s.equation = "x_final = LN_final(x)";
    s.explain = "After the last block the stream is normalised once more before it is read out.";
    s.functions = {"logits"};
    s.hook = "ln_final";
    out.push_back(s);
  }
  s = Stage{};
  s.kind = StageKind::Logits;
  s.id = "logits";
  s.label = "logits";
  s.title = "Logits: a score for every token of the vocabulary";
  const std::string head = c.tied_head ? "x_final E\u1d40" : "x_final W_U";
  if (c.logit_softcap > 0) {
    char cap[32];
    std::snprintf(cap, sizeof cap, "%.4g", double(c.logit_softcap));
    s.equation = std::string("logits = c \u00b7 tanh(") + head + " / c),  c = " + cap + ",   p = softmax(logits)";
  } else {
    s.equation = "logits = " + head + ",   p = softmax(logits)";
  }
  s.explain = c.tied_head ? "The vector is compared with every token's embedding (the same matrix as the input's): "
                            "the closest tokens get the highest scores."
                          : "An output matrix gives every token of the vocabulary a score; the softmax makes them "
                            "probabilities.";
  if (c.logit_softcap > 0) s.explain += " A tanh caps the scores smoothly at \u00b1c.";
  s.functions = {"logits"};
  s.hook = "logits";
  out.push_back(s);
}

Stage input_stage(const ds::Config& c, int layer) {
  Stage in;
  in.kind = StageKind::Input;
  in.id = "input";
  // Rotary positions (and none) add no position vector: they act inside attention.
  const bool added = c.pos == ds::PosKind::Learned || c.pos == ds::PosKind::Sinusoidal;
  in.label = layer > 0 ? "from block " + std::to_string(layer - 1) : added ? "embedding + position" : "token embedding";
  in.title = layer > 0 ? "The input: the residual stream"
             : added   ? "The input: token embedding plus position"
                       : "The input: the token embedding";
  // Gemma multiplies the embeddings by sqrt(d_model).
  const std::string e = c.scale_embed ? "E[token] · √" + std::to_string(c.d_model) : "E[token]";
  in.equation = layer == 0 ? (c.pos == ds::PosKind::Sinusoidal ? "x = " + e +
                                                                     " + PE(pos),  PE(pos)₂ᵢ = "
                                                                     "sin(pos / 10000^(2i/d))"
                              : c.pos == ds::PosKind::Learned ? "x = " + e + " + P[pos]"
                                                              : "x = " + e + "   (positions act inside attention)")
                           : "x = the output of block " + std::to_string(layer - 1);
  in.explain = layer == 0 ? "Each token starts as a row of the embedding table, plus a vector that says where it "
                            "stands; this vector is the residual stream every block reads and adds to."
                          : "The residual stream as the previous block left it: every block reads it and adds to it.";
  if (layer == 0 && c.pos == ds::PosKind::Rotary)
    in.explain =
        "Each token starts as a row of the embedding table; where it stands enters later, as the rotation "
        "of its queries and keys. This vector is the residual stream every block reads and adds to.";
  in.functions = layer == 0 ? std::vector<std::string>{"embed"} : std::vector<std::string>{"block"};
  if (layer == 0 && c.pos == ds::PosKind::Sinusoidal) in.functions.push_back("sinusoid");
  in.hook = "resid_pre";
  return in;
}

}  // namespace

std::vector<std::string> snapshot_hooks(const ds::Config& c, int layer) {
  const std::string b = L(layer);
  std::vector<std::string> h = {b + "resid_pre", b + "ln1.normalized", b + "attn.q",    b + "attn.k",
                                b + "attn.v",    b + "attn.scores",    b + "attn.mask", b + "attn.pattern",
                                b + "attn.z",    b + "attn_out",       b + "resid_mid", b + "ln3.normalized",
                                b + "mlp.pre",   b + "mlp.post",       b + "mlp_out",   b + "resid_post"};
  if (c.encoder_decoder)
    for (const char* p : {"ln2.normalized", "cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn.scores",
                          "cross_attn.mask", "cross_attn.pattern", "cross_attn.z", "cross_attn_out", "resid_mid_cross"})
      h.push_back(b + p);
  if (layer + 1 == c.n_layers) {
    if (c.final_norm) h.push_back("ln_final");
    h.push_back("logits");
  }
  return h;
}

ScoreArithmetic score_arithmetic(const BlockSnapshot& s, int head, int key, bool cross) {
  ScoreArithmetic a;
  const ds::Config& c = s.cfg;
  const int H = c.n_heads, KV = c.n_kv_heads, dh = c.d_head;
  if (head < 0 || head >= H || KV <= 0 || H % KV != 0) return a;
  const std::vector<float>* q = s.get(cross ? "cross_attn.q" : "attn.q");
  const std::vector<float>& K = cross ? s.cross_k : s.k;
  const int n_keys = cross ? s.src_len : s.positions;
  if (!q || int(q->size()) != H * dh || key < 0 || key >= n_keys || K.size() != size_t(n_keys) * KV * dh) return a;
  const int kh = head / (H / KV);
  for (int i = 0; i < dh; ++i)
    a.dot += double((*q)[size_t(head * dh + i)]) * double(K[size_t(key) * KV * dh + size_t(kh * dh + i)]);
  a.root = std::sqrt(double(dh));
  // The engine's scale (model/config.h): 1/sqrt(d_head), or the model's own attn_scale.
  a.scaled = c.attn_scale > 0 ? a.dot * double(c.attn_scale) : a.dot / a.root;
  const std::vector<float>* mask = s.get(cross ? "cross_attn.mask" : "attn.mask");
  if (mask && key < int(mask->size()))
    a.masked = (*mask)[size_t(key)] == 0.0f;
  else
    a.masked = !cross && !ds::may_attend(ds::AttnKind::Causal, s.pos, key, {}, -1, window_of(c, s.layer));
  char b[160];
  if (c.attn_scale > 0)
    std::snprintf(b, sizeof b, "q \u00b7 k = %.4g;  \u00d7 %.4g = %.4g", a.dot, double(c.attn_scale), a.scaled);
  else
    std::snprintf(b, sizeof b, "q \u00b7 k = %.4g;  / \u221a%d = %.4g", a.dot, dh, a.scaled);
  a.text = b;
  a.ok = true;
  return a;
}

std::vector<Stage> block_stages(const ds::Config& c, int layer, const Biases* biases) {
  std::vector<Stage> out;
  const Biases b = biases ? *biases : Biases::of(c);
  const bool post = c.norm_place == ds::NormPlace::Post;
  const bool sandwich = c.sandwich_norm && !post;  // sandwich norms are pre-norm only (model/config.h)
  out.push_back(input_stage(c, layer));
  // The FFN's norm: LN2 of a decoder-only block (x + Attn(LN1(x)), then + FFN(LN2(.))),
  // LN3 of an encoder-decoder one; the engine calls it ln3 either way.
  const int ffn_norm = c.encoder_decoder ? 3 : 2;
  if (!post) out.push_back(norm_stage(c, 1, 1));
  attention_stages(c, false, layer, b, out);
  if (sandwich) out.push_back(sub_norm_stage(1));
  out.push_back(add_stage(c, 1));
  if (post) out.push_back(norm_stage(c, 1, 1));
  if (c.encoder_decoder) {
    // Cross-attention keeps the Config's biases (the GGUF architectures have none).
    const Biases cb = Biases::of(c);
    if (!post) out.push_back(norm_stage(c, 2, 2));
    attention_stages(c, true, layer, cb, out);
    out.push_back(add_stage(c, 2));
    if (post) out.push_back(norm_stage(c, 2, 2));
  }
  if (!post) out.push_back(norm_stage(c, ffn_norm, 3));
  ffn_stages(c, b, out);
  if (sandwich) out.push_back(sub_norm_stage(3));
  out.push_back(add_stage(c, 3));
  if (post) out.push_back(norm_stage(c, ffn_norm, 3));
  final_stages(c, layer, out);
  return out;
}

std::string block_summary(const ds::Config& c, int layer) {
  std::string s = c.norm_place == ds::NormPlace::Post ? "post-norm (Add & Norm)" : "pre-norm";
  s += c.norm == ds::NormKind::LayerNorm ? ", LayerNorm" : ", RMSNorm";
  if (c.n_kv_heads < c.n_heads) s += ", grouped-query";
  if (c.qk_norm) s += ", q/k norms";
  if (c.sandwich_norm) s += ", norms after each sub-layer";
  if (const int w = window_of(c, layer); w > 0)
    s += ", sliding window of " + std::to_string(w);
  else if (c.sliding_window > 0)
    s += ", global attention";
  return s;
}

const char* group_title(int group) {
  switch (group) {
    case 0:
      return "Masked multi-head self-attention";
    case 1:
      return "Multi-head cross-attention (reads the source)";
    case 2:
      return "Position-wise feed-forward";
  }
  return "";
}

int computed_keys(const ds::Trace& t, int step, int pos) {
  if (step < 0 || step >= int(t.steps.size())) return 0;
  const int n = t.positions(step);
  if (!t.steps[size_t(step)].kv_cache) return n;  // the whole prefix ran again
  const int s = t.step_of(pos);
  if (s < 0 || s > step) return n;
  const ds::TraceStep& st = t.steps[size_t(s)];
  return std::min(n, st.pos0 + int(st.input.size()));
}

float shared_scale(const std::vector<StripRow>& rows) {
  float m = 0;
  for (const StripRow& r : rows)
    for (float x : r.v)
      if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m > 0 ? m : 1;
}

std::vector<float> standardized(const std::vector<float>& x, ds::NormKind kind, float eps) {
  if (x.empty()) return {};
  double mu = 0, var = 0;
  if (kind == ds::NormKind::LayerNorm) {
    for (float v : x) mu += v;
    mu /= double(x.size());
  }
  for (float v : x) var += (v - mu) * (v - mu);
  var /= double(x.size());
  const double sd = std::sqrt(var + double(eps));
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float((x[i] - mu) / sd);
  return out;
}

std::vector<StripRow> norm_rows(const std::vector<float>& in, const std::vector<float>& out, const ds::Config& c) {
  const bool ln = c.norm == ds::NormKind::LayerNorm;
  std::vector<StripRow> r;
  r.push_back({"x (input)", in});
  r.push_back({ln ? "(x \u2212 \u03bc) / \u03c3  (before \u03b3 and \u03b2)" : "x / rms(x)  (before \u03b3)",
               standardized(in, c.norm, c.norm_eps)});
  r.push_back({ln ? (c.norm_bias ? "\u2299 \u03b3 + \u03b2: the output" : "\u2299 \u03b3: the output")
                  : "\u2299 \u03b3: the output",
               out});
  return r;
}

TablePick TablePick::around(int pos, int d_head, int rows, int cols) {
  TablePick p;
  p.pos1 = std::max(0, pos);
  p.pos0 = std::max(0, p.pos1 - rows + 1);
  p.dim0 = 0;
  p.dims = std::max(1, std::min(cols, d_head));
  return p;
}

TablePick TablePick::clamped(int positions, int d_head) const {
  TablePick p = *this;
  p.pos1 = std::clamp(p.pos1, 0, std::max(0, positions - 1));
  p.pos0 = std::clamp(p.pos0, 0, p.pos1);
  p.dim0 = std::clamp(p.dim0, 0, std::max(0, d_head - 1));
  p.dims = std::clamp(p.dims, 1, std::max(1, d_head - p.dim0));
  return p;
}

const std::string& reference_source() {
  static const std::string s(kReference);
  return s;
}

bool reference_function(const std::string& name, int& first_line, std::string& text) {
  std::vector<std::string> lines;
  {
    std::istringstream is(reference_source());
    std::string ln;
    while (std::getline(is, ln)) lines.push_back(ln);
  }
  // The definition: a line at column 0 (not a comment) holding " name(".
  const std::string sig = " " + name + "(";
  size_t def = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty() || l[0] == ' ' || l[0] == '/' || l[0] == '#' || l[0] == '}') continue;
    if (l.find(sig) != std::string::npos && l.find(';') == std::string::npos) {
      def = i;
      break;
    }
  }
  if (def == lines.size()) return false;
  size_t first = def;
  while (first > 0 && lines[first - 1].rfind("//", 0) == 0) --first;
  size_t last = def;
  while (last < lines.size() && lines[last] != "}") ++last;
  if (last == lines.size()) return false;
  text.clear();
  for (size_t i = first; i <= last; ++i) text += lines[i] + "\n";
  first_line = int(first) + 1;
  return true;
}

}  // namespace dsgui
