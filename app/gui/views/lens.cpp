// The logit lens: each layer's residual stream read through the final norm and the
// output head as if the model stopped there. A grid of layers (rows: the embedding,
// then the output of every layer) by positions (columns), each cell the top token's
// text on its probability's colour; a strip of the generated tokens coloured by the
// layer from which the lens had them on top for good; and, for the position clicked,
// the table of each layer's top tokens. The trace carries the lens (the worker records
// it with every step); for a trace recorded without it, the engine computes the columns
// the view shows from the recorded residual stream when the model is loaded.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine_link/lens_grid.h"
#include "shell/notices.h"
#include "views/common.h"
#include "widgets/text.h"

namespace dsgui {

// The grid, what was asked of the engine, and which columns the grid shows.
struct LensState {
  LensGrid grid;
  uint64_t asked = 0;        // the version of the request with the engine
  uint64_t asked_epoch = 0;  // the grid's epoch it was made for
  bool pending = false;
  bool failed = false;    // the engine refused: ask again only for another trace
  int first = -1;         // the first column of the window, -1: the newest that fit
  bool all = false;       // every position at once (the overview)
  uint64_t toks_key = 0;  // the tokens and labels below are of this version and step
  std::vector<TokenInfo> toks;
  std::vector<std::string> col_labels;  // every position's label
};

bool lens_waiting(App& app) { return app.state<LensState>().pending; }

bool lens_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Lens>(&e);
  if (!a) return false;
  LensState& st = app.state<LensState>();
  if (a->lens.version != st.asked) return true;  // an answer to an older request
  st.pending = false;
  if (st.asked_epoch == st.grid.epoch()) st.grid.put(a->lens);
  return true;
}

void lens_failed(App& app) {
  LensState& st = app.state<LensState>();
  st.pending = false;
  st.failed = true;
}

