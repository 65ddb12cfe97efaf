// Every head of every layer as a small heatmap; click to open one, right-click to
// switch it off (an intervention) and re-run the step to see what changes.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app.h"

namespace dsgui {

// Top candidates of two draws side by side: the model's probability before and after.
void compare_draws(App& app, const ds::SampleRecord& before, const ds::SampleRecord& after, const char* before_label,
                   const char* after_label);

namespace {

bool is_off(const App& app, int l, int h) {
  return std::find(app.heads_off.begin(), app.heads_off.end(), std::make_pair(l, h)) != app.heads_off.end();
}

// Brings every head's texture to the cursor: the rows of the steps taken since the
// last call, or every head again when the trace or the kind changed or the cursor
// went back. Returns false (and keeps nothing) when one texture a head would take
// too much memory; the grid is then drawn from matrices made for the occasion.
bool update_grid(App& app, int L, int H) {
  App::HeadsGrid& g = app.grid;
  const ds::Trace& t = app.trace;
  // The largest texture a head may have (a power of two, as HeatTexture allocates)
  // with all of them within 256 MB.
  const size_t budget = size_t(256) << 20, cell = sizeof(float) + 1;
  int max_room = 32;
  while (size_t(L) * H * size_t(2 * max_room) * size_t(2 * max_room) * cell <= budget) max_room *= 2;
  const int P = t.positions(app.cursor);
  if (P > max_room || size_t(L) * H * size_t(max_room) * size_t(max_room) * cell > budget) {
    g.tiles.clear();
    g.what.clear();
    return false;
  }
  char what[64];
  std::snprintf(what, sizeof what, "%llu/%d", (unsigned long long)app.trace_epoch, int(app.show_scores));
  const bool fresh = g.what != what || app.cursor < g.step || int(g.tiles.size()) != L * H;
  // Make room ahead of time, a few heads a frame, so that no single frame copies
  // every head's texture into a larger one.
  auto grow_ahead = [&] {
    const int soon = std::min(P + P / 4 + 1, max_room);
    int left = 16;
    for (auto& tile : g.tiles)
      if (tile->ok && tile->tex.capacity_rows() < soon && left-- > 0) tile->tex.reserve(soon, soon);
  };
  if (!fresh && g.step == app.cursor) {
    grow_ahead();
    return true;
  }
  if (int(g.tiles.size()) != L * H) {
    g.tiles.clear();
    for (int i = 0; i < L * H; ++i) g.tiles.push_back(std::make_unique<App::HeadTile>());
  }
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      App::HeadTile& tile = *g.tiles[size_t(l) * H + h];
      bool whole = fresh || !tile.ok;
      for (int s = g.step + 1; !whole && s <= app.cursor; ++s) {
        Matrix rows = attention_step_rows(t, l, h, s, false, app.show_scores);
        if (!rows.error.empty() || !tile.tex.append_rows(t.steps[s].pos0, rows.rows, rows.cols, rows.v.data(),
                                                         rows.mask.data(), app.uploads)) {
          whole = true;
          break;
        }
        if (rows.lo <= rows.hi) {
          if (tile.lo <= tile.hi)
            tile.lo = std::min(tile.lo, rows.lo), tile.hi = std::max(tile.hi, rows.hi);
          else
            tile.lo = rows.lo, tile.hi = rows.hi;
        }
      }
      if (whole) {
        Matrix m = attention_matrix(t, l, h, app.cursor, false, app.show_scores);
        tile.ok = m.ok();
        if (tile.ok) tile.tex.set(m.rows, m.cols, m.v.data(), m.mask.data(), app.uploads);
        tile.lo = m.lo;
        tile.hi = m.hi;
      }
    }
  grow_ahead();
  g.what = what;
  g.step = app.cursor;
  ++g.serial;
  return true;
}

}  // namespace

