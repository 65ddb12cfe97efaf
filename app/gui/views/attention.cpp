// Attention heatmap of one layer and head (or the mean of a layer's heads).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "views/common.h"

namespace dsgui {

// Layer and head pickers shared by the attention and cross-attention panels.
void layer_head_controls(App& app, int& layer, int& head, const char* id) {
  const ds::Config& cfg = app.history.trace.config;
  const float font = ImGui::GetFontSize();
  ImGui::PushID(id);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Layer");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 7);
  layer = std::clamp(layer, 0, std::max(0, cfg.n_layers - 1));
  ImGui::SliderInt("##layer", &layer, 0, std::max(0, cfg.n_layers - 1));
  tooltip(app, "Layers are stacked: layer 0 reads the token embeddings, later layers read what earlier ones wrote.");
  flow(font * 11);
  ImGui::TextUnformatted("Head");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 8);
  char cur[32];
  if (head < 0)
    std::snprintf(cur, sizeof cur, "mean of %d", cfg.n_heads);
  else
    std::snprintf(cur, sizeof cur, "head %d", head);
  if (ImGui::BeginCombo("##head", cur)) {
    if (ImGui::Selectable("mean of all heads", head < 0)) head = -1;
    for (int h = 0; h < cfg.n_heads; ++h) {
      char b[32];
      std::snprintf(b, sizeof b, "head %d", h);
      if (ImGui::Selectable(b, head == h)) head = h;
    }
    ImGui::EndCombo();
  }
  tooltip(app, "Each layer has several heads that attend independently; the mean averages them.");
  ImGui::PopID();
}

void colour_controls(App& app, bool allow_log) {
  const float font = ImGui::GetFontSize();
  flow(font * 12);
  ImGui::SetNextItemWidth(font * 6);
  ImGui::Combo("##cmap", &app.look.cmap, kColormapNames, 3);
  tooltip(app, "The colours used for values: low values dark, high values bright.");
  ImGui::SameLine();
  ImGui::BeginDisabled(!allow_log);
  int sc = app.look.log_scale && allow_log ? 1 : 0;
  const char* scales[] = {"linear", "log"};
  ImGui::SetNextItemWidth(font * 5);
  if (ImGui::Combo("##scale", &sc, scales, 2)) app.look.log_scale = sc == 1;
  ImGui::EndDisabled();
  tooltip(app, "Log scale spreads out small weights so that faint attention becomes visible.");
}

