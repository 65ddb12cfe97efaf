// Every head of every layer as a small heatmap; click to open one, right-click to
// switch it off (an intervention) and re-run the step to see what changes.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "shell/window_io.h"
#include "views/common.h"
#include "views/heads_ablation.h"
#include "widgets/thumb.h"

namespace dsgui {

// Top candidates of two draws side by side: the model's probability before and after.
void compare_draws(App& app, const ds::SampleRecord& before, const ds::SampleRecord& after, const char* before_label,
                   const char* after_label);

namespace {

// The grids of an encoder-decoder model; a decoder-only one has the first alone.
enum GridKind { kHeadsSelf = 0, kHeadsCross = 1, kHeadsEncoder = 2 };

// The heads switched off in a grid: decoder self-attention or cross-attention (the
// encoder runs once, before the steps: its heads cannot be switched off for a step).
const std::vector<std::pair<int, int>>* off_list(const App& app, int kind) {
  return kind == kHeadsSelf ? &app.whatif.heads_off : kind == kHeadsCross ? &app.whatif.cross_heads_off : nullptr;
}

bool is_off(const App& app, int kind, int l, int h) {
  const auto* v = off_list(app, kind);
  return v && std::find(v->begin(), v->end(), std::make_pair(l, h)) != v->end();
}

void toggle_head_of(App& app, int kind, int l, int h) {
  if (kind == kHeadsSelf)
    app.toggle_head(l, h);
  else if (kind == kHeadsCross)
    app.toggle_cross_head(l, h);
  else
    app.say("the encoder reads the source once, before the steps: its heads cannot be switched off for a step");
}
const char* const kGridNames[] = {"heads", "heads-cross", "heads-encoder"};

// The All heads grids (decoder self-attention, cross-attention, encoder self-attention):
// every head keeps a thumbnail (its matrix max-pooled to at most the tile's pixels,
// grown a step at a time) and a texture of it; the textures are sent a few at a time
// under a per-frame budget, the stale ones shown meanwhile.
struct HeadTile {
  HeatTexture tex;
  Thumb thumb;
  uint64_t sent = 0;      // the thumb's serial that tex holds
  uint64_t uploaded = 0;  // which upload of the grid tex holds (HeadsGrid::uploads)
  uint64_t drawn = 0;     // the upload drawn into the grid's target (0: none)
  float lo = 0, hi = -1;  // the range of what tex holds (Matrix::lo, hi)
  bool ok = false;        // tex holds something to draw
};
struct HeadsGrid {
  std::string what;                              // trace epoch, kind, thumbnail side
  int step = -1;                                 // the step the thumbs are built to
  bool rebuilding = false;                       // thumbs started over: textures keep the old ones until done
  size_t next = 0;                               // the tile the next upload round starts at
  uint64_t serial = 0;                           // bumped whenever a texture changes
  uint64_t uploads = 0;                          // textures sent so far (HeadTile::uploaded)
  std::string drawn;                             // the style and size the grid's render target was drawn in
  double step_s = 0;                             // how long pooling one step took last
  bool waited = false;                           // the last frame pooled and left the uploads to this one
  std::vector<std::unique_ptr<HeadTile>> tiles;  // layer-major
};
struct HeadsGrids {
  std::array<HeadsGrid, 3> grid;  // kHeadsSelf, kHeadsCross, kHeadsEncoder
};
const char* const kGridTitles[] = {"Decoder self-attention", "Cross-attention (output tokens reading the source)",
                                   "Encoder self-attention (source tokens reading each other)"};
const char* const kGridShort[] = {"Decoder self-attention", "Cross-attention", "Encoder self-attention"};

// Per frame: at most this long spent pooling new rows into thumbnails (a step is not
// started that would end past it, from the last step's time), and at most this many
// bytes of thumbnails sent to the GPU (at least one tile a frame).
constexpr double kBuildBudgetS = 0.006;
constexpr size_t kUploadBudget = size_t(1) << 20;

// Pools the rows of step s (every step's rows: the encoder's whole matrix) of every
// head into its thumbnail.
void pool_step(App& app, HeadsGrid& g, int kind, int H, int s) {
  const ds::Trace& t = app.history.trace;
  for (size_t i = 0; i < g.tiles.size(); ++i) {
    const int l = int(i) / H, h = int(i) % H;
    Thumb& th = g.tiles[i]->thumb;
    if (kind == kHeadsEncoder) {
      Matrix m = encoder_matrix(t, l, h);
      if (m.ok()) th.add_rows(m, 0);
    } else {
      Matrix rows = attention_step_rows(t, l, h, s, kind == kHeadsCross, app.look.show_scores);
      if (rows.error.empty()) th.add_rows(rows, t.steps[s].pos0);
    }
  }
}

// Sends the thumbnails that changed, from where the last round stopped, within the
// upload budget; the others keep their stale texture until a later frame. Returns
// whether a texture changed.
bool upload_tiles(App& app, HeadsGrid& g) {
  const size_t n = g.tiles.size();
  size_t left = kUploadBudget, i = 0;
  bool changed = false;
  for (; i < n; ++i) {
    HeadTile& tile = *g.tiles[(g.next + i) % n];
    if (tile.sent == tile.thumb.serial()) continue;
    const Matrix& p = tile.thumb.pooled();
    const size_t bytes = size_t(p.rows) * p.cols * (sizeof(float) + 1);
    if (changed && bytes > left) break;
    left -= std::min(left, bytes);
    tile.sent = tile.thumb.serial();
    if (!p.ok()) continue;
    tile.tex.set(p.rows, p.cols, p.v.data(), p.mask.data(), app.maps.uploads);
    tile.uploaded = ++g.uploads;
    tile.lo = p.lo;
    tile.hi = p.hi;
    tile.ok = true;
    changed = true;
  }
  g.next = n ? (g.next + i) % n : 0;
  return changed;
}

// Brings a grid's thumbnails (side bins at most each way) to the cursor: the rows of
// the steps taken since the last frame, within the frame's time budget; everything
// again, over as many frames as it takes, when the trace, the kind or the size
// changed or the cursor went back (the old textures stay on screen meanwhile).
// Returns whether a texture changed.
bool update_grid(App& app, int kind, int L, int H, int side) {
  HeadsGrid& g = app.state<HeadsGrids>().grid[size_t(kind)];
  char what[80];
  std::snprintf(what, sizeof what, "%llu/%d/%d/%d", (unsigned long long)app.history.epoch, kind,
                int(app.look.show_scores), side);
  const int target = kind == kHeadsEncoder ? 0 : app.sel.cursor;
  if (g.what != what || int(g.tiles.size()) != L * H || target < g.step) {
    if (int(g.tiles.size()) != L * H) {
      g.tiles.clear();
      for (int i = 0; i < L * H; ++i) g.tiles.push_back(std::make_unique<HeadTile>());
    }
    for (auto& tile : g.tiles) tile->thumb.reset(side);
    g.what = what;
    g.step = -1;
    g.rebuilding = true;
  }
  const double t0 = now_s();
  bool pooled = false;
  for (double t = t0; g.step < target && (!pooled || t - t0 + g.step_s <= kBuildBudgetS); pooled = true) {
    pool_step(app, g, kind, H, ++g.step);
    const double t1 = now_s();
    g.step_s = t1 - t;
    t = t1;
  }
  if (g.step == target) g.rebuilding = false;
  // A frame that pooled a step leaves the uploads (and the grid's drawing) to the next
  // (every other frame at most, so that they keep up while the engine steps every frame):
  // both in one frame took the frames over 50 ms at 1,024 GPT-2-small positions.
  const bool wait = pooled && !g.waited;
  g.waited = wait;
  // A grid started over shows its old maps until the new ones are whole.
  const bool changed = !g.rebuilding && !wait && upload_tiles(app, g);
  if (changed) ++g.serial;
  return changed;
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

// The grids' arrangement (plan_grids): the tile's side and the grids in each column.
struct GridPlan {
  float tile = 0;
  std::vector<int> cols;
};

// What the view drew last frame, for the scripted run's sidecar: the tile's side, the
// columns, the area the grids had and the box they filled (x, y, w, h).
struct HeadsLayout {
  float tile = 0;
  int columns = 0;
  ImVec4 view, box;
  int zoom_layer = -1, zoom_head = -1;  // the head shown large beside the grids (-1: none)
  bool zoom_cross = false;
  ImVec4 zoom;  // the large map's box
};

// The head shown large in the room the grids leave: the one last hovered (kept when the
// mouse leaves, so that its cells can be hovered), else the open one.
struct HeadsZoom {
  int kind = -1, layer = -1, head = -1;
};

// The weights/scores switch, the colour map and the re-run buttons.
void heads_controls(App& app) {
  const float font = ImGui::GetFontSize();
  int what = app.look.show_scores ? 1 : 0;
  ImGui::RadioButton("weights", &what, 0);
  tooltip(app, "After softmax: how much each token reads each earlier token.");
  ImGui::SameLine();
  ImGui::RadioButton("scores", &what, 1);
  tooltip(app, "Before softmax: raw match scores, each map scaled to its own range.");
  app.look.show_scores = what == 1;
  flow(font * 6);
  ImGui::SetNextItemWidth(font * 6);
  ImGui::Combo("##cmap", &app.look.cmap, kColormapNames, 3);
  flow(font * 14);
  const bool can_rerun = !app.history.replay && app.engine.model && !app.engine.worker.busy();
  ImGui::BeginDisabled(!can_rerun);
  char rerun[96];
  const size_t n_off = app.whatif.heads_off.size() + app.whatif.cross_heads_off.size();
  std::snprintf(rerun, sizeof rerun, "Re-run step %d with %d head%s off", app.sel.cursor + 1, int(n_off),
                n_off == 1 ? "" : "s");
  if (ImGui::Button(rerun)) app.rerun_with_heads(app.sel.cursor);
  tooltip(app,
          "Compute this step again with the switched-off heads silenced (their output set to zero), and compare "
          "the next-token probabilities. Later steps are dropped and use the same heads.");
  flow(font * 6);
  ImGui::BeginDisabled(n_off == 0);
  if (ImGui::Button("All heads on")) app.all_heads_on();
  ImGui::EndDisabled();
  ImGui::EndDisabled();
  flow(font * 12);
  ablation_button(app);
  ImGui::TextDisabled("click a map to open it; right-click to switch that head off or on");
}

// Renders a grid into its target, only when a tile or the style changed.
RenderTarget& render_grid(App& app, int kind, const GridLayout& g) {
  const int L = g.L, H = g.H, gw = g.gw, gh = g.gh;
  const float tw = g.tile, th = g.tile, gap = g.gap;
  // Thumbnails of at most the tile's pixels each way (a power of two, so that a
  // slightly resized window keeps them).
  int side = 8;
  while (side * 2 <= int(g.tile)) side *= 2;
  HeadsGrid& grid = app.state<HeadsGrids>().grid[size_t(kind)];
  update_grid(app, kind, L, H, side);
  char key[160];
  std::snprintf(key, sizeof key, "%d/%d/%d/%d/%d", int(app.look.show_scores), app.look.cmap, gw, gh,
                int(app.look.light));
  RenderTarget& rt = app.maps.target(kGridNames[kind]);
  // The whole grid again when the style or size changed; else only the tiles whose
  // texture changed since they were drawn (tiles cover their squares, unblended): Mesa's
  // software renderer drew all 144 of GPT-2 small every frame a step arrived.
  const bool whole = grid.drawn != key || rt.width() != gw || rt.height() != gh;
  bool stale = whole;
  for (size_t i = 0; !stale && i < grid.tiles.size(); ++i)
    stale = grid.tiles[i]->ok && grid.tiles[i]->drawn != grid.tiles[i]->uploaded;
  if (stale) {
    grid.drawn = key;
    rt.ensure(gw, gh);
    rt.bind();
    ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
    if (whole) app.maps.heat.clear(bg.x, bg.y, bg.z);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        HeadTile& tile = *grid.tiles[size_t(l) * H + h];
        if (!tile.ok || (!whole && tile.drawn == tile.uploaded)) continue;
        tile.drawn = tile.uploaded;
        HeatStyle st;
        st.cmap = app.look.cmap;
        const bool scores = app.look.show_scores && kind != kHeadsEncoder;
        float vmin, vmax;
        display_range(tile.lo, tile.hi, scores, vmin, vmax);
        st.vmin = scores ? vmin : 0.0f;
        st.vmax = scores ? vmax : 1.0f;
        const int x = int(h * (tw + gap)), y = gh - int(l * (th + gap)) - int(th);
        app.maps.heat.draw(tile.tex, st, x, y, int(tw), int(th));
      }
    RenderTarget::unbind(app.fb_w, app.fb_h);
  }
  return rt;
}

// Opens head (l, h) of a grid in the view that shows it whole.
void open_head(App& app, int kind, int l, int h) {
  if (kind == kHeadsSelf) {
    app.sel.layer = l;
    app.sel.head = h;
    app.sel.view = view_index("attention");
  } else {
    cross_show(app, l, h, kind == kHeadsEncoder);
    app.sel.view = view_index("cross");
  }
  app.sel.view_request = true;
}

// The change in the chosen token's log-probability when head (l, h) of a grid is
// switched off alone, in the tile's corner (large tiles only), with its rank.
void effect_label(const ds::HeadAblation& r, int kind, int l, int h, ImVec2 a, float tile, float font) {
  const ds::HeadSite site = kind == kHeadsCross ? ds::HeadSite::Cross : ds::HeadSite::Self;
  for (size_t i = 0; i < r.heads.size(); ++i) {
    const ds::HeadEffect& e = r.heads[i];
    if (e.site != site || e.layer != l || e.head != h) continue;
    char b[48];
    std::snprintf(b, sizeof b, "#%zu %s", i + 1, sig4(e.delta).c_str());
    const ImVec2 ts = ImGui::CalcTextSize(b);
    if (ts.x + 4 > tile || tile < font * 2.5f) std::snprintf(b, sizeof b, "#%zu", i + 1);
    const ImVec2 s2 = ImGui::CalcTextSize(b);
    if (s2.x + 4 > tile) return;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(a, ImVec2(a.x + s2.x + 4, a.y + s2.y + 2), IM_COL32(0, 0, 0, 190));
    dl->AddText(ImVec2(a.x + 2, a.y + 1), i < 3 ? IM_COL32(255, 200, 60, 255) : IM_COL32(255, 255, 255, 255), b);
    return;
  }
}

// Switched-off heads, the open head and the hovered head over the grid at org; a click
// opens a head, a right-click switches it off or on.
void grid_overlays(App& app, int kind, const GridLayout& g, ImVec2 org, bool hovered) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int L = g.L, H = g.H;
  const float tw = g.tile, th = g.tile, gap = g.gap, tile = g.tile;
  const float font = ImGui::GetFontSize();
  const ds::HeadAblation* ranking = ablation_now(app);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      ImVec2 a(org.x + h * (tw + gap), org.y + l * (th + gap)), b(a.x + tw, a.y + th);
      if (is_off(app, kind, l, h)) {
        dl->AddRectFilled(a, b, IM_COL32(0, 0, 0, 150));
        dl->AddLine(a, b, IM_COL32(255, 70, 60, 255), 3);
        dl->AddLine(ImVec2(a.x, b.y), ImVec2(b.x, a.y), IM_COL32(255, 70, 60, 255), 3);
        ImVec2 ts = ImGui::CalcTextSize("OFF");
        if (tile > ts.x)
          dl->AddText(ImVec2(a.x + (tw - ts.x) * 0.5f, a.y + (th - ts.y) * 0.5f), IM_COL32(255, 255, 255, 255), "OFF");
      }
      if (ranking && kind != kHeadsEncoder) effect_label(*ranking, kind, l, h, a, tile, font);
      if (kind == kHeadsSelf && l == app.sel.layer && h == app.sel.head)
        dl->AddRect(ImVec2(a.x - 2, a.y - 2), ImVec2(b.x + 2, b.y + 2), IM_COL32(255, 170, 40, 255), 0, 0, 2);
    }
  if (!hovered) return;
  ImVec2 mp = ImGui::GetIO().MousePos;
  int h = int((mp.x - org.x) / (tw + gap)), l = int((mp.y - org.y) / (th + gap));
  if (l < 0 || l >= L || h < 0 || h >= H) return;
  ImVec2 a(org.x + h * (tw + gap), org.y + l * (th + gap));
  dl->AddRect(a, ImVec2(a.x + tw, a.y + th), IM_COL32(255, 255, 255, 255), 0, 0, 2);
  if (kind != kHeadsEncoder) app.state<HeadsZoom>() = HeadsZoom{kind, l, h};
  const bool off = is_off(app, kind, l, h);
  ImGui::BeginTooltip();
  ImGui::Text("%s layer %d, head %d%s",
              kind == kHeadsSelf    ? ""
              : kind == kHeadsCross ? "cross"
                                    : "encoder",
              l, h, off ? " (switched off)" : "");
  ImGui::TextDisabled("click: open it in the %s view", kind == kHeadsSelf ? "Attention" : "Cross-attention");
  ImGui::TextDisabled("right-click: switch it %s", off ? "back on" : "off");
  ImGui::EndTooltip();
  if (ImGui::IsMouseClicked(0)) open_head(app, kind, l, h);
  if (ImGui::IsMouseClicked(1)) toggle_head_of(app, kind, l, h);
}

