#pragma once
// What views offer the rest of the window beyond their row of the table
// (shell/view_table.h): what the command line and the scripted runs set and read.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shell/view_table.h"

namespace dsgui {

class App;
struct BlockSnapshot;

// Cross-attention (cross.cpp): the layer and head it shows, kept within the model.
void cross_select(App& app, int layer, int head);
// The same, on the encoder's self-attention (encoder true) or the cross-attention.
void cross_show(App& app, int layer, int head, bool encoder);
// Beam search (beams.cpp): the width and length penalty asked for on the command line.
void beams_set(App& app, int width, float length_penalty);
// Scripted runs: starts the view's search now when it is on screen, or whatever view is
// (any_view: --beam given) (a window in use starts it when the view opens; a scripted
// run waits until its steps are done). The winner is kept as a branch.
void beams_search_now(App& app, bool any_view = false);
// Branches (branches.cpp): makes branch i the live generation; the generation shown is
// kept as a branch in its place (Ctrl+Z undoes both). False when it cannot now.
bool branches_choose(App& app, int i);
// What the beam search, branches, next token and cross-attention views say, for the
// screenshot's sidecar: (key, JSON value) pairs.
std::vector<std::pair<std::string, std::string>> beamtab_sidecar(App& app);

// The Block and KV cache views (block.cpp, kv.cpp) share one snapshot: the
// selected token's numbers inside one layer, which the worker measures on request.
// block_snapshot asks for the one the window's selection needs (when it changed) and
// returns the latest that arrived (null: none yet).
const BlockSnapshot* block_snapshot(App& app, int layer, int head);
// For the scripted test's sidecar: whether the latest snapshot arrived without error.
bool block_ok(App& app);
// The Block view's last frame (key table rows on screen, equation width, colour scales,
// key states) and the KV cache view's (plot labels), as JSON objects for the sidecar.
std::string block_sidecar(App& app);
std::string kv_sidecar(App& app);
// Opens the KV cache view's "cache" or "cost" tab (shown as tabs on a narrow window).
void kv_open_pane(App& app, const std::string& name);
// The KV cache view (kv.cpp): times the steps shown both ways now (the view's
// button; scripted runs of the view).
void kv_time_now(App& app);
// Head roles (roles.cpp): the head the view has open and its score of the chosen kind
// (for the test's sidecar); false when there are no scores.
bool roles_selected(App& app, int& kind, int& layer, int& head, float& score);
// Compare (compare.cpp): B's text, model, settings and heads off as the command line gives
// them (--compare-prompt, ...), and B run now (scripted runs, once A's steps are done); the
// view's state for the screenshot's sidecar, as a JSON object.
struct CompareSetup {
  std::string prompt, source, model, heads_off;
  float temperature = -1;  // < 0: A's settings
  long seed = -1;
  int part = -1;  // a narrow window's tab: 0 next token, 1 attention, 2 layers (-1: as it is)
};
void compare_script(App& app, const CompareSetup& s);
std::string compare_sidecar(App& app);
// Opens a stage of the Block view ("attn.scores", "ln1", ...; block_data.h).
void block_open_stage(App& app, const std::string& id);
// Patching (patching.cpp): scripted runs set the boxes from --patch-clean, --patch-corrupt,
// --patch-answer, --patch-wrong, --patch-prefix, --patch-site, --patch-layer (keys without
// "--patch-") and start the experiment; what the view shows, as JSON for the sidecar.
void patching_script(App& app, const std::map<std::string, std::string>& o);
std::string patching_sidecar(App& app);

// Attribution (attribution.cpp): scripted choices, applied once the step is shown: the
// token (a candidate's text or "#ID"; "" keeps the drawn one), the token subtracted ("":
// none) and the head whose writes are listed ("L:H", "cL:H" for cross-attention; "": none).
void attribution_script(App& app, const std::string& token, const std::string& vs, const std::string& head);
// The view's last frame and answer as a JSON object, for the sidecar.
std::string attribution_sidecar(App& app);

}  // namespace dsgui
