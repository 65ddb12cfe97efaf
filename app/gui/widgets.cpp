// Small widgets shared by the panels: the heatmap with its labels, legends, bars.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app.h"
#include "imgui_internal.h"

namespace dsgui {

ImU32 cmap_u32(int cmap, float t) {
  auto c = colormap(cmap, t);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(c[0], c[1], c[2], 1.0f));
}

ImU32 diverging(float t, bool light) {
  t = std::clamp(std::isfinite(t) ? t : 0.0f, -1.0f, 1.0f);
  const float a = std::fabs(t);
  const ImVec4 mid = light ? ImVec4(0.96f, 0.96f, 0.96f, 1) : ImVec4(0.16f, 0.16f, 0.18f, 1);
  const ImVec4 end = t < 0 ? ImVec4(0.23f, 0.49f, 0.95f, 1) : ImVec4(0.93f, 0.33f, 0.25f, 1);
  return ImGui::ColorConvertFloat4ToU32(
      ImVec4(mid.x + (end.x - mid.x) * a, mid.y + (end.y - mid.y) * a, mid.z + (end.z - mid.z) * a, 1));
}

void vertical_text(ImDrawList* dl, ImVec2 pos, ImU32 col, const char* text) {
  // ImGui clips text on the CPU against the current clip rectangle before we rotate
  // it, so lay it out under an unlimited one, then give its draw command the window's
  // clip rectangle back for the GPU.
  const ImVec2 cmin = dl->GetClipRectMin(), cmax = dl->GetClipRectMax();
  dl->PushClipRect(ImVec2(-1e6f, -1e6f), ImVec2(1e6f, 1e6f), false);
  const int v0 = dl->VtxBuffer.Size;
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), pos, col, text);
  for (int i = v0; i < dl->VtxBuffer.Size; ++i) {
    ImVec2& p = dl->VtxBuffer[i].pos;
    float dx = p.x - pos.x, dy = p.y - pos.y;
    p = ImVec2(pos.x + dy, pos.y - dx);
  }
  if (!dl->CmdBuffer.empty()) dl->CmdBuffer.back().ClipRect = ImVec4(cmin.x, cmin.y, cmax.x, cmax.y);
  dl->PopClipRect();
}

void hatch_rect(ImDrawList* dl, ImVec2 a, ImVec2 b) {
  const ImU32 ca = IM_COL32(kMaskA[0], kMaskA[1], kMaskA[2], 255);
  const ImU32 cb = IM_COL32(kMaskB[0], kMaskB[1], kMaskB[2], 255);
  dl->AddRectFilled(a, b, cb);
  dl->PushClipRect(a, b, true);
  const float h = b.y - a.y;
  for (float x = a.x - h; x < b.x; x += 8.0f) dl->AddLine(ImVec2(x, b.y), ImVec2(x + h, a.y), ca, 4.0f);
  dl->PopClipRect();
}

void flow(float w) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x * 2 + w <= right)
    ImGui::SameLine(0, ImGui::GetStyle().ItemSpacing.x * 2);
}

void tooltip(App& app, const char* text) {
  if (!app.tooltips || !ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) return;
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
  ImGui::TextUnformatted(text);
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

bool has_step(const App& app, const char* message) {
  if (!app.trace.steps.empty() && app.cursor >= 0) return true;
  ImGui::TextDisabled("%s", message);
  return false;
}

void view_caption(App& app, const char* view_id) {
  if (!app.captions) return;
  const int v = view_index(view_id);
  if (v < 0) return;
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", all_views()[v].help);
  ImGui::PopStyleColor();
  (void)app;
}

void bar(float f, float w, ImU32 col, const char* overlay, ImU32 bg) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  float h = ImGui::GetFrameHeight() * 0.8f;
  if (!bg) bg = ImGui::GetColorU32(ImGuiCol_FrameBg);
  dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), bg);
  f = std::clamp(std::isfinite(f) ? f : 0.0f, 0.0f, 1.0f);
  if (f > 0) dl->AddRectFilled(p, ImVec2(p.x + std::max(1.0f, w * f), p.y + h), col);
  if (overlay) {
    ImVec2 ts = ImGui::CalcTextSize(overlay);
    dl->AddText(ImVec2(p.x + 4, p.y + (h - ts.y) * 0.5f), ImGui::GetColorU32(ImGuiCol_Text), overlay);
  }
  ImGui::Dummy(ImVec2(w, h));
}

