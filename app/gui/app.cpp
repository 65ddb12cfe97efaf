// The window: menu, text boxes, stepping controls, token strip, the views' tabs and the
// status line; the worker's events are folded into the window's copy of the trace here.
#include "app.h"
#include "presenter.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <utility>

#include "file_browser.h"
#include "imgui_stdlib.h"
#include "models.h"
#include "notices.h"
#include "trace_io.h"
#include "util/error.h"

namespace dsgui {

ds::SamplerConfig default_sampler() {
  ds::SamplerConfig c;
  c.temperature = 1.0f;
  c.top_p = 0.9f;
  c.top_k = 0;
  c.seed = 0;
  return c;
}

App::App() { sampler = default_sampler(); }

bool App::input_changed() const {
  if (!model || replay || loading) return false;
  const std::string& p = start_pending ? pending_prompt : run_prompt;
  const std::string& s = start_pending ? pending_source : run_source;
  return prompt != p || (model->cfg.encoder_decoder && source != s);
}

int App::selected_position() const {
  if (cursor < 0 || cursor >= int(trace.steps.size())) return -1;
  int n = trace.positions(cursor);
  if (sel_pos >= 0 && sel_pos < n) return sel_pos;
  return n - 1;
}

RenderTarget& App::target(const std::string& name) {
  auto& p = targets[name];
  if (!p) p = std::make_unique<RenderTarget>();
  return *p;
}

HeatTexture& App::heat_texture(const std::string& name) {
  auto& p = heat_textures[name];
  if (!p) p = std::make_unique<HeatTexture>();
  return *p;
}

const App::GrowingMatrix& App::attention_view(const std::string& slot, int layer, int head, bool cross, bool scores) {
  char what[96];
  std::snprintf(what, sizeof what, "%llu/%d/%d/%d/%d", (unsigned long long)trace_epoch, layer, head, int(cross),
                int(scores));
  GrowingMatrix& g = growing[slot];
  // Within one trace epoch steps are only appended, so the matrix as of a later step
  // is the one as of an earlier step plus the rows of the steps in between, and the
  // one as of an earlier step the later one cropped (scrubbing back costs no rebuild).
  if (g.what == what && cursor >= 0 && cursor < g.step && g.lineage != 0 && g.m.ok() &&
      cursor < int(trace.steps.size())) {
    const int P = trace.positions(cursor);
    g.m = crop(g.m, P, cross ? g.m.cols : P, scores);
    g.step = cursor;
    g.lineage = ++last_lineage;
  }
  bool fresh = g.what != what || cursor < g.step || g.lineage == 0 || !g.m.ok();
  for (int s = g.step + 1; !fresh && s <= cursor; ++s) {
    Matrix rows = attention_step_rows(trace, layer, head, s, cross, scores);
    if (!rows.error.empty()) {
      fresh = true;
      break;
    }
    append_rows(g.m, rows, trace.steps[s].pos0, scores);
    g.step = s;
  }
  if (fresh) {
    g.m = attention_matrix(trace, layer, head, cursor, cross, scores);
    g.what = what;
    g.step = cursor;
    g.lineage = ++last_lineage;
  }
  return g;
}

std::vector<std::string> App::position_labels(int n) const {
  std::vector<std::string> out;
  auto toks = tokens();
  for (int i = 0; i < n; ++i)
    out.push_back(i < int(toks.size()) ? shorten(visible(toks[i].text), 10) : std::to_string(i));
  return out;
}

std::vector<std::string> App::source_labels() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < trace.source.size(); ++i)
    out.push_back(shorten(visible(i < trace.source_text.size() ? trace.source_text[i] : "#"), 10));
  return out;
}

void App::say(const std::string& s) {
  status = s;
  status_time = ImGui::GetTime();
}

void App::fail(const std::string& s) {
  error = s;
  if (!scripted) std::fprintf(stderr, "decoderscope: %s\n", s.c_str());
}

void App::alert(const std::string& s) {
  std::fprintf(stderr, "decoderscope: %s\n", s.c_str());
  alert_text = alert_text.empty() ? s : alert_text + "\n\n" + s;
}

