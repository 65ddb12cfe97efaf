#include "engine_link/lesson_file.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/data_dir.h"

namespace dsgui {

namespace {

using json = nlohmann::json;

// The keys a step (or the lesson, as every step's default) may set that are options of
// the command line: the key is the option without its dashes.
enum class Kind { Text, Integer, Number, Switch, List };
struct OptionKey {
  const char* key;
  Kind kind;
};
const OptionKey kOptionKeys[] = {
    {"model", Kind::Text},
    {"tokenizer", Kind::Text},
    {"trace", Kind::Text},
    {"prompt", Kind::Text},
    {"source", Kind::Text},
    {"steps", Kind::Integer},
    {"view", Kind::Text},
    {"layer", Kind::Integer},
    {"head", Kind::Integer},
    {"select", Kind::Integer},
    {"stage", Kind::Text},
    {"kv-pane", Kind::Text},
    {"cursor", Kind::Integer},
    {"temperature", Kind::Number},
    {"top-k", Kind::Integer},
    {"top-p", Kind::Number},
    {"seed", Kind::Integer},
    {"penalty-alpha", Kind::Number},
    {"repetition-penalty", Kind::Number},
    {"beam", Kind::Integer},
    {"length-penalty", Kind::Number},
    {"head-off", Kind::List},
    {"preview-temperature", Kind::Number},
    {"rank-heads", Kind::Integer},
    {"attribute-token", Kind::Text},
    {"attribute-vs", Kind::Text},
    {"attribute-head", Kind::Text},
    {"patch-clean", Kind::Text},
    {"patch-corrupt", Kind::Text},
    {"patch-answer", Kind::Text},
    {"patch-wrong", Kind::Text},
    {"patch-prefix", Kind::Text},
    {"patch-site", Kind::Text},
    {"patch-layer", Kind::Text},
    {"last-tokens", Kind::Integer},
    {"zoom", Kind::Number},
    {"scores", Kind::Switch},
    {"mask-only", Kind::Switch},
    {"log", Kind::Switch},
    {"no-kv-cache", Kind::Switch},
    {"compare-prompt", Kind::Text},
    {"compare-source", Kind::Text},
    {"compare-model", Kind::Text},
    {"compare-temperature", Kind::Number},
    {"compare-seed", Kind::Integer},
    {"compare-head-off", Kind::Text},
    {"compare-part", Kind::Text},
};
// The keys of a step that are the lesson's own.
const char* kStepKeys[] = {"title", "caption", "equation", "question", "answer", "key"};
// The keys of the lesson itself besides the options' defaults.
const char* kLessonKeys[] = {"title", "about", "steps", "format"};

const OptionKey* option_key(const std::string& k) {
  for (const OptionKey& o : kOptionKeys)
    if (k == o.key) return &o;
  return nullptr;
}

template <size_t N>
bool one_of(const std::string& k, const char* const (&names)[N]) {
  for (const char* n : names)
    if (k == n) return true;
  return false;
}

std::string number_text(const json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  std::ostringstream s;
  s << v.get<double>();
  return s.str();
}

// One option's value as command-line words; throws std::runtime_error naming the key
// when its JSON type is wrong.
void option_words(const OptionKey& o, const json& v, std::vector<std::string>& args) {
  const std::string opt = std::string("--") + o.key;
  auto bad = [&](const char* want) { throw std::runtime_error(std::string("\"") + o.key + "\" must be " + want); };
  switch (o.kind) {
    case Kind::Text:
      if (!v.is_string()) bad("text");
      args.insert(args.end(), {opt, v.get<std::string>()});
      break;
    case Kind::Integer:
      if (std::string(o.key) == "head" && v.is_string() && v.get<std::string>() == "mean") {
        args.insert(args.end(), {opt, "mean"});
        break;
      }
      if (!v.is_number_integer()) bad("a whole number");
      args.insert(args.end(), {opt, number_text(v)});
      break;
    case Kind::Number:
      if (!v.is_number()) bad("a number");
      args.insert(args.end(), {opt, number_text(v)});
      break;
    case Kind::Switch:
      if (!v.is_boolean()) bad("true or false");
      if (v.get<bool>()) args.push_back(opt);
      break;
    case Kind::List:
      if (!v.is_array()) bad("a list such as [\"0:1\", \"1:3\"]");
      for (const json& e : v) {
        if (!e.is_string()) bad("a list of \"LAYER:HEAD\" texts");
        args.insert(args.end(), {opt, e.get<std::string>()});
      }
      break;
  }
}

std::string text_of(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return "";
  if (!it->is_string()) throw std::runtime_error(std::string("\"") + key + "\" must be text");
  return it->get<std::string>();
}

bool is_file_spec(const std::string& m) {
  return !m.empty() && m != "open" && m.rfind("builtin:", 0) != 0 && m.rfind("random:", 0) != 0;
}

// The step's options: the lesson's defaults, then the step's own keys.
void read_step(const json& defaults, const json& s, LessonStep& st,
               const std::function<bool(const std::string&)>& exists) {
  st.title = text_of(s, "title");
  st.caption = text_of(s, "caption");
  st.equation = text_of(s, "equation");
  st.question = text_of(s, "question");
  st.answer = text_of(s, "answer");
  if (auto k = s.find("key"); k != s.end()) {
    if (!k->is_number_integer() || k->get<long long>() < 0)
      throw std::runtime_error("\"key\" must be a position, 0 or more");
    st.key = int(k->get<long long>());
  }
  for (const auto& [k, v] : s.items())
    if (!option_key(k) && !one_of(k, kStepKeys))
      throw std::runtime_error("unknown key \"" + k + "\" (a step's keys are in the README, \"Lessons\")");
  json merged = defaults;
  for (const auto& [k, v] : s.items())
    if (option_key(k)) merged[k] = v;
  for (const OptionKey& o : kOptionKeys) {
    auto it = merged.find(o.key);
    if (it == merged.end()) continue;
    if (std::string(o.key) == "model" && it->is_string() && it->get<std::string>() == "open") {
      st.needs_real_model = true;  // the window's open model: no --model
      continue;
    }
    option_words(o, *it, st.args);
    if ((std::string(o.key) == "model" || std::string(o.key) == "trace") && is_file_spec(it->get<std::string>()) &&
        !exists(it->get<std::string>()))
      throw std::runtime_error(std::string(o.key) + " file '" + it->get<std::string>() + "' not found");
  }
}

}  // namespace

std::string lessons_dir() {
  // Installed, the build tree, then $DECODERSCOPE_DATA (util/data_dir.h); the build tree's
  // place when none has it (the lists are then empty).
  const std::string d = ds::find_data("lessons");
  return d.empty() ? (std::filesystem::path(DS_SOURCE_DIR) / "assets" / "lessons").string() : d;
}

std::vector<std::string> shipped_lessons() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(lessons_dir(), ec))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string find_lesson(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return name;
  for (const std::string& p : shipped_lessons()) {
    const std::string stem = fs::path(p).stem().string();
    const size_t dash = stem.find('-');
    if (stem == name || (dash != std::string::npos && stem.substr(dash + 1) == name) ||
        (dash != std::string::npos && stem.substr(0, dash) == name))
      return p;
  }
  return "";
}

