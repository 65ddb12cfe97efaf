#pragma once
// Interventions: observers that change a tensor in place as the forward pass runs, so
// a class can ask "what if".
#include "model/hooks.h"

namespace ds {

// Interventions for a class to ask "what if": each subscribes to the head outputs
// (attn.z or cross_attn.z) of one layer and returns the hook handle.
int zero_head(Hooks& hooks, int layer, int head, int d_head, bool cross = false);
int scale_head(Hooks& hooks, int layer, int head, int d_head, float scale, bool cross = false);

}  // namespace ds
