// The KV cache view: one layer's key and value caches as they grow, the rows the step
// shown appended outlined, the rows it read back from the cache marked; the work a step
// does with the cache against recomputing the whole prefix without it (multiply-adds and
// bytes, this step and the whole generation so far, plotted against the position), and
// the measured time of steps with and without the cache. Encoder-decoder models: the
// source's cross-attention keys and values, computed once.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine_link/block_data.h"
#include "model/cost.h"
#include "views/common.h"

namespace dsgui {

void layer_head_controls(App& app, int& layer, int& head, const char* id);

struct KvState {
  int kv_head = 0;
  // Measured milliseconds per step against the position, of the last run with the cache
  // and the last run without it (kept across runs so the two can be compared).
  std::vector<std::pair<int, double>> measured[2];  // [0] without, [1] with
  uint64_t measured_epoch[2] = {0, 0};
  size_t measured_steps[2] = {0, 0};  // the trace's steps they were read from
  uint64_t asked = 0;                 // the Measure request waiting (0: none)
  int timed_positions = 0;            // how far the last request timed
  // The last frame, for the sidecar: the timing plot's box and the right-most edge of
  // its labels; the first timed step of each run (left out of the plot) and how many
  // points each curve drew.
  float plot_x0 = 0, plot_x1 = 0, label_x1 = 0, label_y1 = 0, plot_y1 = 0;
  float plot_h = 0;  // each plot's height this frame
  double first_ms[2] = {0, 0};
  int points[2] = {0, 0};
  bool explained = false;  // the bytes-read sentence was written
  // A narrow window shows the caches or the costs, one at a time (tabs): which one.
  int pane = 0;                      // 0: the caches, 1: the costs
  int ask_pane = -1;                 // a pane to open on the next frame (--kv-pane), -1: none
  bool tabs = false;                 // the last frame used the tabs
  int rows_all = 0, rows_shown = 0;  // the last frame's key rows, and those drawn
  bool new_shown = false;            // the step's new row was among them
  float label_px = 0;                // the size of the key rows' labels, in pixels
  float new_y1 = 0, pane_y1 = 0;     // the bottom of the new row and of the pane's visible part
};

// The timing failed (the error is on the status line).
void kv_failed(App& app) { app.state<KvState>().asked = 0; }

bool kv_measure_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Measure>(&e);
  if (!a) return false;
  KvState& st = app.state<KvState>();
  const std::shared_ptr<const MeasureAnswer>& m = a->answer;
  if (!m || m->version != st.asked) return true;
  st.asked = 0;
  st.measured[1] = m->with;
  st.measured[0] = m->without;
  for (int k = 0; k < 2; ++k)
    st.measured_epoch[k] = app.history.epoch, st.measured_steps[k] = app.history.trace.steps.size();
  return true;
}

bool kv_waiting(App& app) { return app.state<KvState>().asked != 0; }

void kv_time_now(App& app) {
  KvState& st = app.state<KvState>();
  if (!app.engine.model || app.sel.cursor < 0 || app.history.trace.steps.empty()) return;
  cmd::Measure c;
  const std::vector<int> all = app.history.trace.tokens();
  int positions = std::min(app.history.trace.positions(app.sel.cursor), int(all.size()));
  c.prompt_len = std::min(int(app.history.trace.steps[0].input.size()), positions);
  // Without the cache the work grows with the square of the length: time no more
  // positions than about 6e10 multiply-adds (some ten seconds here) allow.
  ds::CostOptions co;
  co.src_len = int(app.history.trace.source.size());
  try {
    while (positions > c.prompt_len + 1 &&
           ds::generation_cost(app.history.trace.config, c.prompt_len, positions, false, co).macs() > 6e10)
      positions = c.prompt_len + (positions - c.prompt_len) * 3 / 4;
  } catch (const std::exception&) {
  }
  st.timed_positions = positions;
  c.tokens.assign(all.begin(), all.begin() + positions);
  c.src = app.history.trace.source;
  c.threads = app.engine.threads;
  c.version = st.asked = app.history.version * 2654435761ull + 1;
  app.engine.ask(std::move(c));
}

