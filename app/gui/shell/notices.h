#pragma once
// Messages beside the input that caused them, the legend of the token strip's chips and
// markers, and what the text boxes cannot hold.
#include <string>

#include "imgui.h"
#include "widgets/text.h"

struct GLFWwindow;

namespace dsgui {

class App;

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
