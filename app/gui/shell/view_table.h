#pragma once
// The table of the window's views, as the shell (menus, tabs, the event loop) sees it.
// The rows are written in views/views.cpp, a view's draw function and the state only it
// needs in a file of its own (views/NAME.cpp). A view that asks the engine for something
// posts a command (engine_link/messages.h) and its row says whether it waits for the
// answer, takes the answer, and stops waiting when a command fails; the shell loops over
// the rows and names no view. Adding a view is adding its file and its row (and, for a
// new command, the worker's handler).
#include <span>
#include <string>
#include <string_view>

#include "engine_link/messages.h"

namespace dsgui {

class App;

struct ViewInfo {
  const char* id;     // --view ID
  const char* title;  // the tab's label
  const char* help;   // one sentence: the tab's tooltip and the view's caption
  void (*draw)(App& app);
  // The views that ask the worker (null for the others): whether an answer is on its
  // way; take the worker's event if it is the view's answer (true: taken); a command
  // failed (the message is on the status line): stop waiting.
  bool (*waiting)(App& app) = nullptr;
  bool (*answer)(App& app, Event& e) = nullptr;
  void (*failed)(App& app) = nullptr;
  // A model was loaded: keep the view's own choices within it.
  void (*model_loaded)(App& app) = nullptr;
  // Right (+1) and Left (-1), and a Play tick, while the view is on screen: true when the
  // view took them (the window then does not step the trace). A Play tick sets `playing`
  // false when the view has nothing more to show.
  bool (*arrow)(App& app, int dir) = nullptr;
  bool (*play)(App& app, bool& playing) = nullptr;
};

std::span<const ViewInfo> all_views();
// The row of the view with this id, or -1.
int view_index(std::string_view id);
// "attention, heads, ... or branches", for messages.
std::string view_id_list();
// Whether any view waits for the worker; "Logit lens, Beam search" (the titles of those
// that do, "" when none), for a scripted run's messages.
bool views_waiting(App& app);
std::string views_waiting_list(App& app);

}  // namespace dsgui
