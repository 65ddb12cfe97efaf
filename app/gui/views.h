#pragma once
// The window's views, one table (views.cpp). A view is a draw function in a file of its
// own (panel_NAME.cpp), with the state only it needs in a struct beside it, reached
// through App::state<S>(). Adding a view is adding that file and one row of the table.
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace dsgui {

class App;
struct LensResult;
struct ShapeAnswer;
struct BeamAnswer;
struct BlockSnapshot;
struct MeasureAnswer;
struct RolesAnswer;

struct ViewInfo {
  const char* id;     // --view ID
  const char* title;  // the tab's label
  const char* help;   // one sentence: the tab's tooltip and the view's caption
  void (*draw)(App& app);
};

std::span<const ViewInfo> all_views();
// The row of the view with this id, or -1.
int view_index(std::string_view id);
// "attention, heads, ... or branches", for messages.
std::string view_id_list();

// What views offer the rest of the window.
// Cross-attention (panel_cross.cpp): the layer and head it shows, kept within the model.
void cross_select(App& app, int layer, int head);
// The same, on the encoder's self-attention (encoder true) or the cross-attention.
void cross_show(App& app, int layer, int head, bool encoder);
void cross_clamp(App& app, int n_layers, int n_heads);
// Logit lens (panel_lens.cpp): whether it waits for the worker; the worker's answer.
bool lens_waiting(App& app);
void lens_answer(App& app, LensResult&& lens);
void lens_failed(App& app);
// The Next token view (panel_next.cpp): whether a reshaped table is on its way; the
// worker's answer.
bool next_waiting(App& app);
void next_shape_answer(App& app, std::shared_ptr<const ShapeAnswer> ans);
// Beam search (panel_beams.cpp): whether a search is running; the worker's answer; a
// failed search; the width and length penalty asked for on the command line; Right and
// Left while the view is on screen (true when it took the key).
bool beams_waiting(App& app);
void beams_answer(App& app, std::shared_ptr<const BeamAnswer> ans);
void beams_failed(App& app);
void beams_set(App& app, int width, float length_penalty);
bool beams_step(App& app, int dir);
// Play (Space) while the view is on screen: the next step of the tree; `playing` turns
// false at its end. False when the view is not on screen (playing means generating).
bool beams_playing(App& app, bool& playing);
// Scripted runs: starts the view's search now when it is on screen (a window in use
// starts it when the view opens; a scripted run waits until its steps are done).
void beams_search_now(App& app);

// The Block and KV cache views (panel_block.cpp, panel_kv.cpp) share one snapshot: the
// selected token's numbers inside one layer, which the worker measures on request.
// block_snapshot asks for the one the window's selection needs (when it changed) and
// returns the latest that arrived (null: none yet).
const BlockSnapshot* block_snapshot(App& app, int layer, int head);
void block_answer(App& app, std::shared_ptr<const BlockSnapshot> s);
bool block_waiting(App& app);
void block_failed(App& app);
// For the scripted test's sidecar: whether the latest snapshot arrived without error.
bool block_ok(App& app);
// The KV cache view (panel_kv.cpp): the worker's timing of the same tokens both ways.
void kv_measure_answer(App& app, std::shared_ptr<const MeasureAnswer> m);
// Times the steps shown both ways now (the view's button; scripted runs of the view);
// whether that is still running.
void kv_time_now(App& app);
bool kv_waiting(App& app);
// Head roles (panel_roles.cpp): the worker's head detector answer, a failure, whether
// it is running.
void roles_answer(App& app, std::shared_ptr<const RolesAnswer> r);
void roles_failed(App& app);
bool roles_waiting(App& app);
// The head the view has open and its score of the chosen kind (for the test's sidecar);
// false when there are no scores.
bool roles_selected(App& app, int& kind, int& layer, int& head, float& score);
// Opens a stage of the Block view ("attn.scores", "ln1", ...; block_data.h).
void block_open_stage(App& app, const std::string& id);

}  // namespace dsgui
