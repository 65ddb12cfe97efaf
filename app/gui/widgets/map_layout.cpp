#include "widgets/map_layout.h"

#include <algorithm>
#include <cmath>

namespace dsgui {

namespace {

// A cell size: at least 1 and min_c, at most max_c (0: no limit). Cells of kWholeCell
// pixels and more are whole pixels (they line up with the screen and lose at most a
// sixteenth of the area); smaller ones keep their fraction, so that a long run's map
// fills its area instead of snapping down to the next whole pixel (267 cells in 600 px:
// 2.247 px, not 2).
float cell_size(float c, float min_c, float max_c) {
  if (!std::isfinite(c)) c = min_c;
  if (max_c > 0) c = std::min(c, max_c);
  // Fractions in 1/1024ths of a pixel: n cells then measure exactly n times the size in
  // float, never a rounding error past the area.
  c = c >= kWholeCell ? std::floor(c) : std::floor(c * 1024.0f) / 1024.0f;
  return std::max({1.0f, c, min_c});
}

// How many cells of size c fit in `room` pixels (a cell that fits but for rounding
// counts), between 1 and n.
int cells_in(float room, float c, int n) { return std::clamp(int(room / c + 1e-3f), 1, n); }

}  // namespace

MapLayout layout_map(const MapLayoutIn& in, MapView& v) {
  MapLayout l;
  if (in.rows <= 0 || in.cols <= 0) return l;
  const float aw = std::max(in.area_w, 1.0f), ah = std::max(in.area_h, 1.0f);
  const int n = std::max(0, v.last_n);
  l.range_row0 = in.row_tokens && n > 0 ? std::max(0, in.rows - n) : 0;
  l.range_col0 = in.col_tokens && n > 0 ? std::max(0, in.cols - n) : 0;
  l.range_rows = in.rows - l.range_row0;
  l.range_cols = in.cols - l.range_col0;
  float fw = aw / float(l.range_cols), fh = ah / float(l.range_rows);
  if (in.square) fw = fh = std::min(fw, fh);
  l.fit_w = cell_size(fw, in.min_cell, in.max_cell);
  l.fit_h = cell_size(fh, in.min_cell, in.max_cell);
  if (!std::isfinite(v.zoom)) v.zoom = 1;
  v.zoom = std::clamp(v.zoom, 1.0f, kMaxZoom);
  l.cell_w = zoomed_cell(l.fit_w, v.zoom);
  l.cell_h = zoomed_cell(l.fit_h, v.zoom);
  l.rows = cells_in(ah, l.cell_h, l.range_rows);
  l.cols = cells_in(aw, l.cell_w, l.range_cols);
  if (in.square && in.row_tokens && in.col_tokens && l.range_rows == l.range_cols && v.zoom <= 1.0f) {
    // At zoom 1, a token-by-token map too long to fit shows the same tokens down and across (the
    // newest that fit the shorter side): a square window on the square matrix.
    l.rows = l.cols = std::min(l.rows, l.cols);
  }
  const float max_r = float(l.range_rows - l.rows), max_c = float(l.range_cols - l.cols);
  if (!std::isfinite(v.row0)) v.row0 = 0;
  if (!std::isfinite(v.col0)) v.col0 = 0;
  if (v.follow) {
    // The newest tokens: the bottom rows and the right columns (on token axes).
    if (in.row_tokens) v.row0 = max_r;
    if (in.col_tokens) v.col0 = max_c;
  }
  v.row0 = std::clamp(v.row0, 0.0f, max_r);
  v.col0 = std::clamp(v.col0, 0.0f, max_c);
  l.row0 = l.range_row0 + int(std::lround(v.row0));
  l.col0 = l.range_col0 + int(std::lround(v.col0));
  return l;
}

namespace {

// Follow again when the view shows the newest cells of its token axes.
void update_follow(MapView& v, const MapLayout& l) {
  const bool end_r = v.row0 + float(l.rows) >= float(l.range_rows) - 0.5f;
  const bool end_c = v.col0 + float(l.cols) >= float(l.range_cols) - 0.5f;
  v.follow = end_r && end_c;
}

}  // namespace

void zoom_map(MapView& v, const MapLayout& l, float factor, float fx, float fy) {
  if (!l.ok() || !std::isfinite(factor) || factor <= 0) return;
  const float z = std::clamp(v.zoom * factor, 1.0f, kMaxZoom);
  // The cell under the point, in range cells (fractional).
  const float ax = float(l.col0 - l.range_col0) + fx / l.cell_w;
  const float ay = float(l.row0 - l.range_row0) + fy / l.cell_h;
  const float cw = zoomed_cell(l.fit_w, z), ch = zoomed_cell(l.fit_h, z);
  v.zoom = z;
  v.col0 = std::max(0.0f, ax - fx / cw);
  v.row0 = std::max(0.0f, ay - fy / ch);
  if (z <= 1.0f) {
    fit_map(v);
    return;
  }
  // The cells the area holds at the new size: the pan stays within them, and the view
  // follows the newest cells again when it reaches them.
  const int vis_c = std::min(l.range_cols, std::max(1, int(float(l.cols) * l.cell_w / cw)));
  const int vis_r = std::min(l.range_rows, std::max(1, int(float(l.rows) * l.cell_h / ch)));
  v.col0 = std::min(v.col0, float(l.range_cols - vis_c));
  v.row0 = std::min(v.row0, float(l.range_rows - vis_r));
  MapLayout next = l;
  next.rows = vis_r;
  next.cols = vis_c;
  update_follow(v, next);
}

void pan_map(MapView& v, const MapLayout& l, float dx, float dy) {
  if (!l.ok() || !std::isfinite(dx) || !std::isfinite(dy)) return;
  v.col0 = std::clamp(v.col0 - dx / l.cell_w, 0.0f, float(l.range_cols - l.cols));
  v.row0 = std::clamp(v.row0 - dy / l.cell_h, 0.0f, float(l.range_rows - l.rows));
  update_follow(v, l);
}

void fit_map(MapView& v) {
  v.zoom = 1;
  v.row0 = v.col0 = 0;
  v.follow = true;
}

}  // namespace dsgui