void App::alert_dialog() {
  if (alert_text.empty()) return;
  if (!ImGui::IsPopupOpen("Problem##alert")) ImGui::OpenPopup("Problem##alert");
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->Pos.x + vp->Size.x * 0.5f, vp->Pos.y + vp->Size.y * 0.4f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSizeConstraints(ImVec2(ImGui::GetFontSize() * 20, 0),
                                      ImVec2(vp->Size.x * 0.9f, vp->Size.y * 0.8f));
  if (ImGui::BeginPopupModal("Problem##alert", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
    ImGui::TextUnformatted(alert_text.c_str());
    ImGui::PopTextWrapPos();
    ImGui::Spacing();
    if (ImGui::Button("OK", ImVec2(ImGui::GetFontSize() * 6, 0)) ||
        ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Enter)) ||
        ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) {
      alert_text.clear();
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
}

// ---- actions

void App::load_model(const std::string& spec, const std::string& tokenizer) {
  worker.cancel();
  playing = false;
  Command c;
  c.kind = Command::Load;
  c.spec = spec;
  c.tokenizer = tokenizer;
  c.precision = precision;
  worker.post(c);
  send_sampler();
  loading = true;
  loading_since = ImGui::GetTime();
  loading_what = spec;
  if (precision != ds::Precision::F32) loading_what += std::string(" in ") + ds::precision_name(precision);
  error.clear();
}

void App::start() {
  if (!model) {
    fail("no model is loaded: pick one in the Model box");
    return;
  }
  worker.cancel();
  playing = false;
  // What was shown is pushed for undo once the session has started (a refused prompt keeps it on screen).
  if (!trace.steps.empty())
    pending_start = snapshot(replay ? "Start (the replayed trace)" : "Start (the text before it)", -1);
  else
    pending_start.reset();
  send_heads();  // replay ends when the session has started (Event::Started): a refused prompt keeps the replay
  Command c;
  c.kind = Command::Start;
  c.prompt = prompt;
  c.source = source;
  c.threads = engine_threads;
  c.kv_cache = kv_cache;
  worker.post(c);
  pending_prompt = prompt;
  pending_source = source;
  start_pending = true;
  error.clear();
}

void App::step_forward() {
  if (beams_step(*this, +1)) return;
  if (cursor + 1 < int(trace.steps.size())) {
    ++cursor;
    sel_pos = -1;
    return;
  }
  if (input_changed()) {  // the boxes hold new text: start from it, then step
    if (!start_pending || prompt != pending_prompt || source != pending_source) start();
    step_after_start = true;
    return;
  }
  if (replay || !model || done || worker.busy()) return;
  Command c;
  c.kind = Command::Step;
  c.count = 1;
  worker.post(c);
  steps_wanted = 1;
}

void App::step_back() {
  if (beams_step(*this, -1)) return;
  if (cursor > 0) {
    --cursor;
    sel_pos = -1;
  }
}

void App::run_to_end() {
  cursor = int(trace.steps.size()) - 1;
  if (replay || !model || done) return;
  Command c;
  c.kind = Command::Step;
  c.count = -1;
  worker.post(c);
  steps_wanted = -1;
}

void App::reset() {
  playing = false;
  if (replay) {
    cursor = trace.steps.empty() ? -1 : 0;
    return;
  }
  if (!trace.steps.empty()) undo_stack.push(snapshot("Reset", 0));
  rewind_engine(0);
}

void App::toggle_play() {
  if (!playing && !model && (!replay || trace.steps.empty())) {
    fail(loading ? "the model is still loading: Play works once it is in"
                 : "there is no model to play: pick one in the Model box");
    return;
  }
  playing = !playing;
  if (!playing) worker.cancel();
  next_play = 0;
}

void App::rewind_engine(int keep) {
  if (replay) return;
  worker.cancel();
  Command c;
  c.kind = Command::Rewind;
  c.keep = keep;
  worker.post(c);
  cursor = std::min(cursor, keep - 1);
  sel_pos = -1;
}

void App::redraw_step(int s) {
  if (replay || !model || s < 0 || s >= int(trace.steps.size())) return;
  before = trace.steps[s].sample;
  before_step = s;
  before_label = "before re-drawing";
  if (!send_sampler()) return;  // refused settings: the step keeps its draw
  Undo u = snapshot("re-draw of step " + std::to_string(s + 1), s);
  u.added_branch = keep_as_branch("before re-drawing step " + std::to_string(s + 1), s);
  undo_stack.push(std::move(u));
  rewind_engine(s);
  Command c;
  c.kind = Command::Step;
  c.count = 1;
  worker.post(c);
  steps_wanted = 1;
}

void App::rerun_with_heads(int s) {
  if (replay || !model || s < 0 || s >= int(trace.steps.size())) return;
  before = trace.steps[s].sample;
  before_step = s;
  before_label =
      heads_off.empty() && cross_heads_off.empty() ? "before switching the heads back on" : "with every head on";
  const size_t n_off = heads_off.size() + cross_heads_off.size();
  const std::string what = "re-run of step " + std::to_string(s + 1) + " with " +
                           (n_off == 0 ? std::string("every head on") : std::to_string(n_off) + " heads off");
  Undo u = snapshot(what, s);
  u.added_branch = keep_as_branch("before the " + what, s);
  undo_stack.push(std::move(u));
  send_heads();
  rewind_engine(s);
  Command c;
  c.kind = Command::Step;
  c.count = 1;
  worker.post(c);
  steps_wanted = 1;
}

bool App::send_sampler() {
  try {
    ds::validate(sampler);
  } catch (const ds::Error& e) {
    fail(e.what());
    return false;
  }
  Command c;
  c.kind = Command::Sampler;
  c.sampler = sampler;
  worker.post(c);
  return true;
}

void App::send_heads() {
  heads_engine = heads_off;
  Command c;
  c.kind = Command::Heads;
  c.heads = heads_off;
  c.cross_heads = cross_heads_off;
  worker.post(c);
}

void App::fork_here() {
  if (replay || !model || cursor < 0) return;
  Undo u = snapshot("fork at step " + std::to_string(cursor + 1), cursor);
  u.added_branch = int(branches.size());
  undo_stack.push(std::move(u));
  Branch b;
  b.label = settings_label();
  b.trace = trace;
  b.fork_step = cursor;
  branches.push_back(std::move(b));
  branch_shown = int(branches.size()) - 1;
  const int at = cursor;
  rewind_engine(at);
  say("forked at step " + std::to_string(at + 1) + ": change the seed, the temperature or a head, then press Step");
}

void App::forget_branch(int i) {
  if (i < 0 || i >= int(branches.size())) return;
  Undo u;
  u.label = "forgetting branch " + std::to_string(i + 1);
  u.has_trace = false;
  u.removed_at = i;
  u.removed_label = std::move(branches[size_t(i)].label);
  u.removed_trace = std::move(branches[size_t(i)].trace);
  u.removed_fork = branches[size_t(i)].fork_step;
  undo_stack.push(std::move(u));
  branches.erase(branches.begin() + i);
  branch_shown = std::clamp(branch_shown, 0, std::max(0, int(branches.size()) - 1));
}

void App::scrub_to(int step) {
  const int n = int(trace.steps.size());
  cursor = std::clamp(step, n > 0 ? 0 : -1, n - 1);
  sel_pos = -1;
}

void App::show_view(int v) {
  if (v < 0 || v >= int(all_views().size())) return;
  view = v;
  view_request = true;
}

// Adds (l, h) to a sorted list of heads switched off, or takes it out.
static void toggle_in(std::vector<std::pair<int, int>>& off, int l, int h) {
  auto it = std::find(off.begin(), off.end(), std::make_pair(l, h));
  if (it == off.end())
    off.push_back({l, h});
  else
    off.erase(it);
  std::sort(off.begin(), off.end());
}

void App::toggle_head(int l, int h) { toggle_in(heads_off, l, h); }

void App::toggle_cross_head(int l, int h) { toggle_in(cross_heads_off, l, h); }

void App::all_heads_on() {
  heads_off.clear();
  cross_heads_off.clear();
}

void App::redraw_new_seed(int s) {
  sampler.seed += 1;
  redraw_step(s);
}

void App::set_theme(bool light_theme) {
  light = light_theme;
  font_dirty = true;
}

void App::scale_text(int dir) {
  if (dir > 0)
    ui_scale = std::min(3.0f, ui_scale * 1.15f);
  else if (dir < 0)
    ui_scale = std::max(0.6f, ui_scale / 1.15f);
  else
    ui_scale = 1.0f;
  font_dirty = true;
}

bool App::open_trace(const std::string& path) {
  try {
    show_trace(ds::Trace::load(path), path);
    return true;
  } catch (const std::exception& e) {
    alert(std::string("cannot open the trace: ") + e.what());
    return false;
  }
}

void App::show_trace(ds::Trace t, const std::string& path, double seconds) {
  worker.cancel();
  playing = false;
  if (!trace.steps.empty()) undo_stack.push(snapshot("opening " + path, -1));
  trace = std::move(t);
  ++version;
  ++trace_epoch;
  replay = true;
  done = true;
  cursor = int(trace.steps.size()) - 1;
  sel_pos = -1;
  layer = std::clamp(layer, 0, std::max(0, trace.config.n_layers - 1));
  head = std::clamp(head, -1, trace.config.n_heads - 1);
  char secs[32] = "";
  if (seconds >= 0 && !scripted) std::snprintf(secs, sizeof secs, " in %.1f s", seconds);
  say("opened " + path + secs + ": " + std::to_string(trace.steps.size()) + " steps (replay, nothing is recomputed)");
  error.clear();
}

bool App::save_trace(const std::string& path) {
  if (trace.steps.empty()) {
    fail("there is nothing to save yet: take a step first");
    return false;
  }
  auto t = std::make_shared<ds::Trace>(trace);
  if (model && t->model_name.empty()) t->model_name = model->name;
  Command c;
  c.kind = Command::SaveTrace;
  c.path = path;
  c.trace = std::move(t);
  c.progress = trace_save_progress(*this, path);
  worker.post(std::move(c));
  return true;
}

// ---- events

namespace {

// Another model arrived while the sampling settings are not the window's defaults:
// they carry over, and a note beside the text boxes says so (with a button back).
void kept_sampler_note(App& app) {
  const ds::SamplerConfig d = default_sampler(), &c = app.sampler;
  std::string s;
  char b[64];
  auto add = [&](const char* t) { s += (s.empty() ? "" : ", ") + std::string(t); };
  if (c.temperature != d.temperature) {
    std::snprintf(b, sizeof b, c.temperature == 0 ? "temperature 0 (greedy)" : "temperature %.2f", c.temperature);
    add(b);
  }
  if (c.top_k != d.top_k) add(("top-k " + std::to_string(c.top_k)).c_str());
  if (c.top_p != d.top_p) {
    std::snprintf(b, sizeof b, "top-p %.2f", c.top_p);
    add(b);
  }
  if (c.repetition_penalty != d.repetition_penalty) {
    std::snprintf(b, sizeof b, "repetition penalty %.2f", c.repetition_penalty);
    add(b);
  }
  if (c.contrastive != d.contrastive) add("contrastive search");
  if (c.seed != d.seed) add(("seed " + std::to_string(c.seed)).c_str());
  app.sampler_note = s.empty() ? "" : "Sampling settings kept from the model before: " + s + ".";
}

// A model arrived: a fresh trace for it, settings that fit it, and a session started.
void on_loaded(App& app, const Event& e) {
  app.loading = false;
  app.model = e.info;
  app.replay = false;
  app.trace = ds::Trace{};
  app.trace.config = app.model->cfg;
  app.trace.model_name = app.model->name;
  ++app.version;
  ++app.trace_epoch;
  app.cursor = -1;
  app.sel_pos = -1;
  app.done = false;
  app.heads_off.clear();
  app.cross_heads_off.clear();
  app.branches.clear();
  app.undo_stack.clear();  // its steps were another model's
  app.pending_start.reset();
  app.started = false;
  app.before.reset();
  app.layer = std::min(app.layer, app.model->cfg.n_layers - 1);
  app.head = std::min(app.head, app.model->cfg.n_heads - 1);
  cross_clamp(app, app.model->cfg.n_layers, app.model->cfg.n_heads);
  if (!app.keep_text) {
    app.prompt = app.model->prompt;
    app.source = app.model->source;
  }
  app.keep_text = false;
  if (!app.prev_model_spec.empty() && app.prev_model_spec != app.model->spec) kept_sampler_note(app);
  app.prev_model_spec = app.model->spec;
  app.input_error.clear();
  char buf[64];
  std::snprintf(buf, sizeof buf, ", %.1f s", app.model->load_seconds);
  app.say("loaded " + app.model->name + " in " + app.model->storage_name() + (app.scripted ? "" : buf));
  app.start();
}

}  // namespace

// A session began: an empty trace for it (the Start it replaced can be undone).
void on_started(App& app, Event& e) {
  if (app.pending_start) {
    app.undo_stack.push(std::move(*app.pending_start));
    app.pending_start.reset();
    app.say("started: Ctrl+Z brings back the text shown before");
  }
  ds::Trace& trace = app.trace;
  trace = ds::Trace{};
  trace.config = app.model ? app.model->cfg : trace.config;
  trace.model_name = app.model ? app.model->name : "";
  trace.source = std::move(e.source);
  trace.source_text = std::move(e.source_text);
  trace.encoder = std::move(e.encoder);
  ++app.version;
  ++app.trace_epoch;
  app.cursor = -1;
  app.sel_pos = -1;
  app.done = false;
  app.started = true;
  app.replay = false;
  started_with_text(app);
}

void App::handle_events() {
  for (Event& e : worker.poll()) {
    switch (e.kind) {
      case Event::Loading:
        loading = true;
        loading_what = e.msg;
        break;
      case Event::Loaded:
        on_loaded(*this, e);
        break;
      case Event::Started:
        on_started(*this, e);
        break;
      case Event::Step: {
        if (e.step_index < int(trace.steps.size())) {  // a step taken again
          trace.steps.resize(e.step_index);
          ++trace_epoch;
        }
        bool follow = cursor >= int(trace.steps.size()) - 1;
        trace.steps.push_back(*e.step);
        ++version;
        if (follow) {
          cursor = int(trace.steps.size()) - 1;
          sel_pos = -1;
        }
        done = e.done;
        last_step_seconds = e.seconds;
        if (steps_wanted > 0) --steps_wanted;
        break;
      }
      case Event::Truncate:
        if (e.kept < int(trace.steps.size())) trace.steps.resize(e.kept);
        ++version;
        ++trace_epoch;
        cursor = std::min(cursor, int(trace.steps.size()) - 1);
        done = e.done;
        break;
      case Event::Lens:
        lens_answer(*this, std::move(e.lens));
        break;
      case Event::Shape:
        next_shape_answer(*this, std::move(e.shape));
        break;
      case Event::Saved: {
        char secs[32] = "";
        if (!scripted) std::snprintf(secs, sizeof secs, " in %.1f s", e.seconds);
        say("saved the trace to " + e.msg + secs);
        break;
      }
      case Event::Error:
        refused_input(*this, e);  // beside the boxes, before loading is cleared
        if (loading) {            // the model did not open: the engine has none now (it let the old one go first)
          model.reset();
          started = false;
          done = true;
        }
        loading = false;
        steps_wanted = 0;
        playing = false;
        lens_failed(*this);
        beams_failed(*this);
        block_failed(*this);
        kv_measure_answer(*this, nullptr);
        roles_failed(*this);
        fail(e.msg);
        break;
      case Event::Idle:
        steps_wanted = 0;
        break;
      case Event::Beam:
        beams_answer(*this, std::move(e.beam));
        break;
      case Event::Inspect:
        block_answer(*this, std::move(e.block));
        break;
      case Event::Measure:
        kv_measure_answer(*this, std::move(e.measure));
        break;
      case Event::Roles:
        roles_answer(*this, std::move(e.roles));
        break;
    }
  }
}

void App::tick(double now) {
  if (!playing) return;
  if (!model && !replay) {  // the model went away (a load failed): nothing to play
    playing = false;
    return;
  }
  if (now < next_play) return;
  if (beams_playing(*this, playing)) {
    next_play = now + 1.0 / std::max(0.1f, speed);
    return;
  }
  if (cursor + 1 < int(trace.steps.size())) {
    ++cursor;
    sel_pos = -1;
  } else if (done || replay) {
    playing = false;
    return;
  } else if (!worker.busy()) {
    step_forward();
  } else {
    return;  // wait for the step in progress
  }
  next_play = now + 1.0 / std::max(0.1f, speed);
}

void App::shortcuts() {
  ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl) {
    bool plus = ImGui::IsKeyPressed(GLFW_KEY_EQUAL) || ImGui::IsKeyPressed(GLFW_KEY_KP_ADD);
    bool minus = ImGui::IsKeyPressed(GLFW_KEY_MINUS) || ImGui::IsKeyPressed(GLFW_KEY_KP_SUBTRACT);
    if (plus) scale_text(+1);
    if (minus) scale_text(-1);
    if (ImGui::IsKeyPressed(GLFW_KEY_0)) scale_text(0);
    if (ImGui::IsKeyPressed(GLFW_KEY_Q)) quit = true;
    if (ImGui::IsKeyPressed(GLFW_KEY_Z, false) && !io.WantTextInput) undo();
    return;
  }
  if (ImGui::IsKeyPressed(GLFW_KEY_F12, false)) screenshot_request = png_path;
  if (ImGui::IsKeyPressed(GLFW_KEY_F11, false)) toggle_presenter(*this);
  if (io.WantTextInput) return;
  if (ImGui::IsKeyPressed(GLFW_KEY_F, false)) ++fit_serial;  // every heatmap fits its area again
  if (presenter && ImGui::IsKeyPressed(GLFW_KEY_PAGE_DOWN, false)) show_view((view + 1) % int(all_views().size()));
  if (presenter && ImGui::IsKeyPressed(GLFW_KEY_PAGE_UP, false))
    show_view((view + int(all_views().size()) - 1) % int(all_views().size()));
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) step_forward();
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow))) step_back();
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space), false)) toggle_play();
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home), false)) scrub_to(0);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_End), false)) run_to_end();
}