// One grid with its layer and head labels at the cursor.
void draw_grid(App& app, int kind, const GridLayout& g) {
  const float font = ImGui::GetFontSize();
  const int L = g.L, H = g.H;
  const float tw = g.tile, th = g.tile, gap = g.gap, tile = g.tile;
  RenderTarget& rt = render_grid(app, kind, g);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 org(std::floor(p0.x + g.lab_w), std::floor(p0.y + g.lab_h));
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
  ImGui::Image((ImTextureID)(intptr_t)rt.texture(), ImVec2(float(g.gw), float(g.gh)), ImVec2(0, 1), ImVec2(1, 0));
  const bool hovered = ImGui::IsItemHovered();
  grid_overlays(app, kind, g, org, hovered);
  HeatmapPlacement pl;
  pl.name = kGridNames[kind];
  pl.x = org.x;
  pl.y = org.y;
  pl.cell_w = tw + gap;
  pl.cell_h = th + gap;
  pl.rows = L;
  pl.cols = H;
  app.maps.placements.push_back(pl);
  if (kind == kHeadsSelf) app.maps.last_heatmap = kGridNames[kind];
  ImGui::SetCursorScreenPos(p0);
  ImGui::Dummy(ImVec2(g.lab_w + g.gw, g.lab_h + g.gh));
}

