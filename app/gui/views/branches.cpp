// Branches: fork the generation at a step, continue it another way, and compare the two
// continuations side by side with the first step where they differ marked. Each side is
// labelled with the method its own steps say chose their tokens (engine_link/choice.h),
// and a kept branch can be made the live generation.
#include <algorithm>
#include <cstdio>

#include "engine_link/choice.h"
#include "shell/notices.h"
#include "views/common.h"

namespace dsgui {

namespace {

// Tokens as a wrapped flow of chips: before the fork greyed, the first difference red.
void token_flow(const std::vector<TokenInfo>& toks, int fork_pos, int diff_pos, float width) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  const float x0 = ImGui::GetCursorScreenPos().x;
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetFontSize() + style.FramePadding.y * 2;
  for (size_t i = 0; i < toks.size(); ++i) {
    std::string s = visible(toks[i].text);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    float w = ts.x + style.FramePadding.x * 2;
    if (p.x + w > x0 + width && p.x > x0) {
      p.x = x0;
      p.y += h + 3;
    }
    ImU32 bg = toks[i].pos < fork_pos ? IM_COL32(70, 70, 80, 255) : IM_COL32(40, 110, 60, 255);
    if (toks[i].pos == diff_pos) bg = IM_COL32(200, 50, 40, 255);
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), bg, 3);
    dl->AddText(ImVec2(p.x + style.FramePadding.x, p.y + style.FramePadding.y), IM_COL32(255, 255, 255, 255),
                s.c_str());
    p.x += w + 3;
  }
  ImGui::Dummy(ImVec2(width, p.y - ImGui::GetCursorScreenPos().y + h + 4));
}

}  // namespace

// The live side's label: the methods of its steps from the fork on, and heads switched off.
std::string live_label(const App& app, int fork_step) {
  return branch_method(app.history.trace, fork_step) + (app.whatif.heads_engine.empty() ? "" : ", heads switched off");
}

bool branches_choose(App& app, int i) {
  TraceHistory& h = app.history;
  if (i < 0 || i >= int(h.branches.size()) || h.replay || !app.engine.model || app.engine.worker.busy() ||
      h.branches[size_t(i)].trace.steps.empty() || !h.branches[size_t(i)].trace.steps.front().sample)
    return false;
  Branch chosen = std::move(h.branches[size_t(i)]);
  h.branches.erase(h.branches.begin() + i);
  Undo u = app.snapshot("making branch " + std::to_string(i + 1) + " live", -1);
  u.removed_at = i;
  u.removed_label = chosen.label;
  u.removed_trace = chosen.trace;
  u.removed_fork = chosen.fork_step;
  if (!h.trace.steps.empty()) {  // the generation shown is kept in its place
    Branch was;
    was.label = "the generation before branch " + std::to_string(i + 1) + " was made live";
    was.trace = std::move(h.trace);
    was.fork_step = chosen.fork_step;
    h.branches.push_back(std::move(was));
    u.added_branch = int(h.branches.size()) - 1;
  }
  h.undo.push(std::move(u));
  h.branch_shown = std::max(0, int(h.branches.size()) - 1);
  // The engine's session is put on the branch's tokens (each step with its own
  // settings); the window already has the steps.
  cmd::Restore c;
  c.restart = true;
  c.threads = app.engine.threads;
  c.kv_cache = app.engine.kv_cache;
  c.prompt = chosen.trace.steps.front().input;
  c.src = chosen.trace.source;
  for (const ds::TraceStep& st : chosen.trace.steps) {
    if (!st.sample) break;
    c.forced.push_back(st.sample->token);
    c.step_samplers.push_back(st.sample->config);
  }
  h.trace = std::move(chosen.trace);
  ++h.version;
  ++h.epoch;
  app.play.playing = false;
  app.whatif.before.reset();
  app.sel.cursor = std::clamp(app.sel.cursor, 0, int(h.trace.steps.size()) - 1);
  app.sel.pos = -1;
  app.engine.worker.cancel();
  app.send_heads();
  app.engine.ask(std::move(c));
  app.engine.done = false;
  app.engine.ask(cmd::Step{0});  // a finished text says so (ev::Truncate)
  app.engine.started = true;
  app.say("branch " + std::to_string(i + 1) + " is now the live generation; the one before is kept as branch " +
          std::to_string(h.branch_shown + 1) + " (Ctrl+Z undoes this)");
  return true;
}

