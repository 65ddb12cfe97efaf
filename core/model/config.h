#pragma once
// One configuration describes every supported model: GPT-2, llama2.c checkpoints,
// the original post-norm encoder-decoder and the built-in models are rows of
// options, not forks of the code.
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

enum class NormKind { LayerNorm, RMSNorm };
enum class NormPlace { Pre, Post };
enum class PosKind { None, Learned, Sinusoidal, Rotary };
enum class FFNKind { GELU, GELUTanh, ReLU, SwiGLU, GeGLU };
// Which features of a head rotary positions rotate together: (2i, 2i+1) (llama2.c, and
// llama-family GGUF files, whose converter reorders q and k for it) or (i, i + d_head/2)
// (GPT-NeoX style: Qwen, Gemma, Hugging Face Llama folders).
enum class RopeStyle { Interleaved, Half };

struct Config {
  // Sizes.
  int d_model = 64;
  int n_layers = 2;      // decoder blocks
  int n_enc_layers = 0;  // encoder blocks (encoder-decoder models only)
  int n_heads = 4;
  int n_kv_heads = 4;  // < n_heads: grouped-query attention
  int d_head = 16;     // usually d_model / n_heads
  int d_ff = 256;
  int vocab_size = 256;
  int max_seq = 128;  // decoder positions (also the KV cache capacity)
  int max_src = 128;  // encoder positions

  // Architecture.
  NormKind norm = NormKind::LayerNorm;
  NormPlace norm_place = NormPlace::Pre;
  PosKind pos = PosKind::Learned;
  FFNKind ffn = FFNKind::GELU;
  bool encoder_decoder = false;
  bool tied_head = true;   // output head = token embedding transposed
  bool attn_bias = true;   // biases on q, k, v, o
  bool ffn_bias = true;    // biases on the feed-forward layers
  bool norm_bias = true;   // LayerNorm has a bias (RMSNorm never has one)
  bool final_norm = true;  // a norm after the last block (pre-norm models)
  bool enc_final_norm = true;
  bool scale_embed = false;  // multiply token embeddings by sqrt(d_model)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::Interleaved;
  float rope_scale = 1.0f;               // linear rotary scaling: angles times this (1 / factor)
  std::vector<float> rope_freq_factors;  // [d_head/2] divisors of each frequency (Llama 3.1+), or empty

  // Llama-family extensions (GGUF and Hugging Face models).
  bool qk_norm = false;        // RMSNorm over each head's q and k (gains [d_head]) before rotary (Qwen3, Gemma 3)
  bool sandwich_norm = false;  // RMSNorm also on each sub-layer's output before the residual add (Gemma 3)
  float attn_scale = 0.0f;     // scores = q.k * attn_scale; 0 means 1 / sqrt(d_head)
  float logit_softcap = 0.0f;  // logits = c * tanh(logits / c) when > 0
  // Sliding-window attention: a layer l with sliding_layers[l] != 0 lets a query at p
  // read keys p - sliding_window + 1 .. p only, with rotary base rope_theta_local and no
  // frequency factors or scaling. Empty: every layer is global.
  int sliding_window = 0;
  std::vector<uint8_t> sliding_layers;
  float rope_theta_local = 10000.0f;

  // Special tokens (-1: none).
  int bos_id = -1;
  int eos_id = -1;
  int pad_id = -1;  // encoder source positions holding this id are masked out

  int q_dim() const { return n_heads * d_head; }
  // Whether the feed-forward has a gate projection (SwiGLU, GeGLU).
  bool gated() const { return ffn == FFNKind::SwiGLU || ffn == FFNKind::GeGLU; }
  int kv_dim() const { return n_kv_heads * d_head; }
  // Whether decoder layer l uses the sliding window, and the first key a query at
  // query_pos may read there (0 for global layers).
  bool sliding(int l) const {
    return sliding_window > 0 && l >= 0 && size_t(l) < sliding_layers.size() && sliding_layers[size_t(l)];
  }
  int first_key(int l, int query_pos) const {
    return sliding(l) && query_pos >= sliding_window ? query_pos - sliding_window + 1 : 0;
  }
  // The attention scores' scale.
  float score_scale() const;
  // Throws ds::Error naming the first inconsistent field.
  void validate() const;
  std::string describe() const;
};