namespace {

// What the grid is drawn from and where: L layers x H heads of tile x tile maps, gap
// pixels apart, below the head labels and right of the layer labels.
struct GridLayout {
  int L = 0, H = 0;
  float tile = 0, gap = 0, lab_w = 0, lab_h = 0;
  int gw = 0, gh = 0;  // the grid's size in pixels
};

// The weights/scores switch, the colour map and the re-run buttons.
void heads_controls(App& app) {
  const float font = ImGui::GetFontSize();
  int what = app.show_scores ? 1 : 0;
  ImGui::RadioButton("weights", &what, 0);
  tooltip(app, "After softmax: how much each token reads each earlier token.");
  ImGui::SameLine();
  ImGui::RadioButton("scores", &what, 1);
  tooltip(app, "Before softmax: raw match scores, each map scaled to its own range.");
  app.show_scores = what == 1;
  flow(font * 6);
  ImGui::SetNextItemWidth(font * 6);
  ImGui::Combo("##cmap", &app.cmap, kColormapNames, 3);
  flow(font * 14);
  const bool can_rerun = !app.replay && app.model && !app.worker.busy();
  ImGui::BeginDisabled(!can_rerun);
  char rerun[96];
  std::snprintf(rerun, sizeof rerun, "Re-run step %d with %d head%s off", app.cursor + 1, int(app.heads_off.size()),
                app.heads_off.size() == 1 ? "" : "s");
  if (ImGui::Button(rerun)) app.rerun_with_heads(app.cursor);
  tooltip(app,
          "Compute this step again with the switched-off heads silenced (their output set to zero), and compare "
          "the next-token probabilities. Later steps are dropped and use the same heads.");
  flow(font * 6);
  ImGui::BeginDisabled(app.heads_off.empty());
  if (ImGui::Button("All heads on")) app.all_heads_on();
  ImGui::EndDisabled();
  ImGui::EndDisabled();
  ImGui::TextDisabled("click a map to open it; right-click to switch that head off or on");
}

// Renders the whole grid into one target, only when something changed.
RenderTarget& render_grid(App& app, const GridLayout& g) {
  const ds::Trace& t = app.trace;
  const int L = g.L, H = g.H, gw = g.gw, gh = g.gh;
  const float tw = g.tile, th = g.tile, gap = g.gap;
  const bool kept = update_grid(app, L, H);
  char key[160];
  std::snprintf(key, sizeof key, "%llu/%llu/%d/%d/%d/%d/%d/%d", (unsigned long long)(kept ? app.grid.serial : 0),
                (unsigned long long)(kept ? 0 : app.version), kept ? 0 : app.cursor, int(app.show_scores), app.cmap, gw,
                gh, int(app.light));
  RenderTarget& rt = app.target("heads");
  if (app.heads_key != key) {
    app.heads_key = key;
    rt.ensure(gw, gh);
    rt.bind();
    ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
    app.heat.clear(bg.x, bg.y, bg.z);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        HeatStyle st;
        st.cmap = app.cmap;
        const int x = int(h * (tw + gap)), y = gh - int(l * (th + gap)) - int(th);
        if (kept) {
          const App::HeadTile& tile = *app.grid.tiles[size_t(l) * H + h];
          if (!tile.ok) continue;
          float vmin, vmax;
          display_range(tile.lo, tile.hi, app.show_scores, vmin, vmax);
          st.vmin = app.show_scores ? vmin : 0.0f;
          st.vmax = app.show_scores ? vmax : 1.0f;
          app.heat.draw(tile.tex, st, x, y, int(tw), int(th));
        } else {
          Matrix m = attention_matrix(t, l, h, app.cursor, false, app.show_scores);
          if (!m.ok()) continue;
          st.vmin = app.show_scores ? m.vmin : 0.0f;
          st.vmax = app.show_scores ? m.vmax : 1.0f;
          app.heat.draw(m.rows, m.cols, m.v.data(), m.mask.data(), st, x, y, int(tw), int(th), app.uploads);
        }
      }
    RenderTarget::unbind(app.fb_w, app.fb_h);
  }
  return rt;
}

// Switched-off heads, the open head and the hovered head over the grid at org; a click
// opens a head, a right-click switches it off or on.
void grid_overlays(App& app, const GridLayout& g, ImVec2 org, bool hovered) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int L = g.L, H = g.H;
  const float tw = g.tile, th = g.tile, gap = g.gap, tile = g.tile;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      ImVec2 a(org.x + h * (tw + gap), org.y + l * (th + gap)), b(a.x + tw, a.y + th);
      if (is_off(app, l, h)) {
        dl->AddRectFilled(a, b, IM_COL32(0, 0, 0, 150));
        dl->AddLine(a, b, IM_COL32(255, 70, 60, 255), 3);
        dl->AddLine(ImVec2(a.x, b.y), ImVec2(b.x, a.y), IM_COL32(255, 70, 60, 255), 3);
        ImVec2 ts = ImGui::CalcTextSize("OFF");
        if (tile > ts.x)
          dl->AddText(ImVec2(a.x + (tw - ts.x) * 0.5f, a.y + (th - ts.y) * 0.5f), IM_COL32(255, 255, 255, 255), "OFF");
      }
      if (l == app.layer && h == app.head)
        dl->AddRect(ImVec2(a.x - 2, a.y - 2), ImVec2(b.x + 2, b.y + 2), IM_COL32(255, 170, 40, 255), 0, 0, 2);
    }
  if (hovered) {
    ImVec2 mp = ImGui::GetIO().MousePos;
    int h = int((mp.x - org.x) / (tw + gap)), l = int((mp.y - org.y) / (th + gap));
    if (l >= 0 && l < L && h >= 0 && h < H) {
      ImVec2 a(org.x + h * (tw + gap), org.y + l * (th + gap));
      dl->AddRect(a, ImVec2(a.x + tw, a.y + th), IM_COL32(255, 255, 255, 255), 0, 0, 2);
      ImGui::BeginTooltip();
      ImGui::Text("layer %d, head %d%s", l, h, is_off(app, l, h) ? " (switched off)" : "");
      ImGui::TextDisabled("click: open it in the Attention view");
      ImGui::TextDisabled("right-click: switch it %s", is_off(app, l, h) ? "back on" : "off");
      ImGui::EndTooltip();
      if (ImGui::IsMouseClicked(0)) {
        app.layer = l;
        app.head = h;
        app.view = view_index("attention");
        app.view_request = true;
      }
      if (ImGui::IsMouseClicked(1)) app.toggle_head(l, h);
    }
  }
}

}  // namespace

