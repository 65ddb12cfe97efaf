#pragma once
// Small drawing pieces the views and the shell share: colours, hatching, bars, legends,
// rotated text, a row that flows onto the next line (draw.cpp). Nothing here knows App.
#include "imgui.h"
#include "widgets/heatmap.h"

namespace dsgui {

// A colour bar for a style's range, with the hatched mask swatch.
void legend(const HeatStyle& st, const char* value_name, bool show_mask);
// The same, upright: to the right of a heatmap (height: of the colour bar).
void legend_vertical(const HeatStyle& st, const char* value_name, bool show_mask, float height);
// Stays on the line when an item of width w still fits, else starts a new line.
void flow(float w);
// A tooltip on the last item (when enabled and the item is hovered).
void tooltip(bool enabled, const char* text);
// Text rotated 90 degrees counter-clockwise, its baseline's start at pos (reads upward).
void vertical_text(ImDrawList* dl, ImVec2 pos, ImU32 col, const char* text);
// A horizontal bar of fraction f in [0,1] at the cursor, width w.
void bar(float f, float w, ImU32 col, const char* overlay = nullptr, ImU32 bg = 0);
void hatch_rect(ImDrawList* dl, ImVec2 a, ImVec2 b);
ImU32 cmap_u32(int cmap, float t);
// A signed value t in [-1, 1] as a colour: blue negative, red positive, the background's
// grey at 0 (dark or light theme).
ImU32 diverging(float t, bool light);

}  // namespace dsgui
