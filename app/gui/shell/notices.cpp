// Messages beside the text boxes, readable colours, the chip legend and the check for
// characters the text boxes cannot hold (notices.h).
#include "shell/notices.h"

#include <GLFW/glfw3.h>

#include <cstdio>

#include "backends/imgui_impl_glfw.h"
#include "shell/app.h"

namespace dsgui {

namespace {

// One entry of the legend: a chip's colour (or the orange underline, or the orange
// triangle) and its label, on the line when it fits; help: the hover text.
void swatch(App& app, bool first, ImVec4 col, const char* label, const char* help, int mark = 0) {
  const float font = ImGui::GetFontSize();
  const float w = font * 1.55f + ImGui::CalcTextSize(label).x;
  if (!first) flow(w);
  ImGui::BeginGroup();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  p.y += font * 0.15f;
  const ImVec2 q(p.x + font * 1.2f, p.y + font * 0.8f);
  const ImU32 orange = IM_COL32(255, 170, 40, 255);
  if (mark == 1)
    dl->AddLine(ImVec2(p.x, q.y), q, orange, 2);
  else if (mark == 2)
    dl->AddTriangleFilled(ImVec2(p.x + font * 0.3f, p.y + font * 0.4f), ImVec2(p.x + font * 0.9f, p.y),
                          ImVec2(p.x + font * 0.9f, q.y), orange);
  else
    dl->AddRectFilled(p, q, ImGui::ColorConvertFloat4ToU32(col), 2);
  ImGui::Dummy(ImVec2(font * 1.3f, font));
  ImGui::SameLine(0, font * 0.25f);
  ImGui::TextDisabled("%s", label);
  ImGui::EndGroup();
  tooltip(app, help);
}

}  // namespace

void chip_legend(App& app) {
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(ImGui::GetStyle().ItemSpacing.x, 0));
  swatch(app, true, ImVec4(0.20f, 0.33f, 0.55f, 1), "prompt", "A token of the text you typed.");
  swatch(app, false, ImVec4(0.18f, 0.45f, 0.25f, 1), "generated", "A token the model wrote and has read back.");
  if (app.engine.model && !app.engine.model->special_ids.empty() && !app.history.replay)
    swatch(app, false, ImVec4(0.45f, 0.22f, 0.55f, 1), "special",
           "A special token: it marks the start of the text, or in a chat the turns and who speaks (the chat "
           "template writes them). The model reads each as one token.");
  swatch(app, false, ImVec4(0.55f, 0.35f, 0.08f, 1), "just drawn",
         "The token the last step drew: the next step runs it through the model.");
  if (app.history.trace.config.encoder_decoder)
    swatch(app, false, ImVec4(0.35f, 0.30f, 0.15f, 1), "source", "A token of the source text the encoder reads.");
  swatch(app, false, ImVec4(0.85f, 0.55f, 0.05f, 1), "selected",
         "The position every view follows: click a chip to choose it.");
  swatch(app, false, ImVec4(), "the step shown",
         "Orange underline on the chips, orange box on a heatmap: the tokens the step shown fed in (its rows).", 1);
  swatch(app, false, ImVec4(), "selected row", "Orange triangle beside a heatmap: the selected position's row.", 2);
  ImGui::PopStyleVar();
}

std::string wide_char_message(unsigned cp, bool pasted) {
  char b[240];
  std::snprintf(b, sizeof b,
                "The character U+%04X (an emoji or another character beyond U+FFFF) %s: the window's text boxes hold "
                "characters up to U+FFFF only.",
                cp, pasted ? "was pasted and became U+FFFD (the replacement character)" : "was left out of the box");
  return b;
}

namespace {

App* app_of(GLFWwindow* w) { return static_cast<App*>(glfwGetWindowUserPointer(w)); }

void on_char(GLFWwindow* w, unsigned int c) {
  if (c > 0xFFFF) {
    if (App* app = app_of(w)) app->inputs.error = wide_char_message(c, false);
    return;
  }
  ImGui_ImplGlfw_CharCallback(w, c);
}

const char* (*g_clipboard_get)(void*) = nullptr;

// The first code point beyond U+FFFF in UTF-8 text s, or 0.
unsigned first_wide(const char* s) {
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); p && *p; ++p)
    if ((*p & 0xF8) == 0xF0 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80)
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  return 0;
}

const char* on_clipboard_get(void* user) {
  const char* s = g_clipboard_get ? g_clipboard_get(user) : nullptr;
  if (const unsigned cp = first_wide(s); cp > 0xFFFF && user)
    if (App* app = app_of(static_cast<GLFWwindow*>(user))) app->inputs.error = wide_char_message(cp, true);
  return s;
}

}  // namespace

void watch_wide_characters(GLFWwindow* win, App& app) {
  glfwSetWindowUserPointer(win, &app);
  glfwSetCharCallback(win, on_char);
  ImGuiIO& io = ImGui::GetIO();
  if (io.GetClipboardTextFn != on_clipboard_get) {
    g_clipboard_get = io.GetClipboardTextFn;
    io.GetClipboardTextFn = on_clipboard_get;
  }
}

// ---- App: the lines under the text boxes

void started_with_text(App& app) {
  app.inputs.run_prompt = app.inputs.pending_prompt;
  app.inputs.run_source = app.inputs.pending_source;
  app.inputs.start_pending = false;
  app.inputs.error.clear();
  if (app.inputs.step_after_start) {  // Step was pressed with new text: the step it asked for
    app.inputs.step_after_start = false;
    app.engine.ask(cmd::Step{1});
    app.engine.steps_wanted = 1;
  }
}

void refused_input(App& app, const ev::Error& e) {
  if (app.engine.loading) app.inputs.error = "The model did not open: " + e.msg;
  if (e.start_failed) {  // the text was refused: the session before (if any) is still the one shown
    app.inputs.start_pending = false;
    app.inputs.error = "This text was not taken: " + e.msg +
                       (app.engine.started ? ". The tokens below are still from the text before." : ".");
  }
  app.inputs.step_after_start = false;
}

void App::use_default_sampler() {
  whatif.sampler = default_sampler();
  send_sampler();
  inputs.sampler_note.clear();
}

void App::notices() {
  const float font = ImGui::GetFontSize();
  if (!inputs.error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, readable(ImVec4(1.0f, 0.4f, 0.35f, 1)));
    ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x - font * 4);
    ImGui::TextUnformatted(inputs.error.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
    ImGui::SameLine();
    if (ImGui::SmallButton("ok##input_error")) {
      if (msgs.error.size() && inputs.error.find(msgs.error) != std::string::npos)
        msgs.error.clear();  // the same message below
      inputs.error.clear();
    }
  } else if (input_changed()) {
    ImGui::TextDisabled("The text in the box is new: Step (or Enter, or Start) starts again from it.");
  }
  if (!inputs.sampler_note.empty()) {
    ImGui::TextColored(readable(ImVec4(0.45f, 0.8f, 1.0f, 1)), "%s", inputs.sampler_note.c_str());
    ImGui::SameLine();
    if (ImGui::SmallButton("Use the defaults")) use_default_sampler();
    tooltip(*this, "temperature 1, top-k off, top-p 0.90, no repetition penalty, seed 0");
    ImGui::SameLine();
    if (ImGui::SmallButton("Keep them")) inputs.sampler_note.clear();
  }
}

}  // namespace dsgui
