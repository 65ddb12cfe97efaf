#pragma once
// What the shell asks of lesson mode (app/gui/lessons/lesson_mode.cpp) each frame.
#include <string>

namespace dsgui {

class App;

// A lesson's caption panel is up (not left to explore).
bool lesson_active(const App& app);
// The File menu's Lessons submenu: the shipped lessons, a file, back to the tour.
void lesson_menu(App& app);
// Before the window's body: Page Down / Page Up, the step being set up; when a lesson is
// up, the body goes into a child window beside (or above) the caption panel.
void lesson_begin(App& app);
// After the body: closes the child and draws the caption panel.
void lesson_end(App& app);
// For a screenshot's sidecar: the step, its caption as shown and its live numbers, as a
// JSON object ("null" with no lesson).
std::string lesson_sidecar(const App& app);

}  // namespace dsgui