std::string lesson_step_name(const Lesson& l, int step) {
  std::string s = l.name + " step " + std::to_string(step + 1);
  if (step >= 0 && step < int(l.steps.size()) && !l.steps[size_t(step)].title.empty())
    s += " (" + l.steps[size_t(step)].title + ")";
  return s;
}

Lesson parse_lesson(const std::string& text, const std::string& name, const LessonOptionCheck& check,
                    const std::function<bool(const std::string&)>& file_exists) {
  Lesson l;
  l.name = name;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    l.errors.push_back(name + ": not valid JSON (byte " + std::to_string(e.byte) + "); the lesson has no steps");
    return l;
  }
  if (!doc.is_object() || !doc.contains("steps") || !doc["steps"].is_array() || doc["steps"].empty()) {
    l.errors.push_back(name + ": a lesson is an object with a list of \"steps\" (README, \"Lessons\")");
    return l;
  }
  json defaults = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (option_key(k) && k != "steps")  // the lesson's "steps" is its list of steps
      defaults[k] = v;
    else if (!one_of(k, kLessonKeys))
      l.errors.push_back(name + ": unknown key \"" + k + "\" (ignored)");
  }
  try {
    l.title = text_of(doc, "title");
    l.about = text_of(doc, "about");
  } catch (const std::exception& e) {
    l.errors.push_back(name + ": " + e.what());
  }
  if (l.title.empty()) l.title = name;
  for (const json& s : doc["steps"]) {
    l.steps.emplace_back();
    LessonStep& st = l.steps.back();
    const int i = int(l.steps.size()) - 1;
    try {
      if (!s.is_object()) throw std::runtime_error("a step is an object {\"view\": ..., \"caption\": ...}");
      read_step(defaults, s, st, file_exists);
      if (check && st.error.empty()) st.error = check(st.args);
    } catch (const std::exception& e) {
      st.error = e.what();
    }
    if (!st.error.empty()) {
      st.error = lesson_step_name(l, i) + ": " + st.error;
      l.errors.push_back(st.error);
    }
  }
  return l;
}

