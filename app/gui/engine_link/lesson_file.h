#pragma once
// A lesson: a guided tour a teacher writes as a JSON file (README, "Lessons"). Each
// step says what the window shows (model, prompt, steps, view, layer, head, position,
// stage, settings, heads off) as the command line's options would, and what the
// caption says, with live numbers ({weight}, {token}, ...) filled in from the step.
// This file reads and checks the format; no GL, no ImGui (the window's part is in
// app/gui/lessons/).
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dsgui {

struct LessonStep {
  std::string title, caption, equation, question, answer;
  int key = -1;                   // the key position the caption's {score}/{weight} read (-1: the query's own)
  bool needs_real_model = false;  // "model": "open": the GGUF or Hugging Face model open in the window
  std::vector<std::string> args;  // the step as command-line options (--model M --steps N --view V ...)
  std::string error;              // why the step cannot be shown ("" when it can), naming the step
};

struct Lesson {
  std::string name;  // the file's name, for messages
  std::string title, about;
  std::vector<LessonStep> steps;
  std::vector<std::string> errors;  // every problem found, each naming its step (or the file)
};

// Checks a step's options as the window would (parse_options): returns "" or the
// message. The window passes its own; tests may pass another.
using LessonOptionCheck = std::function<std::string(const std::vector<std::string>& args)>;

// Reads a lesson from its text. A problem in one step marks that step (its error, also
// in Lesson::errors) and the others still open; text that is not a lesson at all (bad
// JSON, no steps) gives a lesson with no steps and one error naming the file.
// file_exists: whether a model or trace file named by a step is there (missing ones are
// the step's error).
Lesson parse_lesson(const std::string& text, const std::string& name, const LessonOptionCheck& check,
                    const std::function<bool(const std::string&)>& file_exists);
// Reads the file (a path) and parses it; a file that cannot be read is one error.
Lesson load_lesson(const std::string& path, const LessonOptionCheck& check);

// The message for a position past the end of the text a step wrote ("" when within):
// pos and key as the step asks, n the number of tokens.
std::string lesson_position_error(const Lesson& l, int step, int pos, int key, int n);

// The folder of the shipped lessons ($DECODERSCOPE_DATA/lessons when set and there, else
// the source tree's assets/lessons), and their files sorted by name.
std::string lessons_dir();
std::vector<std::string> shipped_lessons();
// A lesson named on the command line: a file path, or the name of a shipped lesson with
// or without its number ("attention-mask", "1-attention-mask"); "" when none matches.
std::string find_lesson(const std::string& name);

// "step 3 (Scores)": how messages name a step (0-based index).
std::string lesson_step_name(const Lesson& l, int step);

// The caption with every {name} replaced by values[name]; unknown names are left as
// they are and listed in `unknown` (when given).
std::string fill_caption(const std::string& text, const std::map<std::string, std::string>& values,
                         std::vector<std::string>* unknown = nullptr);

// A step as JSON text (for "Add this view as a step"): the options in args read back
// into the format's keys, and a caption to write.
std::string lesson_step_json(const std::vector<std::string>& args, const std::string& title,
                             const std::string& caption);
// Appends a step (JSON text of one object) to the lesson file at path, making the file
// when it is not there; false and the reason in why when it cannot.
bool append_lesson_step(const std::string& path, const std::string& step_json, std::string& why);

}  // namespace dsgui
