#pragma once
// The reference forward pass: the whole transformer in plain loops and double
// precision, one short function per step of the math, for every variant a Config
// describes. It is the file to read first (reference.cpp, top to bottom), and the
// naive implementation the tests hold the fast engine (model.cpp) to.
//
// It reads the float32 weights one number at a time and makes no attempt to be fast:
// it is meant for small models (tests, a few tokens of a built-in model).
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ds::ref {

using Row = std::vector<double>;             // one vector, e.g. [d_model]
using Rows = std::vector<Row>;               // one vector per position, [T][d_model]
using HeadPatterns = std::vector<Rows>;      // [n_heads][queries][keys]
using Patterns = std::vector<HeadPatterns>;  // [n_layers][n_heads][queries][keys]

// What one attention computed on the way: q, k and v as the scores read them (after
// rotary; the heads side by side, [Tq][n_heads * d_head] and [Tk][n_kv_heads * d_head])
// and the weights, [n_heads][Tq][Tk].
struct AttnRecord {
  Rows q, k, v;
  HeadPatterns pattern;
};

// What one block computed on the way, one row per position.
struct BlockRecord {
  Rows ln1, ln2, ln3;      // each norm's output [T][d_model] (ln2: decoder blocks of encoder-decoder models)
  AttnRecord attn, cross;  // self- and cross-attention (cross: k, v are [S][...])
  Rows attn_out, cross_attn_out, mlp_out;  // each sub-layer's output before the residual add [T][d_model]
  // The residual stream after each sub-layer [T][d_model] (resid_mid_cross: decoder
  // blocks of encoder-decoder models); resid_pre is the block's input.
  Rows resid_pre, resid_mid, resid_mid_cross, resid_post;
};

// What a forward pass can also hand back besides the logits.
struct Recorded {
  Patterns self;                        // decoder self-attention patterns, [n_layers][n_heads][T][T]
  Patterns cross;                       // decoder cross-attention, [n_layers][n_heads][T][S] (encoder-decoder)
  Patterns enc;                         // encoder self-attention, [n_enc_layers][n_heads][S][S] (encoder-decoder)
  Rows enc_out;                         // encoder output, [S][d_model] (encoder-decoder)
  std::vector<BlockRecord> blocks;      // every decoder block, [n_layers]
  std::vector<BlockRecord> enc_blocks;  // every encoder block, [n_enc_layers]
};

// The encoder's output for a source (encoder-decoder models): [S][d_model]. blocks:
// receives what each encoder block computed.
Rows encode(const Config& cfg, const Weights& w, const std::vector<int>& src, Patterns* enc_patterns = nullptr,
            std::vector<BlockRecord>* blocks = nullptr);

// The logits at every position of `tokens` (positions 0 .. T-1): [T][vocab].
// src: the encoder's source (encoder-decoder models). zero_layer, zero_head: that
// decoder self-attention head's output z is set to zero before the output projection
// (a head switched off; -1: none). rec: receives the attention patterns and what each
// block computed (both stacks) when given.
Rows logits(const Config& cfg, const Weights& w, const std::vector<int>& tokens, const std::vector<int>& src = {},
            int zero_layer = -1, int zero_head = -1, Recorded* rec = nullptr);

// The logits of `tokens` as logits() computes them, with the residual stream entering
// decoder block `layer` (its resid_pre) at position `pos` replaced by `value` [d_model]:
// one cell of activation patching (probe/patching.h), computed the plain way.
Rows logits_with_resid_pre(const Config& cfg, const Weights& w, const std::vector<int>& tokens,
                           const std::vector<int>& src, int layer, int pos, const Row& value);

}  // namespace ds::ref
