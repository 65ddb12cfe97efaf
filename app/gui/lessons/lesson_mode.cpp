#include "lessons/lesson_mode.h"

#include <GLFW/glfw3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine_link/models.h"
#include "harness/script.h"
#include "imgui.h"
#include "imgui_stdlib.h"
#include "shell/app.h"
#include "shell/lesson_hooks.h"
#include "shell/options.h"
#include "shell/presenter.h"
#include "views/views.h"

namespace dsgui {

namespace {

// The lesson open in the window, and the step being set up.
struct LessonState {
  Lesson lesson;
  bool on = false;         // a lesson is open
  bool exploring = false;  // the class left the tour (the panel is down)
  bool slides = false;     // --export: the caption under the view, no buttons
  bool scripted = false;   // a scripted run set the step up (no runner of ours)
  int step = 0;
  bool revealed = false;          // the question's answer is shown
  bool pending = false;           // set the step up once the model being loaded is in
  std::vector<std::string> rest;  // the command line's own options (they win over the lesson's)
  Options opts;                   // the step's options
  std::unique_ptr<ScriptedRun> run;
  std::string note;  // why the step is not shown as written (a bad step, no model)
  // File > Lessons: a file to open, the lesson being written by "Add this view as a step".
  bool open_popup = false;
  std::string open_path, write_path = "my-lesson.json", write_msg;
};

LessonState& ls(App& app) { return app.state<LessonState>(); }
const LessonState& ls(const App& app) { return const_cast<App&>(app).state<LessonState>(); }

// The live numbers a caption quotes, for the step as the window shows it.
struct LiveValues {
  std::map<std::string, std::string> text;
  std::map<std::string, double> num;
  void set(const std::string& k, double v, const char* fmt = "%.3g") {  // 3 digits: read from the back of a room
    num[k] = v;
    char b[64];
    if (std::isinf(v))
      std::snprintf(b, sizeof b, "%s", v < 0 ? "-inf" : "inf");
    else if (v == 0)
      std::snprintf(b, sizeof b, "0");  // exactly 0 (a masked weight), not 0.0000
    else if (std::fabs(v) < 1e-3 && std::string(fmt) == "%.3g")
      std::snprintf(b, sizeof b, "%.5f", v);  // 0.00003, not 3e-05: a class reads decimals
    else
      std::snprintf(b, sizeof b, fmt, v);
    text[k] = b;
  }
};

// The query row's attention numbers: {score} (scaled, before softmax), {masked} (after
// the mask: the score, or -inf), {weight} (after softmax), at layer, head, (q, k).
void attention_values(const App& app, int q, int k, LiveValues& v) {
  const ds::Trace& tr = app.history.trace;
  const int c = app.sel.cursor, L = app.sel.layer, H = app.sel.head;
  if (L < 0 || L >= tr.config.n_layers || q < 0 || k < 0) return;
  try {
    const ds::MatRM sc = tr.attention(L, H, c, false, true), p = tr.attention(L, H, c, false, false);
    if (q >= sc.rows() || k >= sc.cols()) return;
    const int s = tr.step_of(q), keys = tr.positions(s), r = q - tr.steps[size_t(s)].pos0;
    const std::vector<uint8_t> m = tr.step_mask(L, s);
    const bool allowed = k < keys && size_t(r * keys + k) < m.size() && m[size_t(r * keys + k)];
    v.set("score", sc(q, k));
    v.set("masked", allowed ? double(sc(q, k)) : -std::numeric_limits<double>::infinity());
    v.set("weight", p(q, k));
  } catch (const std::exception&) {
    // a trace without attention (or a model without this layer): no such numbers
  }
}

// The cursor step's draw: {token}, {prob} (after the filters), {p_raw}, {rank}, {kept},
// {temperature}, {top} and {top_prob} (the most probable token before any setting), and
// that token's {top_temp} (after temperature) and {top_final} (after every setting).
void sample_values(const ds::TraceStep& st, LiveValues& v) {
  if (!st.sample) return;
  const ds::SampleRecord& s = *st.sample;
  const ds::Candidate* top = nullptr;
  for (const ds::Candidate& c : s.candidates) {
    if (c.id == s.token) {
      v.text["token"] = visible(c.text);
      v.set("prob", c.p_final);
      v.set("p_raw", c.p_raw);
    }
    if (!top || c.p_raw > top->p_raw) top = &c;
  }
  if (top) {
    v.text["top"] = visible(top->text);
    v.set("top_prob", top->p_raw);     // before the settings
    v.set("top_temp", top->p_temp);    // after temperature
    v.set("top_final", top->p_final);  // after every setting (what the draw used)
  }
  v.set("token_id", s.token, "%.0f");
  v.set("rank", s.rank + 1, "%.0f");
  v.set("kept", s.n_kept, "%.0f");
  v.set("temperature", s.config.temperature, "%.2f");
}

LiveValues live_values(const App& app, const LessonStep* step) {
  LiveValues v;
  const ds::Trace& tr = app.history.trace;
  const int c = app.sel.cursor;
  if (c < 0 || c >= int(tr.steps.size())) return v;
  const int q = app.selected_position(), n = tr.positions(c);
  const int k = step && step->key >= 0 ? step->key : q;
  v.set("layer", app.sel.layer, "%.0f");
  v.set("head", app.sel.head, "%.0f");
  v.set("pos", q, "%.0f");
  v.set("key", k, "%.0f");
  v.set("step", c + 1, "%.0f");
  v.set("tokens", n, "%.0f");
  v.set("heads_off", double(app.whatif.heads_off.size()), "%.0f");
  const auto& toks = app.tokens();
  if (q >= 0 && q < int(toks.size())) v.text["query"] = visible(toks[size_t(q)].text);
  if (k >= 0 && k < int(toks.size())) v.text["key_token"] = visible(toks[size_t(k)].text);
  if (tr.steps[size_t(c)].forward_ms >= 0) v.set("forward_ms", tr.steps[size_t(c)].forward_ms, "%.2f");
  attention_values(app, q, k, v);
  sample_values(tr.steps[size_t(c)], v);
  return v;
}

const LessonStep* current(const LessonState& s) {
  return s.on && s.step >= 0 && s.step < int(s.lesson.steps.size()) ? &s.lesson.steps[size_t(s.step)] : nullptr;
}

// A step on "the open model" with a real one open (not built in, not random).
bool real_model_open(const App& app) {
  return app.engine.model && app.engine.model->spec.rfind("builtin:", 0) != 0 &&
         app.engine.model->spec.rfind("random:", 0) != 0;
}

// Why the step is not shown as written, once it is set up ("" when it is): its error, no
// model, a position past the end.
std::string step_note(const App& app, const LessonState& s) {
  const LessonStep* st = current(s);
  if (!st) return "";
  if (!s.note.empty() || s.run) return s.note;
  const int c = app.sel.cursor;
  if (c < 0 || c >= int(app.history.trace.steps.size())) return "";
  return lesson_position_error(s.lesson, s.step, s.opts.select, st->key, app.history.trace.positions(c));
}

// Sets the window up as step s.step says, through a ScriptedRun (the state --screenshot
// drives); a step that cannot be shown keeps the window as it is and says why.
void set_up_step(App& app, LessonState& s) {
  s.revealed = false;
  s.note.clear();
  s.run.reset();
  const LessonStep& st = s.lesson.steps[size_t(s.step)];
  if (!st.error.empty()) {
    s.note = st.error;
    return;
  }
  if (st.needs_real_model && !real_model_open(app)) {
    s.note =
        "skipped: this step walks a GGUF or Hugging Face model, and none is open (File > Open model, then "
        "Page Up and Page Down)";
    return;
  }
  const auto argv = lesson_step_argv(s.lesson, s.step, s.rest);
  std::vector<char*> ptrs;
  for (const std::string& a : argv) ptrs.push_back(const_cast<char*>(a.c_str()));
  try {
    s.opts = parse_options(int(ptrs.size()), ptrs.data());
  } catch (const OptionError& e) {
    s.note = lesson_step_name(s.lesson, s.step) + ": " + e.what();
    return;
  }
  const Options& o = s.opts;
  app.look.show_scores = o.scores;
  app.look.mask_only = o.mask_only;
  app.look.log_scale = o.log;
  beams_set(app, o.beam_width, o.length_penalty);
  if (!o.stage.empty()) block_open_stage(app, o.stage);
  if (!o.kv_pane.empty()) kv_open_pane(app, o.kv_pane);
  app.sel.layer = std::max(0, o.layer);
  app.sel.head = o.head;
  app.sel.pos = -1;
  app.whatif.sampler = o.sampler;
  app.whatif.heads_off.clear();
  app.whatif.cross_heads_off.clear();
  app.play.playing = false;
  s.run = std::make_unique<ScriptedRun>(s.opts, app, ImGui::GetTime(), nullptr);
  if (!o.trace.empty()) {
    if (app.open_trace(o.trace))
      s.run->replay();
    else
      s.run.reset(), s.note = lesson_step_name(s.lesson, s.step) + ": cannot open the trace " + o.trace;
    return;
  }
  const std::string spec = st.needs_real_model ? app.engine.model->spec
                           : o.model.empty()   ? default_model_spec()
                                               : o.model;
  app.engine.kv_cache = !o.no_kv_cache;
  if (!app.engine.model || app.engine.loading || app.engine.model->spec != spec || app.history.replay) {
    app.inputs.keep_text = o.has_prompt || o.has_source;
    app.inputs.prompt = o.prompt;
    app.inputs.source = o.source;
    app.load_model(spec, o.tokenizer);
  } else {
    app.inputs.prompt = o.has_prompt ? o.prompt : app.engine.model->prompt;
    app.inputs.source = o.has_source ? o.source : app.engine.model->source;
    app.send_sampler();
    app.start();
  }
  app.engine.started = false;  // the run waits for this session's start
}

void go(App& app, int i) {
  LessonState& s = ls(app);
  if (i < 0 || i >= int(s.lesson.steps.size())) {
    app.say(i < 0 ? "the first step of the lesson" : "the end of the lesson: Page Up goes back");
    return;
  }
  s.step = i;
  s.exploring = false;
  set_up_step(app, s);
}

void next(App& app) {
  LessonState& s = ls(app);
  const LessonStep* st = current(s);
  if (st && !st->question.empty() && !s.revealed && st->error.empty())
    s.revealed = true;
  else
    go(app, s.step + 1);
}

// The step's moves: Page Down / Page Up (a clicker sends them), the runner.
void keys_and_run(App& app, LessonState& s) {
  if (!app.scripted && !s.exploring && !ImGui::GetIO().WantTextInput) {
    if (app.key_pressed(GLFW_KEY_PAGE_DOWN, false)) next(app);
    if (app.key_pressed(GLFW_KEY_PAGE_UP, false)) go(app, s.step - 1);
  }
  if (!s.run) return;
  const double t = ImGui::GetTime();
  if (!s.run->advance(t, t)) {
    s.note = lesson_step_name(s.lesson, s.step) + ": " + (app.msgs.error.empty() ? "it stopped" : app.msgs.error);
    s.run.reset();
  } else if (s.run->shooting()) {
    s.run.reset();  // set up: the class may look around
  } else {
    glfwPostEmptyEvent();  // the next frame at once: an idle window waits up to 0.1 s for one
  }
}

void open_popup(App& app, LessonState& s) {
  if (s.open_popup) ImGui::OpenPopup("Open a lesson##lesson"), s.open_popup = false;
  if (!ImGui::BeginPopupModal("Open a lesson##lesson", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  ImGui::TextUnformatted("A lesson file (.json; the README's \"Lessons\" says how to write one).");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
  ImGui::InputText("file##lessonpath", &s.open_path);
  if (ImGui::Button("Open")) {
    lesson_open(app, open_lesson(s.open_path), 0);
    ImGui::CloseCurrentPopup();
  }
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
  ImGui::EndPopup();
}

// "Add this view as a step": the window's state as a step's options.
std::vector<std::string> current_args(App& app) {
  std::vector<std::string> a;
  if (app.history.replay)
    a.insert(a.end(), {"--trace", app.inputs.trace_path});
  else if (app.engine.model)
    a.insert(a.end(), {"--model", app.engine.model->spec});
  if (!app.history.replay) {
    a.insert(a.end(), {"--prompt", app.inputs.run_prompt});
    if (!app.inputs.run_source.empty()) a.insert(a.end(), {"--source", app.inputs.run_source});
    a.insert(a.end(), {"--steps", std::to_string(std::max(0, app.sel.cursor + 1))});
  }
  a.insert(a.end(),
           {"--view", all_views()[size_t(std::max(0, app.sel.view))].id, "--layer", std::to_string(app.sel.layer),
            "--head", app.sel.head < 0 ? "mean" : std::to_string(app.sel.head)});
  if (app.sel.pos >= 0) a.insert(a.end(), {"--select", std::to_string(app.sel.pos)});
  const ds::SamplerConfig& sc = app.whatif.sampler;
  a.insert(a.end(), {"--temperature", std::to_string(sc.temperature), "--top-k", std::to_string(sc.top_k), "--top-p",
                     std::to_string(sc.top_p), "--seed", std::to_string(sc.seed)});
  for (const auto& [l, h] : app.whatif.heads_off)
    a.insert(a.end(), {"--head-off", std::to_string(l) + ":" + std::to_string(h)});
  if (app.look.show_scores) a.push_back("--scores");
  if (!app.engine.kv_cache) a.push_back("--no-kv-cache");
  return a;
}

void add_step(App& app, LessonState& s) {
  const std::string title = all_views()[size_t(std::max(0, app.sel.view))].title;
  std::string why;
  if (append_lesson_step(s.write_path, lesson_step_json(current_args(app), title, "Write the caption here."), why))
    s.write_msg = "added to " + s.write_path, app.say("the view was added as a step to " + s.write_path);
  else
    s.write_msg = why, app.fail(why);
}

void draw_buttons(App& app, LessonState& s) {
  const int n = int(s.lesson.steps.size());
  ImGui::Separator();
  if (ImGui::Button("< Back")) go(app, s.step - 1);
  tooltip(app, "Page Up");
  ImGui::SameLine();
  if (ImGui::Button(s.step + 1 >= n ? "Next (the end)" : "Next >")) next(app);
  tooltip(app, "Page Down (a presentation clicker sends it)");
  if (ImGui::Button("Leave the tour")) {
    s.exploring = true;
    app.say("left the tour: File > Lessons > Back to the tour returns to step " + std::to_string(s.step + 1));
  }
  ImGui::SameLine();
  tooltip(app, "Hide the caption and explore; Page Down comes back to this step");
  ImGui::SameLine();
  if (ImGui::Button("Close")) s.on = false;
  tooltip(app, "Close the lesson");
  if (!app.look.presenter) {
    // On a small projector the window's controls leave the view little room: the
    // presenter mode keeps the view and this caption, larger.
    const bool small = app.fb_h < 900;
    if (small) ImGui::PushStyleColor(ImGuiCol_Button, ImVec4(0.85f, 0.5f, 0.1f, 1));
    if (ImGui::Button("Present (F11)")) toggle_presenter(app);
    if (small) ImGui::PopStyleColor();
    tooltip(app,
            "Only the view and this caption, larger, with the text being written under them: the best "
            "choice on a 1024x768 projector. F11 again comes back.");
  }
  if (ImGui::CollapsingHeader("Write a lesson")) {
    ImGui::SetNextItemWidth(-1);
    ImGui::InputText("##lessonwrite", &s.write_path);
    if (ImGui::Button("Add this view as a step")) add_step(app, s);
    if (!s.write_msg.empty()) ImGui::TextWrapped("%s", s.write_msg.c_str());
  }
}

float caption_scale(const App& app) { return app.look.ui_scale > 1.05f ? 1.1f : 1.3f; }

// The caption panel: the step, its caption with the live numbers, the equation, the
// question (its answer on the next Page Down), what is wrong, the buttons.
void draw_caption(App& app, LessonState& s) {
  const LessonStep* st = current(s);
  if (!st) return;
  const LiveValues v = live_values(app, st);
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("%s", s.lesson.title.c_str());
  // Large enough for the back of a room: the panel's text is 1.3 times the window's (1.1
  // times when the window's text is made larger already, --scale, Ctrl +).
  const float big = caption_scale(app);
  ImGui::SetWindowFontScale(big * 1.15f);
  ImGui::Text("%d/%d  %s", s.step + 1, int(s.lesson.steps.size()), st->title.c_str());
  ImGui::SetWindowFontScale(big);
  ImGui::Spacing();
  if (!st->caption.empty()) ImGui::TextUnformatted(fill_caption(st->caption, v.text).c_str());
  if (!st->equation.empty()) {
    ImGui::Spacing();
    if (app.look.mono_font) ImGui::PushFont(app.look.mono_font);
    ImGui::TextColored(ImVec4(0.95f, 0.85f, 0.5f, 1), "%s", fill_caption(st->equation, v.text).c_str());
    if (app.look.mono_font) ImGui::PopFont();
  }
  if (!st->question.empty()) {
    ImGui::Spacing();
    ImGui::TextColored(ImVec4(0.55f, 0.8f, 1, 1), "Question: %s", fill_caption(st->question, v.text).c_str());
    if (s.revealed)
      ImGui::TextColored(ImVec4(0.55f, 0.95f, 0.6f, 1), "Answer: %s", fill_caption(st->answer, v.text).c_str());
    else if (!s.slides)
      ImGui::TextDisabled("Page Down: the answer");
  }
  const std::string note = step_note(app, s);
  if (!note.empty()) ImGui::TextColored(ImVec4(1, 0.45f, 0.4f, 1), "%s", note.c_str());
  if (s.run) ImGui::TextDisabled("setting the step up...");
  ImGui::SetWindowFontScale(1.0f);
  ImGui::PopTextWrapPos();
  if (!s.slides) draw_buttons(app, s);
}

// A slide's caption panel: as tall as its text (drawn at the panel's scales) needs.
float slide_caption_height(App& app, const LessonState& s, float width) {
  const LessonStep* st = current(s);
  if (!st) return 0;
  const LiveValues v = live_values(app, st);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float w = width - 2 * (style.WindowPadding.x + style.FramePadding.x);
  auto h = [&](const std::string& text, float scale) {
    return text.empty()
               ? 0.0f
               : ImGui::CalcTextSize(text.c_str(), nullptr, false, w / scale).y * scale + style.ItemSpacing.y * 2;
  };
  std::string question = st->question.empty() ? "" : "Question: " + fill_caption(st->question, v.text);
  const float big = caption_scale(app);
  return h(s.lesson.title, 1) + h(st->title, big * 1.15f) + h(fill_caption(st->caption, v.text), big) +
         h(fill_caption(st->equation, v.text), big) + h(question, big) + h(step_note(app, s), big) +
         2 * style.WindowPadding.y;
}

}  // namespace

bool lesson_active(const App& app) {
  const LessonState& s = ls(app);
  return s.on && !s.exploring;
}

void lesson_menu(App& app) {
  LessonState& s = ls(app);
  if (!ImGui::BeginMenu("Lessons")) return;
  for (const std::string& p : shipped_lessons())
    if (ImGui::MenuItem(std::filesystem::path(p).stem().string().c_str())) lesson_open(app, open_lesson(p), 0);
  if (ImGui::MenuItem("Open a lesson file...")) s.open_popup = true;
  ImGui::Separator();
  if (s.on && s.exploring &&
      ImGui::MenuItem(("Back to the tour (step " + std::to_string(s.step + 1) + ")").c_str(), "Page Down"))
    go(app, s.step);
  if (s.on && !s.exploring && ImGui::MenuItem("Leave the tour to explore")) s.exploring = true;
  if (ImGui::MenuItem(("Add this view as a step (" + s.write_path + ")").c_str())) add_step(app, s);
  ImGui::EndMenu();
}

void lesson_begin(App& app) {
  LessonState& s = ls(app);
  open_popup(app, s);
  if (!s.on) return;
  if (s.pending && !app.engine.loading && !app.engine.worker.busy()) s.pending = false, go(app, s.step);
  // Left to explore: Page Down brings the class back to the same step.
  if (s.exploring && !app.scripted && app.key_pressed(GLFW_KEY_PAGE_DOWN, false) && !ImGui::GetIO().WantTextInput)
    go(app, s.step);
  else
    keys_and_run(app, s);
  if (s.exploring) return;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float font = ImGui::GetFontSize();
  if (s.slides)
    ImGui::BeginChild("lesson-body",
                      ImVec2(0, -std::clamp(slide_caption_height(app, s, avail.x), font * 5, avail.y * 0.45f)));
  else
    ImGui::BeginChild("lesson-body", ImVec2(-std::clamp(avail.x * 0.28f, font * 14, avail.x * 0.4f), 0));
}

// The cell the caption's numbers read (query row, key column), outlined on the attention
// heatmap when the step names a key.
void highlight_cell(App& app, const LessonState& s) {
  const LessonStep* st = current(s);
  const int q = app.selected_position();
  if (!st || st->key < 0 || q < 0 || s.run) return;
  for (const HeatmapPlacement& p : app.maps.placements) {
    if (p.name != "attention" || q < p.row0 || q >= p.row0 + p.rows || st->key < p.col0 || st->key >= p.col0 + p.cols)
      continue;
    const ImVec2 a(p.x + (st->key - p.col0) * p.cell_w, p.y + (q - p.row0) * p.cell_h);
    const float t = std::max(2.0f, std::min(p.cell_w, p.cell_h) * 0.12f);
    const ImVec4& r = app.maps.view_rect;  // a cell scrolled out of the view is not outlined over what is there
    ImDrawList* dl = ImGui::GetForegroundDrawList();
    dl->PushClipRect(ImVec2(r.x, r.y), ImVec2(r.x + r.z, r.y + r.w), false);
    dl->AddRect(a, ImVec2(a.x + p.cell_w, a.y + p.cell_h), IM_COL32(255, 60, 200, 255), 0, 0, t);
    dl->PopClipRect();
  }
}

void lesson_end(App& app) {
  LessonState& s = ls(app);
  if (!s.on || s.exploring) return;
  highlight_cell(app, s);
  ImGui::EndChild();
  if (!s.slides) ImGui::SameLine();
  ImGui::BeginChild("lesson-caption", ImVec2(0, 0), true);
  draw_caption(app, s);
  ImGui::EndChild();
}

std::string lesson_sidecar(const App& app) {
  const LessonState& s = ls(app);
  const LessonStep* st = current(s);
  if (!st) return "null";
  const LiveValues v = live_values(app, st);
  nlohmann::json j = {{"lesson", s.lesson.name},
                      {"step", s.step + 1},
                      {"of", s.lesson.steps.size()},
                      {"title", st->title},
                      {"caption", fill_caption(st->caption, v.text)},
                      {"template", st->caption},
                      {"note", step_note(app, s)},
                      {"revealed", s.revealed},
                      {"setting_up", bool(s.run) || s.pending},
                      {"exploring", s.exploring},
                      {"errors", s.lesson.errors}};
  nlohmann::json num = nlohmann::json::object(), text = nlohmann::json::object();
  for (const auto& [k, x] : v.num)
    num[k] = std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(x < 0 ? "-inf" : "inf");
  for (const auto& [k, x] : v.text) text[k] = x;
  j["numbers"] = num;
  j["values"] = text;
  return j.dump();
}

bool lesson_command(int argc, char** argv, LessonCommand& c) {
  bool found = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool takes = a == "--lesson" || a == "--lesson-step" || a == "--export";
    if (!takes) {
      c.rest.push_back(a);
      continue;
    }
    if (i + 1 >= argc) die(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--lesson") c.name = v, found = true;
    if (a == "--export") c.export_dir = v;
    if (a == "--lesson-step") {
      char* end = nullptr;
      const long k = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || k < 1 || k > 1000) die("--lesson-step expects a step number from 1, got '" + v + "'");
      c.step = int(k);
    }
  }
  if (!found && (c.step > 0 || !c.export_dir.empty())) die("--lesson-step and --export need --lesson NAME");
  if (!found) return false;
  c.path = find_lesson(c.name);
  if (c.path.empty()) {
    std::string names;
    for (const std::string& p : shipped_lessons()) names += " " + std::filesystem::path(p).stem().string();
    die("no lesson '" + c.name + "' (a file, or one of:" + names + ")");
  }
  return true;
}

Lesson open_lesson(const std::string& path) {
  return load_lesson(path, [](const std::vector<std::string>& args) -> std::string {
    std::vector<std::string> argv = {"decoderscope"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> ptrs;
    for (const std::string& a : argv) ptrs.push_back(const_cast<char*>(a.c_str()));
    try {
      parse_options(int(ptrs.size()), ptrs.data());
    } catch (const OptionError& e) {
      return e.what();
    }
    return "";
  });
}

std::vector<std::string> lesson_step_argv(const Lesson& l, int i, const std::vector<std::string>& rest) {
  std::vector<std::string> argv = {"decoderscope"};
  if (i >= 0 && i < int(l.steps.size()) && l.steps[size_t(i)].error.empty())
    argv.insert(argv.end(), l.steps[size_t(i)].args.begin(), l.steps[size_t(i)].args.end());
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

bool lesson_step_skipped(const Lesson& l, int i, const std::vector<std::string>& rest) {
  if (i < 0 || i >= int(l.steps.size()) || !l.steps[size_t(i)].needs_real_model) return false;
  for (size_t k = 0; k + 1 < rest.size(); ++k)
    if (rest[k] == "--model" && rest[k + 1].rfind("builtin:", 0) != 0 && rest[k + 1].rfind("random:", 0) != 0)
      return false;
  return true;
}

void lesson_attach(App& app, Lesson l, int i, bool slides, bool skipped) {
  LessonState& s = ls(app);
  s.lesson = std::move(l);
  s.on = true;
  s.scripted = true;
  s.slides = slides;
  s.step = std::clamp(i, 0, std::max(0, int(s.lesson.steps.size()) - 1));
  if (s.step < int(s.lesson.steps.size())) {
    const LessonStep& st = s.lesson.steps[size_t(s.step)];
    s.note = st.error;
    if (skipped && s.note.empty())
      s.note = "skipped: this step walks a GGUF or Hugging Face model, and none is open (--model FILE)";
    const auto argv = lesson_step_argv(s.lesson, s.step, {});
    std::vector<char*> ptrs;
    for (const std::string& a : argv) ptrs.push_back(const_cast<char*>(a.c_str()));
    try {
      s.opts = parse_options(int(ptrs.size()), ptrs.data());
    } catch (const OptionError&) {
      s.opts = Options{};
    }
  }
}

void lesson_open(App& app, Lesson l, int i) {
  LessonState& s = ls(app);
  for (const std::string& e : l.errors) std::fprintf(stderr, "decoderscope: %s\n", e.c_str());
  if (l.steps.empty()) {
    app.alert(l.errors.empty() ? "the lesson has no steps" : l.errors[0]);
    return;
  }
  if (!l.errors.empty())
    app.alert(std::to_string(l.errors.size()) + " step(s) of the lesson cannot be shown (the others can):\n" +
              l.errors[0]);
  s.lesson = std::move(l);
  s.on = true;
  s.scripted = false;
  s.slides = false;
  s.exploring = false;
  s.step = std::clamp(i, 0, int(s.lesson.steps.size()) - 1);
  s.pending = true;  // lesson_begin sets it up once no model is on its way
}

}  // namespace dsgui
