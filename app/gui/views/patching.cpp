// Activation patching (core/probe/patching.h): a clean and a corrupted prompt of the same
// length, an answer and a wrong token. Each site (a layer at a position, or a head) is
// copied alone from the clean run into the corrupted run; the grid shows how much of
// logit(answer) - logit(wrong) comes back: 0 = as corrupted (grey), 1 = as clean (red),
// below 0 (blue) = the patch pushed the other way. The worker runs it with progress and
// Stop; answers are kept per (prompts, tokens, site).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "imgui.h"
#include "imgui_stdlib.h"
#include "views/common.h"
#include "widgets/draw.h"

namespace dsgui {

namespace {

struct SiteChoice {
  ds::PatchSite site;
  const char* label;
  bool cross;  // encoder-decoder models only
};
const SiteChoice kSites[] = {
    {ds::PatchSite::ResidPre, "residual stream (layer x position)", false},
    {ds::PatchSite::AttnOut, "attention output (layer x position)", false},
    {ds::PatchSite::MlpOut, "MLP output (layer x position)", false},
    {ds::PatchSite::Head, "each head (layer x head)", false},
    {ds::PatchSite::HeadPos, "one layer's heads x position", false},
    {ds::PatchSite::CrossAttnOut, "cross-attention output (layer x position)", true},
    {ds::PatchSite::CrossHead, "each cross-attention head (layer x head)", true},
};

struct PatchState {
  std::string clean, corrupt, answer, wrong, prefix;
  ds::PatchSite site = ds::PatchSite::ResidPre;
  int layer = 0;                // head_pos's layer
  std::string filled_for;       // the model spec the boxes were filled for
  std::string asked;            // the request in flight ("": none)
  std::string shown;            // the key of the answer on screen
  bool script_pending = false;  // a scripted run's request, sent once the worker is free
  bool edit = false;            // the boxes shown even where the view is short
  std::map<std::string, std::shared_ptr<const PatchAnswer>> cache;
  // The grid's last frame, for the sidecar: its box and a cell's size.
  float x = 0, y = 0, cell_w = 0, cell_h = 0;
  bool drawn = false;
};

PatchState& ps(App& app) { return app.state<PatchState>(); }

std::string request_key(const App& app, const PatchState& s) {
  const std::string spec = app.engine.model ? app.engine.model->spec : "";
  return spec + '\x1f' + s.clean + '\x1f' + s.corrupt + '\x1f' + s.answer + '\x1f' + s.wrong + '\x1f' + s.prefix +
         '\x1f' + ds::patch_site_name(s.site) + '\x1f' +
         std::to_string(s.site == ds::PatchSite::HeadPos ? s.layer : -1);
}

// The answer and the wrong token: the two the model found likeliest after the prompt.
void likeliest(const App& app, PatchState& s) {
  const ds::Trace& t = app.history.trace;
  if (t.steps.empty() || !t.steps[0].sample || t.steps[0].sample->candidates.size() < 2) return;
  std::vector<ds::Candidate> c = t.steps[0].sample->candidates;
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.p_raw > b.p_raw; });
  s.answer = c[0].text, s.wrong = c[1].text;
}

// The example shipped with the built-in models (README, "Activation patching"); others
// start from the prompt on screen and the two tokens the model found likeliest next.
void fill_defaults(App& app, PatchState& s) {
  const std::string spec = app.engine.model ? app.engine.model->spec : "";
  if (s.filled_for == spec) {
    if (s.answer.empty() && s.wrong.empty()) likeliest(app, s);  // the first step has come since
    return;
  }
  s.filled_for = spec;
  s.prefix.clear();
  if (spec == "builtin:stories") {
    s.clean = "drum market friend house brown girl shy drum market friend house brown girl";
    s.corrupt = "drum market friend house brown girl kind drum market friend house brown girl";
    s.answer = "shy", s.wrong = "kind";
    return;
  }
  if (spec == "builtin:dates" || spec == "builtin:dates-postnorm") {
    s.clean = "July 14, 1989", s.corrupt = "July 14, 1954";
    s.answer = "8", s.wrong = "5", s.prefix = "19";
    return;
  }
  const bool ed = app.engine.model && app.engine.model->cfg.encoder_decoder;
  s.clean = s.corrupt = ed ? app.inputs.run_source : app.inputs.run_prompt;
  s.answer = s.wrong = "";
  likeliest(app, s);
}

