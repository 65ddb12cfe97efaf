// The residual stream: its norm before attention, after attention, after
// cross-attention (encoder-decoder models) and after the MLP, for every layer at the
// selected position, and a layer x position map.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "views/common.h"

namespace dsgui {

// What the residual view shows.
struct ResidualState {
  int kind = 2;       // which point of each layer the map shows (a kind of trace_view.h)
  GrowingNorms grow;  // the map's norms, read a step at a time
};

namespace {

// By kind (trace_view.h): 0 resid_pre, 1 resid_mid, 2 resid_post, 3 resid_mid_cross.
const char* kinds[kResidKinds] = {"before attention (resid_pre)", "after attention (resid_mid)",
                                  "after the MLP (resid_post)", "after cross-attention (resid_mid_cross)"};
const ImU32 colours[kResidKinds] = {IM_COL32(110, 160, 230, 255), IM_COL32(240, 160, 60, 255),
                                    IM_COL32(100, 200, 120, 255), IM_COL32(200, 110, 220, 255)};

// The points a model's blocks have, in forward order.
std::vector<int> shown_kinds(const ds::Trace& t) {
  if (t.config.encoder_decoder) return {0, 1, 3, 2};
  return {0, 1, 2};
}

// Left: grouped bars per layer at the selected position.
void norm_bars(App& app, int pos) {
  const ds::Trace& t = app.history.trace;
  const float font = ImGui::GetFontSize();
  const int L = t.config.n_layers;
  const std::vector<int> shown = shown_kinds(t);
  const int nk = int(shown.size());
  std::vector<std::array<float, kResidKinds>> norms(L, {0, 0, 0, 0});
  float mx = 1e-6f;
  bool any = false;
  for (int l = 0; l < L; ++l)
    for (int k : shown)
      if (resid_norm(t, app.sel.cursor, l, k, pos, norms[l][k])) {
        mx = std::max(mx, norms[l][k]);
        any = true;
      }
  ImVec2 avail = ImGui::GetContentRegionAvail();
  const float cw = std::min(avail.x * 0.42f, font * 30);
  ImGui::BeginGroup();
  const auto& toks = app.tokens();
  ImGui::Text("Norms at position %d \"%s\"", pos,
              pos >= 0 && pos < int(toks.size()) ? visible(toks[pos].text).c_str() : "?");
  tooltip(app, "The length of the vector each layer reads and writes: it grows as layers add their contributions.");
  if (!any) {
    ImGui::TextDisabled("the trace did not record the residual stream");
  } else {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    ImVec2 p = ImGui::GetCursorScreenPos();
    const float ch = std::max(font * 8, avail.y - font * 9);
    const float axis = font * 3;
    const float gw = (cw - axis) / L;
    const float bw = std::max(2.0f, gw * 0.8f / nk);
    const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
    const ImVec2 o(p.x + axis, p.y + font * 0.5f);
    dl->AddLine(ImVec2(o.x, o.y), ImVec2(o.x, o.y + ch), tc);
    dl->AddLine(ImVec2(o.x, o.y + ch), ImVec2(o.x + cw - axis, o.y + ch), tc);
    for (float f : {0.0f, 0.5f, 1.0f}) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3g", double(mx * f));
      ImVec2 ts = ImGui::CalcTextSize(b);
      float y = o.y + ch - f * ch;
      dl->AddText(ImVec2(o.x - ts.x - 4, y - ts.y * 0.5f), tc, b);
      dl->AddLine(ImVec2(o.x - 3, y), ImVec2(o.x, y), tc);
    }
    int hover_l = -1;
    ImVec2 mp = ImGui::GetIO().MousePos;
    for (int l = 0; l < L; ++l) {
      float gx = o.x + l * gw + gw * 0.1f;
      for (int i = 0; i < nk; ++i) {
        const int k = shown[size_t(i)];
        float h = norms[l][k] / mx * ch;
        dl->AddRectFilled(ImVec2(gx + i * bw, o.y + ch - h), ImVec2(gx + (i + 1) * bw - 1, o.y + ch), colours[k]);
      }
      char b[16];
      std::snprintf(b, sizeof b, L > 16 ? "%d" : "L%d", l);
      ImVec2 ts = ImGui::CalcTextSize(b);
      if (ts.x < gw || l % 2 == 0) dl->AddText(ImVec2(gx + (gw * 0.8f - ts.x) * 0.5f, o.y + ch + 2), tc, b);
      if (mp.x >= o.x + l * gw && mp.x < o.x + (l + 1) * gw && mp.y >= o.y && mp.y < o.y + ch) hover_l = l;
    }
    ImGui::Dummy(ImVec2(cw, ch + font * 2));
    if (hover_l >= 0 && ImGui::IsWindowHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("layer %d at position %d", hover_l, pos);
      for (int k : shown) ImGui::Text("%s: %.4f", kinds[k], norms[hover_l][k]);
      ImGui::EndTooltip();
    }
    for (int k : shown) {
      ImVec2 q = ImGui::GetCursorScreenPos();
      dl->AddRectFilled(ImVec2(q.x, q.y + 3), ImVec2(q.x + font, q.y + font), colours[k]);
      ImGui::Dummy(ImVec2(font * 1.3f, font));
      ImGui::SameLine();
      ImGui::TextUnformatted(kinds[k]);
    }
  }
  ImGui::EndGroup();
}

// Right: the layer x position map of one point of each layer.
void norm_map(App& app) {
  ResidualState& st = app.state<ResidualState>();
  const ds::Trace& t = app.history.trace;
  const float font = ImGui::GetFontSize();
  ImGui::BeginGroup();
  const std::vector<int> shown = shown_kinds(t);
  std::vector<const char*> items;
  int at = int(shown.size()) - 1;  // resid_post when the kind is not one of this model's
  for (size_t i = 0; i < shown.size(); ++i) {
    items.push_back(kinds[shown[i]]);
    if (shown[i] == st.kind) at = int(i);
  }
  ImGui::SetNextItemWidth(font * 19);
  if (ImGui::Combo("##kind", &at, items.data(), int(items.size()))) st.kind = shown[size_t(at)];
  st.kind = shown[size_t(at)];
  tooltip(app, "Which point of each layer the map shows.");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 6);
  ImGui::Combo("##cmap", &app.look.cmap, kColormapNames, 3);
  char key[96];
  std::snprintf(key, sizeof key, "%llu/%d/%d", (unsigned long long)app.history.version, app.sel.cursor, st.kind);
  const Maps::CachedMatrix& cm =
      app.maps.cached("resid", key, [&] { return st.grow.as_of(t, app.history.epoch, app.sel.cursor, st.kind); });
  const Matrix& m = cm.m;
  if (!m.ok()) {
    ImGui::TextDisabled("%s", m.error.c_str());
  } else {
    std::vector<std::string> rows, cols = app.position_labels(m.cols);
    for (int l = 0; l < m.rows; ++l) rows.push_back("layer " + std::to_string(l));
    HeatmapArgs a;
    a.m = &m;
    a.lineage = cm.lineage;
    a.row_labels = &rows;
    a.col_labels = &cols;
    a.row_title = "layer";
    a.col_title = "position";
    a.style.cmap = app.look.cmap;
    // The map spans the norms it shows (post-norm models keep them nearly equal).
    float lo = m.vmax;
    for (float v : m.v) lo = std::min(lo, v);
    a.style.vmin = lo;
    a.style.vmax = std::max(m.vmax, lo + 1e-6f);
    a.selected_row = -1;
    a.value_name = "norm";
    ImVec2 av = ImGui::GetContentRegionAvail();
    a.size = ImVec2(av.x - font * 6, av.y - font * 4);
    // Few layers, many positions: each side of a cell fits its own axis, so that 120
    // positions still make a map as tall as the space.
    a.square = false;
    a.row_tokens = false;
    HeatmapHit hit = heatmap_widget(app, "residual", a);
    if (hit.hovered)
      ImGui::SetTooltip("layer %d, position %d \"%s\": norm %.4f", hit.row, hit.col, cols[hit.col].c_str(),
                        m.at(hit.row, hit.col));
    if (hit.clicked) app.sel.pos = hit.col;
    legend(a.style, "norm", false);
  }
  ImGui::EndGroup();
}

}  // namespace

void panel_residual(App& app) {
  view_caption(app, "residual");
  if (!has_step(app)) return;
  const float font = ImGui::GetFontSize();
  const int pos = app.selected_position();

  norm_bars(app, pos);
  ImGui::SameLine(0, font * 2);
  norm_map(app);
}

}  // namespace dsgui