// The head last hovered (else the open one) as a map with its tokens, in the room of
// width w the grids leave beside them (the view's height below the cursor).
void zoom_panel(App& app, float w) {
  const ds::Trace& t = app.history.trace;
  const ds::Config& cfg = t.config;
  const float font = ImGui::GetFontSize();
  HeadsZoom z = app.state<HeadsZoom>();
  if (z.layer < 0 || z.layer >= cfg.n_layers || z.head < 0 || z.head >= cfg.n_heads ||
      (z.kind == kHeadsCross && !cfg.encoder_decoder))
    z = HeadsZoom{kHeadsSelf, app.sel.layer, app.sel.head};
  const bool cross = z.kind == kHeadsCross;
  HeadsLayout& lay = app.state<HeadsLayout>();
  ImGui::BeginGroup();
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + w);
  ImGui::Text("%slayer %d, head %d, larger", cross ? "cross-attention " : "", z.layer, z.head);
  ImGui::TextDisabled("hover a small map to show it here; click it to open it");
  ImGui::PopTextWrapPos();
  const bool scores = app.look.show_scores;
  const Maps::GrowingMatrix& g = app.attention_view("heads-zoom", z.layer, z.head, cross, scores);
  if (!g.m.ok()) {
    ImGui::TextDisabled("%s", g.m.error.c_str());
    ImGui::EndGroup();
    return;
  }
  const std::vector<std::string> rows = app.position_labels(g.m.rows);
  std::vector<std::string> src;
  if (cross)
    for (int i = 0; i < g.m.cols; ++i) src.push_back(i < int(t.source_text.size()) ? t.source_text[size_t(i)] : "");
  HeatmapArgs a;
  a.m = &g.m;
  a.lineage = g.lineage;
  a.row_labels = &rows;
  a.col_labels = cross ? &src : &rows;
  a.row_title = "query";
  a.col_title = cross ? "source token" : "key";
  a.style.cmap = app.look.cmap;
  a.style.vmin = scores ? g.m.vmin : 0.0f;
  a.style.vmax = scores ? g.m.vmax : 1.0f;
  a.selected_row = app.selected_position();
  a.value_name = scores ? "score" : "weight";
  a.causal = !cross;
  a.col_tokens = !cross;
  a.toolbar = false;
  a.size = ImVec2(w, std::max(font * 8, ImGui::GetContentRegionAvail().y - ImGui::GetStyle().ItemSpacing.y));
  const std::string last = app.maps.last_heatmap;  // the grids stay what an export saves
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const HeatmapHit hit = heatmap_widget(app, "head-zoom", a);  // not "heads...": those are the grids
  app.maps.last_heatmap = last;
  if (hit.hovered) {
    ImGui::BeginTooltip();
    if (!g.m.allowed(hit.row, hit.col))
      ImGui::Text("query %d, key %d: masked (a token may not look ahead)", hit.row, hit.col);
    else
      ImGui::Text("query %d reading %s %d: %s %.4f", hit.row, cross ? "source token" : "key", hit.col,
                  scores ? "score" : "weight", double(g.m.at(hit.row, hit.col)));
    ImGui::EndTooltip();
  }
  if (hit.clicked) app.sel.pos = hit.row;
  lay.zoom_layer = z.layer;
  lay.zoom_head = z.head;
  lay.zoom_cross = cross;
  lay.zoom = ImVec4(at.x, at.y, w, a.size.y);
  ImGui::EndGroup();
}

}  // namespace

