// Compare: the window's run (A) beside a second run (B) of another prompt, another model
// with the same vocabulary, other sampling settings or heads switched off, lined up token
// by token: the next-token probabilities of one step with their differences, the same
// layer and head's attention side by side with a difference map, each layer's residual
// norm and logit lens. B runs on the engine's thread (cmd::Compare), beside the session,
// which it leaves alone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine_link/models.h"
#include "views/common.h"
// after imgui.h (views/common.h)
#include "imgui_stdlib.h"

namespace dsgui {

void layer_head_controls(App& app, int& layer, int& head, const char* id);  // attention.cpp

namespace {

struct CompareState {
  // B's inputs: text ("" = A's), model ("" = A's), settings (same = A's), heads off.
  std::string prompt, source, spec;
  bool same_settings = true;
  ds::SamplerConfig sampler = default_sampler();
  std::string heads_text;
  std::string heads_error;
  // The request on its way and the answer shown.
  uint64_t serial = 0;
  std::string asked;
  std::shared_ptr<const CompareAnswer> answer;
  int a_steps = 0;  // A's steps when B was asked for
  // What is shown.
  bool after_settings = false;  // probabilities after temperature, top-k, top-p
  bool cross = true;            // encoder-decoder: cross-attention (else self-attention)
  int part = 0;                 // narrow windows: 0 next token, 1 attention, 2 residual and lens
  bool wide = false;            // the last frame's layout
  int top_shown = 6;            // each side's tokens the next-token table showed last
};

// "1:0 2:3" -> heads; false (why in err) for anything else.
bool parse_heads(const std::string& text, const ds::Config& cfg, std::vector<HeadId>& out, std::string& err) {
  out.clear();
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    int l = -1, h = -1;
    char extra = 0;
    if (std::sscanf(w.c_str(), "%d:%d%c", &l, &h, &extra) != 2 || l < 0 || h < 0 || l >= cfg.n_layers ||
        h >= cfg.n_heads) {
      err = "heads off: '" + w + "' is not LAYER:HEAD with layer 0-" + std::to_string(cfg.n_layers - 1) +
            " and head 0-" + std::to_string(cfg.n_heads - 1);
      return false;
    }
    out.push_back({l, h});
  }
  err.clear();
  return true;
}

const ds::Trace* b_trace(const CompareState& st) {
  return st.answer && st.answer->error.empty() && !st.answer->trace.steps.empty() ? &st.answer->trace : nullptr;
}

// The step of each side the view shows: A's cursor, and B's step of the same index (its
// last when it has fewer).
int b_step(const App& app, const ds::Trace& b) { return std::clamp(app.sel.cursor, 0, int(b.steps.size()) - 1); }

// The position each side's lens and norms read: the selected one when the class chose a
// position, else each side's own last row of the step (the row its next token came from).
int side_position(const App& app, const ds::Trace& t, int step) {
  if (app.sel.pos >= 0) return std::min(app.sel.pos, t.positions(step) - 1);
  return t.positions(step) - 1;
}

void run_b(App& app, CompareState& st) {
  const ds::Config& cfg = app.history.trace.config;
  std::vector<HeadId> heads;
  if (!parse_heads(st.heads_text, cfg, heads, st.heads_error)) return;
  cmd::Compare c;
  c.key = std::to_string(++st.serial);
  c.spec = st.spec;
  c.precision = app.engine.model ? app.engine.model->precision : app.engine.precision;
  c.prompt = st.prompt.empty() ? app.inputs.run_prompt : st.prompt;
  c.source = st.source.empty() ? app.inputs.run_source : st.source;
  c.sampler = st.same_settings ? app.whatif.sampler : st.sampler;
  c.heads_off = heads;
  c.steps = std::max(1, int(app.history.trace.steps.size()));
  c.threads = app.engine.threads;
  c.kv_cache = app.engine.kv_cache;
  st.asked = c.key;
  st.a_steps = c.steps;
  app.engine.ask(std::move(c));
}

// ---- the inputs

// A message in red, wrapped to the view's width.
void error_text(const std::string& s) {
  ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 0.45f, 0.35f, 1));
  ImGui::TextWrapped("%s", s.c_str());
  ImGui::PopStyleColor();
}