namespace {

// One head's cache [rows, d_head] from a [rows, stride] block: the newest rows at the
// bottom, rows [new0, new1) outlined as appended by the step shown. Returns the first
// row drawn (the rows above it did not fit).
int cache_cells(App& app, const char* title, const std::vector<float>& m, int rows, int stride, int offset, int cols,
                int new0, int new1, const std::vector<std::string>& labels, float width, float height,
                bool cached = true, int first_read = 0, bool row_labels = true, bool tags = true) {
  const float font = ImGui::GetFontSize();
  ImGui::BeginGroup();
  ImGui::TextUnformatted(title);
  if (rows <= 0 || m.size() < size_t(rows) * size_t(stride)) {
    ImGui::TextDisabled("not published by this model");
    ImGui::EndGroup();
    return rows;
  }
  // K and V side by side: the row labels left of K, the read/new tags right of V.
  const float lw = row_labels ? font * 4.5f : 0.0f, tag = tags ? font * 4.2f : font * 0.3f;
  const float cw = std::clamp((width - lw - tag) / float(cols), 2.0f, font * 1.2f);
  // Rows (and their labels) no smaller than three quarters of the text: rows that do not
  // fit go above, the newest stay.
  const float ch = std::clamp((height - font * 1.5f) / float(rows) - 1, font * 0.75f, font * 0.9f);
  const int fit = std::max(1, int((height - font * 1.5f) / (ch + 1)));
  const int first = std::max(0, rows - fit);
  float sc = 0;
  for (int r = first; r < rows; ++r)
    for (int c = 0; c < cols; ++c) sc = std::max(sc, std::fabs(m[size_t(r) * stride + offset + c]));
  sc = sc > 0 ? sc : 1;
  if (first == 1) ImGui::TextDisabled("row 0 above (%d in all)", rows);
  if (first > 1) ImGui::TextDisabled("rows 0-%d above (%d in all)", first - 1, rows);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float fs = std::min(font, ch + 2);
  if (row_labels) app.state<KvState>().label_px = fs;
  for (int r = first; r < rows; ++r) {
    const float y = p.y + float(r - first) * (ch + 1);
    char lab[48];
    std::snprintf(lab, sizeof lab, "%d %s", r, r < int(labels.size()) ? shorten(labels[size_t(r)], 4).c_str() : "");
    if (row_labels)
      dl->AddText(ImGui::GetFont(), fs, ImVec2(p.x, y + (ch - fs) * 0.5f), ImGui::GetColorU32(ImGuiCol_TextDisabled),
                  lab);
    for (int c = 0; c < cols; ++c)
      dl->AddRectFilled(ImVec2(p.x + lw + float(c) * cw, y), ImVec2(p.x + lw + float(c + 1) * cw - (cw > 4), y + ch),
                        diverging(m[size_t(r) * stride + offset + c] / sc, app.look.light));
    const bool fresh = r >= new0 && r < new1;
    if (fresh && row_labels) app.state<KvState>().new_y1 = y + ch;
    if (fresh)
      dl->AddRect(ImVec2(p.x + lw - 2, y - 1), ImVec2(p.x + lw + float(cols) * cw + 1, y + ch + 1),
                  IM_COL32(255, 200, 40, 255), 0, 0, 2);
    // Rows before first_read (a sliding-window layer) stay in the cache but no query of
    // this step reads them.
    const char* t = fresh ? "+ new" : r < new0 ? (!cached ? "again" : r < first_read ? "unread" : "read") : "";
    if (tags)
      dl->AddText(ImGui::GetFont(), fs, ImVec2(p.x + lw + float(cols) * cw + font * 0.4f, y + (ch - fs) * 0.5f),
                  fresh ? IM_COL32(255, 200, 40, 255) : ImGui::GetColorU32(ImGuiCol_TextDisabled), t);
  }
  ImGui::Dummy(ImVec2(lw + float(cols) * cw + tag, float(rows - first) * (ch + 1)));
  ImGui::EndGroup();
  return first;
}

std::string si(double v) {
  char b[32];
  const char* u[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 5) v /= 1000, ++i;
  std::snprintf(b, sizeof b, v < 10 && i > 0 ? "%.2f %s" : "%.3g %s", v, u[i]);
  return b;
}

// Two curves (with and without the cache) against the position, on one set of axes.
// Returns the right-most and lowest edge of its labels (the y axis's labels get the
// room their text needs, so none is cut).
ImVec2 two_curves(App& app, const char* id, const char* unit, const std::vector<std::pair<int, double>>& a,
                  const std::vector<std::pair<int, double>>& b, int cursor_pos, ImVec2 size) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(id, size);
  int xmax = 1;
  double ymax = 0;
  for (auto* s : {&a, &b})
    for (auto& [x, y] : *s) xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  if (ymax <= 0) ymax = 1;
  const std::string top = si(ymax) + unit;
  const float lab_w = ImGui::CalcTextSize(top.c_str()).x + font * 0.5f;
  const ImVec2 o(p.x + lab_w, p.y + size.y - font * 1.4f), e(p.x + size.x - font * 0.5f, p.y + font * 0.3f);
  const ImU32 axis = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  dl->AddLine(o, ImVec2(e.x, o.y), axis);
  dl->AddLine(o, ImVec2(o.x, e.y), axis);
  dl->AddText(ImVec2(p.x, e.y), axis, top.c_str());
  dl->AddText(ImVec2(o.x, o.y + font * 0.1f), axis, "0");
  const std::string xm = std::to_string(xmax);
  const float xm_w = ImGui::CalcTextSize(xm.c_str()).x, pos_w = ImGui::CalcTextSize("position").x;
  dl->AddText(ImVec2(e.x - xm_w, o.y + font * 0.1f), axis, xm.c_str());
  if ((e.x - o.x) > pos_w + xm_w + font * 2)
    dl->AddText(ImVec2((o.x + e.x - pos_w) * 0.5f, o.y + font * 0.1f), axis, "position");
  auto X = [&](double x) { return o.x + float(x / xmax) * (e.x - o.x); };
  auto Y = [&](double y) { return o.y - float(y / ymax) * (o.y - e.y); };
  const ImU32 cols[2] = {IM_COL32(240, 90, 70, 255), IM_COL32(80, 200, 120, 255)};
  int k = 0;
  for (auto* s : {&a, &b}) {
    for (size_t i = 1; i < s->size(); ++i)
      dl->AddLine(ImVec2(X((*s)[i - 1].first), Y((*s)[i - 1].second)), ImVec2(X((*s)[i].first), Y((*s)[i].second)),
                  cols[k], 2.5f);
    if (s->size() == 1) dl->AddCircleFilled(ImVec2(X((*s)[0].first), Y((*s)[0].second)), 3, cols[k]);
    ++k;
  }
  if (cursor_pos >= 0) dl->AddLine(ImVec2(X(cursor_pos), o.y), ImVec2(X(cursor_pos), e.y), axis, 1.0f);
  (void)app;
  return ImVec2(std::max(p.x + ImGui::CalcTextSize(top.c_str()).x, e.x), o.y + font * 1.1f);
}

