#pragma once
// What every view uses (common.cpp): the heatmap widget, with its labels, zoom, pan and
// "last N tokens" window, drawn into App's maps; the caption above a view; the note
// shown when there is no step yet.
#include <string>
#include <vector>

#include "shell/app.h"
#include "views/views.h"

namespace dsgui {

struct HeatmapArgs {
  const Matrix* m = nullptr;
  const std::vector<std::string>* row_labels = nullptr;
  const std::vector<std::string>* col_labels = nullptr;
  const char* row_title = "";  // e.g. "query (reads)"
  const char* col_title = "";  // e.g. "key (is read)"
  HeatStyle style;
  std::vector<int> current_rows;  // rows of the current step (outlined)
  int selected_row = -1;
  const char* value_name = "weight";
  // Cell size limits when the map fits its area (zoom 1); max 0: 8 text heights, so
  // that Ctrl +/- scales the maps with the text.
  float max_cell = 0, min_cell = 1;
  bool square = true;  // square cells (else each side fits its own axis)
  // Axes whose cells are token positions: the "last N tokens" window applies to them
  // and follows generation.
  bool row_tokens = true, col_tokens = true;
  // The Fit / last-N / zoom line above the map; false: the view put heatmap_toolbar
  // in its own row of controls.
  bool toolbar = true;
  ImVec2 size;  // space for the controls line, cells and labels
  bool causal = false;
  int window = 0;  // causal on a sliding-window layer: its width (for the test's checker)
  // The matrix's lineage id (App::cached, App::attention_view): while it stays the
  // same the matrix has only gained rows or columns, and only those are sent to the
  // GPU; the cells are drawn again only when the matrix, its style or the size
  // changes. 0: sent and drawn again every frame.
  uint64_t lineage = 0;
};
struct HeatmapHit {
  bool hovered = false, clicked = false;  // clicked: released without dragging
  int row = -1, col = -1;                 // the matrix cell under the mouse
};
HeatmapHit heatmap_widget(App& app, const char* name, const HeatmapArgs& a);
// The heatmap's Fit button, last-N choice and zoom hint, for a view's row of controls
// (HeatmapArgs::toolbar false); nothing before the map's first frame.
void heatmap_toolbar(App& app, const char* name, bool tokens);
// Every heatmap shows only the last n tokens (0: all) at this zoom (1: fit), on the
// newest cells and following generation (--last-tokens, --zoom).
void heatmaps_start(App& app, int last_n, float zoom);
// The view's one-sentence explanation (its row's help), above it.
void view_caption(App& app, const char* view_id);
// Whether the trace has a step to show; if not, says so (with what to do) and the view
// draws nothing more.
bool has_step(const App& app, const char* message = "No step yet: press Step (Right arrow).");

}  // namespace dsgui
