#pragma once
// What the Block and KV cache views show, without any drawing:
//  * BlockSnapshot: one token's numbers inside one block (every stage from the input to
//    the output, the layer's cached keys and values). The worker measures it by running
//    the token's prefix again through a second engine with the block's inner hook points
//    subscribed (cmd::Inspect): the window's trace stays compact, and a view that
//    opens late still gets every number of every step.
//  * block_stages: a block's stages in the order the model's Config computes them
//    (pre- or post-norm, the cross-attention sub-layer, the feed-forward kind, q/k norms,
//    norms after each sub-layer, a sliding window), each with its equation, a
//    one-sentence explanation and the functions of core/model/reference.cpp that compute
//    it.
//  * reference_source: those functions' lines, embedded in the program at build time.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"

namespace ds {
struct Trace;
}

namespace dsgui {

// Which linear maps of a decoder layer have a bias: the Config says it for every layer
// at once (attn_bias, ffn_bias), but a file may hold some and not others (Qwen2: q, k
// and v, no output bias).
struct Biases {
  bool q = false, k = false, v = false, o = false, up = false, down = false;
  static Biases of(const ds::Config& c) {
    return {c.attn_bias, c.attn_bias, c.attn_bias, c.attn_bias, c.ffn_bias, c.ffn_bias};
  }
};

struct BlockSnapshot {
  uint64_t key = 0;   // the request it answers
  int layer = 0;      // decoder layer
  int pos = 0;        // the selected token's position
  int positions = 0;  // positions run (0 .. positions - 1): the prefix as of the step shown
  ds::Config cfg;
  Biases biases;            // of the layer's weights
  std::vector<int> tokens;  // the tokens run
  // Short hook name ("resid_pre", "ln1.normalized", "attn.q", "attn.scores", "mlp.post",
  // "ln_final", ...) -> the selected position's values: [d_model], [d_ff], q [n_heads *
  // d_head], k and v of the token itself [n_kv_heads * d_head], attention scores and
  // pattern [n_heads * keys] (head-major), the mask [keys] (1 may be read, 0 masked);
  // self-attention keys = positions, cross-attention keys = the source length.
  std::map<std::string, std::vector<float>> row;
  // Every position's keys and values at this layer, [positions, n_kv_heads * d_head]:
  // the KV cache as of the step shown. Cross-attention: the source's keys and values
  // [src_len, n_kv_heads * d_head], computed once when the source was encoded.
  std::vector<float> k, v, cross_k, cross_v;
  // Every position's queries at this layer, [positions, n_heads * d_head] (after rotary
  // and q/k norms, as attn.q publishes them).
  std::vector<float> q_all;
  int src_len = 0;
  // The selected head's self-attention scores of every query row [positions, positions]
  // (masked cells -inf), to show the whole mask around the selected row; empty when the
  // matrix would be too large to keep.
  std::vector<float> scores_all;
  int scores_all_head = -1;
  // The most probable next tokens after the selected position (from its logits).
  std::vector<int> top_ids;
  std::vector<float> top_logits, top_probs;
  std::vector<std::string> top_text;
  double seconds = 0;  // how long the run took
  std::string error;   // why there is no snapshot

