// What every view uses: the heatmap widget with its labels, zoom and pan, the caption,
// the note shown when there is no step yet (common.h).
#include "views/common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "imgui_internal.h"
#include "widgets/map_layout.h"
#include "widgets/text.h"

namespace dsgui {
bool has_step(const App& app, const char* message) {
  if (!app.history.trace.steps.empty() && app.sel.cursor >= 0) return true;
  ImGui::TextDisabled("%s", message);
  return false;
}

void view_caption(App& app, const char* view_id) {
  if (!app.look.captions || app.look.presenter) return;
  const int v = view_index(view_id);
  if (v < 0) return;
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  // Whole, wrapped to the width (a small window or big text takes more lines; the caption
  // can be switched off in View > Explain each view).
  ImGui::TextWrapped("%s", all_views()[v].help);
  ImGui::PopStyleColor();
  (void)app;
}

namespace {

// Every heatmap's zoom and pan, by name (an App view state: made on first use).
struct HeatmapViews {
  std::map<std::string, MapView> views;
  std::map<std::string, MapLayout> shown;  // each heatmap's layout last frame (heatmap_toolbar)
  int last_n = 0;                          // the last-N window a heatmap starts with (--last-tokens)
  float zoom = 1;                          // the zoom it starts with (--zoom)
  std::string dragging;                    // the heatmap a left drag pans, "" none
  bool dragged = false;                    // the drag moved (its release is no click)
};

// A label with a highlight behind it (the hovered row or column), or plain.
void label_text(ImDrawList* dl, ImVec2 pos, const char* s, ImU32 col, bool boxed) {
  const ImVec4 clip_all(-1e6f, -1e6f, 1e6f, 1e6f);
  if (boxed) {
    ImVec2 ts = ImGui::CalcTextSize(s);
    dl->AddRectFilled(ImVec2(pos.x - 2, pos.y - 1), ImVec2(pos.x + ts.x + 2, pos.y + ts.y + 1),
                      ImGui::GetColorU32(ImGuiCol_PopupBg));
  }
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), pos, col, s, nullptr, 0, &clip_all);
}

const std::string& label_of(const std::vector<std::string>* labels, int i, std::string& tmp) {
  if (labels && i < int(labels->size())) return (*labels)[size_t(i)];
  tmp = std::to_string(i);
  return tmp;
}

// The row and column labels of the visible cells (all that fit; every k-th when cells
// are smaller than the text; always the selected row and the hovered row and column)
// and the axis titles of a heatmap whose visible cells start at org; returns the
// width the column title takes from p0.
float heatmap_labels(const HeatmapArgs& a, const MapLayout& l, ImVec2 p0, ImVec2 org, float lw, float lh,
                     const HeatmapHit& hover) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float W = l.cell_w * l.cols, H = l.cell_h * l.rows;
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  const ImU32 hl = IM_COL32(255, 170, 40, 255);
  std::string tmp;
  const int kr = std::max(1, int(std::ceil(font * 1.05f / l.cell_h)));
  for (int r = l.row0; r < l.row0 + l.rows; ++r) {
    const bool sel = r == a.selected_row, hov = hover.hovered && r == hover.row;
    if (r % kr != 0 && !sel && !hov) continue;
    const std::string& s = label_of(a.row_labels, r, tmp);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    const float y = org.y + float(r - l.row0) * l.cell_h + (l.cell_h - ts.y) * 0.5f;
    label_text(dl, ImVec2(org.x - font * 0.3f - std::min(ts.x, lw), y), s.c_str(), sel || hov ? hl : tc, hov);
  }
  const int kc = std::max(1, int(std::ceil(font * 1.05f / l.cell_w)));
  for (int c = l.col0; c < l.col0 + l.cols; ++c) {
    const bool hov = hover.hovered && c == hover.col;
    if (c % kc != 0 && !hov) continue;
    const std::string& s = label_of(a.col_labels, c, tmp);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    const float x = org.x + float(c - l.col0) * l.cell_w;
    if (ts.x <= l.cell_w - 2) {  // fits across: keep it upright
      label_text(dl, ImVec2(x + (l.cell_w - ts.x) * 0.5f, org.y - ts.y - font * 0.2f), s.c_str(), hov ? hl : tc, hov);
    } else {
      const ImVec2 at(x + (l.cell_w - font) * 0.5f, org.y - font * 0.3f);
      if (hov)
        dl->AddRectFilled(ImVec2(at.x - 1, at.y - std::min(ts.x, lh) - 2), ImVec2(at.x + font + 1, at.y + 1),
                          ImGui::GetColorU32(ImGuiCol_PopupBg));
      vertical_text(dl, at, hov ? hl : tc, s.c_str());
    }
  }
  // Axis titles.
  float title_w = 0;
  if (a.col_title && *a.col_title) {
    ImVec2 ts = ImGui::CalcTextSize(a.col_title);
    float x = std::max(p0.x, org.x + W * 0.5f - ts.x * 0.5f);
    dl->AddText(ImVec2(x, p0.y), tc, a.col_title);
    title_w = x + ts.x - p0.x;
  }
  if (a.row_title && *a.row_title && ImGui::CalcTextSize(a.row_title).x <= H + lh * 0.5f) {
    ImVec2 ts = ImGui::CalcTextSize(a.row_title);
    vertical_text(dl, ImVec2(p0.x, std::min(org.y + H, org.y + H * 0.5f + ts.x * 0.5f)), tc, a.row_title);
  }
  return title_w;
}