bool can_ask(App& app) {
  return !app.history.replay && app.engine.model && !app.engine.worker.busy() && ps(app).asked.empty();
}

void ask(App& app) {
  PatchState& s = ps(app);
  const std::string key = request_key(app, s);
  if (s.cache.count(key)) {
    s.shown = key;
    return;
  }
  if (!can_ask(app)) return;
  cmd::Patch c;
  c.key = s.asked = key;
  c.clean = s.clean, c.corrupt = s.corrupt, c.answer = s.answer, c.wrong = s.wrong, c.prefix = s.prefix;
  c.site = s.site, c.layer = s.layer, c.threads = app.engine.threads;
  app.engine.ask(std::move(c));
}

void site_combo(App& app, PatchState& s, float w) {
  const bool ed = app.engine.model && app.engine.model->cfg.encoder_decoder;
  const char* now = "?";
  for (const SiteChoice& c : kSites)
    if (c.site == s.site) now = c.label;
  ImGui::SetNextItemWidth(w);
  if (ImGui::BeginCombo("site", now)) {
    for (const SiteChoice& c : kSites)
      if ((!c.cross || ed) && ImGui::Selectable(c.label, c.site == s.site)) s.site = c.site;
    ImGui::EndCombo();
  }
  tooltip(app,
          "Which activation is copied from the clean run: the residual stream entering a layer, what a layer's "
          "attention or MLP adds, or one head's output (at every position, or per position in one layer).");
  if (s.site == ds::PatchSite::HeadPos && app.engine.model) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
    ImGui::SliderInt("layer##patch", &s.layer, 0, std::max(0, app.engine.model->cfg.n_layers - 1));
  }
}

// The site list as wide as its longest choice.
float combo_width(const App& app) {
  const bool ed = app.engine.model && app.engine.model->cfg.encoder_decoder;
  float w = 0;
  for (const SiteChoice& c : kSites)
    if (!c.cross || ed) w = std::max(w, ImGui::CalcTextSize(c.label).x);
  return w + ImGui::GetFrameHeight() + ImGui::GetStyle().FramePadding.x * 2;
}

void text_boxes(App& app, PatchState& s) {
  const float font = ImGui::GetFontSize(), avail = ImGui::GetContentRegionAvail().x;
  const bool ed = app.engine.model && app.engine.model->cfg.encoder_decoder;
  const float label = ImGui::CalcTextSize(ed ? "corrupted source" : "corrupted").x;
  const float box = std::max(font * 10, avail - label - ImGui::GetStyle().ItemSpacing.x * 2);
  ImGui::SetNextItemWidth(box);
  ImGui::InputText(ed ? "clean source" : "clean", &s.clean);
  tooltip(app, "The prompt whose answer we want to explain.");
  ImGui::SetNextItemWidth(box);
  ImGui::InputText(ed ? "corrupted source" : "corrupted", &s.corrupt);
  tooltip(app, "The same prompt with a small change (the same number of tokens), which changes the answer.");
  const float small = font * 6;
  ImGui::SetNextItemWidth(small);
  ImGui::InputText("answer", &s.answer);
  tooltip(app, "The token the clean prompt leads to (one token; a leading space is part of a word token).");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(small);
  ImGui::InputText("wrong", &s.wrong);
  tooltip(app, "The token the corrupted prompt leads to. The metric is logit(answer) - logit(wrong).");
  if (ed) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(small * 1.5f);
    ImGui::InputText("decoder prefix", &s.prefix);
    tooltip(app, "What the decoder has written so far (after BOS), the same in both runs.");
  }
  const float combo = combo_width(app);
  flow(combo);
  site_combo(app, s, combo);
}

void run_controls(App& app, PatchState& s) {
  if (!s.asked.empty()) {
    const std::string act = app.engine.worker.activity();
    int done = 0, total = 0;
    if (std::sscanf(act.c_str(), "patching from the clean run: %d of %d", &done, &total) == 2 && total > 0) {
      char over[64];
      std::snprintf(over, sizeof over, "%d of %d runs", done, total);
      ImGui::ProgressBar(float(done) / float(total), ImVec2(ImGui::GetFontSize() * 16, 0), over);
    } else {
      ImGui::TextUnformatted(act.empty() ? "waiting for the engine" : act.c_str());
    }
    ImGui::SameLine();
    if (ImGui::Button("Stop")) app.engine.worker.cancel();
    return;
  }
  ImGui::BeginDisabled(!can_ask(app));
  if (ImGui::Button("Patch")) ask(app);
  ImGui::EndDisabled();
  tooltip(app,
          "Run the clean and the corrupted prompt, then the corrupted one again once for each cell of the "
          "grid, with that site copied from the clean run.");
}

