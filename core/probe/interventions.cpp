#include "probe/interventions.h"

#include <string>

namespace ds {

std::string head_output_hook(int layer, HeadSite kind) {
  const std::string l = std::to_string(layer);
  switch (kind) {
    case HeadSite::Cross:
      return "blocks." + l + ".cross_attn.z";
    case HeadSite::Encoder:
      return "encoder.blocks." + l + ".attn.z";
    case HeadSite::Self:
      break;
  }
  return "blocks." + l + ".attn.z";
}

namespace {
int head_hook(Hooks& hooks, int layer, int head, int d_head, float scale, HeadSite kind) {
  return hooks.subscribe(head_output_hook(layer, kind), [head, d_head, scale](HookEvent& ev) {
    int T = ev.t.shape[0], W = ev.t.shape[1];
    if ((head + 1) * d_head > W) return;
    for (int t = 0; t < T; ++t) {
      float* row = ev.t.data + int64_t(t) * W + int64_t(head) * d_head;
      for (int i = 0; i < d_head; ++i) row[i] = scale == 0.0f ? 0.0f : row[i] * scale;
    }
  });
}
}  // namespace

int zero_head(Hooks& hooks, int layer, int head, int d_head, HeadSite kind) {
  return head_hook(hooks, layer, head, d_head, 0.0f, kind);
}
int scale_head(Hooks& hooks, int layer, int head, int d_head, float scale, HeadSite kind) {
  return head_hook(hooks, layer, head, d_head, scale, kind);
}

}  // namespace ds