// Where the view is: the zoom and the cells shown.
std::string map_hint(const MapView& v, const MapLayout& l) {
  char where[160];
  if (l.clipped())
    std::snprintf(where, sizeof where, "zoom %.1fx: rows %d-%d, columns %d-%d of %d x %d%s", double(v.zoom), l.row0,
                  l.row0 + l.rows - 1, l.col0, l.col0 + l.cols - 1, l.range_rows, l.range_cols,
                  v.follow ? ", following" : "");
  else
    std::snprintf(where, sizeof where, "zoom %.1fx: all %d x %d", double(v.zoom), l.range_rows, l.range_cols);
  return where;
}

// Fit, the last-N window, and where the view is, on the current line.
void heatmap_controls(App& app, MapView& v, const MapLayout& l, bool tokens) {
  const float font = ImGui::GetFontSize();
  ImGui::PushID(&v);
  ImGui::BeginDisabled(v.zoom <= 1.0f && v.follow && !l.clipped());
  if (ImGui::SmallButton("Fit")) fit_map(v);
  ImGui::EndDisabled();
  tooltip(app,
          "Fit the whole map in the space (key F, or double-click the map). Mouse wheel over the map zooms, "
          "dragging it pans.");
  if (tokens) {
    ImGui::SameLine();
    static const int kLast[] = {0, 8, 16, 32, 64, 128, 256};
    char cur[32];
    std::snprintf(cur, sizeof cur, v.last_n > 0 ? "last %d tokens" : "all tokens", v.last_n);
    ImGui::SetNextItemWidth(font * 8.5f);
    if (ImGui::BeginCombo("##last", cur, ImGuiComboFlags_HeightLarge)) {
      for (int n : kLast) {
        char b[32];
        std::snprintf(b, sizeof b, n > 0 ? "last %d tokens" : "all tokens", n);
        if (ImGui::Selectable(b, v.last_n == n)) v.last_n = n, v.follow = true;
      }
      ImGui::EndCombo();
    }
    tooltip(app, "Show only the newest tokens: the window follows generation as tokens arrive.");
  }
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  ImGui::TextDisabled("%s", map_hint(v, l).c_str());
  ImGui::PopID();
}