void legend_line(ImU32 c, const char* text) {
  const float font = ImGui::GetFontSize();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::GetWindowDrawList()->AddLine(ImVec2(p.x, p.y + font * 0.6f), ImVec2(p.x + font * 1.5f, p.y + font * 0.6f), c,
                                      3);
  ImGui::Dummy(ImVec2(font * 1.7f, font));
  ImGui::SameLine();
  ImGui::PushTextWrapPos(0);
  ImGui::TextUnformatted(text);
  ImGui::PopTextWrapPos();
}

// Why the bytes read with and without the cache are so close (and the cached step's
// can be the larger): both read every weight once; the cache adds its rows.
void bytes_note(const ds::StepCost& c, const ds::StepCost& f) {
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled(
      "Bytes read are close: both ways read every weight once (%sB). The cache adds its stored rows (%sB); "
      "without it they are computed again, not read%s.",
      si(c.weight_bytes).c_str(), si(c.cache_bytes).c_str(),
      c.cross_bytes > 0 ? " (both also read the source's keys and values)" : "");
  ImGui::PopTextWrapPos();
  (void)f;
}

// The measured times. The first timed step of a run is left out of the plot and
// written out instead: it also pays one-off work (the cache's memory, the threads'
// start) and its spike would flatten every other step.
void measured_plot(App& app, KvState& st, int positions, float w) {
  std::vector<std::pair<int, double>> shown[2];
  for (int k = 0; k < 2; ++k) {
    shown[k] = st.measured[k];
    st.first_ms[k] = 0;
    if (shown[k].size() > 1) {
      st.first_ms[k] = shown[k].front().second;
      shown[k].erase(shown[k].begin());
    }
    st.points[k] = int(shown[k].size());
  }
  if (st.first_ms[0] > 0 || st.first_ms[1] > 0) {
    char b[160], n[48] = "", c[48] = "";
    if (st.first_ms[1] > 0) std::snprintf(c, sizeof c, "%.2f ms with the cache", st.first_ms[1]);
    if (st.first_ms[0] > 0) std::snprintf(n, sizeof n, "%.2f ms without", st.first_ms[0]);
    std::snprintf(b, sizeof b, "%s%s%s", c, c[0] && n[0] ? ", " : "", n);
    ImGui::PushTextWrapPos(0);
    ImGui::TextDisabled(
        "The first timed step (%s) is left out: it also pays one-off work (memory for the cache, the threads' "
        "start), a spike that would flatten the other steps.",
        b);
    ImGui::PopTextWrapPos();
  }
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const ImVec2 lab = two_curves(app, "##ms", " ms", shown[0], shown[1], positions - 1, ImVec2(w, st.plot_h));
  st.plot_x0 = p.x, st.plot_x1 = ImGui::GetWindowPos().x + ImGui::GetWindowWidth();
  st.label_x1 = lab.x, st.label_y1 = lab.y, st.plot_y1 = p.y + st.plot_h;
}

