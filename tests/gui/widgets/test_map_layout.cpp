// The heatmap layout (app/gui/map_layout.h): cells fill the area (square, as large as
// fit), zoom and pan stay inside the matrix, the last-N window and "follow" keep the
// newest tokens in view. Each property is checked against arithmetic done here.
#include <gtest/gtest.h>

#include <cmath>

#include "widgets/map_layout.h"

using dsgui::fit_map;
using dsgui::layout_map;
using dsgui::MapLayout;
using dsgui::MapLayoutIn;
using dsgui::MapView;
using dsgui::pan_map;
using dsgui::zoom_map;

namespace {

MapLayoutIn area(int rows, int cols, float w, float h) {
  MapLayoutIn in;
  in.rows = rows;
  in.cols = cols;
  in.area_w = w;
  in.area_h = h;
  return in;
}

// The visible cells lie inside the area and inside the matrix.
void expect_inside(const MapLayoutIn& in, const MapLayout& l) {
  ASSERT_TRUE(l.ok());
  EXPECT_LE(l.cell_w * float(l.cols), in.area_w);
  EXPECT_LE(l.cell_h * float(l.rows), in.area_h);
  EXPECT_GE(l.row0, 0);
  EXPECT_GE(l.col0, 0);
  EXPECT_LE(l.row0 + l.rows, in.rows);
  EXPECT_LE(l.col0 + l.cols, in.cols);
  // Large cells are whole pixels (they line up with the screen); small ones may not be.
  if (l.cell_w >= dsgui::kWholeCell) {
    EXPECT_EQ(l.cell_w, std::floor(l.cell_w));
  }
  if (l.cell_h >= dsgui::kWholeCell) {
    EXPECT_EQ(l.cell_h, std::floor(l.cell_h));
  }
}

}  // namespace

TEST(MapLayout, SmallMatrixFillsTheShorterSideWithSquareCells) {
  // 11 tokens in 1500 x 800 px: cells of floor(800 / 11) = 72 px, 792 px tall.
  MapView v;
  const MapLayoutIn in = area(11, 11, 1500, 800);
  const MapLayout l = layout_map(in, v);
  expect_inside(in, l);
  EXPECT_EQ(l.cell_w, l.cell_h);
  EXPECT_EQ(l.cell_h, std::floor(800.0f / 11));
  EXPECT_EQ(l.rows, 11);
  EXPECT_EQ(l.cols, 11);
  EXPECT_FALSE(l.clipped());
  // One pixel more per cell would not fit.
  EXPECT_GT((l.cell_h + 1) * 11, 800);
}

TEST(MapLayout, MaxCellLimitsTheFitAndNonSquareCellsFitEachAxis) {
  MapView v;
  MapLayoutIn in = area(4, 4, 1000, 1000);
  in.max_cell = 100;
  EXPECT_EQ(layout_map(in, v).cell_w, 100);
  // The residual map: 12 layers by 120 positions in 1200 x 600 px.
  in = area(12, 120, 1200, 600);
  in.square = false;
  in.row_tokens = false;
  const MapLayout l = layout_map(in, v);
  expect_inside(in, l);
  EXPECT_EQ(l.cell_w, 10);
  EXPECT_EQ(l.cell_h, 50);  // not a 10 px strip: the map is as tall as the space
}

TEST(MapLayout, TooManyTokensShowTheNewestThatFit) {
  // 500 tokens in 300 px: 1 px cells, the last 300 rows and columns.
  MapView v;
  const MapLayoutIn in = area(500, 500, 300, 300);
  const MapLayout l = layout_map(in, v);
  expect_inside(in, l);
  EXPECT_EQ(l.cell_w, 1);
  EXPECT_EQ(l.rows, 300);
  EXPECT_EQ(l.row0, 200);
  EXPECT_EQ(l.col0, 200);
  EXPECT_TRUE(l.clipped());
}

TEST(MapLayout, LongRunsFillTheAreaWithFractionalCells) {
  // 267 tokens in 1300 x 600 px: whole pixels would give 2 px cells (534 px, 89% of the
  // height); fractional cells take the whole height and show every token.
  MapView v;
  const MapLayoutIn in = area(267, 267, 1300, 600);
  const MapLayout l = layout_map(in, v);
  expect_inside(in, l);
  EXPECT_EQ(l.cell_w, l.cell_h);
  EXPECT_FALSE(l.clipped());
  EXPECT_GE(l.cell_h * 267, 600 * 0.999);
  // Every size from 2 to 600 tokens fills the shorter side: fractional cells at least
  // 99.9% of it, whole-pixel cells (kWholeCell and more) lose less than a pixel a cell.
  for (int n = 2; n <= 600; ++n) {
    MapView w;
    const MapLayoutIn a = area(n, n, 1300, 600);
    const MapLayout m = layout_map(a, w);
    expect_inside(a, m);
    ASSERT_FALSE(m.clipped()) << n;
    EXPECT_GT(m.cell_h * float(n), 600 - float(n)) << n;
    if (m.cell_h < dsgui::kWholeCell) {
      EXPECT_GE(m.cell_h * float(n), 600 * 0.999) << n;
    }
  }
}

