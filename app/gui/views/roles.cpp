// Head roles: the head detector's scores (core/probe/heads.h) for every head of the
// model, measured on a probe of random tokens repeated twice: previous-token, duplicate-
// token and induction heads, as TransformerLens's head_detector defines them. The grid
// is layer x head, coloured by the chosen score; a click opens that head's attention on
// the probe, where an induction head draws its stripe one step right of the repeat's
// diagonal.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/mask.h"
#include "probe/heads.h"
#include "views/common.h"

namespace dsgui {

struct RolesState {
  std::shared_ptr<const RolesAnswer> roles;
  std::string asked_for;  // the request (or the answer) in force: model spec and options
  bool pending = false;
  int kind = 2;                           // 0 previous token, 1 duplicate token, 2 induction
  int layer = -1, head = -1;              // the head opened (-1: the strongest of the kind)
  bool outline = true;                    // outline the cells the score counts
  bool exclude_bos = true;                // leave attention to position 0 out of the scores
  std::vector<std::string> short_labels;  // the probe's tokens, cut for the map's labels
};

bool roles_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Roles>(&e);
  if (!a) return false;
  RolesState& st = app.state<RolesState>();
  st.pending = false;
  if (!a->answer || a->answer->key != st.asked_for) return true;
  st.roles = std::move(a->answer);
  st.short_labels.clear();
  st.layer = st.head = -1;
  return true;
}

bool roles_waiting(App& app) { return app.state<RolesState>().pending; }

bool roles_selected(App& app, int& kind, int& layer, int& head, float& score) {
  const RolesState& st = app.state<RolesState>();
  if (!st.roles || st.layer < 0 || st.head < 0) return false;
  kind = st.kind, layer = st.layer, head = st.head;
  score = st.roles->roles.score(kind, layer, head);
  return true;
}

void roles_failed(App& app) { app.state<RolesState>().pending = false; }

namespace {

const char* kKinds[] = {"previous token", "duplicate token", "induction"};
const char* kKindHelp[] = {
    "A previous-token head: each token looks at the token just before it (the cells below the diagonal).",
    "A duplicate-token head: a token looks back at earlier copies of itself (in the probe: the same token "
    "one half earlier).",
    "An induction head: a token looks at the token that FOLLOWED its earlier copy, so the model can predict that "
    "what came next last time comes next again (the stripe one step right of the repeat's diagonal)."};

float score_of(const ds::HeadRoles& r, int kind, int l, int h) { return r.score(kind, l, h); }

// The layer x head grid; returns true when a cell was clicked (st.layer, st.head set).
void grid(App& app, RolesState& st, const ds::HeadRoles& r, float width) {
  const float font = ImGui::GetFontSize();
  const float lw = font * 4.5f;
  const float cell = std::clamp((width - lw) / float(std::max(1, r.n_heads)), font * 1.6f, font * 3.2f);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  for (int h = 0; h < r.n_heads; ++h) {
    char b[16];
    std::snprintf(b, sizeof b, "%d", h);
    dl->AddText(ImVec2(p.x + lw + (float(h) + 0.5f) * cell - ImGui::CalcTextSize(b).x * 0.5f, p.y),
                ImGui::GetColorU32(ImGuiCol_TextDisabled), b);
  }
  dl->AddText(ImVec2(p.x, p.y), ImGui::GetColorU32(ImGuiCol_TextDisabled), "head");
  p.y += font * 1.2f;
  for (int l = 0; l < r.n_layers; ++l) {
    char b[32];
    std::snprintf(b, sizeof b, "layer %d", l);
    dl->AddText(ImVec2(p.x, p.y + float(l) * cell + (cell - font) * 0.5f), ImGui::GetColorU32(ImGuiCol_Text), b);
    for (int h = 0; h < r.n_heads; ++h) {
      const float s = score_of(r, st.kind, l, h);
      const ImVec2 a(p.x + lw + float(h) * cell, p.y + float(l) * cell), c(a.x + cell - 2, a.y + cell - 2);
      dl->AddRectFilled(a, c, cmap_u32(app.look.cmap, std::clamp(s, 0.0f, 1.0f)));
      std::snprintf(b, sizeof b, "%.2f", s);
      const float fs = std::min(font, cell * 0.42f);
      dl->AddText(ImGui::GetFont(), fs,
                  ImVec2(a.x + (cell - 2 - ImGui::CalcTextSize(b).x * fs / font) * 0.5f, a.y + (cell - 2 - fs) * 0.5f),
                  s > 0.55f ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255), b);
      if (l == st.layer && h == st.head) dl->AddRect(a, c, IM_COL32(255, 200, 40, 255), 0, 0, 3);
      ImGui::SetCursorScreenPos(a);
      ImGui::PushID(l * 4096 + h);
      if (ImGui::InvisibleButton("##cell", ImVec2(cell - 2, cell - 2))) st.layer = l, st.head = h;
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "layer %d head %d\nprevious token %.3f\nduplicate token %.3f\ninduction %.3f\n(click: open "
            "its attention on the probe)",
            l, h, score_of(r, 0, l, h), score_of(r, 1, l, h), score_of(r, 2, l, h));
      ImGui::PopID();
    }
  }
  ImGui::SetCursorScreenPos(ImVec2(p.x, p.y + float(r.n_layers) * cell + font * 0.3f));
  ImGui::Dummy(ImVec2(lw + float(r.n_heads) * cell, 1));
}

