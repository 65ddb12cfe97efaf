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

// What a forward pass can also hand back besides the logits.
struct Recorded {
  Patterns self;   // decoder self-attention patterns, [n_layers][n_heads][T][T]
  Patterns cross;  // decoder cross-attention, [n_layers][n_heads][T][S] (encoder-decoder)
  Patterns enc;    // encoder self-attention, [n_enc_layers][n_heads][S][S] (encoder-decoder)
  Rows enc_out;    // encoder output, [S][d_model] (encoder-decoder)
};

// The encoder's output for a source (encoder-decoder models): [S][d_model].
Rows encode(const Config& cfg, const Weights& w, const std::vector<int>& src, Patterns* enc_patterns = nullptr);

// The logits at every position of `tokens` (positions 0 .. T-1): [T][vocab].
// src: the encoder's source (encoder-decoder models). zero_layer, zero_head: that
// decoder self-attention head's output z is set to zero before the output projection
// (a head switched off; -1: none). rec: receives the attention patterns when given.
Rows logits(const Config& cfg, const Weights& w, const std::vector<int>& tokens, const std::vector<int>& src = {},
            int zero_layer = -1, int zero_head = -1, Recorded* rec = nullptr);

}  // namespace ds::ref
