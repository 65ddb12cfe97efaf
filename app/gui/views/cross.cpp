// Cross-attention of an encoder-decoder model: output tokens (rows) reading the source
// (columns), and the source text tinted by how much the selected output token reads it.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine_link/models.h"
#include "views/common.h"

namespace dsgui {

void layer_head_controls(App& app, int& layer, int& head, const char* id);
void colour_controls(App& app, bool allow_log);

// What the cross-attention view shows.
struct CrossState {
  int layer = 0, head = -1;  // head -1: mean of the layer's heads
  bool encoder = false;      // the encoder's self-attention instead
};

void cross_select(App& app, int layer, int head) {
  CrossState& st = app.state<CrossState>();
  st.layer = layer;
  st.head = head;
}

void cross_show(App& app, int layer, int head, bool encoder) {
  cross_select(app, layer, head);
  app.state<CrossState>().encoder = encoder;
}

// A model was loaded: the layer and head shown stay within it.
void cross_model_loaded(App& app) {
  if (!app.engine.model) return;
  CrossState& st = app.state<CrossState>();
  st.layer = std::min(st.layer, app.engine.model->cfg.n_layers - 1);
  st.head = std::min(st.head, app.engine.model->cfg.n_heads - 1);
}

namespace {

// The layer and head pickers, encoder or cross, colours, saving.
void cross_controls(App& app, CrossState& st) {
  const float font = ImGui::GetFontSize();
  layer_head_controls(app, st.layer, st.head, "cross");
  flow(font * 12);
  ImGui::Checkbox("encoder self-attention", &st.encoder);
  tooltip(app, "Show how the encoder's source tokens read each other instead (they may look both ways).");
  colour_controls(app, true);
  if (app.look.presenter) return;  // presenter mode: the map gets the room
  flow(font * 5);
  if (ImGui::Button("Save PNG")) app.requests.heatmap_png = "cross.png";
  heatmap_toolbar(app, st.encoder ? "encoder" : "cross", !st.encoder);
}

// The matrix shown and its lineage. The encoder's matrix stays the same for a whole
// run; cross-attention gains a row with every step.
std::pair<const Matrix*, uint64_t> cross_matrix(App& app, const CrossState& st, int layer) {
  const ds::Trace& t = app.history.trace;
  if (st.encoder) {
    char key[96];
    std::snprintf(key, sizeof key, "%llu/%d/%d", (unsigned long long)app.history.epoch, layer, st.head);
    const Maps::CachedMatrix& c = app.maps.cached("encoder", key, [&] { return encoder_matrix(t, layer, st.head); });
    return {&c.m, c.lineage};
  }
  const Maps::GrowingMatrix& g = app.attention_view("cross", layer, st.head, true, false);
  return {&g.m, g.lineage};
}

}  // namespace

// Whether the built-in dates model (an encoder-decoder) is there to open.
bool dates_available() {
  static const bool yes = [] {
    for (const ModelChoice& c : model_choices())
      if (c.spec == "builtin:dates") return true;
    return false;
  }();
  return yes;
}

// What the view says about a model without cross-attention.
std::string cross_note(const App& app) {
  const std::string name = app.engine.model ? " (" + app.engine.model->name + ")" : std::string();
  return "This model" + name +
         " is decoder-only: it reads only its own text, so it has no source and no cross-attention. " +
         (dates_available() ? "Open builtin:dates, an encoder-decoder that rewrites dates, to see cross-attention."
                            : "Open random:encdec, a small encoder-decoder, to see cross-attention.");
}

// A decoder-only model: what it lacks and a button to open one that has it.
void no_cross(App& app) {
  ImGui::TextWrapped("%s", cross_note(app).c_str());
  const bool dates = dates_available();
  ImGui::BeginDisabled(app.engine.loading);
  if (ImGui::Button(dates ? "Open builtin:dates" : "Open random:encdec")) {
    app.load_model(dates ? "builtin:dates" : "random:encdec", "");
    app.inputs.keep_text = false;
  }
  ImGui::EndDisabled();
  tooltip(app, dates ? "Loads the built-in encoder-decoder that rewrites dates (\"July 14, 1989\" -> \"1989-07-14\"); "
                       "this view then shows its cross-attention."
                     : "Loads a small random encoder-decoder; this view then shows its cross-attention.");
}

void panel_cross(App& app) {
  view_caption(app, "cross");
  CrossState& st = app.state<CrossState>();
  const ds::Trace& t = app.history.trace;
  if (!t.config.encoder_decoder) return no_cross(app);
  if (!has_step(app)) return;
  const float font = ImGui::GetFontSize();
  cross_controls(app, st);

  const int L = st.encoder ? t.config.n_enc_layers : t.config.n_layers;
  const int layer = std::clamp(st.layer, 0, std::max(0, L - 1));
  const auto [mp, lineage] = cross_matrix(app, st, layer);
  const Matrix& m = *mp;
  if (!m.ok()) {
    ImGui::TextDisabled("%s", m.error.c_str());
    return;
  }
  auto src = app.source_labels();
  auto tgt = app.position_labels(m.rows);
  HeatmapArgs a;
  a.m = &m;
  a.lineage = lineage;
  a.row_labels = st.encoder ? &src : &tgt;
  a.col_labels = &src;
  a.row_title = st.encoder ? "source token reading" : "output token reading";
  a.col_title = "source token being read";
  a.style.cmap = app.look.cmap;
  a.style.log = app.look.log_scale;
  a.style.vmin = a.style.log ? 1e-3f : 0.0f;
  a.style.vmax = 1.0f;
  const int sel = app.selected_position();
  if (!st.encoder) {
    const ds::TraceStep& st = t.steps[app.sel.cursor];
    for (size_t i = 0; i < st.input.size(); ++i) a.current_rows.push_back(st.pos0 + int(i));
    a.selected_row = sel;
  }
  ImVec2 avail = ImGui::GetContentRegionAvail();
  a.size = ImVec2(avail.x - font * 9, avail.y - font * 5.5f);
  a.row_tokens = !st.encoder;  // output tokens grow a row a step; the source stays
  a.col_tokens = false;
  a.toolbar = false;  // in the row of controls above
  HeatmapHit hit = heatmap_widget(app, st.encoder ? "encoder" : "cross", a);
  if (hit.hovered) {
    ImGui::BeginTooltip();
    ImGui::Text("%s %d \"%s\" reading source %d \"%s\"", st.encoder ? "source" : "output", hit.row,
                (*a.row_labels)[hit.row].c_str(), hit.col, src[hit.col].c_str());
    if (!m.allowed(hit.row, hit.col))
      ImGui::TextUnformatted("masked: padding, never read");
    else
      ImGui::Text("weight: %.6f", m.at(hit.row, hit.col));
    ImGui::EndTooltip();
  }
  if (hit.clicked && !st.encoder) app.sel.pos = hit.row;
  ImGui::SameLine();
  legend_vertical(a.style, "weight", false, std::min(avail.y * 0.4f, font * 10));

  // The source, tinted by how much the selected output token reads each source token.
  if (st.encoder || sel < 0 || sel >= m.rows) return;
  ImGui::Separator();
  const auto& toks = app.tokens();
  std::string who = sel < int(toks.size()) ? visible(toks[sel].text) : "?";
  ImGui::Text("What output token %d \"%s\" reads in the source (layer %d, %s):", sel, who.c_str(), layer,
              st.head < 0 ? "mean of heads" : ("head " + std::to_string(st.head)).c_str());
  tooltip(app, "The brighter the background, the more this output token looks at that source token.");
  float mx = 1e-6f;
  for (int j = 0; j < m.cols; ++j) mx = std::max(mx, m.at(sel, j));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  for (int j = 0; j < m.cols; ++j) {
    std::string s = visible(j < int(t.source_text.size()) ? t.source_text[j] : "?");
    float v = m.at(sel, j);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    ImVec2 sz(ts.x + style.FramePadding.x * 2, ts.y + style.FramePadding.y * 2);
    if (j > 0) {
      ImGui::SameLine(0, 2);
      if (ImGui::GetCursorPosX() + sz.x > ImGui::GetContentRegionMax().x) ImGui::NewLine();
    }
    ImVec2 p = ImGui::GetCursorScreenPos();
    float tnorm = v / mx;
    auto c = colormap(app.look.cmap, tnorm);
    dl->AddRectFilled(p, ImVec2(p.x + sz.x, p.y + sz.y), ImGui::ColorConvertFloat4ToU32(ImVec4(c[0], c[1], c[2], 1)));
    float lum = 0.3f * c[0] + 0.59f * c[1] + 0.11f * c[2];
    dl->AddText(ImVec2(p.x + style.FramePadding.x, p.y + style.FramePadding.y),
                lum > 0.5f ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255), s.c_str());
    ImGui::Dummy(sz);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("source %d \"%s\": weight %.4f", j, s.c_str(), v);
  }
  ImGui::TextDisabled("brightest = %.3f of this token's attention", mx);
}

}  // namespace dsgui