namespace {

// The arrangement of the grids in the area: grids in order, split into columns of
// consecutive grids (one column: stacked; one grid a column: side by side), with the
// largest square tile that fits. rows: each grid's layers; H heads; over_h: the height
// each grid takes besides its tiles (title, head labels, spacing); over_w: the width each
// column takes besides its tiles (layer labels); col_gap between columns.
GridPlan plan_grids(const std::vector<int>& rows, int H, float W, float Ht, float over_h, float over_w, float col_gap,
                    float gap) {
  GridPlan best;
  const int n = int(rows.size());
  if (n == 0 || H <= 0) return best;
  for (int cuts = 0; cuts < (1 << (n - 1)); ++cuts) {  // bit i: a new column after grid i
    std::vector<int> cols(1, 0);
    for (int i = 0; i < n; ++i) {
      ++cols.back();
      if (i < n - 1 && (cuts >> i & 1)) cols.push_back(0);
    }
    const int c = int(cols.size());
    float tile = (W - float(c) * over_w - float(c - 1) * col_gap) / float(c * H) - gap;
    for (int j = 0, g = 0; j < c; ++j) {
      int sum = 0;
      for (int k = 0; k < cols[size_t(j)]; ++k) sum += rows[size_t(g++)];
      tile = std::min(tile, (Ht - float(cols[size_t(j)]) * over_h) / float(std::max(sum, 1)) - gap);
    }
    tile = std::floor(tile);
    if (tile > best.tile) best.tile = tile, best.cols = cols;
  }
  return best;
}

}  // namespace