// The colour key: blue -1, grey 0 (as corrupted), red 1 (as clean).
void colour_key(App& app) {
  const float font = ImGui::GetFontSize(), w = font * 8, h = ImGui::GetTextLineHeight();
  ImGui::TextUnformatted("-1");
  ImGui::SameLine();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (int i = 0; i < 32; ++i)
    dl->AddRectFilled(ImVec2(p.x + w * i / 32, p.y), ImVec2(p.x + w * (i + 1) / 32 + 1, p.y + h),
                      diverging(float(i) / 15.5f - 1.0f, app.look.light));
  ImGui::Dummy(ImVec2(w, h));
  ImGui::SameLine();
  ImGui::TextUnformatted("+1   0 = as corrupted, 1 = as clean");
}

std::string cell_text(double v) {
  char b[16];
  std::snprintf(b, sizeof b, "%.2f", v);
  return std::string(b) == "-0.00" ? "0.00" : b;
}

void cell_tooltip(App& app, const PatchAnswer& a, int r, int c) {
  const ds::PatchGrid& g = a.grid;
  std::string where;
  if (g.site == ds::PatchSite::Head || g.site == ds::PatchSite::CrossHead)
    where = std::string(g.site == ds::PatchSite::CrossHead ? "cross-attention " : "") + "layer " + std::to_string(r) +
            ", head " + std::to_string(c) + " (every position)";
  else
    where = (g.site == ds::PatchSite::HeadPos ? "layer " + std::to_string(g.layer) + ", head " + std::to_string(r)
                                              : "layer " + std::to_string(r)) +
            ", position " + std::to_string(c) + " '" + visible(a.col_labels[size_t(c)]) + "'";
  char b[256];
  std::snprintf(b, sizeof b,
                "%s\nrestored %.4f of the difference\nlogit difference %+.4f (clean %+.4f, corrupted %+.4f)",
                where.c_str(), g.at(r, c), g.metric[size_t(r * g.cols + c)], g.clean, g.corrupt);
  if (app.look.tooltips) ImGui::SetTooltip("%s", b);
}

// The column labels above the grid: each position's token (clean / corrupted where they
// differ, highlighted), upright when the cells are too narrow for them. Returns the height.
float column_labels(App& app, const PatchAnswer& a, ImVec2 at, float cell_w, bool draw) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 col = ImGui::GetColorU32(ImGuiCol_Text),
              hi = app.look.light ? IM_COL32(190, 90, 0, 255) : IM_COL32(255, 190, 60, 255);
  float widest = 0;
  std::vector<std::string> text;
  const bool tokens = a.grid.site != ds::PatchSite::Head && a.grid.site != ds::PatchSite::CrossHead;
  for (size_t c = 0; c < a.col_labels.size(); ++c) {
    std::string t = tokens ? shorten(visible(a.col_labels[c]), 12) : a.col_labels[c];
    if (c < a.col_differs.size() && a.col_differs[c]) t += " / " + shorten(visible(a.corrupt[c]), 12);
    widest = std::max(widest, ImGui::CalcTextSize(t.c_str()).x);
    text.push_back(std::move(t));
  }
  const float line = ImGui::GetTextLineHeight();
  const bool upright = widest > cell_w - 4;
  const float h = upright ? widest + 4 : line + 4;
  if (!draw) return h;
  for (size_t c = 0; c < text.size(); ++c) {
    const ImU32 cc = c < a.col_differs.size() && a.col_differs[c] ? hi : col;
    const float x = at.x + cell_w * float(c);
    if (upright)
      vertical_text(dl, ImVec2(x + (cell_w - line) / 2, at.y + h - 2), cc, text[c].c_str());
    else
      dl->AddText(ImVec2(x + (cell_w - ImGui::CalcTextSize(text[c].c_str()).x) / 2, at.y + 2), cc, text[c].c_str());
  }
  return h;
}

