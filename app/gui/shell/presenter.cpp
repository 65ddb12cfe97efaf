#include "shell/presenter.h"

#include <cstdio>
#include <string>
#include <utility>

#include "shell/app.h"

namespace dsgui {

namespace {
constexpr double kHintSeconds = 5.0;  // the "F11: leave" hint is bright this long, then faint
}

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
  // One line: the view, the step, the keys. The hint is bright for a few seconds after
  // entering (always in a scripted picture, which has no clock), then faint.
  std::string where = views[size_t(app.sel.view)].title;
  if (!app.history.trace.steps.empty())
    where += "   step " + std::to_string(app.sel.cursor + 1) + " of " + std::to_string(app.history.trace.steps.size());
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(where.c_str());
  ImGui::SameLine(0, ImGui::GetFontSize() * 2);
  const char* keys = "Right: step  Left: back  PgDn/PgUp: view  F: fit  F11: leave presenter mode";
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