void model_combo(App& app, CompareState& st) {
  const float font = ImGui::GetFontSize();
  std::string cur = st.spec.empty() ? "same model as A" : st.spec;
  ImGui::SetNextItemWidth(font * 13);
  if (ImGui::BeginCombo("##bmodel", cur.c_str())) {
    if (ImGui::Selectable("same model as A", st.spec.empty())) st.spec.clear();
    for (const ModelChoice& m : model_choices()) {
      if (m.spec.rfind("random:gpt2", 0) == 0) continue;  // too large to run twice on a small machine
      if (ImGui::Selectable(m.label.c_str(), st.spec == m.spec)) st.spec = m.spec;
      tooltip(app, m.help.c_str());
    }
    ImGui::EndCombo();
  }
  tooltip(app,
          "B's model. Only a model with the same vocabulary (the same tokenizer) can be lined up token by "
          "token with A's; another gives a message saying why.");
}

void settings_controls(App& app, CompareState& st) {
  const float font = ImGui::GetFontSize();
  flow(font * 12);
  ImGui::Checkbox("A's settings", &st.same_settings);
  tooltip(app, "B draws with A's sampling settings; untick to give B a temperature and seed of its own.");
  if (!st.same_settings) {
    flow(font * 10);
    ImGui::SetNextItemWidth(font * 7);
    ImGui::SliderFloat("##bT", &st.sampler.temperature, 0.0f, 3.0f, "T %.2f");
    tooltip(app, "B's temperature (0: greedy).");
    flow(font * 8);
    int seed = int(st.sampler.seed);
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::InputInt("seed##b", &seed)) st.sampler.seed = uint64_t(std::max(0, seed));
  }
  flow(font * 14);
  ImGui::SetNextItemWidth(font * 8);
  ImGui::InputTextWithHint("##bheads", "heads off: 1:0 2:3", &st.heads_text);
  tooltip(app, "Heads switched off in B only, as LAYER:HEAD separated by spaces.");
}

void inputs_row(App& app, CompareState& st) {
  const float font = ImGui::GetFontSize();
  const bool encdec = app.history.trace.config.encoder_decoder;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("B:");
  ImGui::SameLine();
  bool enter = false;
  if (encdec) {
    ImGui::SetNextItemWidth(font * 14);
    enter |=
        ImGui::InputTextWithHint("##bsource", "source (empty: A's)", &st.source, ImGuiInputTextFlags_EnterReturnsTrue);
    tooltip(app, "B's source text; empty runs B on A's.");
    flow(font * 10);
  }
  ImGui::SetNextItemWidth(font * (encdec ? 8 : 16));
  enter |= ImGui::InputTextWithHint("##bprompt", encdec ? "target prefix" : "prompt (empty: A's)", &st.prompt,
                                    ImGuiInputTextFlags_EnterReturnsTrue);
  tooltip(app, "B's prompt; empty runs B on A's text (to compare models or settings).");
  flow(font * 13);
  model_combo(app, st);
  settings_controls(app, st);
  const bool waiting = !st.asked.empty();
  flow(font * 6);
  ImGui::BeginDisabled(waiting || app.history.replay || !app.engine.model);
  if (ImGui::Button("Run B") || (enter && !waiting)) run_b(app, st);
  ImGui::EndDisabled();
  tooltip(app, "Run B for as many steps as A has, on the engine's thread.");
  if (waiting) {  // on a line of its own: nothing here may widen the view
    if (ImGui::Button("Stop")) app.engine.worker.cancel();
    tooltip(app, "Stop B's run after the step in progress; the steps made are shown.");
    ImGui::SameLine();
    const std::string act = app.engine.worker.activity();
    ImGui::TextWrapped("%s", act.empty() ? "waiting for the engine" : act.c_str());
  }
  if (!st.heads_error.empty()) error_text(st.heads_error);
}

// ---- the aligned token strips