// Outlines the cells the score counts (D > 0) on the map placed at pl. Large cells get
// a frame each; small ones (where a frame would cover the cell) a line on each side of
// every diagonal run of them, so the cells themselves stay visible between the two.
void outline_cells(const HeatmapPlacement& pl, const ds::MatRM& D, int T) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 c = IM_COL32(255, 200, 40, 255);
  auto at = [&](float i, float j) {
    return ImVec2(pl.x + (j - float(pl.col0)) * pl.cell_w, pl.y + (i - float(pl.row0)) * pl.cell_h);
  };
  auto on = [&](int i, int j) {
    return i >= pl.row0 && i < pl.row0 + pl.rows && j >= pl.col0 && j < pl.col0 + pl.cols && i < T && j < T &&
           i < D.rows() && j < D.cols() && D(i, j) > 0;
  };
  const bool small = std::min(pl.cell_w, pl.cell_h) < 7;
  for (int i = pl.row0; i < pl.row0 + pl.rows; ++i)
    for (int j = pl.col0; j < pl.col0 + pl.cols; ++j) {
      if (!on(i, j)) continue;
      if (!small) {
        dl->AddRect(at(float(i), float(j)), at(float(i + 1), float(j + 1)), c, 0, 0, 1.5f);
        continue;
      }
      if (on(i - 1, j - 1)) continue;  // not the first cell of its diagonal run
      int n = 1;
      while (on(i + n, j + n)) ++n;
      // Through the centres of the cells two diagonals away, so that the run and its
      // neighbours show whole between the lines; white, unlike any colour map's cells.
      const float i0 = float(i), j0 = float(j), i1 = float(i + n), j1 = float(j + n);
      const ImU32 w = IM_COL32(255, 255, 255, 230);
      dl->AddLine(at(i0 - 0.5f, j0 + 1.5f), at(i1 - 0.5f, j1 + 1.5f), w, 1.0f);  // above-right of the run
      dl->AddLine(at(i0 + 1.5f, j0 - 0.5f), at(i1 + 1.5f, j1 - 0.5f), w, 1.0f);  // below-left of it
    }
}

// The opened head's attention on the probe, with the cells the chosen score counts
// outlined.
void probe_pattern(App& app, RolesState& st, const RolesAnswer& ra, ImVec2 size) {
  const ds::HeadRoles& r = ra.roles;
  const size_t idx = size_t(st.layer) * r.n_heads + st.head;
  if (idx >= r.patterns.size()) return;
  const ds::MatRM& P = r.patterns[idx];
  const int T = int(P.rows());
  if (T == 0 || P.cols() != T) return;
  // The layer's mask: causal, and on a sliding-window layer the window's edge too.
  const ds::Config& cfg = app.engine.model ? app.engine.model->cfg : app.history.trace.config;
  const int window = cfg.sliding(st.layer) ? cfg.sliding_window : 0;
  auto& e = app.maps.cached("roles", ra.spec + "/" + std::to_string(idx), [&] {
    Matrix m;
    m.rows = m.cols = T;
    m.v.resize(size_t(T) * T);
    m.mask.resize(size_t(T) * T);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        m.v[size_t(i) * T + j] = float(P(i, j));
        m.mask[size_t(i) * T + j] = ds::may_attend(ds::AttnKind::Causal, i, j, {}, -1, window);
      }
    m.lo = 0, m.hi = 1, m.vmin = 0, m.vmax = 1;
    return m;
  });
  // Short labels (the tooltip has the whole token): the cells get the height.
  if (st.short_labels.size() != ra.labels.size()) {
    st.short_labels.clear();
    for (auto& s : ra.labels) st.short_labels.push_back(shorten(s, 5));
  }
  HeatmapArgs a;
  a.m = &e.m;
  a.lineage = e.lineage;
  a.row_labels = &st.short_labels;
  a.col_labels = &st.short_labels;
  a.row_title = "query: the token reading";
  a.col_title = "key: the token being read";
  a.style.cmap = app.look.cmap;
  a.style.vmin = 0, a.style.vmax = 1;
  a.causal = true;
  a.window = window;
  a.size = size;
  a.toolbar = false;  // beside the head's line (panel_roles)
  // The whole probe at once, however small its cells: the stripes are the point (the
  // wheel zooms in). Its positions are not the trace's, so no "last N tokens" window.
  a.row_tokens = a.col_tokens = false;
  const HeatmapHit hit = heatmap_widget(app, "roles", a);
  if (st.outline && !app.maps.placements.empty() && app.maps.placements.back().name == "roles") {
    const ds::MatRM D = st.kind == 0   ? ds::previous_token_detection(r.probe)
                        : st.kind == 1 ? ds::duplicate_token_detection(r.probe)
                                       : ds::induction_detection(r.probe);
    outline_cells(app.maps.placements.back(), D, T);
  }
  if (hit.hovered && hit.row < T && hit.col < T)
    ImGui::SetTooltip("\"%s\" (position %d) reading \"%s\" (position %d): weight %.3f",
                      ra.labels[size_t(hit.row)].c_str(), hit.row, ra.labels[size_t(hit.col)].c_str(), hit.col,
                      double(P(hit.row, hit.col)));
}

}  // namespace

