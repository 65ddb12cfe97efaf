#pragma once
// Hook points: named places inside the forward pass where observers read, and
// interventions change, the tensors as they are computed. The engine publishes them
// (model/); what subscribes to them (the trace recorder, interventions, the logit
// lens) lives in probe/. Names follow TransformerLens: "blocks.3.attn.pattern",
// "encoder.blocks.0.resid_post", "logits".
//
// Shapes (T = rows computed in this call, S = keys):
//   embed, pos_embed, resid_pre, resid_mid, resid_mid_cross, resid_post, ln_final: [T, d_model]
//   attn.scores, attn.pattern, cross_attn.scores, cross_attn.pattern: [n_heads, T, S]
//     (scores are pre-softmax after the 1/sqrt(d_head) scaling; masked cells -inf)
//   attn.mask, cross_attn.mask: [T, S], 1 = allowed, 0 = masked
//   attn.z, cross_attn.z: [T, n_heads * d_head] (per-head outputs before Wo)
//   mlp.pre, mlp.post: [T, d_ff] (pre- and post-activation; SwiGLU: gate pre-act, silu(gate)*up)
//   logits: [T_out, vocab] (T_out = 1 unless all rows were asked for)
// Query row t of a decoder call is absolute position pos0 + t; self-attention key j is
// absolute position j. "sample" is published by the Session, not by the model.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace ds {

enum class Stack : uint8_t { Decoder = 0, Encoder = 1 };

enum class Point : uint8_t {
  Embed,
  PosEmbed,
  ResidPre,
  AttnScores,
  AttnMask,
  AttnPattern,
  AttnZ,
  ResidMid,
  CrossScores,
  CrossMask,
  CrossPattern,
  CrossZ,
  ResidMidCross,
  MlpPre,
  MlpPost,
  ResidPost,
  LnFinal,
  Logits,
  Count
};

// A non-owning view of a float tensor of rank 1 to 3, row-major.
struct TensorView {
  float* data = nullptr;
  int rank = 0;
  int shape[3] = {1, 1, 1};
  int64_t size() const { return int64_t(shape[0]) * (rank > 1 ? shape[1] : 1) * (rank > 2 ? shape[2] : 1); }
};

struct HookEvent {
  Stack stack;
  int layer;  // -1 for points outside the blocks (embed, ln_final, logits)
  Point point;
  int pos0;      // absolute position of the first query row
  TensorView t;  // observers may change it in place (interventions)
};

using HookFn = std::function<void(HookEvent&)>;

class Hooks {
 public:
  Hooks() = default;
  explicit Hooks(const Config& cfg);

  // Subscribes fn to every hook point whose name matches pattern. In a pattern
  // '*' matches one name segment ("blocks.*.attn.pattern") and "**" any number of
  // characters. Returns a handle for unsubscribe; throws ds::Error when the pattern
  // matches no hook point of this model.
  int subscribe(const std::string& pattern, HookFn fn);
  void unsubscribe(int handle);
  void clear();
  bool empty() const { return n_active_ == 0; }

  // True when something is subscribed at this point: the forward pass checks this
  // before it builds any tensor that only observers need.
  bool active(Stack s, int layer, Point p) const { return n_active_ != 0 && !slots_[slot(s, layer, p)].empty(); }
  void fire(Stack s, int layer, Point p, int pos0, TensorView t) const;

  // Every hook name of a model with this configuration, in forward order.
  static std::vector<std::string> names(const Config& cfg);
  static std::string name(Stack s, int layer, Point p);
  static bool matches(const std::string& pattern, const std::string& name);
  // The same point as TransformerLens spells it ("blocks.0.attn.hook_pattern",
  // "blocks.0.hook_resid_pre", "ln_final.hook_normalized"); "" for points it has no
  // name for (attn.mask, logits) and for strings that are not hook names. Every
  // function here that takes a name or a pattern accepts either spelling.
  static std::string transformerlens_name(const std::string& name);
  // Parses a hook name (either spelling); returns false if it is not one.
  static bool parse(const std::string& name, Stack& s, int& layer, Point& p);

 private:
  int slot(Stack s, int layer, Point p) const {
    int per_stack = (n_layers_max_ + 1) * int(Point::Count);
    return int(s) * per_stack + (layer + 1) * int(Point::Count) + int(p);
  }
  struct Sub {
    int handle;
    HookFn fn;
  };
  Config cfg_;
  int n_layers_max_ = 0;
  std::vector<std::vector<Sub>> slots_;
  int next_handle_ = 1;
  int n_active_ = 0;
};

}  // namespace ds
