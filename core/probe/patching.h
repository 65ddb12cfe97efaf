#pragma once
// Activation patching: where in the model does the difference between two prompts live?
//
// A clean prompt and a corrupted one of the same length (for an encoder-decoder model:
// two sources, with the same decoder tokens) lead the model to different answers. The
// metric is logit(answer) - logit(wrong) at the last position. The clean input is run
// once and every site's activation recorded (hook points, model/hooks.h); then the
// corrupted input is run again and again, each time with one site replaced by its clean
// value (an intervention). How much of the metric comes back, normalised
//   (patched - corrupt) / (clean - corrupt),
// 0 = as corrupted, 1 = as clean, says how much of the difference passes through that site.
//
// Sites (decoder blocks): the residual stream entering a block (resid_pre), a block's
// attention output (attn_out), cross-attention output (cross_attn_out, encoder-decoder)
// and MLP output (mlp_out), each per layer and position; one head's output z (attn.z, or
// cross_attn.z) per layer and head at every position at once; and one layer's heads per
// position.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "probe/ablation.h"

namespace ds {

enum class PatchSite {
  ResidPre,      // grid: layer x position
  AttnOut,       // layer x position
  CrossAttnOut,  // layer x position (encoder-decoder)
  MlpOut,        // layer x position
  Head,          // layer x head: the head's z at every position
  CrossHead,     // layer x head, cross-attention (encoder-decoder)
  HeadPos,       // one layer's heads x position
};

// "resid_pre", "attn_out", "cross_attn_out", "mlp_out", "head", "cross_head", "head_pos".
const char* patch_site_name(PatchSite s);
// Parses those names; false when s is none of them.
bool parse_patch_site(const std::string& name, PatchSite& s);
// The hook point a site patches (AttnZ for Head and HeadPos, CrossZ for CrossHead).
Point patch_point(PatchSite s);

struct PatchInput {
  std::vector<int> clean, corrupt;  // decoder-only: the prompts; encoder-decoder: the sources
  std::vector<int> prefix;          // encoder-decoder: the decoder's tokens, the same for both runs
  int answer = -1, wrong = -1;      // the metric is logit(answer) - logit(wrong) at the last position
};

// Checks an input against a model: the same number of tokens (saying both counts), ids
// inside the vocabulary, within the context, answer != wrong; throws ds::Error.
void check_patch_input(const Config& c, const PatchInput& in);

// One site taken from the clean run. pos -1: every position; head: the head of Head,
// CrossHead and HeadPos (-1: every head, i.e. the whole z).
struct PatchCell {
  PatchSite site = PatchSite::ResidPre;
  int layer = 0;
  int pos = -1;
  int head = -1;
};

// Runs the clean input once (recording every patchable site) and the corrupted input
// once; then runs the corrupted input with chosen sites patched.
class Patcher {
 public:
  Patcher(std::shared_ptr<const Model> m, PatchInput in, int threads = 1);
  ~Patcher();
  Patcher(const Patcher&) = delete;
  Patcher& operator=(const Patcher&) = delete;

  // The last position's logits [vocab] of the corrupted input with every cell taken
  // from the clean run (none: the corrupted run itself). Throws ds::Error for a cell
  // the model has not got.
  std::vector<float> run(std::span<const PatchCell> cells);
  // logit(answer) - logit(wrong), in double precision.
  double metric(const std::vector<float>& logits) const;
  const std::vector<float>& clean_logits() const { return clean_logits_; }
  const std::vector<float>& corrupt_logits() const { return corrupt_logits_; }
  double clean_metric() const { return metric(clean_logits_); }
  double corrupt_metric() const { return metric(corrupt_logits_); }
  const Config& config() const;
  const PatchInput& input() const { return in_; }
  int positions() const;  // the decoder positions each run computes
  // The clean run's tensor at a decoder hook point of layer `layer`, [T, width].
  const MatRM& clean_value(Point p, int layer) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PatchInput in_;
  std::vector<float> clean_logits_, corrupt_logits_;
};

// A grid of patching results, row-major.
struct PatchGrid {
  PatchSite site = PatchSite::ResidPre;
  int layer = -1;              // HeadPos: the layer; else -1
  int rows = 0, cols = 0;      // layers x positions, layers x heads, or heads x positions
  std::vector<double> metric;  // the patched logit difference of each cell
  std::vector<double> value;   // normalised: (metric - corrupt) / (clean - corrupt)
  double clean = 0, corrupt = 0;
  double at(int r, int c) const { return value[size_t(r) * size_t(cols) + size_t(c)]; }
};

// The normalised effect; throws ds::Error when clean and corrupt are (nearly) equal:
// then there is nothing to restore.
double patch_normalise(double patched, double clean, double corrupt);

// Every cell of one grid, one corrupted run each. layer: HeadPos's layer. progress is
// called after each run (returning false throws ds::Cancelled). Throws ds::Error for a
// site the model lacks (cross-attention sites on a decoder-only model, a bad layer) and
// when the clean and corrupted metrics are equal.
PatchGrid patch_grid(Patcher& p, PatchSite site, int layer = -1, const AblationProgress& progress = {});

}  // namespace ds
