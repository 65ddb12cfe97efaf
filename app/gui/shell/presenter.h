#pragma once
// Presenter mode (F11): for a projector. The window goes full screen; the menu, the
// toolbar, the token strip, the tabs and the captions are hidden, and the current view
// takes the whole window above one line that says where the run is and which keys
// step (Right, Left, Space), change the view (Page Down, Page Up) and leave (F11).
namespace dsgui {

class App;

void toggle_presenter(App& app);
// Draws the whole window's content in presenter mode (called by App::frame).
void presenter_frame(App& app);

}  // namespace dsgui
