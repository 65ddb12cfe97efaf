#include "probe/interventions.h"

#include <string>

namespace ds {

namespace {
int head_hook(Hooks& hooks, int layer, int head, int d_head, float scale, bool cross) {
  std::string nm = "blocks." + std::to_string(layer) + (cross ? ".cross_attn.z" : ".attn.z");
  return hooks.subscribe(nm, [head, d_head, scale](HookEvent& ev) {
    int T = ev.t.shape[0], W = ev.t.shape[1];
    if ((head + 1) * d_head > W) return;
    for (int t = 0; t < T; ++t) {
      float* row = ev.t.data + int64_t(t) * W + int64_t(head) * d_head;
      for (int i = 0; i < d_head; ++i) row[i] = scale == 0.0f ? 0.0f : row[i] * scale;
    }
  });
}
}  // namespace

int zero_head(Hooks& hooks, int layer, int head, int d_head, bool cross) {
  return head_hook(hooks, layer, head, d_head, 0.0f, cross);
}
int scale_head(Hooks& hooks, int layer, int head, int d_head, float scale, bool cross) {
  return head_hook(hooks, layer, head, d_head, scale, cross);
}

}  // namespace ds
