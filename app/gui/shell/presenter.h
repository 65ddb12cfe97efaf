#pragma once
// Presenter mode (F11): for a projector. The window goes full screen; the menu, the
// toolbar, the tabs and the captions are hidden; one line of the text written so far
// stays on top, and the current view takes the rest above one line that says where the
// run is and which keys step (Right, Left, Space), change the layer, head and token (Up,
// Down, [ ], , .), change the view (Page Down, Page Up), show every key (F1) and leave (F11).
namespace dsgui {

class App;

void toggle_presenter(App& app);
// Draws the whole window's content in presenter mode (called by App::frame).
void presenter_frame(App& app);

}  // namespace dsgui