// The work of the steps so far: this step, the total, and the curves.
void cost_panel(App& app, KvState& st, int positions, int new0) {
  const ds::Config& cfg = app.history.trace.config;
  ds::CostOptions co;
  co.src_len = int(app.history.trace.source.size());
  // Bytes a weight: 2 for 16-bit weights; a GGUF file's quantized blocks, their mean over
  // every parameter as stored (Q4_K_M: about 0.6).
  if (app.engine.model && ds::is_quantized(app.engine.model->precision) && app.engine.model->params > 0)
    co.bytes_per_weight = double(app.engine.model->weight_bytes) / double(app.engine.model->params);
  else if (app.engine.model && app.engine.model->precision != ds::Precision::F32)
    co.bytes_per_weight = 2;
  const ds::StepCost now_c = ds::cached_step_cost(cfg, positions - 1, co);
  const ds::StepCost now_f = ds::uncached_step_cost(cfg, positions - 1, co);
  double cum_c = 0, cum_f = 0;
  std::vector<std::pair<int, double>> with, without;
  const int x0 = app.history.trace.steps.empty() ? 0 : int(app.history.trace.steps[0].input.size()) - 1;
  for (int p = x0; p < std::max(positions, x0 + 1); ++p) {
    const double c = ds::cached_step_cost(cfg, p, co).macs(), f = ds::uncached_step_cost(cfg, p, co).macs();
    cum_c += c;
    cum_f += f;
    with.push_back({p, cum_c});
    without.push_back({p, cum_f});
  }
  ImGui::Text("Step at position %d (%d token%s in the cache before it):", positions - 1, new0, new0 == 1 ? "" : "s");
  // Measures down, the two ways across: narrow enough for half a 1024-pixel window.
  if (ImGui::BeginTable("cost", 3,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("this step");
    ImGui::TableSetupColumn("with the KV cache");
    ImGui::TableSetupColumn("without it");
    ImGui::TableHeadersRow();
    auto row = [&](const char* name, const std::string& with, const std::string& without, const char* tip) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(name);
      tooltip(app, tip);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(with.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(without.c_str());
    };
    row("multiply-adds", si(now_c.macs()), si(now_f.macs()),
        "Multiply-adds of the matrix products of this step: without the cache the whole prefix is computed "
        "again.");
    row("bytes read", si(now_c.bytes()) + "B", si(now_f.bytes()) + "B",
        "Both ways read every weight once a step; with the cache the step also reads the stored keys and "
        "values back.");
    row("so far (multiply-adds)", si(cum_c), si(cum_f), "Every step of the generation up to this one, added up.");
    ImGui::EndTable();
  }
  bytes_note(now_c, now_f);
  st.explained = true;
  ImGui::TextWrapped("Without the cache this step does %.1fx the work; the generation so far %.1fx.",
                     now_c.macs() > 0 ? now_f.macs() / now_c.macs() : 0.0, cum_c > 0 ? cum_f / cum_c : 0.0);
  const float font = ImGui::GetFontSize();
  const float w = ImGui::GetContentRegionAvail().x;
  ImGui::TextWrapped("The work of the whole generation so far, against the position:");
  legend_line(IM_COL32(240, 90, 70, 255), "without the cache: all n rows every step, O(n\u00b2) in all");
  flow(font * 16);
  legend_line(IM_COL32(80, 200, 120, 255), "with it: one new row a step, O(n)");
  // Both plots share what the pane has left (the measured one has some 6 lines of text
  // with it), between 5 and 9 lines high each; a short pane scrolls to the second.
  st.plot_h = std::clamp((ImGui::GetContentRegionAvail().y - font * 7.5f) * 0.5f, font * 5, font * 9);
  two_curves(app, "##macs", " MACs", without, with, positions - 1, ImVec2(w, st.plot_h));
  // Measured: the trace's own steps, and the last run of the other kind.
  ImGui::Spacing();
  ImGui::TextWrapped("Measured time of each step after the prompt (ms):");
  const bool cached = app.history.trace.steps.empty() || app.history.trace.steps.back().kv_cache;
  auto& mine = st.measured[cached ? 1 : 0];
  const int k = cached ? 1 : 0;
  if (st.measured_epoch[k] != app.history.epoch || st.measured_steps[k] != app.history.trace.steps.size()) {
    st.measured_steps[k] = app.history.trace.steps.size();
    mine.clear();
    for (size_t i = 1; i < app.history.trace.steps.size(); ++i) {  // step 0 (the whole prompt) left out
      const ds::TraceStep& s = app.history.trace.steps[i];
      if (s.forward_ms > 0) mine.push_back({s.pos0 + int(s.input.size()) - 1, s.forward_ms});
    }
    st.measured_epoch[cached ? 1 : 0] = app.history.epoch;
  }
  ImGui::BeginDisabled(!app.engine.model || st.asked != 0 || app.engine.worker.busy());
  if (ImGui::Button(st.asked ? "Timing..." : "Time both ways now")) kv_time_now(app);
  ImGui::EndDisabled();
  tooltip(app,
          "Runs the tokens shown through the model twice, with the KV cache and without it, timing every step "
          "(the same tokens come out both ways). On long texts of large models only the first positions are "
          "timed: without the cache the whole run would take too long.");
  if (!st.measured[0].empty() && st.timed_positions > 0 && st.timed_positions < positions) {
    ImGui::SameLine();
    ImGui::TextDisabled("(timed up to position %d)", st.timed_positions - 1);
  }
  flow(font * 6);
  legend_line(IM_COL32(240, 90, 70, 255), "without");
  flow(font * 9);
  legend_line(IM_COL32(80, 200, 120, 255), "with the cache");
  measured_plot(app, st, positions, w);
}

// What the step did to the cache, in a sentence (a sliding-window layer reads back only
// the last rows).
void step_text(const BlockSnapshot* s, bool kv_cache, int positions, int new0) {
  const int unread = s && s->error.empty() ? std::min(new0, s->cfg.first_key(s->layer, new0)) : 0;
  if (kv_cache && unread > 0)
    ImGui::TextWrapped(
        "This step ran %d new token%s through the model and appended %s row%s to every layer's cache "
        "(outlined); of the %d rows above, this layer's sliding window read back the last %d from the cache, "
        "not computed again.",
        positions - new0, positions - new0 == 1 ? "" : "s", positions - new0 == 1 ? "one" : "these",
        positions - new0 == 1 ? "" : "s", new0, new0 - unread);
  else if (kv_cache)
    ImGui::TextWrapped(
        "This step ran %d new token%s through the model and appended %s row%s to every layer's cache "
        "(outlined); the %d rows above were read back from the cache, not computed again.",
        positions - new0, positions - new0 == 1 ? "" : "s", positions - new0 == 1 ? "one" : "these",
        positions - new0 == 1 ? "" : "s", new0);
  else
    ImGui::TextWrapped(
        "Made without the KV cache: this step ran all %d tokens through the model again and computed "
        "every row of keys and values anew, the %d older ones included; only the last row is new.",
        positions, new0);
}

// The "without the KV cache" box; false when there is no step to show yet (said so).
bool kv_switch(App& app) {
  bool without = !app.engine.kv_cache;
  if (ImGui::Checkbox("Generate without the KV cache", &without)) {
    app.engine.kv_cache = !without;
    app.say(without ? "the next Start recomputes the whole prefix at every step" : "the next Start uses the KV cache");
  }
  tooltip(app,
          "Without the cache every step runs the whole sequence through the model again (the same tokens "
          "come out, only slower). Takes effect when you press Start.");
  return has_step(app);
}

// The caches pane: the layer's keys and values (and the source's, encoder-decoder), left
// wide and cache_h tall (beside the costs, or alone under its tab).
void caches_pane(App& app, const BlockSnapshot* s, int head, float left, float cache_h) {
  KvState& st = app.state<KvState>();
  const float font = ImGui::GetFontSize();
  const ds::TraceStep& step = app.history.trace.steps[size_t(app.sel.cursor)];
  const int positions = app.history.trace.positions(app.sel.cursor), new0 = step.pos0;
  st.rows_all = st.rows_shown = 0;
  st.new_shown = false;
  st.new_y1 = 0;
  st.pane_y1 = ImGui::GetWindowPos().y + ImGui::GetWindowHeight();
  if (!app.engine.model) {
    ImGui::TextDisabled("The cache is measured by running the model: load the model this trace came from.");
  } else if (!s) {
    ImGui::TextDisabled("running the model...");
  } else if (!s->error.empty()) {
    ImGui::TextColored(ImVec4(1, 0.5f, 0.4f, 1), "%s", s->error.c_str());
  } else {
    const auto& toks = app.tokens();
    std::vector<std::string> labels;
    for (auto& t : toks) labels.push_back(visible(t.text));
    const int kvd = s->cfg.kv_dim(), dh = s->cfg.d_head, rows = int(s->k.size()) / std::max(1, kvd);
    const bool ed = s->cfg.encoder_decoder && s->src_len > 0;
    // The whole cache's size below takes two lines on a narrow pane.
    float hh = cache_h - font * (left < font * 45 ? 5.7f : 4.5f) - (ed ? font * (5.5f + 0.95f * float(s->src_len)) : 0);
    char t[96];
    std::snprintf(t, sizeof t, "Keys K, layer %d head %d  [%d x %d]", s->layer, head, rows, dh);
    // A sliding-window layer: the step's first query reads no row before this one.
    const int first_read = s->cfg.first_key(s->layer, new0);
    const float kw = (left - font) * 0.5f + font * 0.1f;  // K's labels and V's tags take the same room
    const int first = cache_cells(app, t, s->k, rows, kvd, head * dh, dh, new0, positions, labels, kw, hh,
                                  step.kv_cache, first_read, true, false);
    st.rows_all = rows;
    st.rows_shown = rows - first;
    st.new_shown = new0 >= first && new0 < rows;
    ImGui::SameLine();
    std::snprintf(t, sizeof t, "Values V  [%d x %d]", rows, dh);
    cache_cells(app, t, s->v, rows, kvd, head * dh, dh, new0, positions, labels, kw, hh, step.kv_cache, first_read,
                false, true);
    if (s->cfg.sliding(s->layer))
      ImGui::TextWrapped(
          "Layer %d has a sliding window of %d: a query at position p reads rows p-%d..p only. Older rows "
          "stay in the cache (\"unread\") but no query of this step reads them.",
          s->layer, s->cfg.sliding_window, s->cfg.sliding_window - 1);
    const double bytes = 2.0 * s->cfg.n_layers * rows * kvd * 4;
    ImGui::PushTextWrapPos(0);
    ImGui::TextDisabled("The whole cache: 2 (K and V) x %d layers x %d positions x %d = %.0f floats, %.1f KB",
                        s->cfg.n_layers, rows, kvd, bytes / 4, bytes / 1024);
    ImGui::PopTextWrapPos();
    if (ed) {
      ImGui::Spacing();
      ImGui::TextWrapped(
          "Cross-attention reads the source: its keys and values were computed once, when the source "
          "was encoded, and every step reads them again.");
      const float h = font * (2.0f + 0.95f * float(s->src_len));
      std::snprintf(t, sizeof t, "Source keys [%d x %d]", s->src_len, dh);
      cache_cells(app, t, s->cross_k, s->src_len, kvd, head * dh, dh, -1, -1, app.source_labels(), left * 0.5f - font,
                  h, true, 0, true, false);
      ImGui::SameLine();
      std::snprintf(t, sizeof t, "Source values [%d x %d]", s->src_len, dh);
      cache_cells(app, t, s->cross_v, s->src_len, kvd, head * dh, dh, -1, -1, app.source_labels(), left * 0.5f - font,
                  h, true, 0, false, false);
    }
  }
}

}  // namespace

