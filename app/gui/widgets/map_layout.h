#pragma once
// Where a heatmap's cells go in the space a view gives it: the cell size that fits
// (square cells, as large as fit), the zoom and pan the user chose, and the "last N
// tokens" window that follows generation. Plain arithmetic (no ImGui, no OpenGL), so
// that the GUI unit tests check it directly; the widget (widgets.cpp) draws what it
// says.
#include <algorithm>
#include <cmath>

namespace dsgui {

// One heatmap's zoom and pan, kept from frame to frame.
struct MapView {
  float zoom = 1;            // 1: the whole range fits the area; 2: cells twice that size
  float row0 = 0, col0 = 0;  // the first visible cell, counted from the range's first
  bool follow = true;        // keep the newest rows and columns in view as they arrive
  int last_n = 0;            // 0: every token; n: only the last n tokens (on token axes)
  int fit_serial = 0;        // the App's fit request this view has obeyed
};

inline constexpr float kMaxZoom = 64.0f;
// Cells at least this wide are whole pixels; smaller ones may be fractional.
inline constexpr float kWholeCell = 16.0f;

// A fitted cell size (fit) zoomed by zoom: whole pixels from kWholeCell up, never
// smaller than the fit.
inline float zoomed_cell(float fit, float zoom) {
  const float c = fit * zoom;
  return std::max(fit, c >= kWholeCell ? std::floor(c) : c);
}

struct MapLayoutIn {
  int rows = 0, cols = 0;            // the whole matrix
  float area_w = 0, area_h = 0;      // pixels the cells may take
  float min_cell = 1, max_cell = 0;  // cell size limits at zoom 1 (max 0: no limit)
  bool square = true;                // cells as wide as tall
  bool row_tokens = true;            // rows are token positions (the last-n window applies)
  bool col_tokens = true;            // columns are token positions
};

struct MapLayout {
  int range_row0 = 0, range_col0 = 0;  // the first cell of the last-n range, in the matrix
  int range_rows = 0, range_cols = 0;  // the range's size
  int row0 = 0, col0 = 0;              // the first visible cell, in the matrix
  int rows = 0, cols = 0;              // visible cells
  float cell_w = 0, cell_h = 0;        // pixels (whole from kWholeCell up, else fractional)
  float fit_w = 0, fit_h = 0;          // the cell size at zoom 1
  bool ok() const { return rows > 0 && cols > 0 && cell_w > 0 && cell_h > 0; }
  // Whether part of the range is off the area (zoomed in, or too many cells to fit).
  bool clipped() const { return rows < range_rows || cols < range_cols; }
};

// The layout for v's zoom and pan; v's pan is clamped to what can be shown (and moved
// to the newest cells when v.follow is set).
MapLayout layout_map(const MapLayoutIn& in, MapView& v);

// Zooms by `factor` keeping the cell under the point (fx, fy) (pixels from the visible
// cells' top-left) where it is.
void zoom_map(MapView& v, const MapLayout& l, float factor, float fx, float fy);

// Moves the view by (dx, dy) pixels (a drag: the cells follow the mouse).
void pan_map(MapView& v, const MapLayout& l, float dx, float dy);

// Back to "everything fits": zoom 1, following the newest tokens.
void fit_map(MapView& v);

}  // namespace dsgui