void panel_branches(App& app) {
  view_caption(app, "branches");
  const float font = ImGui::GetFontSize();
  ImGui::BeginDisabled(app.history.replay || !app.engine.model || app.sel.cursor < 0 || app.engine.worker.busy());
  char fb[64];
  std::snprintf(fb, sizeof fb, "Fork at step %d", app.sel.cursor + 1);
  if (ImGui::Button(fb)) app.fork_here();
  ImGui::EndDisabled();
  tooltip(app,
          "Keep what was generated so far as a branch, then draw this step again: change the seed, the "
          "temperature or switch a head off first, and press Step or Run to end.");
  if (app.history.branches.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("no branch yet: move to a step, fork, change a setting, and generate again");
    return;
  }
  ImGui::SameLine(0, font);
  ImGui::SetNextItemWidth(font * 22);
  app.history.branch_shown = std::clamp(app.history.branch_shown, 0, int(app.history.branches.size()) - 1);
  const Branch& b = app.history.branches[app.history.branch_shown];
  char cur[200];
  std::snprintf(cur, sizeof cur, "branch %d: from step %d", app.history.branch_shown + 1, b.fork_step + 1);
  if (ImGui::BeginCombo("##branch", cur)) {
    for (int i = 0; i < int(app.history.branches.size()); ++i) {
      const Branch& bi = app.history.branches[size_t(i)];
      const std::string s = "branch " + std::to_string(i + 1) + ": from step " + std::to_string(bi.fork_step + 1) +
                            ", " + branch_method(bi.trace, bi.fork_step);
      if (ImGui::Selectable(s.c_str(), i == app.history.branch_shown)) app.history.branch_shown = i;
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", bi.label.c_str());
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::BeginDisabled(app.history.replay || !app.engine.model || app.engine.worker.busy());
  if (ImGui::Button("Make this branch live")) {
    ImGui::EndDisabled();
    branches_choose(app, app.history.branch_shown);
    return;
  }
  ImGui::EndDisabled();
  tooltip(app,
          "Continue from this branch: it becomes the generation every view shows and Step extends; the "
          "generation shown now is kept as a branch in its place. Ctrl+Z takes it back.");
  ImGui::SameLine();
  if (ImGui::Button("Forget this branch")) {
    app.forget_branch(app.history.branch_shown);
    return;
  }

  auto ta = tokens_as_of(b.trace, int(b.trace.steps.size()) - 1);
  auto tb = tokens_as_of(app.history.trace, int(app.history.trace.steps.size()) - 1);
  const int fork_pos = b.fork_step < int(b.trace.steps.size()) ? b.trace.positions(b.fork_step) : 0;
  int diff = -1;
  for (size_t i = 0; i < std::max(ta.size(), tb.size()); ++i) {
    if (i >= ta.size() || i >= tb.size() || ta[i].id != tb[i].id) {
      diff = int(i);
      break;
    }
  }
  if (diff >= 0 && diff < int(std::min(ta.size(), tb.size())))
    ImGui::Text("The branches first differ at position %d (drawn at step %d): \"%s\" versus \"%s\"", diff,
                ta[diff].drawn_at + 1, visible(ta[diff].text).c_str(), visible(tb[diff].text).c_str());
  else if (diff >= 0)
    ImGui::Text("The branches agree on every token both have; one is longer (from position %d).", diff);
  else
    ImGui::TextUnformatted("The two branches are identical so far (same settings, same seed: same draws).");
  // Only a token that differs is marked red; one branch merely going on is not a difference.
  if (diff >= int(std::min(ta.size(), tb.size()))) diff = -1;

  const float colw = (ImGui::GetContentRegionAvail().x - font) * 0.5f;
  if (ImGui::BeginTable("sides", 2, ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("a", ImGuiTableColumnFlags_WidthFixed, colw);
    ImGui::TableSetupColumn("b", ImGuiTableColumnFlags_WidthFixed, colw);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("Branch %d (kept)", app.history.branch_shown + 1);
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + colw - font);
    ImGui::TextDisabled("%s", branch_method(b.trace, b.fork_step).c_str());
    ImGui::PopTextWrapPos();
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", b.label.c_str());
    token_flow(ta, fork_pos, diff, colw - font);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("Now (live)");
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + colw - font);
    ImGui::TextDisabled("%s", live_label(app, b.fork_step).c_str());
    ImGui::PopTextWrapPos();
    token_flow(tb, fork_pos, diff, colw - font);
    ImGui::EndTable();
  }
  ImGui::TextDisabled("grey: shared before the fork   green: generated after it   red: the first difference");
}

}  // namespace dsgui