namespace {

constexpr ImU32 kSampledGrey = IM_COL32(128, 128, 128, 255);
constexpr ImU32 kHighlight = IM_COL32(255, 170, 40, 255);

// The strip's colormap: another than the grid's, so the two scales are not confused.
int strip_cmap(const App& app) { return app.look.cmap == kMagma ? kViridis : kMagma; }

// Text wrapped at the view's visible right edge (TextWrapped wraps at the content's,
// which a wide item once drawn keeps wide).
void wrapped(const std::string& text) {
  ImGui::PushTextWrapPos(ImGui::GetWindowContentRegionMax().x + ImGui::GetScrollX());
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
}

// Where source src reads the residual stream, in words.
std::string read_where(const LensGrid& g, int src) {
  if (src == 0) return "at the embedding, before any layer";
  if (src == g.sources() - 1) return "after the last layer (" + std::to_string(src - 1) + "): the model's own output";
  return "after layer " + std::to_string(src - 1);
}

// A generated token's colour: its commitment layer on the strip's scale; grey when it
// is not the model's own top-1 (drawn by sampling) or the lens is not known there.
ImU32 commit_colour(const App& app, int commit, int sources, bool top1) {
  if (!top1 || commit < 0) return kSampledGrey;
  return cmap_u32(strip_cmap(app), sources > 1 ? float(commit) / float(sources - 1) : 1.0f);
}

// Asks the engine for columns the trace did not record: the selected position first,
// then the shown columns from the newest, a batch of about 2 G multiply-adds at a time.
void ask_columns(App& app, LensState& st, int col0, int cols, int selected) {
  LensGrid& g = st.grid;
  if (st.pending || st.failed || g.recorded() || !app.engine.model) return;
  const ds::Config& mc = app.engine.model->cfg;
  const ds::Trace& t = app.history.trace;
  if (mc.d_model != t.config.d_model || mc.vocab_size != t.config.vocab_size || mc.n_layers != t.config.n_layers)
    return;
  const double per = double(g.sources()) * mc.vocab_size * mc.d_model;
  const int batch = int(std::clamp(2e9 / std::max(per, 1.0), 1.0, 64.0));
  cmd::Lens c;
  c.step = app.sel.cursor;
  auto want = [&](int p) {
    if (p < 0 || p >= g.positions() || g.known(p) || int(c.columns.size()) >= batch) return;
    for (auto& col : c.columns)
      if (col.pos == p) return;
    cmd::Lens::Column col;
    if (lens_column_inputs(t, app.sel.cursor, p, col)) c.columns.push_back(std::move(col));
  };
  want(selected);
  for (int p = col0 + cols - 1; p >= col0; --p) want(p);
  if (c.columns.empty()) return;
  c.version = st.asked = st.asked + 1;
  st.asked_epoch = g.epoch();
  st.pending = true;
  app.engine.ask_latest(std::move(c));
}

// The tokens as of the cursor and every position's label, made again when the trace or
// the cursor changes.
void refresh_tokens(App& app, LensState& st) {
  const uint64_t key = app.history.version * 1000003ull + uint64_t(app.sel.cursor + 1);
  if (st.toks_key == key) return;
  st.toks_key = key;
  st.toks = app.tokens();
  st.col_labels.clear();
  for (auto& ti : st.toks) st.col_labels.push_back(shorten(visible(ti.text), 10));
}

// The columns shown: every position, or the newest that fit with their text (or from
// `first`, scrolled back). Draws the line of controls.
void window_controls(App& app, LensState& st, float area_w, int& col0, int& cols) {
  const float font = ImGui::GetFontSize();
  const int P = st.grid.positions();
  const int fit = std::max(1, int(area_w / (font * 3.6f)));
  cols = st.all ? P : std::min(P, fit);
  const int last0 = P - cols;
  col0 = st.first < 0 ? last0 : std::clamp(st.first, 0, last0);
  if (app.look.presenter && (st.all || P <= fit)) return;
  const char* modes[] = {"newest that fit", "every position"};
  int mode = st.all ? 1 : 0;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("columns");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 10);
  if (ImGui::Combo("##lens_cols", &mode, modes, 2)) st.all = mode == 1, st.first = -1;
  tooltip(app,
          "Which positions the grid shows: the newest that fit with their text (following generation), or every "
          "position at once (colours only; the mouse wheel zooms in, dragging pans).");
  if (!st.all && P > fit) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(
        std::max(font * 10, ImGui::GetContentRegionAvail().x - (app.look.presenter ? font : font * 25)));
    int at = col0;
    char fmt[64];
    std::snprintf(fmt, sizeof fmt, "positions %d-%d of %d", col0, col0 + cols - 1, P);
    if (ImGui::SliderInt("##lens_first", &at, 0, last0, fmt)) st.first = at >= last0 ? -1 : at;
    tooltip(app, "Scroll through the run; at the right end the grid follows generation again.");
  }
  if (!app.look.presenter) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(font * 6);
    ImGui::Combo("##lens_cmap", &app.look.cmap, kColormapNames, 3);
    heatmap_toolbar(app, "lens", false);
  }
}

// The top token's text (and, when there is room, its probability) in each visible cell.
void cell_texts(App& app, const LensState& st, const HeatmapPlacement& pl) {
  const float font = ImGui::GetFontSize();
  if (pl.cell_h < font * 1.05f || pl.cell_w < font * 1.6f) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const LensGrid& g = st.grid;
  const bool two_lines = pl.cell_h >= font * 2.3f && pl.cell_w >= ImGui::CalcTextSize("0.00").x + 4;
  for (int r = 0; r < pl.rows; ++r)
    for (int c = 0; c < pl.cols; ++c) {
      const int pos = pl.col0 + c, src = pl.row0 + r;
      if (!g.known(pos)) continue;
      const LensCell& cell = g.cell(src, pos);
      const std::string s = fit_text(visible(g.text(cell.top())), pl.cell_w - 4);
      if (s == "...") continue;
      const ImU32 tc = text_on(cmap_u32(app.look.cmap, cell.p()));
      const float x = pl.x + float(c) * pl.cell_w, y = pl.y + float(r) * pl.cell_h;
      const ImVec2 ts = ImGui::CalcTextSize(s.c_str());
      const float ty = y + (pl.cell_h - (two_lines ? 2 * font : ts.y)) * 0.5f;
      dl->AddText(ImVec2(x + (pl.cell_w - ts.x) * 0.5f, ty), tc, s.c_str());
      if (two_lines) {
        char b[16];
        std::snprintf(b, sizeof b, "%.2f", double(cell.p()));
        const float bw = ImGui::CalcTextSize(b).x;
        dl->AddText(ImVec2(x + (pl.cell_w - bw) * 0.5f, ty + font), tc, b);
      }
    }
}