void panel_heads(App& app) {
  view_caption(app, "heads");
  const ds::Trace& t = app.history.trace;
  if (!has_step(app, "No step yet: press Step (Right arrow) to run the prompt through the model.")) return;
  const ds::Config& cfg = t.config;
  const float font = ImGui::GetFontSize();

  heads_controls(app);

  // The grids shown: decoder self-attention, and for an encoder-decoder model its
  // cross-attention and the encoder's self-attention.
  std::vector<std::pair<int, int>> grids = {{kHeadsSelf, cfg.n_layers}};
  if (cfg.encoder_decoder) {
    grids.push_back({kHeadsCross, cfg.n_layers});
    if (cfg.n_enc_layers > 0) grids.push_back({kHeadsEncoder, cfg.n_enc_layers});
  }
  const int H = cfg.n_heads;
  const float title_h = grids.size() > 1 ? ImGui::GetTextLineHeightWithSpacing() : 0.0f;

  // The grids on the left, filling what the comparison and the ranking leave.
  ImVec2 avail = ImGui::GetContentRegionAvail();
  const bool compare = app.whatif.before && app.whatif.before_step == app.sel.cursor && t.steps[app.sel.cursor].sample;
  const bool ranked = ablation_open(app);
  const float side = compare || ranked ? std::min(avail.x * 0.45f, font * 27) : 0.0f;
  const float lab_w = font * 3.2f, lab_h = font * 1.4f;
  const float gap = std::max(2.0f, std::floor(font * 0.25f));
  const float col_gap = font * 1.5f;
  const float spacing = ImGui::GetStyle().ItemSpacing.y * (grids.size() > 1 ? 2.0f : 1.0f);
  std::vector<int> rows;
  for (auto [k, n] : grids) rows.push_back(n);
  const float area_w = avail.x - (side > 0 ? side + font : 0.0f);
  GridPlan plan = plan_grids(rows, H, area_w, avail.y, lab_h + title_h + spacing, lab_w, col_gap, gap);
  const float tile = std::clamp(plan.tile, 16.0f, 480.0f);
  if (plan.cols.empty()) plan.cols = {int(grids.size())};
  HeadsLayout& lay = app.state<HeadsLayout>();
  lay.tile = tile;
  lay.columns = int(plan.cols.size());
  lay.view = ImVec4(ImGui::GetCursorScreenPos().x, ImGui::GetCursorScreenPos().y, area_w, avail.y);

  ImGui::BeginGroup();
  for (size_t j = 0, g = 0; j < plan.cols.size(); ++j) {
    if (j) ImGui::SameLine(0, col_gap);
    ImGui::BeginGroup();
    for (int k = 0; k < plan.cols[j]; ++k, ++g) {
      const auto [kind, L] = grids[g];
      // Side by side the short titles fit a column; stacked, the long ones say more.
      if (grids.size() > 1) ImGui::TextUnformatted(plan.cols.size() > 1 ? kGridShort[kind] : kGridTitles[kind]);
      const int gw = int(H * (tile + gap)), gh = int(L * (tile + gap));
      draw_grid(app, kind, GridLayout{L, H, tile, gap, lab_w, lab_h, gw, gh});
    }
    ImGui::EndGroup();
  }
  ImGui::EndGroup();
  const ImVec2 b0 = ImGui::GetItemRectMin(), b1 = ImGui::GetItemRectMax();
  lay.box = ImVec4(b0.x, b0.y, b1.x - b0.x, b1.y - b0.y);
  lay.zoom_layer = lay.zoom_head = -1;
  const float free_w = area_w - (b1.x - b0.x) - font * 1.5f;
  if (side <= 0 && free_w >= font * 16) {  // the room the grids leave: one head, larger
    ImGui::SameLine(0, font * 1.5f);
    zoom_panel(app, free_w);
  }

  if (side > 0) {
    ImGui::SameLine(0, font);
    ImGui::BeginGroup();
    if (compare) {
      ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + side);
      ImGui::TextWrapped("Step %d: how the model's next-token probabilities moved", app.sel.cursor + 1);
      ImGui::PopTextWrapPos();
      compare_draws(app, *app.whatif.before, *t.steps[app.sel.cursor].sample, app.whatif.before_label.c_str(),
                    app.whatif.heads_off.empty() && app.whatif.cross_heads_off.empty() ? "now" : "heads off");
      ImGui::Spacing();
    }
    if (ranked) ablation_panel(app, side);
    ImGui::EndGroup();
  }
}

void heads_sidecar(const App& app, std::ostream& f) {
  const HeadsLayout& lay = const_cast<App&>(app).state<HeadsLayout>();
  f << "  \"heads_layout\": {\"tile\": " << lay.tile << ", \"columns\": " << lay.columns << ", \"area\": ["
    << lay.view.x << ", " << lay.view.y << ", " << lay.view.z << ", " << lay.view.w << "], \"box\": [" << lay.box.x
    << ", " << lay.box.y << ", " << lay.box.z << ", " << lay.box.w << "], \"zoom\": {\"layer\": " << lay.zoom_layer
    << ", \"head\": " << lay.zoom_head << ", \"cross\": " << (lay.zoom_cross ? "true" : "false") << ", \"box\": ["
    << lay.zoom.x << ", " << lay.zoom.y << ", " << lay.zoom.z << ", " << lay.zoom.w << "]}},\n";
  ablation_sidecar(app, f);
}

}  // namespace dsgui