void draw_grid(App& app, PatchState& s, const PatchAnswer& a) {
  const ds::PatchGrid& g = a.grid;
  const float font = ImGui::GetFontSize();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  float row_w = 0;
  for (const std::string& l : a.row_labels) row_w = std::max(row_w, ImGui::CalcTextSize(l.c_str()).x * 1.6f);
  row_w = std::max(row_w, ImGui::CalcTextSize("layer").x) + font * 0.6f;
  float cell_w = std::min(font * 8, (avail.x - row_w) / float(std::max(1, g.cols)));
  const float label_h = column_labels(app, a, ImVec2(0, 0), cell_w, false);
  float cell_h = std::min(font * 4.5f, (avail.y - label_h - font * 0.5f) / float(std::max(1, g.rows)));
  cell_h = std::max(cell_h, font * 0.8f);
  cell_w = std::max(cell_w, font * 0.8f);
  const ImVec2 p = ImGui::GetCursorScreenPos();
  column_labels(app, a, ImVec2(p.x + row_w, p.y), cell_w, true);
  const ImVec2 o(p.x + row_w, p.y + label_h);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), faint = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  dl->AddText(ImVec2(p.x, o.y - font - 2), faint, g.site == ds::PatchSite::HeadPos ? "head" : "layer");
  // The numbers as large as the cells allow (up to twice the text), for the back row.
  const float num_size =
      std::clamp(std::min(cell_h * 0.45f, cell_w / ImGui::CalcTextSize("-0.00 ").x * font), font * 0.8f, font * 2.0f);
  const float num_w = ImGui::CalcTextSize("-0.00").x * num_size / font;
  for (int r = 0; r < g.rows; ++r) {
    const char* rl = a.row_labels[size_t(r)].c_str();
    const float rs = std::max(font, num_size * 0.8f);
    dl->AddText(ImGui::GetFont(), rs, ImVec2(p.x, o.y + cell_h * (float(r) + 0.5f) - rs / 2), text, rl);
    for (int c = 0; c < g.cols; ++c) {
      const ImVec2 c0(o.x + cell_w * float(c), o.y + cell_h * float(r)), c1(c0.x + cell_w - 1, c0.y + cell_h - 1);
      const double v = g.at(r, c);
      dl->AddRectFilled(c0, c1, diverging(float(v), app.look.light));
      if (num_w + 4 <= cell_w && num_size <= cell_h) {
        const std::string t = cell_text(v);
        const bool strong = std::fabs(v) > 0.55;
        const float tw = ImGui::CalcTextSize(t.c_str()).x * num_size / font;
        dl->AddText(ImGui::GetFont(), num_size, ImVec2(c0.x + (cell_w - tw) / 2, c0.y + (cell_h - num_size) / 2),
                    strong                ? IM_COL32(255, 255, 255, 255)
                    : std::fabs(v) < 0.05 ? faint
                                          : text,
                    t.c_str());
      }
    }
  }
  s.x = o.x, s.y = o.y, s.cell_w = cell_w, s.cell_h = cell_h, s.drawn = true;
  ImGui::InvisibleButton("patchgrid", ImVec2(row_w + cell_w * float(g.cols), label_h + cell_h * float(g.rows)));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetMousePos();
    const int c = int((m.x - o.x) / cell_w), r = int((m.y - o.y) / cell_h);
    if (m.x >= o.x && m.y >= o.y && r < g.rows && c < g.cols) cell_tooltip(app, a, r, c);
  }
}

void summary(App& app, const PatchAnswer& a, bool stale) {
  const ds::PatchGrid& g = a.grid;
  ImGui::PushTextWrapPos(0);
  ImGui::TextWrapped(
      "logit('%s') - logit('%s') at the last position: %+.3f clean, %+.3f corrupted. Each cell: that "
      "site copied alone from the clean run into the corrupted run (%.1f s).",
      visible(a.answer_text).c_str(), visible(a.wrong_text).c_str(), g.clean, g.corrupt, a.seconds);
  ImGui::PopTextWrapPos();
  if (stale) ImGui::TextDisabled("(the boxes have changed since: press Patch for their grid)");
  colour_key(app);
}

}  // namespace

bool patching_waiting(App& app) {
  PatchState& s = ps(app);
  if (s.script_pending && can_ask(app)) {  // the harness asks every frame: the request goes out when it can
    s.script_pending = false;
    ask(app);
  }
  return s.script_pending || !s.asked.empty();
}

