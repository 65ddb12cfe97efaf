// The lesson format (engine_link/lesson_file.h): a lesson written by hand from the
// README's description opens with every step's options as the command line would say
// them; a bad step gives one message naming that step and the others still open; bad
// syntax is one message naming the file; captions fill in their live numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine_link/lesson_file.h"

namespace {

using namespace dsgui;

// A stand-in for the window's check (parse_options): only the views.
std::string check_views(const std::vector<std::string>& args) {
  const std::vector<std::string> views = {"attention", "heads", "next", "block", "kv", "roles"};
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--view" && std::find(views.begin(), views.end(), args[i + 1]) == views.end())
      return "unknown view '" + args[i + 1] + "'";
  return "";
}
bool no_files(const std::string&) { return false; }

size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

// Written from the README's description alone.
const char* kHandWritten = R"JSON({
  "title": "Two heads",
  "model": "builtin:stories",
  "prompt": "Once upon a time",
  "steps": [
    {"title": "Look", "view": "attention", "steps": 3, "layer": 1, "head": 0, "select": 4, "key": 2,
     "caption": "Row {query} reads {key_token} with weight {weight}.", "equation": "softmax(QK^T/sqrt(d_k) + M)"},
    {"title": "Ask", "view": "next", "steps": 3, "temperature": 0.5, "top-k": 5,
     "question": "Which token comes next?", "answer": "{token}"},
    {"title": "Off", "view": "heads", "steps": 2, "head-off": ["0:1", "1:2"], "head": "mean", "scores": true}
  ]
})JSON";

TEST(LessonFile, HandWrittenLessonOpensWithTheOptionsOfEachStep) {
  Lesson l = parse_lesson(kHandWritten, "two.json", check_views, no_files);
  ASSERT_TRUE(l.errors.empty()) << l.errors[0];
  EXPECT_EQ(l.title, "Two heads");
  ASSERT_EQ(l.steps.size(), 3u);
  const std::vector<std::string> want0 = {
      "--model",   "builtin:stories", "--prompt", "Once upon a time", "--steps", "3",        "--view",
      "attention", "--layer",         "1",        "--head",           "0",       "--select", "4"};
  EXPECT_EQ(l.steps[0].args, want0);
  EXPECT_EQ(l.steps[0].key, 2);
  EXPECT_EQ(l.steps[0].equation, "softmax(QK^T/sqrt(d_k) + M)");
  EXPECT_EQ(l.steps[1].question, "Which token comes next?");
  const auto& a1 = l.steps[1].args;
  EXPECT_NE(std::find(a1.begin(), a1.end(), "--temperature"), a1.end());
  EXPECT_EQ(*(std::find(a1.begin(), a1.end(), "--top-k") + 1), "5");
  const auto& a2 = l.steps[2].args;
  EXPECT_EQ(std::count(a2.begin(), a2.end(), "--head-off"), 2);
  EXPECT_EQ(*(std::find(a2.begin(), a2.end(), "--head") + 1), "mean");
  EXPECT_NE(std::find(a2.begin(), a2.end(), "--scores"), a2.end());
}

// Each kind of bad step: one message, naming the step (number and title), and the
// steps around it still open.
TEST(LessonFile, BadStepsGiveOneMessageNamingTheStepAndTheRestOpen) {
  const char* text = R"({"model": "builtin:stories", "steps": [
    {"title": "Fine", "view": "attention"},
    {"title": "Nowhere", "view": "nowhere"},
    {"title": "Gone", "model": "/no/such/model.gguf"},
    {"title": "Typo", "veiw": "attention"},
    {"title": "Wrong type", "steps": "ten"},
    {"title": "Also fine", "view": "next"}]})";
  Lesson l = parse_lesson(text, "bad.json", check_views, no_files);
  ASSERT_EQ(l.steps.size(), 6u);
  ASSERT_EQ(l.errors.size(), 4u) << l.errors[0] << "\n" << l.errors.back();
  EXPECT_TRUE(l.steps[0].error.empty());
  EXPECT_TRUE(l.steps[5].error.empty());
  const char* names[] = {"bad.json step 2 (Nowhere)", "bad.json step 3 (Gone)", "bad.json step 4 (Typo)",
                         "bad.json step 5 (Wrong type)"};
  const char* whats[] = {"nowhere", "/no/such/model.gguf", "veiw", "steps"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(l.errors[size_t(i)], l.steps[size_t(i + 1)].error);
    EXPECT_EQ(l.errors[size_t(i)].rfind(names[i], 0), 0u) << l.errors[size_t(i)];
    EXPECT_NE(l.errors[size_t(i)].find(whats[i]), std::string::npos) << l.errors[size_t(i)];
    EXPECT_EQ(count_of(l.errors[size_t(i)], "step "), 1u) << l.errors[size_t(i)];
  }
  // A model file that is there is no error.
  Lesson ok = parse_lesson(text, "bad.json", check_views, [](const std::string&) { return true; });
  EXPECT_TRUE(ok.steps[2].error.empty()) << ok.steps[2].error;
}