TEST(MapLayout, TooLongRunsFollowInASquareWindow) {
  // 727 tokens in 1300 x 600 px: 1 px cells, the newest 600 tokens down and across (the
  // same tokens on both axes, the diagonal in the window's corner).
  MapView v;
  const MapLayoutIn in = area(727, 727, 1300, 600);
  const MapLayout l = layout_map(in, v);
  expect_inside(in, l);
  EXPECT_EQ(l.cell_w, 1);
  EXPECT_EQ(l.rows, 600);
  EXPECT_EQ(l.cols, 600);
  EXPECT_EQ(l.row0, 127);
  EXPECT_EQ(l.col0, 127);
  // Zoomed in, the window takes the whole area (a rectangle).
  v.zoom = 2;
  v.follow = true;
  const MapLayout z = layout_map(in, v);
  expect_inside(in, z);
  EXPECT_EQ(z.rows, 300);
  EXPECT_EQ(z.cols, 650);
}

TEST(MapLayout, LastNTokensFollowsGeneration) {
  MapView v;
  v.last_n = 8;
  for (int t = 3; t <= 40; ++t) {
    MapLayoutIn in = area(t, t, 640, 480);
    const MapLayout l = layout_map(in, v);
    expect_inside(in, l);
    const int n = std::min(t, 8);
    EXPECT_EQ(l.rows, n);
    EXPECT_EQ(l.cols, n);
    EXPECT_EQ(l.row0 + l.rows, t);  // the newest token is the last row shown
    EXPECT_EQ(l.cell_h, std::floor(480.0f / float(n)));
  }
  // Cross-attention: rows are tokens, the source columns stay whole.
  MapLayoutIn in = area(30, 5, 640, 480);
  in.col_tokens = false;
  const MapLayout l = layout_map(in, v);
  EXPECT_EQ(l.rows, 8);
  EXPECT_EQ(l.row0, 22);
  EXPECT_EQ(l.cols, 5);
  EXPECT_EQ(l.col0, 0);
}

TEST(MapLayout, ZoomKeepsTheCellUnderTheMouse) {
  MapView v;
  const MapLayoutIn in = area(40, 40, 400, 400);  // 10 px cells
  MapLayout l = layout_map(in, v);
  ASSERT_EQ(l.cell_w, 10);
  // The mouse over cell (row 25, col 12), 3 px into it.
  const float fx = 12 * 10 + 3, fy = 25 * 10 + 3;
  zoom_map(v, l, 2.0f, fx, fy);
  l = layout_map(in, v);
  expect_inside(in, l);
  EXPECT_EQ(l.cell_w, 20);
  EXPECT_EQ(l.cols, 20);
  EXPECT_EQ(l.col0 + int((fx) / l.cell_w), 12);
  EXPECT_EQ(l.row0 + int((fy) / l.cell_h), 25);
  EXPECT_FALSE(v.follow);  // the top-left corner is not the newest tokens
  // Zooming out past 1 fits everything again.
  zoom_map(v, l, 0.1f, 0, 0);
  l = layout_map(in, v);
  EXPECT_EQ(v.zoom, 1.0f);
  EXPECT_FALSE(l.clipped());
}

TEST(MapLayout, PanStaysInsideAndFollowsAtTheEnd) {
  MapView v;
  const MapLayoutIn in = area(100, 100, 200, 200);  // 2 px cells fit 100
  v.zoom = 5;                                       // 10 px cells: 20 of 100 visible
  v.follow = false;
  MapLayout l = layout_map(in, v);
  ASSERT_EQ(l.cols, 20);
  EXPECT_EQ(l.row0, 0);
  pan_map(v, l, 1e6f, 1e6f);  // drag far right and down: the view stops at the top-left
  l = layout_map(in, v);
  EXPECT_EQ(l.col0, 0);
  EXPECT_EQ(l.row0, 0);
  pan_map(v, l, -1e6f, -1e6f);  // the other way: stops at the newest cells, and follows them
  l = layout_map(in, v);
  EXPECT_EQ(l.col0 + l.cols, 100);
  EXPECT_EQ(l.row0 + l.rows, 100);
  EXPECT_TRUE(v.follow);
  // The matrix grows by a token: the view moves with it.
  const MapLayoutIn grown = area(101, 101, 200, 200);
  l = layout_map(grown, v);
  EXPECT_EQ(l.row0 + l.rows, 101);
  fit_map(v);
  l = layout_map(grown, v);
  EXPECT_EQ(v.zoom, 1.0f);
  EXPECT_GE(l.cell_h * 101, 200 * 0.999);  // 1.98 px cells: all 101 rows fit again
  EXPECT_FALSE(l.clipped());
}

TEST(MapLayout, BadInputGivesNothingOrClampedValues) {
  MapView v;
  EXPECT_FALSE(layout_map(area(0, 5, 100, 100), v).ok());
  EXPECT_FALSE(layout_map(area(5, -1, 100, 100), v).ok());
  v.zoom = NAN;
  v.row0 = INFINITY;
  v.col0 = -5;
  const MapLayoutIn in = area(10, 10, 0, -50);  // no room: still one cell, never a crash
  const MapLayout l = layout_map(in, v);
  EXPECT_TRUE(l.ok());
  EXPECT_EQ(v.zoom, 1.0f);
  EXPECT_GE(l.row0, 0);
  EXPECT_LE(l.row0 + l.rows, 10);
  zoom_map(v, l, NAN, 0, 0);
  pan_map(v, l, NAN, 1);
  EXPECT_EQ(v.zoom, 1.0f);
}