void legend(const HeatStyle& st, const char* value_name, bool show_mask) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::TextUnformatted(value_name);
  ImGui::SameLine();
  p = ImGui::GetCursorScreenPos();
  const float w = font * 14, h = font;
  if (st.mask_only) {
    dl->AddRectFilled(p, ImVec2(p.x + h * 2, p.y + h),
                      ImGui::ColorConvertFloat4ToU32(ImVec4(st.allowed[0], st.allowed[1], st.allowed[2], 1)));
    ImGui::Dummy(ImVec2(h * 2, h));
    ImGui::SameLine();
    ImGui::TextUnformatted("allowed (may look here)");
  } else {
    // The colormap is piecewise linear in 9 segments: each is an exact gradient.
    const int n = st.cmap == kGreys ? 1 : 9;
    for (int i = 0; i < n; ++i) {
      float x0 = p.x + w * i / n, x1 = p.x + w * (i + 1) / n;
      ImU32 c0 = cmap_u32(st.cmap, float(i) / n), c1 = cmap_u32(st.cmap, float(i + 1) / n);
      dl->AddRectFilledMultiColor(ImVec2(x0, p.y), ImVec2(x1, p.y + h), c0, c1, c1, c0);
    }
    ImGui::Dummy(ImVec2(w, h));
    char lo[32], mid[32], hi[32];
    float vm = st.log ? std::sqrt(std::max(st.vmin, 1e-4f) * std::max(st.vmax, 1e-4f)) : 0.5f * (st.vmin + st.vmax);
    std::snprintf(lo, sizeof lo, "%.3g", st.log ? std::max(st.vmin, 1e-4f) : st.vmin);
    std::snprintf(mid, sizeof mid, "%.3g", vm);
    std::snprintf(hi, sizeof hi, "%.3g", st.vmax);
    ImVec2 q = ImGui::GetCursorScreenPos();
    ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
    dl->AddText(ImVec2(p.x, q.y), tc, lo);
    dl->AddText(ImVec2(p.x + w * 0.5f - ImGui::CalcTextSize(mid).x * 0.5f, q.y), tc, mid);
    dl->AddText(ImVec2(p.x + w - ImGui::CalcTextSize(hi).x, q.y), tc, hi);
    ImGui::SetCursorScreenPos(ImVec2(p.x + w + font, p.y));
    ImGui::Text("%s scale", st.log ? "log" : "linear");
  }
  if (show_mask) {
    ImGui::SameLine(0, font * 1.5f);
    ImVec2 m = ImGui::GetCursorScreenPos();
    hatch_rect(dl, m, ImVec2(m.x + h * 2, m.y + h));
    ImGui::Dummy(ImVec2(h * 2, h));
    ImGui::SameLine();
    ImGui::TextUnformatted("masked: the model may not look here");
  }
  ImGui::Dummy(ImVec2(0, font));
}

void legend_vertical(const HeatStyle& st, const char* value_name, bool show_mask, float height) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  ImGui::BeginGroup();
  ImGui::TextUnformatted(value_name);
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = font * 1.2f, h = std::max(font * 4, height);
  if (st.mask_only) {
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + font * 1.5f),
                      ImGui::ColorConvertFloat4ToU32(ImVec4(st.allowed[0], st.allowed[1], st.allowed[2], 1)));
    dl->AddText(ImVec2(p.x + w + font * 0.4f, p.y + font * 0.2f), tc, "allowed");
    ImGui::Dummy(ImVec2(w, font * 1.5f));
  } else {
    const int n = st.cmap == kGreys ? 1 : 9;
    for (int i = 0; i < n; ++i) {  // top = high values
      float y0 = p.y + h * i / n, y1 = p.y + h * (i + 1) / n;
      ImU32 c0 = cmap_u32(st.cmap, 1.0f - float(i) / n), c1 = cmap_u32(st.cmap, 1.0f - float(i + 1) / n);
      dl->AddRectFilledMultiColor(ImVec2(p.x, y0), ImVec2(p.x + w, y1), c0, c0, c1, c1);
    }
    char lo[32], mid[32], hi[32];
    float a = st.log ? std::max(st.vmin, 1e-4f) : st.vmin;
    float vm = st.log ? std::sqrt(a * std::max(st.vmax, 1e-4f)) : 0.5f * (st.vmin + st.vmax);
    std::snprintf(lo, sizeof lo, "%.3g", a);
    std::snprintf(mid, sizeof mid, "%.3g", vm);
    std::snprintf(hi, sizeof hi, "%.3g", st.vmax);
    const float x = p.x + w + font * 0.4f;
    dl->AddText(ImVec2(x, p.y), tc, hi);
    dl->AddText(ImVec2(x, p.y + h * 0.5f - font * 0.5f), tc, mid);
    dl->AddText(ImVec2(x, p.y + h - font), tc, lo);
    ImGui::Dummy(ImVec2(w, h));
    ImGui::TextDisabled("%s scale", st.log ? "log" : "linear");
  }
  if (show_mask) {
    ImGui::Dummy(ImVec2(0, font * 0.5f));
    ImVec2 m = ImGui::GetCursorScreenPos();
    hatch_rect(dl, m, ImVec2(m.x + w, m.y + font * 1.5f));
    ImGui::Dummy(ImVec2(w, font * 1.5f));
    ImGui::SameLine();
    ImGui::TextUnformatted("masked:\nmay not\nlook here");
  }
  ImGui::EndGroup();
}