TEST(LessonFile, BadSyntaxIsOneMessageNamingTheFile) {
  Lesson l = parse_lesson("{\"steps\": [ {\"view\": \"attention\"} ", "cut.json", check_views, no_files);
  EXPECT_TRUE(l.steps.empty());
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0].rfind("cut.json: not valid JSON", 0), 0u) << l.errors[0];
  Lesson none = parse_lesson("{\"title\": \"x\"}", "none.json", check_views, no_files);
  ASSERT_EQ(none.errors.size(), 1u);
  EXPECT_NE(none.errors[0].find("steps"), std::string::npos);
  Lesson missing = load_lesson("/no/such/lesson.json", check_views);
  ASSERT_EQ(missing.errors.size(), 1u);
  EXPECT_NE(missing.errors[0].find("/no/such/lesson.json"), std::string::npos);
}

TEST(LessonFile, PositionPastTheEndNamesTheStep) {
  Lesson l = parse_lesson(kHandWritten, "two.json", check_views, no_files);
  EXPECT_EQ(lesson_position_error(l, 0, 4, 2, 5), "");
  const std::string e = lesson_position_error(l, 0, 40, 2, 5);
  EXPECT_EQ(e.rfind("two.json step 1 (Look): position 40 is past the end", 0), 0u) << e;
  EXPECT_NE(lesson_position_error(l, 1, 3, 9, 5).find("key 9"), std::string::npos);
}

TEST(LessonFile, CaptionsFillKnownNamesAndKeepTheOthers) {
  std::vector<std::string> unknown;
  const std::string s = fill_caption("score {score}, after the mask {masked}, p {p} {nope}",
                                     {{"score", "1.5"}, {"masked", "-inf"}, {"p", "0.25"}}, &unknown);
  EXPECT_EQ(s, "score 1.5, after the mask -inf, p 0.25 {nope}");
  EXPECT_EQ(unknown, std::vector<std::string>{"nope"});
  EXPECT_EQ(fill_caption("no braces { here", {}), "no braces { here");
}

// "Add this view as a step" writes steps that read back as the same options.
TEST(LessonFile, AddedStepsReadBackAsTheSameOptions) {
  const auto path = std::filesystem::temp_directory_path() / "ds_lesson_added.json";
  std::filesystem::remove(path);
  const std::vector<std::string> args = {"--model", "builtin:dates", "--steps",       "4",   "--view",     "block",
                                         "--head",  "mean",          "--temperature", "0.5", "--head-off", "0:1",
                                         "--scores"};
  std::string why;
  ASSERT_TRUE(append_lesson_step(path.string(), lesson_step_json(args, "Mine", "Write here."), why)) << why;
  ASSERT_TRUE(append_lesson_step(path.string(), lesson_step_json(args, "Again", ""), why)) << why;
  Lesson l = load_lesson(path.string(), check_views);
  ASSERT_TRUE(l.errors.empty()) << l.errors[0];
  ASSERT_EQ(l.steps.size(), 2u);
  EXPECT_EQ(l.steps[0].title, "Mine");
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(l.steps[1].args), sorted(args));
  std::ofstream(path) << "{ broken";
  EXPECT_FALSE(append_lesson_step(path.string(), lesson_step_json(args, "x", ""), why));
  EXPECT_NE(why.find("not valid JSON"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
