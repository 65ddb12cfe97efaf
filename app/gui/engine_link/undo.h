#pragma once
// Undo for the window's what-ifs: re-running a step with heads off, re-drawing a step,
// forking, forgetting a branch, Reset, Start or opening a trace over the one shown.
// Each pushes what it replaced (the steps from the step it changed on, or the whole
// trace, with the selection, the heads switched off and the sampling settings);
// Ctrl+Z (App::undo, app/gui/undo_app.cpp) puts them back, in the window and in the
// engine's session (cmd::Restore). No ImGui here: the tests use it as it is.
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_link/messages.h"
#include "probe/trace.h"
#include "sample/sampler.h"

namespace dsgui {

// The stack keeps the latest kUndoDepth what-ifs, and fewer when what they hold passes
// kUndoBytes (the oldest go first; the latest is always kept).
inline constexpr int kUndoDepth = 20;
inline constexpr size_t kUndoBytes = size_t(512) << 20;

// One what-if, as it can be taken back.
struct Undo {
  std::string label;  // what Edit > Undo names: "re-run of step 11 with 2 heads off"
  // The trace. whole: `trace` is the whole trace the what-if replaced; else the what-if
  // left steps [0, shared) alone and trace.steps holds the steps from `shared` on as
  // they were (the header unused). has_trace false: the what-if changed only the
  // branches (Forget this branch).
  bool has_trace = true;
  bool whole = false;
  int shared = 0;
  ds::Trace trace;
  bool replay = false, done = false;  // the window's replay and finished flags
  int cursor = -1, sel_pos = -1;
  std::vector<std::pair<int, int>> heads_off;        // the heads the kept steps were computed with
  std::vector<std::pair<int, int>> cross_heads_off;  // and the cross-attention heads (encoder-decoder models)
  ds::SamplerConfig sampler;                         // the settings the window had
  // Branches: the index of the branch the what-if added (-1: none); the branch it
  // forgot, and where it was in the list (removed_at -1: none).
  int added_branch = -1;
  int removed_at = -1;
  std::string removed_label;
  ds::Trace removed_trace;
  int removed_fork = 0;

  size_t bytes() const;
};

class UndoStack {
 public:
  void push(Undo u);
  // The latest what-if, taken off the stack (nullopt when there is none).
  std::optional<Undo> pop();
  const Undo* top() const { return d_.empty() ? nullptr : &d_.back(); }
  bool empty() const { return d_.empty(); }
  int size() const { return int(d_.size()); }
  size_t bytes() const { return bytes_; }
  void clear();

 private:
  std::deque<Undo> d_;
  size_t bytes_ = 0;
};

// The trace as it was before u's what-if, given the trace now: its first `shared`
// steps and then u's (whole: u's trace). Moves u's steps out. Throws ds::Error when the
// trace now has fewer than `shared` steps (the steps the kept ones follow are gone).
ds::Trace undone_trace(const ds::Trace& now, Undo& u);

// The command that puts the engine's session back to t (what undone_trace gave for u):
// the steps from u.shared on taken again with the tokens t drew, each with its own
// settings; whole: a new session on t's prompt and source first. threads: the engine's.
cmd::Restore restore_command(const Undo& u, const ds::Trace& t, int threads);

// The heads, self- and cross-attention, that u's kept steps were computed with: what the
// engine (and the window's lists of heads switched off) must have again after undoing u,
// so that the steps after the undo run as the kept ones did.
cmd::Heads restore_heads(const Undo& u);

// Whether two traces drew the same tokens (a branch that would repeat one kept already).
bool same_tokens(const ds::Trace& a, const ds::Trace& b);

}  // namespace dsgui