void token_strips(App& app, const ds::Trace& b, int sb) {
  const std::vector<TokenInfo>& ta = app.tokens();
  const std::vector<TokenInfo> tb = tokens_as_of(b, sb);
  std::vector<int> ia, ib;
  for (const TokenInfo& t : ta) ia.push_back(t.id);
  for (const TokenInfo& t : tb) ib.push_back(t.id);
  const std::vector<bool> differ = token_differences(ia, ib);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float font = ImGui::GetFontSize(), h = font + style.FramePadding.y * 2, pad = style.FramePadding.x;
  const float label_w = ImGui::CalcTextSize("B ").x + pad;
  ImGui::BeginChild("##strips", ImVec2(0, 2 * h + 6 + style.ScrollbarSize), false,
                    ImGuiWindowFlags_HorizontalScrollbar);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  dl->AddText(ImVec2(p0.x, p0.y + style.FramePadding.y), IM_COL32(120, 170, 255, 255), "A");
  dl->AddText(ImVec2(p0.x, p0.y + h + 3 + style.FramePadding.y), IM_COL32(255, 170, 80, 255), "B");
  float x = p0.x + label_w;
  const ImU32 text_col = IM_COL32(255, 255, 255, 255);
  for (size_t i = 0; i < differ.size(); ++i) {
    const std::string sa = i < ta.size() ? shorten(visible(ta[i].text), 14) : "";
    const std::string sbt = i < tb.size() ? shorten(visible(tb[i].text), 14) : "";
    const float w = std::max(ImGui::CalcTextSize(sa.c_str()).x, ImGui::CalcTextSize(sbt.c_str()).x) + 2 * pad;
    const ImU32 same = IM_COL32(60, 64, 78, 255), diff = IM_COL32(200, 90, 20, 255);
    for (int side = 0; side < 2; ++side) {
      const std::string& s = side == 0 ? sa : sbt;
      if ((side == 0 ? i >= ta.size() : i >= tb.size())) continue;
      const float y = p0.y + side * (h + 3);
      const bool fed = side == 0 ? ta[i].fed : tb[i].fed;
      dl->AddRectFilled(ImVec2(x, y), ImVec2(x + w, y + h), differ[i] ? diff : same, 3);
      if (!fed) dl->AddRect(ImVec2(x, y), ImVec2(x + w, y + h), IM_COL32(255, 255, 255, 200), 3, 0, 2);
      dl->AddText(ImVec2(x + pad, y + style.FramePadding.y), text_col, s.c_str());
    }
    x += w + 3;
  }
  ImGui::Dummy(ImVec2(x - p0.x, 2 * h + 3));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "A's tokens above, B's below, position by position; orange where they differ. The outlined "
        "token is the one each side drew at this step.");
  // The newest tokens stay in sight as the steps go on (unless the mouse is on the strip).
  if (!ImGui::IsWindowHovered()) ImGui::SetScrollX(ImGui::GetScrollMaxX());
  ImGui::EndChild();
}

// ---- the next token of one step, both sides

constexpr int kTopEach = 6;  // each side's most probable tokens in the table
const ImVec4 kBlue(0.35f, 0.6f, 1.0f, 1), kOrange(1.0f, 0.62f, 0.25f, 1);