// The row and column labels (every k-th when cells are smaller than the text, and the
// selected row) and the axis titles of a heatmap whose cells start at org; returns the
// width the column title takes from p0.
float heatmap_labels(const HeatmapArgs& a, const Matrix& m, ImVec2 p0, ImVec2 org, float cell, float lw, float lh) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float W = cell * m.cols, H = cell * m.rows;
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  const ImU32 hl = IM_COL32(255, 170, 40, 255);
  const int k = std::max(1, int(std::ceil(font * 1.05f / cell)));
  const ImVec4 clip_all(-1e6f, -1e6f, 1e6f, 1e6f);
  for (int r = 0; r < m.rows; ++r) {
    bool sel = r == a.selected_row;
    if (r % k != 0 && !sel) continue;
    const std::string& s = a.row_labels && r < int(a.row_labels->size()) ? (*a.row_labels)[r] : std::to_string(r);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    ImVec2 pos(org.x - font * 0.3f - std::min(ts.x, lw), org.y + r * cell + (cell - ts.y) * 0.5f);
    dl->AddText(ImGui::GetFont(), font, pos, sel ? hl : tc, s.c_str(), nullptr, 0, &clip_all);
  }
  for (int c = 0; c < m.cols; ++c) {
    if (c % k != 0) continue;
    const std::string& s = a.col_labels && c < int(a.col_labels->size()) ? (*a.col_labels)[c] : std::to_string(c);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    if (ts.x <= cell - 2)  // fits across: keep it upright
      dl->AddText(ImVec2(org.x + c * cell + (cell - ts.x) * 0.5f, org.y - ts.y - font * 0.2f), tc, s.c_str());
    else
      vertical_text(dl, ImVec2(org.x + c * cell + (cell - font) * 0.5f, org.y - font * 0.3f), tc, s.c_str());
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

HeatmapHit heatmap_widget(App& app, const char* name, const HeatmapArgs& a) {
  HeatmapHit hit;
  const Matrix& m = *a.m;
  if (!m.ok()) return hit;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  auto label_extent = [&](const std::vector<std::string>* labels) {
    float w = 0;
    if (labels)
      for (auto& s : *labels) w = std::max(w, ImGui::CalcTextSize(s.c_str()).x);
    return std::min(w, font * 6.0f) + font * 0.5f;
  };
  const float title = font * 1.4f;
  const float lw = label_extent(a.row_labels), lh = label_extent(a.col_labels);
  float cell = std::floor(std::min((a.size.x - lw - title) / m.cols, (a.size.y - lh - title) / m.rows));
  cell = std::clamp(cell, a.min_cell, a.max_cell);
  const float W = cell * m.cols, H = cell * m.rows;
  const ImVec2 org(std::floor(p0.x + title + lw), std::floor(p0.y + title + lh));

  // Draw the cells on the GPU.
  RenderTarget& rt = app.target(name);
  HeatStyle st = a.style;
  ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  st.gap = {bg.x, bg.y, bg.z};
  st.gap_px = cell >= 10 ? 1.0f : 0.0f;
  char style_key[200];
  // Only the cells inside the window's visible area are rendered (a long trace's map
  // is larger than the screen): a vw x vh part from (vx, vy) of the W x H cells.
  const ImVec2 c0 = dl->GetClipRectMin(), c1 = dl->GetClipRectMax();
  const int vx = int(std::clamp(c0.x - org.x, 0.0f, W)), vy = int(std::clamp(c0.y - org.y, 0.0f, H));
  const int vw = int(std::clamp(c1.x - org.x, float(vx), W)) - vx,
            vh = int(std::clamp(c1.y - org.y, float(vy), H)) - vy;
  std::snprintf(style_key, sizeof style_key, "|%d%d%d|%g|%g|%g|%g|%g|%dx%d|%d,%d,%dx%d", st.cmap, int(st.log),
                int(st.mask_only), double(st.vmin), double(st.vmax), double(bg.x), double(bg.y), double(st.gap_px),
                int(W), int(H), vx, vy, vw, vh);
  // The cells go to the GPU only when the matrix changed, and then only the rows (and
  // columns) it gained while its lineage stays the same.
  HeatTexture& tex = app.heat_texture(name);
  const bool sent = tex.sync(m, a.lineage, app.uploads);
  const std::string key = a.lineage == 0 ? "" : std::to_string(a.lineage) + style_key;
  std::string& drawn = app.drawn_keys[name];
  if (sent || key.empty() || key != drawn || rt.width() != std::max(vw, 1) || rt.height() != std::max(vh, 1)) {
    rt.ensure(vw, vh);
    rt.bind();
    app.heat.draw(tex, st, -vx, vy + vh - int(H), int(W), int(H));
    RenderTarget::unbind(app.fb_w, app.fb_h);
    drawn = key;
  }
  app.last_heatmap = name;

  ImGui::SetCursorScreenPos(ImVec2(org.x + float(vx), org.y + float(vy)));
  ImGui::Image((ImTextureID)(intptr_t)rt.texture(), ImVec2(float(vw), float(vh)), ImVec2(0, 1), ImVec2(1, 0));
  if (ImGui::IsItemHovered()) {
    ImVec2 mp = ImGui::GetIO().MousePos;
    int c = int((mp.x - org.x) / cell), r = int((mp.y - org.y) / cell);
    if (r >= 0 && r < m.rows && c >= 0 && c < m.cols) {
      hit.hovered = true;
      hit.row = r;
      hit.col = c;
      hit.clicked = ImGui::IsMouseClicked(0);
    }
  }

  HeatmapPlacement pl;
  pl.name = name;
  pl.x = org.x;
  pl.y = org.y;
  pl.cell_w = pl.cell_h = cell;
  pl.rows = m.rows;
  pl.cols = m.cols;
  pl.causal = a.causal;
  pl.mask = m.mask;
  app.placements.push_back(std::move(pl));

  const float title_w = heatmap_labels(a, m, p0, org, cell, lw, lh);
  // The current step's rows, the selected row, the hovered cell.
  const ImU32 hl = IM_COL32(255, 170, 40, 255);
  if (!a.current_rows.empty()) {
    int r0 = *std::min_element(a.current_rows.begin(), a.current_rows.end());
    int r1 = *std::max_element(a.current_rows.begin(), a.current_rows.end());
    dl->AddRect(ImVec2(org.x - 3, org.y + r0 * cell - 1), ImVec2(org.x + W + 3, org.y + (r1 + 1) * cell + 1), hl, 0, 0,
                2.0f);
  }
  if (a.selected_row >= 0 && a.selected_row < m.rows) {
    float y = org.y + a.selected_row * cell + cell * 0.5f;
    dl->AddTriangleFilled(ImVec2(org.x + W + 4, y), ImVec2(org.x + W + 4 + font * 0.6f, y - font * 0.4f),
                          ImVec2(org.x + W + 4 + font * 0.6f, y + font * 0.4f), hl);
  }
  if (hit.hovered) {
    ImVec2 c0(org.x + hit.col * cell, org.y + hit.row * cell);
    dl->AddRect(c0, ImVec2(c0.x + cell, c0.y + cell), IM_COL32(255, 255, 255, 255), 0, 0, 2.0f);
  }
  ImGui::SetCursorScreenPos(p0);
  ImGui::Dummy(ImVec2(std::max(title + lw + W + font, title_w + font), title + lh + H));
  return hit;
}

}  // namespace dsgui