Lesson load_lesson(const std::string& path, const LessonOptionCheck& check) {
  const std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    Lesson l;
    l.name = name;
    l.errors.push_back("cannot read the lesson " + path);
    return l;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  // Model and trace files are opened as the command line would (relative to the folder
  // the window was started in).
  return parse_lesson(ss.str(), name, check, [](const std::string& p) {
    std::error_code ec;
    return std::filesystem::exists(p, ec);
  });
}

std::string lesson_position_error(const Lesson& l, int step, int pos, int key, int n) {
  if (pos >= n)
    return lesson_step_name(l, step) + ": position " + std::to_string(pos) + " is past the end (the text has " +
           std::to_string(n) + " tokens, positions 0 to " + std::to_string(n - 1) + "); the last is shown";
  if (key >= n)
    return lesson_step_name(l, step) + ": key " + std::to_string(key) + " is past the end (the text has " +
           std::to_string(n) + " tokens)";
  return "";
}

std::string fill_caption(const std::string& text, const std::map<std::string, std::string>& values,
                         std::vector<std::string>* unknown) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t close = text[i] == '{' ? text.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += text[i];
      continue;
    }
    const std::string name = text.substr(i + 1, close - i - 1);
    auto it = values.find(name);
    if (it == values.end()) {
      if (unknown) unknown->push_back(name);
      out += text.substr(i, close - i + 1);
    } else {
      out += it->second;
    }
    i = close;
  }
  return out;
}

std::string lesson_step_json(const std::vector<std::string>& args, const std::string& title,
                             const std::string& caption) {
  json s = json::object();
  s["title"] = title;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) continue;
    const OptionKey* o = option_key(args[i].substr(2));
    if (!o) continue;
    if (o->kind == Kind::Switch) {
      s[o->key] = true;
      continue;
    }
    if (i + 1 >= args.size()) break;
    const std::string& v = args[++i];
    if (o->kind == Kind::Text || (std::string(o->key) == "head" && v == "mean"))
      s[o->key] = v;
    else if (o->kind == Kind::Integer)
      s[o->key] = std::stoll(v);
    else if (o->kind == Kind::Number)
      s[o->key] = std::stod(v);
    else
      s[o->key].push_back(v);
  }
  s["caption"] = caption;
  return s.dump(2);
}

bool append_lesson_step(const std::string& path, const std::string& step_json, std::string& why) {
  json doc = {{"title", "A new lesson"}, {"steps", json::array()}};
  if (std::ifstream f(path); f) {
    try {
      doc = json::parse(f);
    } catch (const json::parse_error& e) {
      why = path + " is not valid JSON (byte " + std::to_string(e.byte) + "): not changed";
      return false;
    }
    if (!doc.is_object() || !doc["steps"].is_array()) {
      why = path + " is not a lesson (no list of steps): not changed";
      return false;
    }
  }
  doc["steps"].push_back(json::parse(step_json));
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  if (!out) {
    why = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace dsgui
