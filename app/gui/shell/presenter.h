#pragma once
// Presenter mode (F11): for a projector. The window goes full screen; the menu, the
// toolbar, the tabs and the captions are hidden, and the current view takes the whole
// window above one line with the view and the step, the end of the text written so far,
// and the keys that show every key (F1: step, layer, head, token, view) and leave (F11).
namespace dsgui {

class App;

void toggle_presenter(App& app);
// Draws the whole window's content in presenter mode (called by App::frame).
void presenter_frame(App& app);

}  // namespace dsgui