void next_token_part(App& app, CompareState& st, const ds::Trace& b, int sb, float width) {
  const float font = ImGui::GetFontSize();
  const ds::Trace& a = app.history.trace;
  const ds::SampleRecord* ra =
      a.steps[size_t(app.sel.cursor)].sample ? &*a.steps[size_t(app.sel.cursor)].sample : nullptr;
  const ds::SampleRecord* rb = b.steps[size_t(sb)].sample ? &*b.steps[size_t(sb)].sample : nullptr;
  int what = st.after_settings ? 1 : 0;
  ImGui::AlignTextToFramePadding();
  ImGui::Text("Next token at step %d:", app.sel.cursor + 1);
  ImGui::SameLine();
  ImGui::RadioButton("model's probabilities", &what, 0);
  tooltip(app, "The softmax of the model's logits, before any sampling setting.");
  flow(font * 10);
  ImGui::RadioButton("after the settings", &what, 1);
  tooltip(app, "After temperature, top-k and top-p: the distribution each side drew from.");
  st.after_settings = what == 1;
  auto drawn = [&](const ds::SampleRecord* r, const char* side, ImVec4 col) {
    if (!r || r->token < 0) return;
    for (const ds::Candidate& c : r->candidates)
      if (c.id == r->token) {
        ImGui::TextColored(col, "%s drew \"%s\" (p %s)", side, visible(c.text).c_str(),
                           prob_text(st.after_settings ? c.p_final : c.p_raw).c_str());
        return;
      }
  };
  drawn(ra, "A", kBlue);
  ImGui::SameLine(0, font * 2);
  drawn(rb, "B", kOrange);
  // As many of each side's tokens as the height holds (at least 2 each).
  const float row_h = ImGui::GetFrameHeight() * 0.8f + ImGui::GetStyle().CellPadding.y * 2 + 1;
  const int fit = int((ImGui::GetContentRegionAvail().y - ImGui::GetTextLineHeightWithSpacing() * 2) / row_h);
  int top = kTopEach;
  std::vector<CompareRow> rows = compare_rows(ra, rb, st.after_settings, top);
  while (int(rows.size()) > std::max(fit, 4) && top > 2) rows = compare_rows(ra, rb, st.after_settings, --top);
  st.top_shown = top;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  const float bar_w = std::clamp((width - font * 25) / 2, font * 5, font * 10);
  if (!ImGui::BeginTable("##cmpnext", 5, flags)) return;
  const ImGuiTableColumnFlags fixed = ImGuiTableColumnFlags_WidthFixed;
  ImGui::TableSetupColumn("token", fixed, font * 6);
  ImGui::TableSetupColumn("A", fixed, bar_w);
  ImGui::TableSetupColumn("B", fixed, bar_w);
  ImGui::TableSetupColumn("A - B", fixed, ImGui::CalcTextSize(">= +0.0000e-00").x);
  ImGui::TableSetupColumn("log A - log B", fixed, ImGui::CalcTextSize("<= -00.00000").x);
  ImGui::TableHeadersRow();
  for (const CompareRow& r : rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(shorten(visible(r.text), 14).c_str());
    for (int side = 0; side < 2; ++side) {
      ImGui::TableNextColumn();
      const bool in = side == 0 ? r.in_a : r.in_b;
      const float p = side == 0 ? r.pa : r.pb, fl = side == 0 ? r.floor_a : r.floor_b;
      const std::string txt = in ? prob_text(p) : fl >= 0 ? "< " + prob_text(fl, 2) : "not listed";
      bar(in ? p : 0, bar_w, ImGui::ColorConvertFloat4ToU32(side == 0 ? kBlue : kOrange), txt.c_str());
    }
    const Diff d = prob_diff(r), dl = logprob_diff(r);
    ImGui::TableNextColumn();
    const ImVec4 col = !d.known || (d.lo <= 0 && d.hi >= 0) ? ImGui::GetStyleColorVec4(ImGuiCol_Text)
                       : d.lo > 0                           ? kBlue
                                                            : kOrange;
    ImGui::TextColored(col, "%s", diff_text(d).c_str());
    ImGui::TableNextColumn();
    ImGui::TextColored(col, "%s", diff_text(dl).c_str());
  }
  ImGui::EndTable();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Each side's most probable tokens. A token one side does not list has at most the smallest "
        "probability that side lists, so its differences are bounds (>=, <=). Log differences are "
        "natural logarithms: +0.69 means A gives it twice B's probability.");
}

// ---- attention, both sides and their difference

std::vector<std::string> side_labels(const ds::Trace& t, int step, int n) {
  std::vector<std::string> out;
  for (const TokenInfo& ti : tokens_as_of(t, step))
    if (ti.fed && int(out.size()) < n) out.push_back(shorten(visible(ti.text), 10));
  while (int(out.size()) < n) out.push_back(std::to_string(out.size()));
  return out;
}
std::vector<std::string> source_labels_of(const ds::Trace& t) {
  std::vector<std::string> out;
  for (size_t i = 0; i < t.source.size(); ++i)
    out.push_back(shorten(visible(i < t.source_text.size() ? t.source_text[i] : "#"), 10));
  return out;
}