// The hovered cell: position, layer, the top 5 tokens with their probabilities.
void cell_tooltip(App& app, const LensState& st, int src, int pos) {
  if (!app.look.tooltips || app.requests.hide_popups) return;
  const LensGrid& g = st.grid;
  ImGui::BeginTooltip();
  const std::string tok = pos < int(st.toks.size()) ? visible(st.toks[size_t(pos)].text) : "?";
  ImGui::Text("position %d \"%s\", read %s", pos, tok.c_str(), read_where(g, src).c_str());
  if (!g.known(pos)) {
    ImGui::TextDisabled("not computed yet");
  } else {
    const LensCell& c = g.cell(src, pos);
    for (int j = 0; j < c.n; ++j)
      ImGui::Text("%d. \"%s\"  %.3f", j + 1, visible(g.text(c.ids[size_t(j)])).c_str(), double(c.probs[size_t(j)]));
  }
  if (pos + 1 < int(st.toks.size()))
    ImGui::TextDisabled("the token that actually followed: \"%s\"", visible(st.toks[size_t(pos) + 1].text).c_str());
  ImGui::TextDisabled("click: this position's table below");
  ImGui::EndTooltip();
}

// The embedding row reads back each position's own token (a tied head: the unembedding
// is the embedding matrix transposed): the sentence that says so, or "" when it does not.
std::string embedding_note(const App& app, const LensState& st) {
  const LensGrid& g = st.grid;
  int known = 0, same = 0;
  double p = 0;
  for (int pos = 0; pos < g.positions() && pos < int(st.toks.size()); ++pos) {
    if (!g.known(pos)) continue;
    ++known;
    if (g.cell(0, pos).top() == st.toks[size_t(pos)].id) ++same, p += g.cell(0, pos).p();
  }
  if (known == 0 || same * 2 < known) return "";
  char b[512];
  const bool tied = app.history.trace.config.tied_head;
  std::snprintf(b, sizeof b,
                "Top row: embedding -> the current token, %.3f. %s so before any layer the lens reads back each "
                "position's own token (%d of %d), not a guess at the next one.",
                p / same,
                tied ? "With tied embeddings the output head is the embedding matrix transposed,"
                     : "The embedding row predicts the input token itself,",
                same, known);
  return b;
}

