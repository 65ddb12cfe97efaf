// The logit lens: each layer's residual stream at the selected position, read through
// the final norm and the output head as if the model stopped there. The trace carries
// it (the worker records it with every step); for a trace recorded without it, the
// worker computes it from the recorded residual stream when the model is loaded.
#include <algorithm>
#include <cstdio>

#include "probe/lens.h"
#include "shell/notices.h"
#include "views/common.h"

namespace dsgui {

namespace {

// The lens the trace recorded at pos as of step `step`, its first few tokens per row.
bool recorded(const ds::Trace& t, int step, int pos, LensResult& out) {
  const int s = t.step_of(pos);
  if (s < 0 || s > step) return false;
  std::vector<ds::LensRow> rows;
  try {
    rows = ds::recorded_lens(t, pos);
  } catch (const std::exception&) {
    return false;  // malformed: as if not recorded
  }
  if (rows.empty()) return false;
  out.step = step;
  out.pos = pos;
  for (auto& r : rows) {
    const size_t n = std::min(r.ids.size(), size_t(ds::kWindowLensTopK));
    out.rows.push_back({r.label,
                        {r.ids.begin(), r.ids.begin() + n},
                        {r.texts.begin(), r.texts.begin() + n},
                        {r.probs.begin(), r.probs.begin() + n}});
  }
  return true;
}

}  // namespace

// The lens the worker computed last (for traces recorded without it) and what was asked.
struct LensState {
  LensResult lens;
  uint64_t key = 0;      // what the last request asked for
  bool pending = false;  // a request is with the worker
};

bool lens_waiting(App& app) { return app.state<LensState>().pending; }

bool lens_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Lens>(&e);
  if (!a) return false;
  LensState& st = app.state<LensState>();
  if (a->lens.version != st.key) return true;  // an answer to an older request
  st.lens = std::move(a->lens);
  st.pending = false;
  return true;
}

void lens_failed(App& app) { app.state<LensState>().pending = false; }

void panel_lens(App& app) {
  LensState& st = app.state<LensState>();
  view_caption(app, "lens");
  const ds::Trace& t = app.history.trace;
  if (!has_step(app)) return;
  const float font = ImGui::GetFontSize();
  const int pos = app.selected_position();
  const bool live = app.engine.model && app.engine.model->cfg.d_model == t.config.d_model &&
                    app.engine.model->cfg.vocab_size == t.config.vocab_size;
  const LensResult* shown = nullptr;
  LensResult in_trace;
  if (recorded(t, app.sel.cursor, pos, in_trace)) {
    shown = &in_trace;
  } else if (!live) {
    ImGui::TextDisabled(
        "This trace did not record the logit lens, which needs the model's final norm and output head: "
        "load the model this trace came from (traces saved by the window carry the lens with them).");
    return;
  } else {
    // Ask the worker when the position or the trace changed.
    const uint64_t key = (app.history.version * 1315423911ull) ^ (uint64_t(app.sel.cursor) << 20) ^ uint64_t(pos + 1);
    if (st.key != key) {
      st.key = key;
      cmd::Lens c;
      c.step = app.sel.cursor;
      c.pos = pos;
      c.version = key;
      lens_inputs(t, app.sel.cursor, pos, c.resid, c.labels);
      if (c.resid.empty()) {
        st.lens = LensResult{};
        st.lens.version = key;
        st.pending = false;
      } else {
        // In place of an older request still waiting: while steps stream in, one
        // request a step would queue up behind them and keep the engine busy long
        // after the last step.
        app.engine.ask_latest(std::move(c));
        st.pending = true;
      }
    }
    if (st.pending && st.lens.version != key) {
      ImGui::TextDisabled("computing...");
      return;
    }
    shown = &st.lens;
  }
  auto toks = app.tokens();
  std::string who = pos >= 0 && pos < int(toks.size()) ? visible(toks[pos].text) : "?";
  std::string next = pos + 1 < int(toks.size()) ? visible(toks[pos + 1].text) : "";
  ImGui::Text("Position %d \"%s\": what comes next, read from each layer", pos, who.c_str());
  if (!next.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("(the token that actually followed: \"%s\")", next.c_str());
  }
  if (shown->rows.empty()) {
    ImGui::TextDisabled("the trace did not record the residual stream at this position");
    return;
  }
  const float bw = font * 10;
  if (ImGui::BeginTable("lens", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("read after");
    ImGui::TableSetupColumn("top token");
    ImGui::TableSetupColumn("probability", ImGuiTableColumnFlags_WidthFixed, bw);
    ImGui::TableSetupColumn("runners-up");
    ImGui::TableHeadersRow();
    for (auto& r : shown->rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.label.c_str());
      ImGui::TableNextColumn();
      std::string top = r.texts.empty() ? "?" : visible(r.texts[0]);
      bool match = !next.empty() && top == next;
      if (match)
        ImGui::TextColored(readable(ImVec4(0.4f, 0.9f, 0.4f, 1)), "%s", top.c_str());
      else
        ImGui::TextUnformatted(top.c_str());
      if (match && ImGui::IsItemHovered()) ImGui::SetTooltip("this is the token that actually came next");
      ImGui::TableNextColumn();
      char b[32];
      float p = r.probs.empty() ? 0 : r.probs[0];
      std::snprintf(b, sizeof b, "%.3f", p);
      bar(p, bw, cmap_u32(app.look.cmap, 0.35f + 0.65f * p), b);
      ImGui::TableNextColumn();
      std::string rest;
      for (size_t i = 1; i < r.texts.size(); ++i) {
        char pb[64];
        std::snprintf(pb, sizeof pb, "%s%s %.2f", i > 1 ? "   " : "", visible(r.texts[i]).c_str(), r.probs[i]);
        rest += pb;
      }
      ImGui::TextDisabled("%s", rest.c_str());
    }
    ImGui::EndTable();
  }
}

}  // namespace dsgui