// ---- the window

void App::menu_bar() {
  if (!ImGui::BeginMenuBar()) return;
  bool open_trace_popup = false, save_trace_popup = false, png_popup = false, open_model_popup = false;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open model file or folder...")) open_model_popup = true;
    if (ImGui::MenuItem("Open a saved trace (replay)...")) open_trace_popup = true;
    if (ImGui::MenuItem("Save the trace...", nullptr, false, !trace.steps.empty())) save_trace_popup = true;
    if (ImGui::MenuItem("Save a picture (PNG)...")) png_popup = true;
    ImGui::Separator();
    if (ImGui::MenuItem("Quit", "Ctrl+Q")) quit = true;
    ImGui::EndMenu();
  }
  edit_menu();
  if (ImGui::BeginMenu("View")) {
    for (int v = 0; v < int(all_views().size()); ++v)
      if (ImGui::MenuItem(all_views()[v].title, nullptr, view == v)) show_view(v);
    ImGui::Separator();
    if (ImGui::MenuItem("Dark theme", nullptr, !light)) set_theme(false);
    if (ImGui::MenuItem("Light theme", nullptr, light)) set_theme(true);
    if (ImGui::MenuItem("Bigger", "Ctrl +")) scale_text(+1);
    if (ImGui::MenuItem("Smaller", "Ctrl -")) scale_text(-1);
    if (ImGui::MenuItem("Normal size", "Ctrl 0")) scale_text(0);
    ImGui::MenuItem("Explain on hover (tooltips)", nullptr, &tooltips);
    ImGui::MenuItem("Explain each view (caption)", nullptr, &captions);
    ImGui::MenuItem("Legend of the token colours", nullptr, &show_legend);
    if (ImGui::MenuItem("Presenter mode", "F11", presenter)) toggle_presenter(*this);
    if (ImGui::MenuItem("Fit the heatmaps", "F")) ++fit_serial;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Help")) {
    ImGui::TextUnformatted("Right arrow: step   Left arrow: step back (no recompute)");
    ImGui::TextUnformatted("Space: play / pause   Home: first step   End: run to the end");
    ImGui::TextUnformatted("Ctrl + / Ctrl -: bigger / smaller (projector)   F12: save the window as PNG");
    ImGui::TextUnformatted("Ctrl+Z: undo the last what-if (re-run, re-draw, fork, Start over a trace)");
    ImGui::TextUnformatted("F11: presenter mode (full screen, the view alone)   F: fit the heatmaps");
    ImGui::TextUnformatted("On a heatmap: mouse wheel zooms, drag pans, hover names the row and column.");
    ImGui::TextUnformatted("Click a token to select the position every view follows.");
    ImGui::EndMenu();
  }
  ImGui::EndMenuBar();
  if (open_trace_popup || save_trace_popup || png_popup)
    state<FileBrowser>().dir.clear();  // start at the path's folder
  if (open_trace_popup) ImGui::OpenPopup("Open trace");
  if (save_trace_popup) ImGui::OpenPopup("Save trace");
  if (png_popup) ImGui::OpenPopup("Save PNG");
  if (open_model_popup) open_model_request = true;
  const float w = ImGui::GetFontSize() * 30;
  const float list_h = ImGui::GetFontSize() * 14;
  if (ImGui::BeginPopupModal("Open trace", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("A trace saved before (File > Save, or the command-line tool's generate with a trace).");
    ImGui::TextUnformatted("Every view works on it without a model; nothing is recomputed.");
    const bool picked = file_browser(state<FileBrowser>(), BrowseFor::Trace, trace_path, list_h);
    ImGui::SetNextItemWidth(w);
    ImGui::InputText("file", &trace_path);
    if (ImGui::Button("Open") || picked) {
      open_trace_in_background(*this, trace_path);  // a bad file: a message's dialog when it fails
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
  if (ImGui::BeginPopupModal("Save trace", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("NAME.dstrace: the compact binary format; NAME.json: JSON, for small runs.");
    file_browser(state<FileBrowser>(), BrowseFor::Save, trace_path, list_h);
    ImGui::SetNextItemWidth(w);
    ImGui::InputText("file", &trace_path);
    if (ImGui::Button("Save")) {
      if (save_trace(trace_path)) ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
  if (ImGui::BeginPopupModal("Save PNG", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    file_browser(state<FileBrowser>(), BrowseFor::Save, png_path, list_h);
    ImGui::SetNextItemWidth(w);
    ImGui::InputText("file", &png_path);
    if (ImGui::Button("The whole window")) {
      window_shot = png_path;  // taken next frame, with this dialog gone
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("The current heatmap")) {
      heatmap_png_request = png_path;
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
}

bool App::precision_combo(const char* id) {
  static const ds::Precision kAll[] = {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16};
  bool changed = false;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6.5f);
  ImGui::BeginDisabled(loading);
  if (ImGui::BeginCombo(id, ds::precision_name(precision))) {
    for (ds::Precision p : kAll)
      if (ImGui::Selectable(precision_label(p), precision == p) && p != precision) {
        precision = p;
        changed = true;
      }
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  tooltip(*this,
          "How the model's weights are kept in memory. float32 takes 4 bytes a weight; bfloat16 and float16 take 2, "
          "which halves the memory each token has to read, so a big model writes faster. The arithmetic stays "
          "float32: only the stored weights are rounded, which costs a little accuracy (bfloat16 keeps float32's "
          "range with fewer digits, float16 more digits in a smaller range). A GGUF file's quantized matrices (Q4_K, "
          "Q8_0, ...) stay as the file stores them: only its float32 matrices follow this choice. Changing it loads "
          "the model again.");
  return changed;
}

namespace {

// The width of the prompt box (or of each of the source and target boxes): what the
// labels and Start leave; on a narrow window (1024 px with big text) the boxes start a
// line of their own, so that Start stays on screen.
float text_box_width(bool encdec) {
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  auto text_w = [&](const char* s) { return ImGui::CalcTextSize(s).x + style.ItemSpacing.x; };
  const float fixed = text_w("Start") + style.FramePadding.x * 2 + style.ItemSpacing.x +
                      (encdec ? text_w("Source") + text_w("Target starts") + style.ItemSpacing.x : text_w("Prompt"));
  float avail = ImGui::GetContentRegionAvail().x;
  if (avail - fixed < font * (encdec ? 16 : 10)) {
    ImGui::NewLine();
    avail = ImGui::GetContentRegionAvail().x;
  }
  return std::max(font * 6, (avail - fixed) / (encdec ? 2.0f : 1.0f));
}

}  // namespace

void App::toolbar() {
  const float font = ImGui::GetFontSize();
  // Row 1: model and text.
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Model");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 16);
  static std::vector<ModelChoice> choices = model_choices();
  std::string current = replay ? "(replaying a saved trace)" : model ? model->name : loading ? "(loading)" : "(none)";
  if (ImGui::BeginCombo("##model", current.c_str())) {
    for (auto& c : choices) {
      if (ImGui::Selectable(c.label.c_str(), model && model->spec == c.spec)) load_model(c.spec, "");
      tooltip(*this, c.help.c_str());
    }
    ImGui::Separator();
    if (ImGui::Selectable("Open file or folder...")) open_model_request = true;
    ImGui::EndCombo();
  }
  tooltip(*this, "Which transformer writes the text. Built-in and random models load at once; big ones take a while.");
  ImGui::SameLine();
  if (precision_combo("##precision") && model && !replay) {
    keep_text = true;  // the same model again, in the new precision
    load_model(model->spec, model->tokenizer);
  }
  const bool encdec = model && model->cfg.encoder_decoder;
  ImGui::SameLine();
  const float box = text_box_width(encdec);
  if (encdec) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("Source");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##source", &source, ImGuiInputTextFlags_EnterReturnsTrue) && model && !loading) start();
    tooltip(*this, "The text the encoder reads (for example a sentence to translate).");
    ImGui::SameLine();
    ImGui::TextUnformatted("Target starts");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##prefix", &prompt, ImGuiInputTextFlags_EnterReturnsTrue) && model && !loading) start();
    tooltip(*this, "The first words of the output, if any; the decoder continues from here.");
  } else {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("Prompt");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##prompt", &prompt, ImGuiInputTextFlags_EnterReturnsTrue) && model && !loading) start();
    tooltip(*this, "The text the model continues. Press Enter or Start, then Step (Right arrow).");
  }
  ImGui::SameLine();
  ImGui::BeginDisabled(!model || loading);
  if (ImGui::Button("Start")) start();
  ImGui::EndDisabled();
  tooltip(*this, "Cut the text into tokens and get ready to generate from it.");

  // Row 2: stepping.
  const int n = int(trace.steps.size());
  const bool busy = worker.busy();
  if (ImGui::Button("Reset")) reset();
  tooltip(*this, "Forget the generated tokens and go back to the prompt.");
  ImGui::SameLine();
  ImGui::BeginDisabled(cursor <= 0);
  if (ImGui::Button("< Back")) step_back();
  ImGui::EndDisabled();
  tooltip(*this, "Look at the previous step again (Left arrow). Nothing is recomputed.");
  ImGui::SameLine();
  ImGui::BeginDisabled(cursor + 1 >= n && ((done && !input_changed()) || replay || busy || !model));
  if (ImGui::Button("Step >")) step_forward();
  ImGui::EndDisabled();
  tooltip(*this, "Write one more token (Right arrow).");
  ImGui::SameLine();
  ImGui::BeginDisabled(!playing && !model && (!replay || n == 0));
  if (ImGui::Button(playing ? "Pause" : "Play", ImVec2(font * 4, 0))) toggle_play();
  ImGui::EndDisabled();
  tooltip(*this, "Step again and again at the chosen speed (Space).");
  flow(font * 7);
  ImGui::SetNextItemWidth(font * 7);
  ImGui::SliderFloat("##speed", &speed, 0.25f, 20.0f, "%.2g steps/s", ImGuiSliderFlags_Logarithmic);
  tooltip(*this, "How fast Play goes.");
  flow(font * 6);
  ImGui::BeginDisabled(done || replay || !model);
  if (ImGui::Button("Run to end")) run_to_end();
  ImGui::EndDisabled();
  tooltip(*this, "Keep writing until the model stops or its context is full.");
  flow(font * 14);
  int shown = cursor + 1;
  ImGui::SetNextItemWidth(std::max(font * 8, ImGui::GetContentRegionAvail().x - font * 10));
  ImGui::BeginDisabled(n == 0);
  if (ImGui::SliderInt("##timeline", &shown, n > 0 ? 1 : 0, std::max(n, 1), n ? "step %d" : "no steps yet"))
    scrub_to(shown - 1);
  ImGui::EndDisabled();
  tooltip(*this, "The timeline: drag to look at any step taken so far.");
  ImGui::SameLine();
  ImGui::Text("of %d%s", n, done ? " (end)" : "");
}

// What a token chip's tooltip says about its token (s: its visible text).
static void token_tooltip(const TokenInfo& t, const std::string& s) {
  ImGui::BeginTooltip();
  ImGui::Text("position %d, token id %d", t.pos, t.id);
  ImGui::Text("text: \"%s\"", s.c_str());
  if (t.prompt) ImGui::TextUnformatted("part of the prompt");
  if (t.drawn_at >= 0) {
    ImGui::Text("drawn at step %d with probability %.4f (model alone: %.4f)", t.drawn_at + 1, t.p, t.p_raw);
    ImGui::Text("rank %d among all tokens", t.rank + 1);
  }
  if (!t.fed)
    ImGui::TextUnformatted("just drawn: the next step runs it through the model");
  else
    ImGui::TextUnformatted("click: every view follows this position");
  ImGui::EndTooltip();
}

void App::token_strip() {
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  const bool encdec = trace.config.encoder_decoder;
  const float line = ImGui::GetFrameHeight() + style.ItemSpacing.y;
  // As tall as its chips need (measured last frame), between one and three lines.
  const float lines = std::clamp(strip_lines, encdec ? 2.0f : 1.0f, encdec ? 4.0f : 3.0f);
  const float h = line * lines + style.WindowPadding.y * 2 - style.ItemSpacing.y + 2;
  ImGui::BeginChild("tokens", ImVec2(0, h), true);
  auto chip_row = [&](const char* title, int count, auto&& draw_chip) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("%s", title);
    ImGui::SameLine();
    float x0 = ImGui::GetCursorPosX(), right = ImGui::GetContentRegionMax().x;
    for (int i = 0; i < count; ++i) {
      float w = draw_chip(i, true);
      float x = ImGui::GetCursorPosX();
      if (i > 0) {
        ImGui::SameLine(0, style.ItemSpacing.x * 0.5f);
        if (ImGui::GetCursorPosX() + w > right) {
          ImGui::NewLine();
          ImGui::SetCursorPosX(x0);
        }
      }
      (void)x;
      draw_chip(i, false);
    }
  };
  if (encdec) {
    auto src = source_labels();
    chip_row("source", int(src.size()), [&](int i, bool measure) -> float {
      std::string s = visible(i < int(trace.source_text.size()) ? trace.source_text[i] : "?");
      float w = ImGui::CalcTextSize(s.c_str()).x + style.FramePadding.x * 2;
      if (measure) return w;
      ImGui::PushID(10000 + i);
      ImGui::PushStyleColor(ImGuiCol_Button, ImVec4(0.35f, 0.30f, 0.15f, 1));
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 1, 1, 1));
      ImGui::Button(s.c_str());
      ImGui::PopStyleColor(2);
      if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::Text("source position %d, token id %d", i, i < int(trace.source.size()) ? trace.source[i] : -1);
        ImGui::Text("text: \"%s\"", s.c_str());
        ImGui::EndTooltip();
      }
      ImGui::PopID();
      return w;
    });
  }
  auto toks = tokens();
  const int sel = selected_position();
  int cur0 = -1, cur1 = -1;
  if (cursor >= 0 && cursor < int(trace.steps.size())) {
    cur0 = trace.steps[cursor].pos0;
    cur1 = cur0 + int(trace.steps[cursor].input.size()) - 1;
  }
  if (toks.empty()) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled(encdec ? "target" : "tokens");
    ImGui::SameLine();
    ImGui::TextDisabled(loading ? "loading the model..."
                                : "press Step (Right arrow) to run the prompt through the model");
  } else {
    chip_row(encdec ? "target" : "tokens", int(toks.size()), [&](int i, bool measure) -> float {
      const TokenInfo& t = toks[i];
      std::string s = visible(t.text);
      float w = ImGui::CalcTextSize(s.c_str()).x + style.FramePadding.x * 2;
      if (measure) return w;
      ImVec4 col = t.prompt ? ImVec4(0.20f, 0.33f, 0.55f, 1) : ImVec4(0.18f, 0.45f, 0.25f, 1);
      if (!t.fed) col = ImVec4(0.55f, 0.35f, 0.08f, 1);
      if (t.pos == sel) col = ImVec4(0.85f, 0.55f, 0.05f, 1);
      ImGui::PushID(i);
      ImGui::PushStyleColor(ImGuiCol_Button, col);
      ImGui::PushStyleColor(ImGuiCol_ButtonHovered, ImVec4(col.x + 0.15f, col.y + 0.15f, col.z + 0.15f, 1));
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 1, 1, 1));
      if (ImGui::Button(s.c_str()) && t.fed) sel_pos = t.pos;
      ImGui::PopStyleColor(3);
      ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
      if (t.pos >= cur0 && t.pos <= cur1)
        ImGui::GetWindowDrawList()->AddLine(ImVec2(a.x, b.y + 1), ImVec2(b.x, b.y + 1), IM_COL32(255, 170, 40, 255), 2);
      if (ImGui::IsItemHovered()) token_tooltip(t, s);
      ImGui::PopID();
      return w;
    });
    if (scrolled_version != version) {
      ImGui::SetScrollHereY(1.0f);
      scrolled_version = version;
    }
  }
  strip_lines = (ImGui::GetCursorPosY() - style.WindowPadding.y + 1) / line;
  ImGui::EndChild();
  (void)font;
}

