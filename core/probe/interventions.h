#pragma once
// Interventions: observers that change a tensor in place as the forward pass runs, so
// a class can ask "what if".
#include "model/hooks.h"

namespace ds {

// Which attention a head belongs to: the decoder's self-attention (blocks.{l}.attn),
// its cross-attention (blocks.{l}.cross_attn, encoder-decoder models) or the encoder's
// self-attention (encoder.blocks.{l}.attn, which runs once, when the source is encoded).
enum class HeadSite { Self, Cross, Encoder };

// The hook point of a head's outputs (z, [T, n_heads * d_head]) in layer `layer`.
std::string head_output_hook(int layer, HeadSite kind);

// Interventions for a class to ask "what if": each subscribes to the head outputs of
// one layer and returns the hook handle.
int zero_head(Hooks& hooks, int layer, int head, int d_head, HeadSite kind = HeadSite::Self);
int scale_head(Hooks& hooks, int layer, int head, int d_head, float scale, HeadSite kind = HeadSite::Self);

}  // namespace ds
