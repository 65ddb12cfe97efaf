#include "shell/presenter.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "shell/app.h"

namespace dsgui {

namespace {
constexpr double kHintSeconds = 5.0;  // the "F11: leave" hint is bright this long, then faint

// One line over the view: the text written so far (its end, as much as fits), the prompt
// in blue, the generated tokens in green, the selected token on orange; the class keeps
// seeing what the model writes.
void slim_strip(App& app) {
  const auto toks = app.tokens();
  if (toks.empty()) return;
  const float w = ImGui::GetContentRegionAvail().x;
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
  ImGui::AlignTextToFramePadding();
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
    const ImVec2 p = ImGui::GetCursorScreenPos(), ts = ImGui::CalcTextSize(texts[i].c_str());
    if (t.pos == selected)
      dl->AddRectFilled(ImVec2(p.x - 1, p.y), ImVec2(p.x + ts.x + 1, p.y + ts.y), IM_COL32(200, 120, 10, 255), 3);
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
  slim_strip(app);
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
  // The whole list when it fits the line, else the two keys that lead to the rest.
  const char* keys = "Right/Left: step  Up/Down: layer  [ ]: head  , .: token  PgDn/PgUp: view  F1: keys  F11: leave";
  if (ImGui::CalcTextSize(keys).x > ImGui::GetContentRegionAvail().x) keys = "F1: every key   F11: leave";
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