void App::status_bar() {
  const float font = ImGui::GetFontSize();
  ImGui::Separator();
  if (!error.empty()) {  // the ok button first, the message cut to the width left (whole in a tooltip)
    if (ImGui::SmallButton("ok")) error.clear();
    ImGui::SameLine();
    ImGui::PushStyleColor(ImGuiCol_Text, readable(ImVec4(1.0f, 0.35f, 0.3f, 1)));
    ImGui::TextUnformatted(fit_text(error, ImGui::GetContentRegionAvail().x).c_str());
    ImGui::PopStyleColor();
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(font * 40);
      ImGui::TextUnformatted(error.c_str());
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
    return;
  }
  std::string act = worker.activity();
  if (loading) {
    double t = ImGui::GetTime() - loading_since;
    ImVec2 p = ImGui::GetCursorScreenPos();
    float w = font * 8, h = font * 0.8f;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), ImGui::GetColorU32(ImGuiCol_FrameBg));
    float f = float(std::fmod(t, 1.5) / 1.5);
    dl->AddRectFilled(ImVec2(p.x + w * std::max(0.0f, f - 0.25f), p.y), ImVec2(p.x + w * f, p.y + h),
                      ImGui::GetColorU32(ImGuiCol_PlotHistogram));
    ImGui::Dummy(ImVec2(w, h));
    ImGui::SameLine();
    ImGui::Text("loading %s ... %.1f s", loading_what.c_str(), t);
    return;
  }
  if (replay) {
    ImGui::Text("replaying %s (%d layers x %d heads): nothing is recomputed",
                trace.model_name.empty() ? "a saved trace" : trace.model_name.c_str(), trace.config.n_layers,
                trace.config.n_heads);
  } else if (model) {
    // "GPT-2 · 124.4M · bfloat16 (249 MB)": name, size and how the weights are kept.
    const ds::Config& c = model->cfg;
    const double p = double(model->params), b = double(model->weight_bytes);
    char params[32], bytes[32];
    if (p >= 1e9)
      std::snprintf(params, sizeof params, "%.2fB", p / 1e9);
    else
      std::snprintf(params, sizeof params, "%.*fM", p >= 1e7 ? 1 : 2, p / 1e6);
    if (b >= 1e9)
      std::snprintf(bytes, sizeof bytes, "%.2f GB", b / 1e9);
    else
      std::snprintf(bytes, sizeof bytes, "%.*f MB", b >= 1e7 ? 0 : 1, b / 1e6);
    // Narrower than float32 (the main storage): bfloat16, float16 or a GGUF file's quantized
    // blocks, named with every type's share of the bytes ("Q4_K 85% + Q6_K 15%").
    const bool narrow = model->precision != ds::Precision::F32;
    const std::string storage = model->storage_name();
    ImGui::BeginGroup();
    ImGui::Text("%s \xC2\xB7 %s \xC2\xB7", model->name.c_str(), params);
    ImGui::SameLine(0, font * 0.3f);
    ImGui::TextColored(narrow ? ImVec4(0.45f, 0.8f, 1.0f, 1) : ImGui::GetStyleColorVec4(ImGuiCol_Text), "%s",
                       storage.c_str());
    const bool status_shown = !status.empty() && (scripted || ImGui::GetTime() - status_time < 8);
    if (!status_shown || fb_w > font * 100) {  // the details, when a message does not need the room
      ImGui::SameLine(0, font * 0.3f);
      ImGui::Text("(%s of weights): %s, %d layers x %d heads, d_model %d, vocab %d", bytes,
                  c.encoder_decoder ? "encoder-decoder" : "decoder-only", c.n_layers, c.n_heads, c.d_model,
                  c.vocab_size);
    }
    ImGui::EndGroup();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s\nweights kept as %s%s", c.describe().c_str(), storage.c_str(),
                        ds::is_quantized(model->precision) ? " (decoded block by block, computed in float32)"
                        : narrow                           ? " (computed in float32)"
                                                           : "");
  }
  if (!act.empty()) {
    ImGui::SameLine();
    const char* spin = "|/-\\";
    ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "  %c %s", spin[int(ImGui::GetTime() * 8) % 4], act.c_str());
  } else if (last_step_seconds > 0 && !scripted) {
    ImGui::SameLine();
    ImGui::TextDisabled("  last step %.1f ms", last_step_seconds * 1000);
  }
  if (const size_t n_off = heads_off.size() + cross_heads_off.size()) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "  %d head%s switched off", int(n_off), n_off == 1 ? "" : "s");
  }
  if (!status.empty() && (scripted || ImGui::GetTime() - status_time < 8)) {  // scripted: no clock in pictures
    // Cut to the width left (the model's details step aside for it), whole in a tooltip.
    ImGui::SameLine();
    ImGui::TextDisabled("%s", fit_text("  " + status, ImGui::GetContentRegionAvail().x).c_str());
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", status.c_str());
  }
}

