#pragma once
// The window's views, one table (views.cpp). A view is a draw function in a file of its
// own (panel_NAME.cpp), with the state only it needs in a struct beside it, reached
// through App::state<S>(). A view that asks the engine for something posts a command
// (messages.h) and its row of the table says whether it waits for the answer, takes the
// answer, and stops waiting when a command fails: adding a view is adding its file, its
// row, and (for a new command) the worker's handler.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "messages.h"

namespace dsgui {

class App;

struct ViewInfo {
  const char* id;     // --view ID
  const char* title;  // the tab's label
  const char* help;   // one sentence: the tab's tooltip and the view's caption
  void (*draw)(App& app);
  // The views that ask the worker (null for the others): whether an answer is on its
  // way; take the worker's event if it is the view's answer (true: taken); a command
  // failed (the message is on the status line): stop waiting.
  bool (*waiting)(App& app) = nullptr;
  bool (*answer)(App& app, Event& e) = nullptr;
  void (*failed)(App& app) = nullptr;
};

std::span<const ViewInfo> all_views();
// Whether any view waits for the worker; "the Logit lens, Beam search" (the titles of
// those that do, "" when none), for a scripted run's messages.
bool views_waiting(App& app);
std::string views_waiting_list(App& app);
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
// Beam search (panel_beams.cpp): the width and length penalty asked for on the command
// line; Right and Left while the view is on screen (true when it took the key).
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
// For the scripted test's sidecar: whether the latest snapshot arrived without error.
bool block_ok(App& app);
// The KV cache view (panel_kv.cpp): times the steps shown both ways now (the view's
// button; scripted runs of the view).
void kv_time_now(App& app);
// Head roles (panel_roles.cpp):
// The head the view has open and its score of the chosen kind (for the test's sidecar);
// false when there are no scores.
bool roles_selected(App& app, int& kind, int& layer, int& head, float& score);
// Opens a stage of the Block view ("attn.scores", "ln1", ...; block_data.h).
void block_open_stage(App& app, const std::string& id);

}  // namespace dsgui