// The difference map, drawn cell by cell in a diverging scale (blue: B reads it more, red: A).
void difference_widget(App& app, const Matrix& d, const std::vector<std::string>& rows,
                       const std::vector<std::string>& cols, ImVec2 size) {
  const float font = ImGui::GetFontSize();
  ImGui::TextUnformatted("A - B");
  if (!d.ok()) {
    ImGui::TextDisabled("%s", d.error.c_str());
    return;
  }
  const float lw = font * 4.5f, lh = font * 1.2f;
  const float cell = std::max(1.0f, std::min((size.x - lw) / float(d.cols), (size.y - lh * 3) / float(d.rows)));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const ImVec2 o(p.x + lw, p.y);
  for (int r = 0; r < d.rows; ++r)
    for (int c = 0; c < d.cols; ++c) {
      const ImVec2 a(o.x + c * cell, o.y + r * cell), b(a.x + cell, a.y + cell);
      if (d.allowed(r, c))
        dl->AddRectFilled(a, b, diverging(d.at(r, c) / d.vmax, app.look.light));
      else
        dl->AddRectFilled(a, b, IM_COL32(90, 110, 150, 255));
    }
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  if (cell >= font * 0.9f)
    for (int r = 0; r < d.rows; ++r) {
      const std::string s = r < int(rows.size()) ? shorten(rows[size_t(r)], 6) : "";
      dl->AddText(ImVec2(p.x, o.y + r * cell + (cell - font) / 2), tc, s.c_str());
    }
  ImGui::Dummy(ImVec2(lw + cell * d.cols, cell * d.rows));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetMousePos();
    const int c = int((m.x - o.x) / cell), r = int((m.y - o.y) / cell);
    if (r >= 0 && r < d.rows && c >= 0 && c < d.cols) {
      ImGui::BeginTooltip();
      ImGui::Text("row %d \"%s\", column %d \"%s\"", r, r < int(rows.size()) ? rows[size_t(r)].c_str() : "", c,
                  c < int(cols.size()) ? cols[size_t(c)].c_str() : "");
      if (d.allowed(r, c))
        ImGui::Text("A - B = %+.4f", d.at(r, c));
      else
        ImGui::TextUnformatted("masked in A or B");
      ImGui::EndTooltip();
    }
  }
  // The scale: blue where B reads more, red where A does.
  const ImVec2 q = ImGui::GetCursorScreenPos();
  const float w = std::min(size.x, font * 12);
  for (int i = 0; i < 24; ++i)
    dl->AddRectFilled(ImVec2(q.x + w * i / 24, q.y), ImVec2(q.x + w * (i + 1) / 24, q.y + font * 0.6f),
                      diverging(float(i) / 11.5f - 1.0f, app.look.light));
  ImGui::Dummy(ImVec2(w, font * 0.7f));
  ImGui::Text("%+.3f (B more)  %+.3f (A more)", -d.vmax, d.vmax);
}

// grid: A and B side by side above the difference (a wide window's right half); else the
// three across.
void attention_part(App& app, CompareState& st, const ds::Trace& b, int sb, ImVec2 size, bool grid) {
  const float font = ImGui::GetFontSize();
  const ds::Trace& a = app.history.trace;
  layer_head_controls(app, app.sel.layer, app.sel.head, "cmp");
  const bool encdec = a.config.encoder_decoder;
  if (encdec) {
    flow(font * 12);
    ImGui::Checkbox("cross-attention", &st.cross);
    tooltip(app, "Each output token reading the source (cross-attention), or the output tokens before it.");
  }
  const bool cross = encdec && st.cross;
  const int layer = app.sel.layer, head = app.sel.head, sa = app.sel.cursor;
  const std::string ka = std::to_string(app.history.version) + "/" + std::to_string(sa) + "/" + std::to_string(layer) +
                         "/" + std::to_string(head) + "/" + std::to_string(cross);
  const std::string kb = std::to_string(st.serial) + "/" + std::to_string(sb) + "/" + std::to_string(layer) + "/" +
                         std::to_string(head) + "/" + std::to_string(cross);
  auto make = [&](const ds::Trace& t, int s) {
    if (layer >= t.config.n_layers || head >= t.config.n_heads) {
      Matrix m;
      m.error = "this model has no layer " + std::to_string(layer) + " head " + std::to_string(head);
      return m;
    }
    return attention_matrix(t, layer, head, s, cross, false);
  };
  const Maps::CachedMatrix& ma = app.maps.cached("compare_a", ka, [&] { return make(a, sa); });
  const Maps::CachedMatrix& mb = app.maps.cached("compare_b", kb, [&] { return make(b, sb); });
  const Maps::CachedMatrix& md =
      app.maps.cached("compare_d", ka + "|" + kb, [&] { return difference_map(ma.m, mb.m); });
  const float used = ImGui::GetCursorPosY() - ImGui::GetCursorStartPos().y;
  const ImVec2 avail(size.x, size.y - used);
  const float w = grid ? (avail.x - font) / 2 : (avail.x - font * 2) / 3;
  const float h = grid ? avail.y / 2 - font * 0.5f : avail.y;
  const std::vector<std::string> la = side_labels(a, sa, ma.m.rows), lb = side_labels(b, sb, mb.m.rows);
  const std::vector<std::string> ca = cross ? source_labels_of(a) : la, cb = cross ? source_labels_of(b) : lb;
  const float hm_h = h;
  auto side = [&](const char* name, const char* title, const Maps::CachedMatrix& m, const std::vector<std::string>& rl,
                  const std::vector<std::string>& cl, ImVec4 col) {
    ImGui::BeginGroup();
    ImGui::TextColored(col, "%s", title);
    if (!m.m.ok()) {
      ImGui::TextDisabled("%s", m.m.error.c_str());
    } else {
      HeatmapArgs h;
      h.m = &m.m;
      h.lineage = m.lineage;
      h.row_labels = &rl;
      h.col_labels = &cl;
      h.style.cmap = app.look.cmap;
      h.style.vmin = 0, h.style.vmax = 1;
      h.value_name = "weight";
      h.causal = !cross;
      h.toolbar = false;
      h.col_tokens = !cross;
      h.size = ImVec2(w, hm_h - ImGui::GetTextLineHeightWithSpacing());
      heatmap_widget(app, name, h);
    }
    ImGui::EndGroup();
  };
  side("compare_a", "A", ma, la, ca, kBlue);
  ImGui::SameLine(0, font);
  side("compare_b", "B", mb, lb, cb, kOrange);
  if (!grid) ImGui::SameLine(0, font);
  ImGui::BeginGroup();
  difference_widget(app, md.m, la, ca, ImVec2(w, h - ImGui::GetTextLineHeightWithSpacing()));
  ImGui::EndGroup();
  if (grid) {
    ImGui::SameLine(0, font);
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + w);
    ImGui::TextWrapped(
        "A - B: each cell of A's map less the same cell of B's, over the positions both have. Red: A's "
        "token reads that key more than B's does; blue: less. Where the prompts differ the rows and "
        "columns hold different tokens.");
    ImGui::PopTextWrapPos();
  }
}