// The grid: the heatmap of the top token's probability with the tokens written in.
void lens_map(App& app, LensState& st, float height) {
  const float font = ImGui::GetFontSize();
  const LensGrid& g = st.grid;
  const float label_w = ImGui::CalcTextSize("layer 00").x + font * 3;
  int col0 = 0, cols = 0;
  window_controls(app, st, ImGui::GetContentRegionAvail().x - label_w, col0, cols);
  const int selected = app.selected_position();
  ask_columns(app, st, col0, cols, selected);
  char key[128];
  std::snprintf(key, sizeof key, "%llu/%llu/%d/%d/%d", (unsigned long long)g.epoch(), (unsigned long long)g.serial(),
                g.positions(), col0, cols);
  const Maps::CachedMatrix& cm = app.maps.cached("lens", key, [&] { return g.matrix(col0, cols); });
  if (!cm.m.ok()) {
    ImGui::TextDisabled("%s", cm.m.error.c_str());
    return;
  }
  const std::string note = embedding_note(app, st);
  if (!note.empty()) wrapped(note);
  std::vector<std::string> labels(st.col_labels.begin() + std::min<ptrdiff_t>(col0, st.col_labels.size()),
                                  st.col_labels.begin() + std::min<ptrdiff_t>(col0 + cols, st.col_labels.size()));
  HeatmapArgs a;
  a.m = &cm.m;
  a.lineage = cm.lineage;
  a.row_labels = &g.labels();
  a.col_labels = &labels;
  a.row_title = "read after";
  a.col_title = "position (its token); each cell: the next token the lens reads there";
  a.style.cmap = app.look.cmap;
  a.value_name = "probability";
  a.square = false;
  a.row_tokens = a.col_tokens = false;
  a.max_cell = font * 12;
  a.toolbar = false;  // its Fit and zoom are on the line of controls above
  const float legend_w = ImGui::CalcTextSize("probability").x + font;
  a.size = ImVec2(ImGui::GetContentRegionAvail().x - legend_w, height);
  const size_t before = app.maps.placements.size();
  const HeatmapHit hit = heatmap_widget(app, "lens", a);
  if (app.maps.placements.size() > before) {
    HeatmapPlacement& pl = app.maps.placements.back();
    pl.col0 += col0;  // the map shows columns [col0, col0 + cols) of the whole grid
    cell_texts(app, st, pl);
    const int sc = selected - pl.col0;  // the selected position's column on screen
    if (sc >= 0 && sc < pl.cols)
      ImGui::GetWindowDrawList()->AddRect(ImVec2(pl.x + float(sc) * pl.cell_w - 1, pl.y - 1),
                                          ImVec2(pl.x + float(sc + 1) * pl.cell_w + 1, pl.y + pl.rows * pl.cell_h + 1),
                                          kHighlight, 0, 0, 2.5f);
  }
  if (hit.hovered) cell_tooltip(app, st, hit.row, col0 + hit.col);
  if (hit.clicked) app.sel.pos = col0 + hit.col;
  if (app.maps.placements.size() > before) {
    const HeatmapPlacement& pl = app.maps.placements.back();
    const ImVec2 below = ImGui::GetCursorScreenPos();  // the line after the map
    ImGui::SetCursorScreenPos(ImVec2(pl.x + float(pl.cols) * pl.cell_w + font * 0.8f, pl.y - font * 1.4f));
    legend_vertical(a.style, "probability", false, float(pl.rows) * pl.cell_h - font * 1.5f);
    ImGui::SetCursorScreenPos(ImVec2(below.x, std::max(below.y, ImGui::GetCursorScreenPos().y)));
  }
}

// The strip's legend: one swatch per layer, then the grey of a sampled token.
void strip_legend(App& app, const LensGrid& g) {
  const float font = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int S = g.sources();
  ImGui::AlignTextToFramePadding();
  wrapped("Generated tokens, coloured by the layer from which the lens had them on top for good:");
  flow(font * 1.3f * float(S));
  const float sw = std::max(font * 1.3f, std::min(font * 2.6f, (ImGui::GetContentRegionAvail().x - font * 16) / S));
  const int every = std::max(1, int(std::ceil(ImGui::CalcTextSize("00").x / (sw - 2))));
  ImVec2 p = ImGui::GetCursorScreenPos();
  for (int s = 0; s < S; ++s) {
    const ImU32 c = commit_colour(app, s, S, true);
    const ImVec2 a(p.x + float(s) * sw, p.y), b(a.x + sw - 1, p.y + font * 1.3f);
    dl->AddRectFilled(a, b, c);
    const std::string lab = s == 0 ? "E" : std::to_string(s - 1);
    if (s % every == 0 || s == S - 1) {
      const ImVec2 ts = ImGui::CalcTextSize(lab.c_str());
      dl->AddText(ImVec2(a.x + (sw - 1 - ts.x) * 0.5f, a.y + (font * 1.3f - ts.y) * 0.5f), text_on(c), lab.c_str());
    }
  }
  ImGui::Dummy(ImVec2(sw * float(S), font * 1.3f));
  if (ImGui::IsItemHovered())
    tooltip(app, "E: the embedding, before any layer; n: after layer n. The last is the model's own output.");
  flow(font * 1.3f + ImGui::CalcTextSize("not the model's top-1 (drawn by sampling)").x);
  p = ImGui::GetCursorScreenPos();
  dl->AddRectFilled(p, ImVec2(p.x + font * 1.3f, p.y + font * 1.3f), kSampledGrey);
  ImGui::Dummy(ImVec2(font * 1.3f, font * 1.3f));
  ImGui::SameLine();
  ImGui::TextUnformatted("not the model's top-1 (drawn by sampling)");
}