// Mouse wheel zooms about the cell under the mouse; a left drag pans; a release
// without a drag is a click.
void heatmap_mouse(App& app, HeatmapViews& hv, const char* name, MapView& v, const MapLayout& l, ImVec2 org,
                   HeatmapHit& hit) {
  const ImGuiIO& io = ImGui::GetIO();
  const bool hovered = ImGui::IsItemHovered();
  if (ImGui::IsItemActivated()) hv.dragging = name, hv.dragged = false;
  if (hv.dragging == name) {
    if (ImGui::IsItemActive()) {
      if (ImGui::IsMouseDragging(0)) {
        hv.dragged = true;
        pan_map(v, l, io.MouseDelta.x, io.MouseDelta.y);
      }
    } else {
      hit.clicked = hovered && !hv.dragged && ImGui::IsItemDeactivated();
      hv.dragging.clear();
    }
  }
  if (hovered) app.look.wheel_zooms = true;  // the view does not scroll under the wheel (App::view_tabs)
  if (hovered && ImGui::IsMouseDoubleClicked(0)) fit_map(v);  // a double click fits again
  if (hovered && io.MouseWheel != 0)
    zoom_map(v, l, std::pow(1.25f, io.MouseWheel), io.MousePos.x - org.x, io.MousePos.y - org.y);
  if (!hovered) return;
  const int c = int((io.MousePos.x - org.x) / l.cell_w), r = int((io.MousePos.y - org.y) / l.cell_h);
  if (r >= 0 && r < l.rows && c >= 0 && c < l.cols) {
    hit.hovered = true;
    hit.row = l.row0 + r;
    hit.col = l.col0 + c;
  }
}

// Draws the visible cells into the heatmap's render target (only when what they show
// changed) and returns the target.
RenderTarget& heatmap_cells(App& app, const char* name, const HeatmapArgs& a, const MapLayout& l) {
  const Matrix& m = *a.m;
  // Whole pixels (cells may be fractional): the picture maps one to one to the screen.
  const float W = std::round(l.cell_w * float(l.cols)), H = std::round(l.cell_h * float(l.rows));
  RenderTarget& rt = app.maps.target(name);
  HeatStyle st = a.style;
  ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  st.gap = {bg.x, bg.y, bg.z};
  st.gap_px = std::min(l.cell_w, l.cell_h) >= 10 ? 1.0f : 0.0f;
  st.row0 = l.row0, st.col0 = l.col0, st.rows = l.rows, st.cols = l.cols;
  char style_key[240];
  std::snprintf(style_key, sizeof style_key, "|%d%d%d|%g|%g|%g|%g|%g|%dx%d|%d,%d,%d,%d", st.cmap, int(st.log),
                int(st.mask_only), double(st.vmin), double(st.vmax), double(bg.x), double(bg.y), double(st.gap_px),
                int(W), int(H), l.row0, l.col0, l.rows, l.cols);
  // The cells go to the GPU only when the matrix changed, and then only the rows (and
  // columns) it gained while its lineage stays the same.
  HeatTexture& tex = app.maps.heat_texture(name);
  const bool sent = tex.sync(m, a.lineage, app.maps.uploads);
  const std::string key = a.lineage == 0 ? "" : std::to_string(a.lineage) + style_key;
  std::string& drawn = app.maps.drawn_keys[name];
  if (sent || key.empty() || key != drawn || rt.width() != std::max(int(W), 1) || rt.height() != std::max(int(H), 1)) {
    rt.ensure(int(W), int(H));
    rt.bind();
    app.maps.heat.draw(tex, st, 0, 0, int(W), int(H));
    RenderTarget::unbind(app.fb_w, app.fb_h);
    drawn = key;
  }
  return rt;
}