// ---- each layer's residual norm and logit lens, both sides

void layers_part(App& app, const ds::Trace& b, int sb, float width) {
  const ds::Trace& a = app.history.trace;
  const int sa = app.sel.cursor;
  const int pa = side_position(app, a, sa), pb = side_position(app, b, sb);
  const std::vector<LensTop1> lens_a = lens_at(a, pa), lb = lens_at(b, pb);
  const float font = ImGui::GetFontSize();
  ImGui::TextWrapped(
      "Each layer at position %d (A) and %d (B): the length of the residual stream after it, and "
      "the token the logit lens reads there (with its probability).",
      pa, pb);
  const int layers = std::max(a.config.n_layers, b.config.n_layers);
  float top = 1e-6f;
  std::vector<float> na(size_t(layers), -1), nb(size_t(layers), -1);
  for (int l = 0; l < layers; ++l) {
    if (l < a.config.n_layers && resid_norm(a, sa, l, 2, pa, na[size_t(l)])) top = std::max(top, na[size_t(l)]);
    if (l < b.config.n_layers && resid_norm(b, sb, l, 2, pb, nb[size_t(l)])) top = std::max(top, nb[size_t(l)]);
  }
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  const float bar_w = std::clamp((width - font * 29) / 2, font * 4.5f, font * 8);
  if (!ImGui::BeginTable("##cmplayers", 5, flags)) return;
  const ImGuiTableColumnFlags fixed = ImGuiTableColumnFlags_WidthFixed;
  ImGui::TableSetupColumn("layer", fixed, ImGui::CalcTextSize("after layer 00").x);
  ImGui::TableSetupColumn("|resid| A", fixed, bar_w);
  ImGui::TableSetupColumn("|resid| B", fixed, bar_w);
  ImGui::TableSetupColumn("lens A", fixed, font * 9);
  ImGui::TableSetupColumn("lens B", fixed, font * 9);
  ImGui::TableHeadersRow();
  const size_t rows = std::max(lens_a.size(), size_t(layers) + 1);
  for (size_t r = 0; r < rows; ++r) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const std::string label = r < lens_a.size() ? lens_a[r].label
                              : r == 0          ? "embedding"
                                                : "after layer " + std::to_string(r - 1);
    ImGui::TextUnformatted(label.c_str());
    for (int side = 0; side < 2; ++side) {
      ImGui::TableNextColumn();
      const std::vector<float>& n = side == 0 ? na : nb;
      if (r == 0 || n[r - 1] < 0) continue;  // norms: resid_post of each layer
      char t[32];
      std::snprintf(t, sizeof t, "%.2f", double(n[r - 1]));
      bar(n[r - 1] / top, bar_w, ImGui::ColorConvertFloat4ToU32(side == 0 ? kBlue : kOrange), t);
    }
    const bool differ = r < lens_a.size() && r < lb.size() && lens_a[r].id != lb[r].id;
    for (int side = 0; side < 2; ++side) {
      ImGui::TableNextColumn();
      const std::vector<LensTop1>& l = side == 0 ? lens_a : lb;
      if (r >= l.size()) {
        ImGui::TextDisabled("-");
        continue;
      }
      const std::string s = "\"" + shorten(visible(l[r].text), 12) + "\" " + prob_text(l[r].p, 3);
      if (differ)
        ImGui::TextColored(ImVec4(1.0f, 0.55f, 0.2f, 1), "%s", s.c_str());
      else
        ImGui::TextUnformatted(s.c_str());
    }
  }
  ImGui::EndTable();
  if (lens_a.empty() || lb.empty())
    ImGui::TextDisabled("The logit lens was not recorded for %s (a large vocabulary): the Logit lens view computes it.",
                        lens_a.empty() ? "A" : "B");
  else
    ImGui::TextDisabled("Orange: the layers whose lens reads a different top token in A and B.");
}