void patching_failed(App& app) { ps(app).asked.clear(), ps(app).script_pending = false; }

bool patching_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Patch>(&e);
  if (!a) return false;
  PatchState& s = ps(app);
  if (!a->answer || a->answer->key != s.asked) return true;
  s.asked.clear();
  if (a->answer->cancelled) {
    app.say("stopped patching");
    return true;
  }
  s.cache[a->answer->key] = a->answer;
  s.shown = a->answer->key;
  return true;
}

void panel_patching(App& app) {
  view_caption(app, "patching");
  if (!app.engine.model) {
    ImGui::TextWrapped("Activation patching needs a model: open one (File > Open model).");
    return;
  }
  PatchState& s = ps(app);
  fill_defaults(app, s);
  s.drawn = false;
  // A short view (a lesson's slide, a small window) keeps its height for the grid: one
  // line with the site, and a button that shows the boxes.
  const bool compact = ImGui::GetContentRegionAvail().y < ImGui::GetFontSize() * 24;
  if (compact && !s.edit) {
    if (ImGui::Button("Prompts...")) s.edit = true;
    tooltip(app, "Show the boxes: the clean and the corrupted prompt, the answer and the wrong token");
    ImGui::SameLine();
    site_combo(app, s, combo_width(app));
    ImGui::SameLine();
  } else {
    if (compact && ImGui::SmallButton("hide the boxes")) s.edit = false;
    text_boxes(app, s);
  }
  run_controls(app, s);
  const std::string key = request_key(app, s);
  if (s.cache.count(key)) s.shown = key;
  auto it = s.cache.find(s.shown);
  if (it == s.cache.end()) {
    if (s.clean == s.corrupt)
      ImGui::TextWrapped(
          "Change a word of the corrupted prompt (keeping the number of tokens) so that the model "
          "answers differently, then press Patch.");
    ImGui::TextWrapped(
        "Press Patch: every site of the model is copied in turn from the clean run into the corrupted "
        "run, and the grid shows how much of the answer each one brings back.");
    return;
  }
  summary(app, *it->second, s.shown != key);
  draw_grid(app, s, *it->second);
}

void patching_script(App& app, const std::map<std::string, std::string>& o) {
  PatchState& s = ps(app);
  fill_defaults(app, s);
  auto take = [&](const char* k, std::string& to) {
    if (auto it = o.find(k); it != o.end()) to = it->second;
  };
  take("clean", s.clean), take("corrupt", s.corrupt), take("answer", s.answer), take("wrong", s.wrong);
  take("prefix", s.prefix);
  if (auto it = o.find("site"); it != o.end() && !ds::parse_patch_site(it->second, s.site))
    app.fail("--patch-site: no site '" + it->second + "'");
  if (auto it = o.find("layer"); it != o.end()) s.layer = std::atoi(it->second.c_str());
  s.script_pending = true;
  patching_waiting(app);
}

std::string patching_sidecar(App& app) {
  PatchState& s = ps(app);
  nlohmann::json j{{"clean", s.clean},
                   {"corrupt", s.corrupt},
                   {"answer", s.answer},
                   {"wrong", s.wrong},
                   {"prefix", s.prefix},
                   {"site", ds::patch_site_name(s.site)},
                   {"layer", s.layer},
                   {"drawn", s.drawn},
                   {"x", s.x},
                   {"y", s.y},
                   {"cell_w", s.cell_w},
                   {"cell_h", s.cell_h},
                   {"cached", s.cache.size()}};
  if (auto it = s.cache.find(s.shown); it != s.cache.end()) {
    const PatchAnswer& a = *it->second;
    nlohmann::json v = nlohmann::json::array();
    for (int r = 0; r < a.grid.rows; ++r) {
      nlohmann::json row = nlohmann::json::array();
      for (int c = 0; c < a.grid.cols; ++c) row.push_back(a.grid.at(r, c));
      v.push_back(row);
    }
    j["grid"] = {{"rows", a.grid.rows},        {"cols", a.grid.cols},       {"value", v},
                 {"clean", a.grid.clean},      {"corrupt", a.grid.corrupt}, {"row_labels", a.row_labels},
                 {"col_labels", a.col_labels}, {"clean_ids", a.clean_ids},  {"corrupt_ids", a.corrupt_ids}};
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dsgui
