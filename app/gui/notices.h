#pragma once
// Messages beside the input that caused them, readable colours in both themes, the
// legend of the token strip's chips and markers, and what the text boxes cannot hold.
#include <string>

#include "imgui.h"

struct GLFWwindow;

namespace dsgui {

class App;

// The window's theme is light (its background is bright).
bool light_background();
// c made dark enough to read on a light background (unchanged on a dark one).
ImVec4 readable(ImVec4 c);
// Black or white, whichever reads better on bg.
ImU32 text_on(ImU32 bg);
// s cut (with "...") to fit width pixels in the current font; s when it fits.
std::string fit_text(const std::string& s, float width);
// The legend of the token strip: what each chip colour and the orange markers mean.
void chip_legend(App& app);
// Characters beyond U+FFFF (emoji) cannot go into the window's text boxes (Dear ImGui
// holds 16-bit characters): typed ones are left out, pasted ones would become U+FFFD;
// either way the box's message names the real code point.
void watch_wide_characters(GLFWwindow* win, App& app);
std::string wide_char_message(unsigned cp, bool pasted);

namespace ev {
struct Error;
}
// The session started (ev::Started): it runs the text sent with the Start, and a Step
// pressed with that new text is taken now.
void started_with_text(App& app);
// ev::Error: a refused text or a model that did not open, said beside the boxes.
void refused_input(App& app, const ev::Error& e);

}  // namespace dsgui