// ---- the view

// What the run shown is: B's model, its steps, and whether A has moved on since.
void b_summary(App& app, const CompareState& st, const ds::Trace& b) {
  const CompareAnswer& ans = *st.answer;
  ImGui::TextColored(kOrange, "B: %s, %d step%s in %.2f s%s", ans.model_name.c_str(), int(b.steps.size()),
                     b.steps.size() == 1 ? "" : "s", ans.seconds, ans.cancelled ? " (stopped)" : "");
  if (st.a_steps != int(app.history.trace.steps.size())) {
    ImGui::SameLine(0, ImGui::GetFontSize());
    ImGui::TextDisabled("(A now has %d steps: Run B again to match)", int(app.history.trace.steps.size()));
  }
}

// The tables on the left, the attention maps on the right.
void wide_layout(App& app, CompareState& st, const ds::Trace& b, int sb, ImVec2 avail, float left_w) {
  ImGui::BeginChild("##cmp_left", ImVec2(left_w, avail.y));
  next_token_part(app, st, b, sb, left_w);
  ImGui::Separator();
  layers_part(app, b, sb, left_w);
  ImGui::EndChild();
  ImGui::SameLine(0, ImGui::GetFontSize());
  ImGui::BeginChild("##cmp_right", ImVec2(0, avail.y));
  attention_part(app, st, b, sb, ImGui::GetContentRegionAvail(), true);
  ImGui::EndChild();
}

// One part at a time, chosen with a row of buttons (a narrow window or big text).
void tabbed_layout(App& app, CompareState& st, const ds::Trace& b, int sb) {
  const char* names[] = {"Next token", "Attention", "Layers: norms and lens"};
  for (int i = 0; i < 3; ++i) {
    if (i) ImGui::SameLine();
    const bool on = st.part == i;
    ImGui::PushStyleColor(ImGuiCol_Button, ImGui::GetStyleColorVec4(on ? ImGuiCol_TabActive : ImGuiCol_Tab));
    if (ImGui::Button(names[i])) st.part = i;
    ImGui::PopStyleColor();
  }
  ImGui::BeginChild("##cmp_part", ImVec2(0, 0));
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (st.part == 0) next_token_part(app, st, b, sb, avail.x);
  if (st.part == 1) attention_part(app, st, b, sb, avail, false);
  if (st.part == 2) layers_part(app, b, sb, avail.x);
  ImGui::EndChild();
}

CompareState& compare_state(App& app) { return app.state<CompareState>(); }

}  // namespace

void panel_compare(App& app) {
  view_caption(app, "compare");
  if (!has_step(app, "No step yet: press Step (Right arrow) to run A, then give B its prompt here.")) return;
  CompareState& st = compare_state(app);
  inputs_row(app, st);
  const ds::Trace* b = b_trace(st);
  if (st.answer && !st.answer->error.empty()) error_text("B could not run: " + st.answer->error);
  if (!b) {
    if (!st.answer || st.answer->error.empty())
      ImGui::TextWrapped(
          "Type B's prompt (for instance A's with one word changed), or keep it empty and pick another "
          "model, other settings or heads off for B, then press Run B: B runs as many steps as A, and "
          "the two are shown side by side, token by token.");
    return;
  }
  b_summary(app, st, *b);
  const int sb = b_step(app, *b);
  token_strips(app, *b, sb);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float font = ImGui::GetFontSize();
  const float left_w = font * 43;
  st.wide = avail.x >= font * 80 && avail.y >= font * 24;
  if (st.wide)
    wide_layout(app, st, *b, sb, avail, left_w);
  else
    tabbed_layout(app, st, *b, sb);
}