// One generated token's tooltip: where the lens first had it on top for good.
void chip_tooltip(App& app, const LensState& st, int q) {
  if (!app.look.tooltips || app.requests.hide_popups) return;
  const LensGrid& g = st.grid;
  const int col = q - 1, S = g.sources();
  const TokenInfo& ti = st.toks[size_t(q)];
  ImGui::BeginTooltip();
  ImGui::Text("\"%s\" at position %d, drawn from position %d's prediction", visible(ti.text).c_str(), q, col);
  if (!g.known(col)) {
    ImGui::TextDisabled("the lens at position %d is not computed yet", col);
  } else {
    const int k = g.commitment(col), top = g.cell(S - 1, col).top();
    const std::string where = read_where(g, k);
    if (top == ti.id)
      ImGui::Text("the lens has it on top from %s and keeps it there through the last layer", where.c_str());
    else
      ImGui::Text("not the model's top-1: sampling drew it; the top-1 was \"%s\" (on top for good from %s)",
                  visible(g.text(top)).c_str(), where.c_str());
    for (int s = 0; s < S; ++s)
      ImGui::TextDisabled("%-10s \"%s\" %.3f", g.labels()[size_t(s)].c_str(),
                          visible(g.text(g.cell(s, col).top())).c_str(), double(g.cell(s, col).p()));
  }
  ImGui::EndTooltip();
}

// The commitment strip: every generated token coloured by the layer from which the lens
// had it as its top-1 for good; click one to see the table of the position it came from.
void lens_strip(App& app, LensState& st, float max_height) {
  const float font = ImGui::GetFontSize();
  const LensGrid& g = st.grid;
  const int S = g.sources();
  strip_legend(app, g);
  // Where each chip goes: (token index, x, y, width), lines wrapped to the strip's width.
  const float w =
      ImGui::GetContentRegionAvail().x - ImGui::GetStyle().WindowPadding.x * 2 - ImGui::GetStyle().ScrollbarSize;
  const float lh = font * 1.45f, pad = font * 0.3f;
  struct Chip {
    int q;
    float x, y, w;
    std::string s;
  };
  std::vector<Chip> chips;
  float x = 0, y = 0;
  for (int q = 1; q < int(st.toks.size()); ++q) {
    if (st.toks[size_t(q)].prompt) continue;
    std::string s = visible(st.toks[size_t(q)].text);
    const float cw = ImGui::CalcTextSize(s.c_str()).x + 2 * pad;
    if (x > 0 && x + cw > w) x = 0, y += lh;
    chips.push_back({q, x, y, cw, std::move(s)});
    x += cw + pad;
  }
  const float need = (chips.empty() ? lh : y + lh) + ImGui::GetStyle().WindowPadding.y * 2;
  ImGui::BeginChild("##lens_strip", ImVec2(0, std::min(need, std::max(max_height, lh * 2))), true);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  for (const Chip& ch : chips) {
    const ImVec2 a(o.x + ch.x, o.y + ch.y), b(a.x + ch.w, a.y + font * 1.3f);
    if (!ImGui::IsRectVisible(a, b)) continue;
    const int col = ch.q - 1;
    const bool top1 = g.known(col) && g.cell(S - 1, col).top() == st.toks[size_t(ch.q)].id;
    const ImU32 c = commit_colour(app, g.commitment(col), S, top1);
    dl->AddRectFilled(a, b, c, font * 0.2f);
    dl->AddText(ImVec2(a.x + pad, a.y + font * 0.15f), text_on(c), ch.s.c_str());
    if (col == app.selected_position()) dl->AddRect(a, b, kHighlight, font * 0.2f, 0, 2.0f);
    if (ImGui::IsWindowHovered() && ImGui::IsMouseHoveringRect(a, b)) {
      chip_tooltip(app, st, ch.q);
      if (ImGui::IsMouseClicked(0)) app.sel.pos = col;
    }
  }
  if (chips.empty())
    ImGui::TextDisabled("no token generated yet: press Step (Right arrow)");
  else
    ImGui::Dummy(ImVec2(w, y + lh));
  if (ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - lh * 1.5f) ImGui::SetScrollY(ImGui::GetScrollMaxY());
  ImGui::EndChild();
}