void panel_attention(App& app) {
  view_caption(app, "attention");
  const ds::Trace& t = app.history.trace;
  if (!has_step(app, "No step yet: press Step (Right arrow) to run the prompt through the model.")) return;
  const float font = ImGui::GetFontSize();
  layer_head_controls(app, app.sel.layer, app.sel.head, "attn");
  const int window = t.config.sliding(app.sel.layer) ? t.config.sliding_window : 0;
  if (window > 0) {  // Gemma 3's local layers: the mask has a second edge
    flow(font * 11);
    ImGui::AlignTextToFramePadding();
    ImGui::TextColored(app.look.light ? ImVec4(0.1f, 0.3f, 0.7f, 1) : ImVec4(0.45f, 0.8f, 1.0f, 1),
                       "sliding window of %d", window);
    char tip[256];
    std::snprintf(tip, sizeof tip,
                  "This layer lets a token read only the last %d tokens, itself included (keys p-%d..p); older keys "
                  "are masked like the ones after it. The model's other (global) layers read every earlier token.",
                  window, window - 1);
    tooltip(app, tip);
  }
  flow(font * 6);
  int what = app.look.show_scores ? 1 : 0;
  ImGui::RadioButton("weights", &what, 0);
  tooltip(app, "After softmax: how much each token reads each earlier token (each row adds up to 1).");
  ImGui::SameLine();
  ImGui::RadioButton("scores", &what, 1);
  tooltip(app, "Before softmax: the raw query-key match scores, scaled by 1/sqrt(head size).");
  app.look.show_scores = what == 1;
  flow(font * 6);
  ImGui::Checkbox("mask only", &app.look.mask_only);
  tooltip(app, window > 0 ? "Show just the mask: where each token is allowed to look (never ahead, and in this layer "
                            "never more than the sliding window back)."
                          : "Show just the mask: where each token is allowed to look (it never looks ahead).");
  colour_controls(app, !app.look.show_scores);
  if (!app.look.presenter) {  // presenter mode: the map gets the room
    flow(font * 5);
    if (ImGui::Button("Save PNG")) app.requests.heatmap_png = "attention.png";
    tooltip(app, "Save this heatmap (cells only) as attention.png in the current folder.");
  }
  heatmap_toolbar(app, "attention", true);

  const Maps::GrowingMatrix& g =
      app.attention_view("attention", app.sel.layer, app.sel.head, false, app.look.show_scores);
  const Matrix& m = g.m;
  if (!m.ok()) {
    ImGui::TextDisabled("%s", m.error.c_str());
    return;
  }
  auto labels = app.position_labels(m.rows);
  HeatmapArgs a;
  a.m = &m;
  a.lineage = g.lineage;
  a.row_labels = &labels;
  a.col_labels = &labels;
  a.row_title = "query: the token reading";
  a.col_title = "key: the token being read";
  a.style.cmap = app.look.cmap;
  a.style.log = app.look.log_scale && !app.look.show_scores;
  a.style.mask_only = app.look.mask_only;
  a.style.vmin = app.look.show_scores ? m.vmin : (a.style.log ? 1e-3f : 0.0f);
  a.style.vmax = app.look.show_scores ? m.vmax : 1.0f;
  const ds::TraceStep& st = t.steps[app.sel.cursor];
  for (size_t i = 0; i < st.input.size(); ++i) a.current_rows.push_back(st.pos0 + int(i));
  a.selected_row = app.selected_position();
  a.value_name = app.look.show_scores ? "score" : "weight";
  a.causal = true;
  a.window = window;
  a.toolbar = false;  // in the row of controls above
  ImVec2 avail = ImGui::GetContentRegionAvail();
  a.size = ImVec2(avail.x - font * 9, avail.y);
  HeatmapHit hit = heatmap_widget(app, "attention", a);
  if (hit.hovered) {
    ImGui::BeginTooltip();
    ImGui::Text("query %d \"%s\" reading key %d \"%s\"", hit.row, labels[hit.row].c_str(), hit.col,
                labels[hit.col].c_str());
    if (!m.allowed(hit.row, hit.col)) {
      if (hit.col > hit.row)
        ImGui::TextColored(ImVec4(0.5f, 0.7f, 1, 1), "masked: a token may not look at tokens after it");
      else if (window > 0 && hit.row - hit.col >= window)
        ImGui::TextColored(ImVec4(0.5f, 0.7f, 1, 1),
                           "masked: outside this layer's sliding window (query %d reads keys %d..%d)", hit.row,
                           hit.row - window + 1, hit.row);
      else
        ImGui::TextColored(ImVec4(0.5f, 0.7f, 1, 1), "masked");
      ImGui::TextUnformatted(app.look.show_scores ? "score: -infinity, so its weight is exactly 0"
                                                  : "weight: exactly 0");
    } else {
      ImGui::Text("%s: %.6f", app.look.show_scores ? "score" : "weight", m.at(hit.row, hit.col));
    }
    ImGui::TextDisabled("click: select this query row");
    ImGui::EndTooltip();
  }
  if (hit.clicked) app.sel.pos = hit.row;
  ImGui::SameLine();
  legend_vertical(a.style,
                  app.look.mask_only     ? "mask"
                  : app.look.show_scores ? "score"
                                         : "weight",
                  true, std::min(avail.y * 0.5f, font * 12));
}

}  // namespace dsgui