void panel_heads(App& app) {
  view_caption(app, "heads");
  const ds::Trace& t = app.trace;
  if (!has_step(app, "No step yet: press Step (Right arrow) to run the prompt through the model.")) return;
  const ds::Config& cfg = t.config;
  const int L = cfg.n_layers, H = cfg.n_heads;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();

  heads_controls(app);

  // Layout: the grid on the left, the comparison on the right.
  ImVec2 avail = ImGui::GetContentRegionAvail();
  const bool compare = app.before && app.before_step == app.cursor && t.steps[app.cursor].sample;
  const float side = compare ? std::min(avail.x * 0.38f, font * 24) : 0.0f;
  const float lab_w = font * 3.2f, lab_h = font * 1.4f;
  const float gap = std::max(2.0f, std::floor(font * 0.25f));
  float tile = std::floor(std::min((avail.x - side - lab_w) / H - gap, (avail.y - lab_h) / L - gap));
  tile = std::clamp(tile, 16.0f, 160.0f);
  const float tw = tile, th = tile;
  const int gw = int(H * (tw + gap)), gh = int(L * (th + gap));

  RenderTarget& rt = render_grid(app, GridLayout{L, H, tile, gap, lab_w, lab_h, gw, gh});

  ImGui::BeginGroup();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 org(std::floor(p0.x + lab_w), std::floor(p0.y + lab_h));
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  for (int h = 0; h < H; ++h) {
    char b[16];
    std::snprintf(b, sizeof b, H > 16 && tile < font * 2 ? "%d" : "head %d", h);
    if (tile < ImGui::CalcTextSize(b).x) std::snprintf(b, sizeof b, "%d", h);
    ImVec2 ts = ImGui::CalcTextSize(b);
    dl->AddText(ImVec2(org.x + h * (tw + gap) + (tw - ts.x) * 0.5f, p0.y), tc, b);
  }
  for (int l = 0; l < L; ++l) {
    char b[16];
    std::snprintf(b, sizeof b, "L%d", l);
    dl->AddText(ImVec2(p0.x, org.y + l * (th + gap) + (th - font) * 0.5f), tc, b);
  }
  ImGui::SetCursorScreenPos(org);
  ImGui::Image((ImTextureID)(intptr_t)rt.texture(), ImVec2(float(gw), float(gh)), ImVec2(0, 1), ImVec2(1, 0));
  const bool hovered = ImGui::IsItemHovered();
  grid_overlays(app, GridLayout{L, H, tile, gap, lab_w, lab_h, gw, gh}, org, hovered);
  HeatmapPlacement pl;
  pl.name = "heads";
  pl.x = org.x;
  pl.y = org.y;
  pl.cell_w = tw + gap;
  pl.cell_h = th + gap;
  pl.rows = L;
  pl.cols = H;
  app.placements.push_back(pl);
  app.last_heatmap = "heads";
  ImGui::SetCursorScreenPos(p0);
  ImGui::Dummy(ImVec2(lab_w + gw, lab_h + gh));
  ImGui::EndGroup();

  if (compare) {
    ImGui::SameLine(0, font);
    ImGui::BeginGroup();
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + side);
    ImGui::TextWrapped("Step %d: how the model's next-token probabilities moved", app.cursor + 1);
    ImGui::PopTextWrapPos();
    compare_draws(app, *app.before, *t.steps[app.cursor].sample, app.before_label.c_str(),
                  app.heads_off.empty() ? "now" : "heads off");
    ImGui::EndGroup();
  }
  (void)style;
}

}  // namespace dsgui