void add_placement(App& app, const char* name, const HeatmapArgs& a, const MapLayout& l, ImVec2 org) {
  const Matrix& m = *a.m;
  HeatmapPlacement pl;
  pl.name = name;
  pl.x = org.x;
  pl.y = org.y;
  pl.cell_w = l.cell_w;
  pl.cell_h = l.cell_h;
  pl.rows = l.rows;
  pl.cols = l.cols;
  pl.row0 = l.row0;
  pl.col0 = l.col0;
  pl.matrix_rows = m.rows;
  pl.matrix_cols = m.cols;
  pl.causal = a.causal;
  pl.window = a.window;
  if (m.mask.size() == size_t(m.rows) * size_t(m.cols)) {
    pl.mask.reserve(size_t(l.rows) * size_t(l.cols));
    for (int r = l.row0; r < l.row0 + l.rows; ++r)
      for (int c = l.col0; c < l.col0 + l.cols; ++c) pl.mask.push_back(m.mask[size_t(r) * size_t(m.cols) + size_t(c)]);
  }
  app.maps.placements.push_back(std::move(pl));
}

// The current step's rows, the selected row, the hovered cell, on the visible cells.
void heatmap_marks(const HeatmapArgs& a, const MapLayout& l, ImVec2 org, const HeatmapHit& hit) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float W = l.cell_w * l.cols;
  const ImU32 hl = IM_COL32(255, 170, 40, 255);
  if (!a.current_rows.empty()) {
    const int r0 = std::max(*std::min_element(a.current_rows.begin(), a.current_rows.end()), l.row0);
    const int r1 = std::min(*std::max_element(a.current_rows.begin(), a.current_rows.end()), l.row0 + l.rows - 1);
    if (r0 <= r1)
      dl->AddRect(ImVec2(org.x - 3, org.y + float(r0 - l.row0) * l.cell_h - 1),
                  ImVec2(org.x + W + 3, org.y + float(r1 - l.row0 + 1) * l.cell_h + 1), hl, 0, 0, 2.0f);
  }
  if (a.selected_row >= l.row0 && a.selected_row < l.row0 + l.rows) {
    float y = org.y + float(a.selected_row - l.row0) * l.cell_h + l.cell_h * 0.5f;
    dl->AddTriangleFilled(ImVec2(org.x + W + 4, y), ImVec2(org.x + W + 4 + font * 0.6f, y - font * 0.4f),
                          ImVec2(org.x + W + 4 + font * 0.6f, y + font * 0.4f), hl);
  }
  if (hit.hovered) {
    ImVec2 c0(org.x + float(hit.col - l.col0) * l.cell_w, org.y + float(hit.row - l.row0) * l.cell_h);
    dl->AddRect(c0, ImVec2(c0.x + l.cell_w, c0.y + l.cell_h), IM_COL32(255, 255, 255, 255), 0, 0, 2.0f);
  }
}

}  // namespace

void heatmaps_start(App& app, int last_n, float zoom) {
  HeatmapViews& hv = app.state<HeatmapViews>();
  hv.last_n = std::max(0, last_n);
  hv.zoom = std::isfinite(zoom) ? std::clamp(zoom, 1.0f, kMaxZoom) : 1.0f;
  for (auto& [name, v] : hv.views) v.last_n = hv.last_n, v.zoom = hv.zoom, v.follow = true;
}

void heatmap_toolbar(App& app, const char* name, bool tokens) {
  if (app.look.presenter) return;
  HeatmapViews& hv = app.state<HeatmapViews>();
  auto v = hv.views.find(name);
  auto l = hv.shown.find(name);
  if (v == hv.views.end() || l == hv.shown.end() || !l->second.ok()) return;  // not drawn yet
  const float font = ImGui::GetFontSize();
  flow(font * (tokens ? 13 : 4) + ImGui::CalcTextSize(map_hint(v->second, l->second).c_str()).x);
  heatmap_controls(app, v->second, l->second, tokens);
}