bool compare_waiting(App& app) { return !compare_state(app).asked.empty(); }

bool compare_answer(App& app, Event& e) {
  auto* c = std::get_if<ev::Compare>(&e);
  if (!c) return false;
  CompareState& st = compare_state(app);
  if (c->answer && c->answer->key == st.asked) {
    st.answer = c->answer;
    st.asked.clear();
    if (app.scripted && !st.answer->error.empty())
      std::fprintf(stderr, "decoderscope: compare: %s\n", st.answer->error.c_str());
  }
  return true;
}

void compare_failed(App& app) { compare_state(app).asked.clear(); }

void compare_model_loaded(App& app) {
  CompareState& st = compare_state(app);
  st.answer.reset();
  if (app.engine.model && st.spec == app.engine.model->spec) st.spec.clear();
}

void compare_script(App& app, const CompareSetup& s) {
  CompareState& st = compare_state(app);
  st.prompt = s.prompt;
  st.source = s.source;
  st.spec = s.model;
  if (s.temperature >= 0 || s.seed >= 0) {
    st.same_settings = false;
    st.sampler = app.whatif.sampler;
    if (s.temperature >= 0) st.sampler.temperature = s.temperature;
    if (s.seed >= 0) st.sampler.seed = uint64_t(s.seed);
  }
  st.heads_text = s.heads_off;
  if (s.part >= 0) st.part = s.part;
  run_b(app, st);
  if (!st.heads_error.empty()) std::fprintf(stderr, "decoderscope: compare: %s\n", st.heads_error.c_str());
}

std::string compare_sidecar(App& app) {
  CompareState& st = compare_state(app);
  nlohmann::json j;
  j["asked"] = !st.asked.empty();
  j["error"] = st.answer ? st.answer->error : std::string();
  j["wide"] = st.wide;
  j["part"] = st.part;
  const ds::Trace* b = b_trace(st);
  const ds::Trace& a = app.history.trace;
  if (!b || app.sel.cursor < 0 || app.sel.cursor >= int(a.steps.size())) return j.dump();
  const int sa = app.sel.cursor, sb = b_step(app, *b);
  j["step_a"] = sa, j["step_b"] = sb;
  j["model_b"] = st.answer->model_name;
  j["after_settings"] = st.after_settings;
  auto side = [&](const ds::Trace& t, int s) {
    nlohmann::json o;
    std::vector<int> ids;
    for (const TokenInfo& ti : tokens_as_of(t, s)) ids.push_back(ti.id);
    o["tokens"] = ids;
    const int pos = side_position(app, t, s);
    o["position"] = pos;
    nlohmann::json top = nlohmann::json::array();
    if (t.steps[size_t(s)].sample)
      for (const ds::Candidate& c : t.steps[size_t(s)].sample->candidates)
        top.push_back({{"id", c.id}, {"p_raw", c.p_raw}, {"p_final", c.p_final}});
    o["top"] = top;
    o["drawn"] = t.steps[size_t(s)].sample ? t.steps[size_t(s)].sample->token : -1;
    std::vector<int> lens;
    for (const LensTop1& l : lens_at(t, pos)) lens.push_back(l.id);
    o["lens"] = lens;
    return o;
  };
  j["a"] = side(a, sa);
  j["b"] = side(*b, sb);
  std::vector<int> differ;
  const auto d = token_differences(j["a"]["tokens"].get<std::vector<int>>(), j["b"]["tokens"].get<std::vector<int>>());
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i]) differ.push_back(int(i));
  j["differ"] = differ;
  nlohmann::json rows = nlohmann::json::array();
  const ds::SampleRecord* ra = a.steps[size_t(sa)].sample ? &*a.steps[size_t(sa)].sample : nullptr;
  const ds::SampleRecord* rb = b->steps[size_t(sb)].sample ? &*b->steps[size_t(sb)].sample : nullptr;
  for (const CompareRow& r : compare_rows(ra, rb, st.after_settings, st.top_shown)) {
    const Diff df = prob_diff(r);
    rows.push_back({{"id", r.id},
                    {"in_a", r.in_a},
                    {"in_b", r.in_b},
                    {"pa", r.pa},
                    {"pb", r.pb},
                    {"floor_a", r.floor_a},
                    {"floor_b", r.floor_b},
                    {"diff_lo", df.lo},
                    {"diff_hi", df.hi},
                    {"shown", diff_text(df)}});
  }
  j["rows"] = rows;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dsgui