void kv_open_pane(App& app, const std::string& name) { app.state<KvState>().ask_pane = name == "cost" ? 1 : 0; }

std::string kv_sidecar(App& app) {
  const KvState& st = app.state<KvState>();
  char b[600];
  std::snprintf(b, sizeof b,
                "{\"explained\": %s, \"plot_x0\": %.1f, \"plot_x1\": %.1f, \"label_x1\": %.1f, \"label_y1\": "
                "%.1f, \"plot_y1\": %.1f, \"first_ms\": [%.4f, %.4f], \"points\": [%d, %d], \"measured\": [%zu, "
                "%zu], \"tabs\": %s, \"pane\": %d, \"rows\": %d, \"rows_shown\": %d, \"new_shown\": %s, "
                "\"label_px\": %.1f, \"font_px\": %.1f, \"new_y1\": %.1f, \"pane_y1\": %.1f}",
                st.explained ? "true" : "false", double(st.plot_x0), double(st.plot_x1), double(st.label_x1),
                double(st.label_y1), double(st.plot_y1), st.first_ms[0], st.first_ms[1], st.points[0], st.points[1],
                st.measured[0].size(), st.measured[1].size(), st.tabs ? "true" : "false", st.pane, st.rows_all,
                st.rows_shown, st.new_shown ? "true" : "false", double(st.label_px), double(ImGui::GetFontSize()),
                double(st.new_y1), double(st.pane_y1));
  return b;
}