// GPT-2's architecture (LayerNorm pre-norm, learned positions, GELU-tanh, biases,
// tied head, final norm, eps 1e-5, <|endoftext|> = vocab - 1 as BOS and EOS), d_ff
// 4 * n_embd. GPT-2 small is gpt2_config(768, 12, 12, 1024, 50257).
Config gpt2_config(int n_embd, int n_layer, int n_head, int n_positions, int vocab_size);

const char* to_string(NormKind k);
const char* to_string(NormPlace k);
const char* to_string(PosKind k);
const char* to_string(FFNKind k);
const char* to_string(RopeStyle k);

}  // namespace ds

/* Semantics of every option (the engine and the tests' naive reference both follow this).

 Embedding (decoder, and encoder with enc_tok_embed / enc_pos_embed):
   x_p = E[id] * (scale_embed ? sqrt(d_model) : 1) + P(p)
   P(p) = pos_embed[p] (Learned); PE(p) (Sinusoidal); 0 (Rotary, None), where
   PE(p)[2i] = sin(p / 10000^(2i/d_model)), PE(p)[2i+1] = cos(p / 10000^(2i/d_model)).
 Norms: LayerNorm(x) = (x - mean) / sqrt(var + eps) * g + b (biased variance; b absent
   when norm_bias is false); RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g (llama2.c).
 Attention (self): q = Wq x + bq, k = Wk x + bk, v = Wv x + bv, split into heads of
   d_head; query head h uses key/value head h / (n_heads / n_kv_heads). With Rotary,
   q and k of each head are rotated in pairs (2i, 2i+1):
   f_i = 1 / rope_theta^(2i / d_head), a = p * f_i,
   (u, w) -> (u cos a - w sin a, u sin a + w cos a)   (llama2.c's run.c).
   RopeStyle::Half pairs feature i with i + d_head/2 instead. a = p * rope_scale * f_i /
   rope_freq_factors[i] (factors and scale on global layers only; sliding-window layers
   use rope_theta_local). qk_norm: q and k of each head go through RMSNorm with gains
   q_norm / k_norm ([d_head]) before rotary.
   scores = q.k * score_scale() (1/sqrt(d_head) unless attn_scale); decoder keys j > i are
   masked (causal), and on sliding layers keys j <= i - sliding_window too; encoder keys
   whose source id == pad_id are masked. pattern = softmax over allowed keys, masked
   cells exactly 0. z_h = sum_j pattern_j v_j; out = Wo concat(z) + bo.
 Cross-attention (decoder of encoder-decoder): q from the decoder stream, k and v
   from the encoder output, no rotary, padded source keys masked.
 Feed-forward: GELU exact 0.5x(1+erf(x/sqrt2)); GELUTanh
   0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))); ReLU; h = act(up(x)), out = down(h).
   SwiGLU: h = silu(gate(x)) * up(x), silu(x) = x / (1 + exp(-x)).
   GeGLU: h = gelu_tanh(gate(x)) * up(x).
 Blocks: Pre:  x += attn(ln1(x)); [x += cross(ln2(x), enc)]; x += ffn(ln3(x))
         Post: x = ln1(x + attn(x)); [x = ln2(x + cross(x, enc))]; x = ln3(x + ffn(x))
   sandwich_norm (pre-norm only): x += post_attn(attn(ln1(x))); x += post_ffn(ffn(ln3(x))).
   Decoder-only models use ln1 and ln3 (ln2 stays empty).
 Output: logits = head * (final_norm ? ln_final(x) : x), head = tok_embed when tied.
   Encoder output = enc_final_norm ? enc_ln_final(x) : x.
   logit_softcap c > 0: logits = c * tanh(logits / c).
*/
