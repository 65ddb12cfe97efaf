#pragma once
// The File menu's recent models and traces, remembered between runs in the settings file
// (engine_link/settings.h), and the folder the window saves into by default.
#include <string>

#include "engine_link/settings.h"

namespace dsgui {

class App;

// Reads the settings file at path ("": none, nothing is remembered). A damaged file is
// ignored: the notice goes to stderr and the status line.
void recent_start(App& app, const std::string& path);
// A model loaded / a trace opened or saved: first in its list, and the file written.
void recent_model(App& app, const std::string& spec);
void recent_trace(App& app, const std::string& path);
// The File menu's "Recent models" and "Recent traces" submenus.
void recent_menu(App& app);
// What is remembered now, and where (for the scripted run's sidecar).
const Settings& recent_settings(App& app);
// Pictures and traces go to the current folder when it is writable, else to the XDG
// pictures and documents folders (engine_link/settings.h, output_dir).
void default_save_folders(App& app);

}  // namespace dsgui