// The table of the position shown: each layer's top token, its probability, the rest.
void lens_table(App& app, LensState& st, int pos) {
  const float font = ImGui::GetFontSize();
  const LensGrid& g = st.grid;
  const auto& toks = st.toks;
  const std::string who = pos >= 0 && pos < int(toks.size()) ? visible(toks[size_t(pos)].text) : "?";
  const std::string next = pos + 1 < int(toks.size()) ? visible(toks[size_t(pos) + 1].text) : "";
  ImGui::Text("Position %d \"%s\": what comes next, read from each layer", pos, who.c_str());
  if (!next.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("(the token that actually followed: \"%s\")", next.c_str());
  }
  if (!g.known(pos)) {
    ImGui::TextDisabled(st.pending ? "computing..." : "the trace did not record the residual stream at this position");
    return;
  }
  const float bw = font * 10;
  const float h = std::max(font * 8, ImGui::GetContentRegionAvail().y);
  if (!ImGui::BeginTable("lens", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY,
                         ImVec2(0, h)))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("read after");
  ImGui::TableSetupColumn("top token");
  ImGui::TableSetupColumn("probability", ImGuiTableColumnFlags_WidthFixed, bw);
  ImGui::TableSetupColumn("runners-up", ImGuiTableColumnFlags_WidthStretch);  // clipped, never wider than the view
  ImGui::TableHeadersRow();
  for (int s = 0; s < g.sources(); ++s) {
    const LensCell& c = g.cell(s, pos);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(g.labels()[size_t(s)].c_str());
    ImGui::TableNextColumn();
    const std::string top = c.n ? visible(g.text(c.top())) : "?";
    const bool match = !next.empty() && top == next;
    if (match)
      ImGui::TextColored(readable(ImVec4(0.4f, 0.9f, 0.4f, 1)), "%s", top.c_str());
    else
      ImGui::TextUnformatted(top.c_str());
    if (match && ImGui::IsItemHovered()) ImGui::SetTooltip("this is the token that actually came next");
    if (s == 0 && pos < int(toks.size()) && c.top() == toks[size_t(pos)].id) {
      ImGui::SameLine();
      ImGui::TextDisabled("= this position's own token");
      tooltip(app,
              "The embedding row reads back the input token: with tied embeddings the output head is the "
              "embedding matrix transposed, and a token's embedding is closest to itself.");
    }
    ImGui::TableNextColumn();
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", double(c.p()));
    bar(c.p(), bw, cmap_u32(app.look.cmap, 0.35f + 0.65f * c.p()), b);
    ImGui::TableNextColumn();
    std::string rest;
    for (int i = 1; i < c.n; ++i) {
      char pb[96];
      std::snprintf(pb, sizeof pb, "%s%s %.2f", i > 1 ? "   " : "", visible(g.text(c.ids[size_t(i)])).c_str(),
                    double(c.probs[size_t(i)]));
      rest += pb;
    }
    ImGui::TextDisabled("%s", rest.c_str());
  }
  ImGui::EndTable();
}

}  // namespace

void panel_lens(App& app) {
  LensState& st = app.state<LensState>();
  view_caption(app, "lens");
  const ds::Trace& t = app.history.trace;
  if (!has_step(app)) return;
  if (st.grid.as_of(t, app.history.epoch, app.sel.cursor) && st.grid.epoch() != st.asked_epoch) st.failed = false;
  refresh_tokens(app, st);
  const bool live = app.engine.model && app.engine.model->cfg.d_model == t.config.d_model &&
                    app.engine.model->cfg.vocab_size == t.config.vocab_size;
  if (st.grid.sources() == 0) {
    ImGui::TextDisabled("This model has no layers for the lens to read.");
    return;
  }
  if (!st.grid.recorded() && !live) {
    ImGui::TextDisabled(
        "This trace did not record the logit lens, which needs the model's final norm and output head: "
        "load the model this trace came from (traces saved by the window carry the lens with them).");
    return;
  }
  const float font = ImGui::GetFontSize();
  const float avail = ImGui::GetContentRegionAvail().y;
  lens_map(app, st, std::max(font * 11, avail * 0.5f));
  lens_strip(app, st, std::max(font * 3, avail * 0.16f));
  lens_table(app, st, app.selected_position());
}

}  // namespace dsgui
