#include "shell/presenter.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "shell/app.h"

namespace dsgui {

namespace {
constexpr double kHintSeconds = 5.0;  // the "F11: leave" hint is bright this long, then faint

// In the line under the view: the text written so far (its end, as much as fits in w
// pixels), the prompt in blue, the generated tokens in green, the selected token on
// orange; the class keeps seeing what the model writes.
void slim_strip(App& app, float w) {
  const auto& toks = app.tokens();
  if (toks.empty()) return;
  const int selected = app.selected_position();
  std::vector<std::string> texts(toks.size());
  const float gap = ImGui::CalcTextSize(" ").x * 0.7f;  // between tokens: words stay apart
  float used = ImGui::CalcTextSize("... ").x;
  size_t first = toks.size();
  while (first > 0) {
    texts[first - 1] = visible(toks[first - 1].text);
    const float tw = ImGui::CalcTextSize(texts[first - 1].c_str()).x + gap;
    if (used + tw > w) break;
    used += tw;
    --first;
  }
  if (first > 0) {
    ImGui::TextDisabled("...");
    ImGui::SameLine(0, ImGui::CalcTextSize(" ").x);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (size_t i = first; i < toks.size(); ++i) {
    const TokenInfo& t = toks[i];
    const ImVec4 col = t.pos == selected ? ImVec4(1, 1, 1, 1)
                       : t.prompt        ? ImVec4(0.55f, 0.75f, 1.0f, 1)
                                         : ImVec4(0.55f, 0.9f, 0.6f, 1);
    // The line is aligned to framed widgets: its text sits FramePadding.y lower.
    const ImVec2 p = ImGui::GetCursorScreenPos(), ts = ImGui::CalcTextSize(texts[i].c_str());
    const float y = p.y + ImGui::GetStyle().FramePadding.y;
    if (t.pos == selected)
      dl->AddRectFilled(ImVec2(p.x - 2, y - 1), ImVec2(p.x + ts.x + 2, y + ts.y + 1), IM_COL32(200, 120, 10, 255), 3);
    ImGui::TextColored(col, "%s", texts[i].c_str());
    if (i + 1 < toks.size()) ImGui::SameLine(0, gap);
  }
}

}  // namespace

void toggle_presenter(App& app) {
  app.look.presenter = !app.look.presenter;
  app.look.presenter_since = ImGui::GetTime();
  app.say(app.look.presenter ? "presenter mode: F11 leaves it" : "presenter mode left");
}

void presenter_frame(App& app) {
  const auto views = all_views();
  if (app.sel.view < 0 || app.sel.view >= int(views.size())) app.sel.view = 0;
  const float line = ImGui::GetFrameHeightWithSpacing() + ImGui::GetStyle().ItemSpacing.y;
  // Over a heatmap (last frame) the wheel zooms it and does not scroll the view.
  const int no_wheel = std::exchange(app.look.wheel_zooms, false) ? ImGuiWindowFlags_NoScrollWithMouse : 0;
  ImGui::BeginChild("view", ImVec2(0, -line), false, ImGuiWindowFlags_HorizontalScrollbar | no_wheel);
  app.maps.view_rect =
      ImVec4(ImGui::GetWindowPos().x, ImGui::GetWindowPos().y, ImGui::GetWindowSize().x, ImGui::GetWindowSize().y);
  views[size_t(app.sel.view)].draw(app);
  ImGui::EndChild();
  ImGui::Separator();
  // One line: the view and the step, the text written so far, the keys. The hint is
  // bright for a few seconds after entering (always in a scripted picture, which has no
  // clock), then faint; F1 shows every key.
  const float font = ImGui::GetFontSize();
  std::string where = views[size_t(app.sel.view)].title;
  if (!app.history.trace.steps.empty())
    where += "  " + std::to_string(app.sel.cursor + 1) + "/" + std::to_string(app.history.trace.steps.size());
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(where.c_str());
  ImGui::SameLine(0, font);
  const char* keys = "F1: keys  F11: leave";
  slim_strip(app, ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize(keys).x - font * 2);
  ImGui::SameLine(0, font);
  ImGui::SetCursorPosX(std::max(ImGui::GetCursorPosX(), ImGui::GetContentRegionMax().x - ImGui::CalcTextSize(keys).x));
  const bool fresh = app.scripted || ImGui::GetTime() - app.look.presenter_since < kHintSeconds;
  if (fresh)
    ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "%s", keys);
  else
    ImGui::TextDisabled("%s", keys);
  if (!app.msgs.error.empty()) {
    ImGui::SameLine(0, ImGui::GetFontSize() * 2);
    ImGui::TextColored(ImVec4(1.0f, 0.35f, 0.3f, 1), "%s", shorten(app.msgs.error, 80).c_str());
  }
}

}  // namespace dsgui
