#pragma once
// Saving and opening trace files from the window without stopping it: a save runs on
// the engine thread (cmd::SaveTrace), an open from the File menu on a thread of its
// own; both report bytes done of the total, shown as a progress bar each frame
// (trace_io_frame). Quitting meanwhile is safe: an open is stopped and waited for, a
// save finishes (the engine thread ends after its command; the file is renamed into
// place whole or not at all).
#include <string>

#include "probe/trace.h"

namespace dsgui {

class App;

// The progress sink a save passes to Trace::save (the worker calls it on its thread).
ds::TraceProgress trace_save_progress(App& app, const std::string& path);
// Starts opening path on a background thread; false (with a message) while another
// open runs.
bool open_trace_in_background(App& app, const std::string& path);
// True while an open or a save is under way.
bool trace_io_busy(App& app);
// Per frame: takes a finished open into the window (or shows why it failed) and draws
// the progress of what is under way.
void trace_io_frame(App& app);

}  // namespace dsgui