// One tab per view of the table (views.h); the open one draws below its tab.
void App::view_tabs() {
  const float status_h = ImGui::GetFrameHeightWithSpacing() + ImGui::GetStyle().ItemSpacing.y;
  // A view asked for (by a view last frame, the menu or a script) is selected now; a
  // view may ask again during this frame, for the next.
  const bool req = view_request;
  view_request = false;
  if (!ImGui::BeginTabBar("views")) return;
  const auto views = all_views();
  for (int v = 0; v < int(views.size()); ++v) {
    ImGuiTabItemFlags f = (req && view == v) ? ImGuiTabItemFlags_SetSelected : 0;
    const bool open = ImGui::BeginTabItem(views[v].title, nullptr, f);
    tooltip(*this, views[v].help);
    if (!open) continue;
    if (!req && !view_request) view = v;
    // Over a heatmap (last frame) the wheel zooms it and does not scroll the view.
    const int no_wheel = std::exchange(wheel_zooms, false) ? ImGuiWindowFlags_NoScrollWithMouse : 0;
    ImGui::BeginChild("view", ImVec2(0, -status_h), false, ImGuiWindowFlags_HorizontalScrollbar | no_wheel);
    view_rect =
        ImVec4(ImGui::GetWindowPos().x, ImGui::GetWindowPos().y, ImGui::GetWindowSize().x, ImGui::GetWindowSize().y);
    views[v].draw(*this);
    ImGui::EndChild();
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

void App::frame() {
  placements.clear();
  last_heatmap.clear();
  hide_popups = !window_shot.empty();
  if (hide_popups) {  // the picture shows the window, not the dialog that asked for it, nor a tooltip
    screenshot_request = window_shot;
    window_shot.clear();
    ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  }
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->Pos);
  ImGui::SetNextWindowSize(vp->Size);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0);
  ImGui::Begin("decoderscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize |
                   (presenter ? 0 : ImGuiWindowFlags_MenuBar) | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoBackground);
  ImGui::PopStyleVar();
  if (!scripted) shortcuts();
  trace_io_frame(*this);
  if (presenter) {  // presenter.h: the view alone
    presenter_frame(*this);
    alert_dialog();
    ImGui::End();
    return;
  }
  menu_bar();
  if (open_model_request) {
    ImGui::OpenPopup("Open model##tb");
    state<FileBrowser>().dir.clear();
    open_model_request = false;
  }
  if (ImGui::BeginPopupModal("Open model##tb", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    // Two lines: the dialog sizes itself to its widest line, and must fit a 1024-pixel window.
    ImGui::TextUnformatted(
        "A GGUF file (.gguf: llama, qwen2, qwen3, gemma3), a llama2.c checkpoint (.bin)\n"
        "or a GPT-2 folder (config.json + model.safetensors).");
    const bool picked = file_browser(state<FileBrowser>(), BrowseFor::Model, model_path, ImGui::GetFontSize() * 14);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    ImGui::InputText("model", &model_path);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    ImGui::InputText("tokenizer (optional)", &tokenizer_path);
    precision_combo("weights in memory##open");
    if (ImGui::Button("Open") || picked) {
      load_model(model_path, tokenizer_path);
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
  toolbar();
  notices();
  token_strip();
  if (show_legend) chip_legend(*this);
  if (loading) {
    ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "Loading %s ... %.1f s (the window stays usable)",
                       loading_what.c_str(), ImGui::GetTime() - loading_since);
  }

  view_tabs();
  status_bar();
  alert_dialog();
  ImGui::End();
}

}  // namespace dsgui
