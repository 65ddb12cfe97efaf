// Branches: fork the generation at a step, continue it another way, and compare the two
// continuations side by side with the first step where they differ marked.
#include <algorithm>
#include <cstdio>

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
  std::snprintf(cur, sizeof cur, "branch %d: fork at step %d", app.history.branch_shown + 1, b.fork_step + 1);
  if (ImGui::BeginCombo("##branch", cur)) {
    for (int i = 0; i < int(app.history.branches.size()); ++i) {
      char s[200];
      std::snprintf(s, sizeof s, "branch %d: fork at step %d (%s)", i + 1, app.history.branches[i].fork_step + 1,
                    app.history.branches[i].label.c_str());
      if (ImGui::Selectable(s, i == app.history.branch_shown)) app.history.branch_shown = i;
    }
    ImGui::EndCombo();
  }
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
    ImGui::TextDisabled("%s", b.label.c_str());
    token_flow(ta, fork_pos, diff, colw - font);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("Now (live)");
    char lab[160];
    std::snprintf(lab, sizeof lab, "T %.2f, top-k %d, top-p %.2f, seed %llu%s", app.whatif.sampler.temperature,
                  app.whatif.sampler.top_k, app.whatif.sampler.top_p, (unsigned long long)app.whatif.sampler.seed,
                  app.whatif.heads_off.empty() ? "" : ", heads switched off");
    ImGui::TextDisabled("%s", lab);
    token_flow(tb, fork_pos, diff, colw - font);
    ImGui::EndTable();
  }
  ImGui::TextDisabled("grey: shared before the fork   green: generated after it   red: the first difference");
}

}  // namespace dsgui
