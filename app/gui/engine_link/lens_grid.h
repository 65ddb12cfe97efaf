#pragma once
// The logit lens of a whole run as a grid: one row per residual point the lens reads
// (the embedding, then the output of every layer; ds::lens_sources) by one column per
// position, each cell the few most probable next tokens when the final norm and the
// output head read that row. The Logit lens view draws it (the top token's probability
// as the cell's colour, its text in the cell) and the commitment strip reads it.
//
// The grid grows a step at a time from the lens the trace recorded (a step reads only
// its own rows), or takes columns the engine computed (cmd::Lens) for a trace recorded
// without the lens. Nothing here is recomputed per frame.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine_link/messages.h"
#include "engine_link/trace_view.h"
#include "probe/trace.h"

namespace dsgui {

// The commitment layer of a column whose sources' top-1 ids are top1[0 .. n): the first
// source from which the top-1 equals the last source's (the model's own answer) at
// every later source; n - 1 when only the last has it, -1 for n < 1 or an unknown id
// (< 0) at or after the answer's run.
int lens_commitment(const int* top1, int n);

// One cell: the lens of one residual row, most probable first.
struct LensCell {
  static constexpr int kTop = ds::kWindowLensTopK;
  std::array<int, kTop> ids{};
  std::array<float, kTop> probs{};
  int n = 0;  // tokens held (0: not known yet)
  int top() const { return n > 0 ? ids[0] : -1; }
  float p() const { return n > 0 ? probs[0] : 0.0f; }
};

class LensGrid {
 public:
  // Brings the grid to the trace as of `step`: reads the lens the steps after the last
  // one read recorded, or starts over when epoch or the model's shape differ from the
  // last call's. Returns true when anything changed (cells, positions).
  bool as_of(const ds::Trace& t, uint64_t epoch, int step);
  // Puts columns the engine computed (answers to cmd::Lens); rows in lens_sources order.
  // Columns beyond the grid or of another shape are ignored. Returns true when any was put.
  bool put(const LensResult& r);

  uint64_t epoch() const { return epoch_; }
  int sources() const { return int(labels_.size()); }
  int positions() const { return positions_; }  // columns as of the step
  // "embedding", "layer 0", ..., "final (11)"
  const std::vector<std::string>& labels() const { return labels_; }
  const LensCell& cell(int source, int pos) const { return cells_[size_t(pos) * labels_.size() + size_t(source)]; }
  bool known(int pos) const { return pos >= 0 && pos < positions_ && known_[size_t(pos)] != 0; }
  int known_count() const;  // columns known among the positions
  // The commitment layer of a known column (lens_commitment), else -1.
  int commitment(int pos) const { return known(pos) ? commit_[size_t(pos)] : -1; }
  // A token's text as the trace or the engine named it, "#id" when neither did.
  std::string text(int id) const;
  // Bumped whenever the cells change (for the view's caches).
  uint64_t serial() const { return serial_; }
  // Whether the trace recorded the lens (false: columns come from the engine).
  bool recorded() const { return recorded_; }

  // The top token's probability of columns [col0, col0 + cols) (clamped to the grid),
  // [sources, cols]; columns not known yet are masked.
  Matrix matrix(int col0, int cols) const;

 private:
  void start(const ds::Trace& t, uint64_t epoch);
  void read_step(const ds::Trace& t, int s);
  void finish_column(int pos);
  void grow(int positions);

  uint64_t epoch_ = 0, serial_ = 0;
  int d_model_ = -1, vocab_ = -1;
  int read_ = -1;  // steps 0 .. read_ were read
  int positions_ = 0;
  bool recorded_ = false;
  std::vector<std::string> labels_;
  std::vector<LensCell> cells_;  // [position][source]
  std::vector<uint8_t> known_;   // [position]: every source's cell is known
  std::vector<int> commit_;      // [position]
  std::map<int, std::string> text_;
};

// The residual rows the engine needs for the lens of position pos as of step (the
// embedding and every layer's resid_post, values the trace recorded), as a column of
// a cmd::Lens; false when the trace did not record them all.
bool lens_column_inputs(const ds::Trace& t, int step, int pos, cmd::Lens::Column& out);

}  // namespace dsgui
