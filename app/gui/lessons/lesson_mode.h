#pragma once
// Lesson mode: a guided tour through the window's views (README, "Lessons"). A step's
// options drive the same state a scripted run does (harness/script.h): the window sets
// them up with a ScriptedRun of its own, and a scripted run (--lesson NAME
// --lesson-step K --screenshot F, --export DIR) takes the step's options as its command
// line. The caption panel sits beside the view (under it on slides).
#include <string>
#include <vector>

#include "engine_link/lesson_file.h"

namespace dsgui {

class App;

// --lesson NAME [--lesson-step K] [--export DIR]: found in argv and taken out; the rest
// of the command line is kept in `rest` (its options win over the lesson's).
struct LessonCommand {
  std::string name, path, export_dir;
  int step = 0;  // 1-based; 0: the first
  std::vector<std::string> rest;
};
// False when argv has no --lesson; throws OptionError for a bad --lesson-step or a lesson
// that cannot be found.
bool lesson_command(int argc, char** argv, LessonCommand& c);

// Reads a lesson with the window's own check of each step's options.
Lesson open_lesson(const std::string& path);
// The command line of step i (argv[0] included): the lesson's options, then `rest`.
// Fails over to `rest` alone when the step cannot be shown (its error says why).
std::vector<std::string> lesson_step_argv(const Lesson& l, int i, const std::vector<std::string>& rest);
// Whether step i can be shown here: a step on "the open model" needs --model in rest
// (scripted) or a GGUF or Hugging Face model open (the window).
bool lesson_step_skipped(const Lesson& l, int i, const std::vector<std::string>& rest);

// A scripted run shows step i's caption (slides: under the view, no buttons).
// skipped: the step needs a model the command line does not give.
void lesson_attach(App& app, Lesson l, int i, bool slides, bool skipped);
// The window opens the lesson at step i and sets it up (the menu, --lesson without
// --screenshot).
void lesson_open(App& app, Lesson l, int i);

}  // namespace dsgui