void panel_kv(App& app) {
  KvState& st = app.state<KvState>();
  view_caption(app, "kv");
  const ds::Config& cfg = app.history.trace.config;
  const float font = ImGui::GetFontSize();
  if (!kv_switch(app)) return;
  flow(font * 22);
  int head = st.kv_head;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Layer");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 7);
  ImGui::SliderInt("##kvlayer", &app.sel.layer, 0, std::max(0, cfg.n_layers - 1));
  ImGui::SameLine();
  ImGui::TextUnformatted("Key/value head");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 7);
  ImGui::SliderInt("##kvhead", &head, 0, std::max(0, cfg.n_kv_heads - 1));
  tooltip(app,
          "Each head keeps its own keys and values (models with grouped-query attention share one between "
          "several query heads).");
  st.kv_head = head = std::clamp(head, 0, std::max(0, cfg.n_kv_heads - 1));
  app.sel.layer = std::clamp(app.sel.layer, 0, std::max(0, cfg.n_layers - 1));
  const ds::TraceStep& step = app.history.trace.steps[size_t(app.sel.cursor)];
  const int positions = app.history.trace.positions(app.sel.cursor), new0 = step.pos0;
  const int q_head = head * std::max(1, cfg.n_heads / std::max(1, cfg.n_kv_heads));
  const BlockSnapshot* s = block_snapshot(app, app.sel.layer, q_head);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Side by side when both halves keep some 25 characters' width and the caches some 20
  // rows of readable labels; else one at a time, under tabs, each with the whole width
  // and height (a 1024x768 window).
  const bool side = avail.x >= font * 52 && avail.y >= font * 27;
  st.tabs = !side;
  if (!side) {
    if (ImGui::BeginTabBar("##kvpanes")) {
      const char* names[] = {"Keys and values", "Cost of a step"};
      for (int k = 0; k < 2; ++k) {
        const ImGuiTabItemFlags f = st.ask_pane == k ? ImGuiTabItemFlags_SetSelected : 0;
        if (ImGui::BeginTabItem(names[k], nullptr, f)) {
          st.pane = k;
          ImGui::EndTabItem();
        }
      }
      ImGui::EndTabBar();
    }
    st.ask_pane = -1;
    ImGui::BeginChild("kvpane", ImVec2(0, 0), false);
    if (st.pane == 0)
      caches_pane(app, s, head, ImGui::GetContentRegionAvail().x, ImGui::GetContentRegionAvail().y);
    else {
      step_text(s, step.kv_cache, positions, new0);
      cost_panel(app, st, positions, new0);
    }
    ImGui::EndChild();
    return;
  }
  // The costs pane's text wraps less with more of the width when the window is narrow.
  const float left = avail.x * (avail.x < font * 90 ? 0.42f : 0.5f);
  ImGui::BeginChild("caches", ImVec2(left, avail.y), false);
  caches_pane(app, s, head, left, avail.y);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("cost", ImVec2(0, 0), false);
  step_text(s, step.kv_cache, positions, new0);
  cost_panel(app, st, positions, new0);
  ImGui::EndChild();
}

}  // namespace dsgui