  bool has(const std::string& name) const { return row.count(name) != 0; }
  const std::vector<float>* get(const std::string& name) const {
    auto it = row.find(name);
    return it == row.end() ? nullptr : &it->second;
  }
};

// The hook names the snapshot of `layer` subscribes to (decoder layer and the final
// points), in the model's TransformerLens-style spelling ("blocks.1.attn.q").
std::vector<std::string> snapshot_hooks(const ds::Config& cfg, int layer);

// The arithmetic of one attention score as the Block view writes it out: q . k_j of the
// selected head over the key's head, divided by sqrt(d_head) (or times the Config's
// attn_scale when it has one).
struct ScoreArithmetic {
  bool ok = false;
  double dot = 0;     // q . k_j
  double scaled = 0;  // dot * Config::score_scale(): the score before the mask
  double root = 0;    // sqrt(d_head)
  bool masked = false;
  std::string text;  // "q . k = 3.21; / sqrt(16) = 0.803", or "q . k = 3.21; x 0.0625 = 0.201"
};
ScoreArithmetic score_arithmetic(const BlockSnapshot& s, int head, int key, bool cross = false);

// A stage of a block, as the Block view draws it.
enum class StageKind {
  Input,
  Norm,
  SubNorm,  // sandwich norms: RMSNorm of a sub-layer's output before the residual add
  QKV,
  QKNorm,  // RMSNorm over each head's q and k (then rotary)
  Scores,
  Mask,
  Softmax,
  Mix,
  OutProj,
  Add,
  FFNUp,
  FFNAct,
  FFNDown,
  FinalNorm,
  Logits,
  Output
};

struct Stage {
  StageKind kind = StageKind::Input;
  std::string id;                      // unique in the block: "ln1", "attn.scores", "add1", ...
  std::string label;                   // the box's text: "LayerNorm", "q.k / sqrt(d)"
  std::string title;                   // the detail's heading
  std::string equation;                // in the seeds' notation
  std::string explain;                 // one sentence
  std::vector<std::string> functions;  // of core/model/reference.cpp
  std::string hook;                    // the short hook name of its output ("" when derived)
  int group = -1;                      // -1 none; 0 self-attention, 1 cross-attention, 2 feed-forward
  // Norm stages: 1, 2 or 3 as the seeds number them (LN1 before self-attention, LN2
  // before the FFN of a decoder-only block or before the cross-attention of an
  // encoder-decoder one, LN3 before its FFN); the hook keeps the engine's name
  // (a decoder-only block's LN2 publishes at ln3.normalized).
  int norm = 0;
};

// The stages of decoder layer `layer` in the order the model computes them; biases:
// which maps have one (null: as the Config says, Biases::of).
std::vector<Stage> block_stages(const ds::Config& cfg, int layer, const Biases* biases = nullptr);
// The layer's block in a line: "pre-norm, RMSNorm, q/k norms, norms after each
// sub-layer, sliding window of 16".
std::string block_summary(const ds::Config& cfg, int layer);
// The title of a stage group ("Masked multi-head self-attention", ...).
const char* group_title(int group);

// Which of the selected query's keys the generation really multiplied with its query,
// as of step `step` of the trace: keys [0, end) with end the value returned. With the
// KV cache the query of position pos was computed once, in the step that fed it, when
// the keys after that step's last row did not exist yet; without the cache the step
// shown ran the whole prefix again and computed q.k for every key (then masked).
int computed_keys(const ds::Trace& t, int step, int pos);

// A row of colour cells of a stage's detail.
struct StripRow {
  std::string label;
  std::vector<float> v;
};
// The largest |value| over every row: one colour scale for the stage, so that a vector
// and its normalised copy keep their different sizes on screen (1 when all are empty).
float shared_scale(const std::vector<StripRow>& rows);
// The norm's core before its gain and bias: LayerNorm (x - mean) / sqrt(var + eps),
// RMSNorm x / sqrt(mean(x^2) + eps). Empty for an empty x.
std::vector<float> standardized(const std::vector<float>& x, ds::NormKind kind, float eps);
// The rows of a norm stage: its input x, the standardized x, and the output
// (gain and bias applied), with their shared scale.
std::vector<StripRow> norm_rows(const std::vector<float>& in, const std::vector<float>& out, const ds::Config& c);

// The number tables of the Q K V and scores stages: positions [pos0, pos1] and features
// [dim0, dim0 + dims) of one head. Default: the last `rows` positions up to the
// selected one and the first `cols` features.
struct TablePick {
  int pos0 = 0, pos1 = 0, dim0 = 0, dims = 6;
  static TablePick around(int pos, int d_head, int rows = 4, int cols = 6);
  TablePick clamped(int positions, int d_head) const;
};

// core/model/reference.cpp's function `name` with the comment above it: the first
// line's number (1-based) and the text; false when there is no such function.
bool reference_function(const std::string& name, int& first_line, std::string& text);
// The whole file as embedded at build time.
const std::string& reference_source();

}  // namespace dsgui