void panel_roles(App& app) {
  RolesState& st = app.state<RolesState>();
  view_caption(app, "roles");
  const float font = ImGui::GetFontSize();
  if (!app.engine.model) {
    ImGui::TextDisabled("The head detector runs the model on a probe sequence: load a model.");
    return;
  }
  const std::string want = app.engine.model->spec + (st.exclude_bos ? " (BOS left out)" : "");
  if (st.asked_for != want) {
    st.asked_for = want;
    st.roles.reset();
    cmd::Roles c;
    c.key = want;
    c.exclude_bos = st.exclude_bos;
    c.threads = app.engine.threads;
    app.engine.ask_latest(std::move(c));
    st.pending = true;
  }
  for (int k = 0; k < 3; ++k) {
    if (k) ImGui::SameLine();
    ImGui::RadioButton(kKinds[k], &st.kind, k);
    tooltip(app, kKindHelp[k]);
  }
  flow(font * 14);
  ImGui::Checkbox("leave out the first token", &st.exclude_bos);
  tooltip(app,
          "A head with nothing to do usually parks its attention on the first token (BOS). Leaving that "
          "column out (TransformerLens's exclude_bos) lets an induction head score near 1; with it in, even a "
          "perfect one scores just under 0.5, because the probe's first half has nothing to copy yet. "
          "The command-line tool's heads command, leaving out the first token too, gives the same scores.");
  flow(font * 14);
  ImGui::Checkbox("outline what the score counts", &st.outline);
  tooltip(app,
          "Outlines the cells of the probe's attention the chosen score adds up: the score is the share of the "
          "head's attention that falls on them.");
  if (!st.roles) {
    ImGui::TextDisabled(st.pending ? "running the probe..." : "no scores yet");
    return;
  }
  const RolesAnswer& ra = *st.roles;
  const ds::HeadRoles& r = ra.roles;
  if (st.layer < 0 || st.head < 0 || st.layer >= r.n_layers || st.head >= r.n_heads) {
    float best = -1;
    for (int l = 0; l < r.n_layers; ++l)
      for (int h = 0; h < r.n_heads; ++h)
        if (score_of(r, st.kind, l, h) > best) best = score_of(r, st.kind, l, h), st.layer = l, st.head = h;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float gw = std::clamp(avail.x * 0.34f, font * 14, font * 30);
  ImGui::BeginChild("grid", ImVec2(gw, avail.y), false);
  grid(app, st, r, gw - font);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "score: the share of a head's attention that falls on the outlined cells (TransformerLens's "
      "head detector, 'mul' measure). Hover a head for all three scores.");
  ImGui::PopStyleColor();
  ImGui::Spacing();
  ImGui::TextWrapped("%s", kKindHelp[st.kind]);  // beside the map, which gets the height
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("pattern", ImVec2(0, avail.y), false);
  // The head's line and the map's Fit / zoom controls share a line when they fit: on a
  // 1024x768 window each line taken from the map is a line of its cells.
  ImGui::AlignTextToFramePadding();
  ImGui::Text("Layer %d head %d: %s %.2f", st.layer, st.head, kKinds[st.kind], score_of(r, st.kind, st.layer, st.head));
  tooltip(app, ("On the probe: " + std::to_string(ra.half) + " random tokens, then the same " +
                std::to_string(ra.half) + " again.")
                   .c_str());
  flow(ImGui::GetFontSize() * 16);
  heatmap_toolbar(app, "roles", false);
  const ImVec2 a2 = ImGui::GetContentRegionAvail();
  probe_pattern(app, st, ra, ImVec2(a2.x, a2.y));
  ImGui::EndChild();
}

}  // namespace dsgui