HeatmapHit heatmap_widget(App& app, const char* name, const HeatmapArgs& a) {
  HeatmapHit hit;
  const Matrix& m = *a.m;
  if (!m.ok()) return hit;
  const float font = ImGui::GetFontSize();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  auto widest = [&](const std::vector<std::string>* labels) {
    float w = 0;
    if (labels)
      for (auto& s : *labels) w = std::max(w, ImGui::CalcTextSize(s.c_str()).x);
    return w;
  };
  // Presenter mode has no controls line: the wheel, a drag and F still work, and a
  // zoomed map says so over its corner.
  const float title = font * 1.4f, line = app.look.presenter || !a.toolbar ? 0.0f : ImGui::GetFrameHeightWithSpacing();
  const float col_w = widest(a.col_labels);
  const float lw = std::min(widest(a.row_labels), font * 6.0f) + font * 0.5f;
  float lh = std::min(col_w, font * 6.0f) + font * 0.5f;  // column labels written upward
  HeatmapViews& hv = app.state<HeatmapViews>();
  auto [it, made] = hv.views.try_emplace(name);
  MapView& v = it->second;
  if (made) v.last_n = hv.last_n, v.zoom = hv.zoom;
  if (v.fit_serial != app.look.fit_serial) fit_map(v), v.fit_serial = app.look.fit_serial;
  MapLayoutIn in;
  in.rows = m.rows;
  in.cols = m.cols;
  // At least 8 text lines each way: a window too small for the map scrolls to it
  // rather than drawing cells of a pixel.
  in.area_w = std::floor(std::max(a.size.x - lw - title - font, font * 8));  // font: the selected row's marker
  in.area_h = std::floor(std::max(a.size.y - lh - title - line, font * 8));
  in.min_cell = a.min_cell;
  in.max_cell = a.max_cell > 0 ? a.max_cell : std::floor(font * 8);
  in.square = a.square;
  in.row_tokens = a.row_tokens;
  in.col_tokens = a.col_tokens;
  MapLayout l = layout_map(in, v);
  if (l.ok() && col_w <= l.cell_w - 2 && lh > font * 1.4f) {
    // Every column label fits across a cell: one line of them, and the cells get the room.
    lh = font * 1.4f;
    in.area_h = std::floor(std::max(a.size.y - lh - title - line, font * 8));
    l = layout_map(in, v);
  }
  if (!l.ok()) return hit;
  const float W = std::round(l.cell_w * float(l.cols)), H = std::round(l.cell_h * float(l.rows));
  const ImVec2 org(std::floor(p0.x + title + lw), std::floor(p0.y + line + title + lh));

  RenderTarget& rt = heatmap_cells(app, name, a, l);
  app.maps.last_heatmap = name;
  ImGui::GetWindowDrawList()->AddImage((ImTextureID)(intptr_t)rt.texture(), org, ImVec2(org.x + W, org.y + H),
                                       ImVec2(0, 1), ImVec2(1, 0));
  ImGui::SetCursorScreenPos(org);
  ImGui::PushID(name);  // two heatmaps in one view (encoder and cross) keep their own mouse
  ImGui::InvisibleButton("##cells", ImVec2(W, H));
  ImGui::PopID();
  heatmap_mouse(app, hv, name, v, l, org, hit);
  add_placement(app, name, a, l, org);

  const float title_w = heatmap_labels(a, l, ImVec2(p0.x, p0.y + line), org, lw, lh, hit);
  heatmap_marks(a, l, org, hit);
  ImGui::SetCursorScreenPos(p0);
  if (!app.look.presenter && a.toolbar) heatmap_controls(app, v, l, a.row_tokens || a.col_tokens);
  hv.shown[name] = l;
  if (app.look.presenter && l.clipped()) {
    char b[96];
    std::snprintf(b, sizeof b, "zoom %.1fx, rows %d-%d (F: fit)", double(v.zoom), l.row0, l.row0 + l.rows - 1);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 ts = ImGui::CalcTextSize(b);
    dl->AddRectFilled(org, ImVec2(org.x + ts.x + 8, org.y + ts.y + 4), ImGui::GetColorU32(ImGuiCol_PopupBg, 0.85f));
    dl->AddText(ImVec2(org.x + 4, org.y + 2), ImGui::GetColorU32(ImGuiCol_Text), b);
  }
  ImGui::SetCursorScreenPos(p0);
  ImGui::Dummy(ImVec2(std::max(title + lw + W + font, title_w + font), line + title + lh + H));
  return hit;
}

}  // namespace dsgui
