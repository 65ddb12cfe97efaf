// The window: menu, text boxes, stepping controls, token strip, the views' tabs and the
// status line; the worker's events are folded into the window's copy of the trace here.
#include "shell/app.h"
#include "shell/presenter.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "engine_link/models.h"
#include "imgui_stdlib.h"
#include "shell/lesson_hooks.h"
#include "shell/notices.h"
#include "shell/recent.h"
#include "shell/trace_io.h"
#include "shell/window_io.h"
#include "util/error.h"
#include "widgets/file_browser.h"

namespace dsgui {

ds::SamplerConfig default_sampler() {
  ds::SamplerConfig c;
  c.temperature = 1.0f;
  c.top_p = 0.9f;
  c.top_k = 0;
  c.seed = 0;
  return c;
}

namespace {

// The row of the view on screen, or null.
const ViewInfo* on_screen(const App& app) {
  const auto views = all_views();
  return app.sel.view >= 0 && app.sel.view < int(views.size()) ? &views[size_t(app.sel.view)] : nullptr;
}

// Right (+1) or Left (-1) taken by the view on screen (Beam search walks its tree).
bool on_screen_arrow(App& app, int dir) {
  const ViewInfo* v = on_screen(app);
  return v && v->arrow && v->arrow(app, dir);
}

// A Play tick taken by the view on screen.
bool on_screen_play(App& app, bool& playing) {
  const ViewInfo* v = on_screen(app);
  return v && v->play && v->play(app, playing);
}

}  // namespace

App::App() { whatif.sampler = default_sampler(); }

bool App::input_changed() const {
  if (!engine.model || history.replay || engine.loading) return false;
  const std::string& p = inputs.start_pending ? inputs.pending_prompt : inputs.run_prompt;
  const std::string& s = inputs.start_pending ? inputs.pending_source : inputs.run_source;
  return inputs.prompt_key() != p || (engine.model->cfg.encoder_decoder && inputs.source != s);
}

bool App::special_token(int id) const {
  if (!engine.model || history.replay) return false;
  const std::vector<int>& s = engine.model->special_ids;
  return std::binary_search(s.begin(), s.end(), id);
}

cmd::ChatInput App::chat_input() const {
  cmd::ChatInput c;
  c.on = inputs.chat && engine.model && engine.model->has_chat;
  c.system = inputs.system;
  return c;
}

int App::selected_position() const {
  if (sel.cursor < 0 || sel.cursor >= int(history.trace.steps.size())) return -1;
  int n = history.trace.positions(sel.cursor);
  if (sel.pos >= 0 && sel.pos < n) return sel.pos;
  return n - 1;
}

RenderTarget& Maps::target(const std::string& name) {
  auto& p = targets[name];
  if (!p) p = std::make_unique<RenderTarget>();
  return *p;
}

HeatTexture& Maps::heat_texture(const std::string& name) {
  auto& p = heat_textures[name];
  if (!p) p = std::make_unique<HeatTexture>();
  return *p;
}

const Maps::GrowingMatrix& App::attention_view(const std::string& slot, int layer, int head, bool cross, bool scores) {
  char what[96];
  std::snprintf(what, sizeof what, "%llu/%d/%d/%d/%d", (unsigned long long)history.epoch, layer, head, int(cross),
                int(scores));
  Maps::GrowingMatrix& g = maps.growing[slot];
  // Within one trace epoch steps are only appended, so the matrix as of a later step
  // is the one as of an earlier step plus the rows of the steps in between, and the
  // one as of an earlier step the later one cropped (scrubbing back costs no rebuild).
  if (g.what == what && sel.cursor >= 0 && sel.cursor < g.step && g.lineage != 0 && g.m.ok() &&
      sel.cursor < int(history.trace.steps.size())) {
    const int P = history.trace.positions(sel.cursor);
    g.m = crop(g.m, P, cross ? g.m.cols : P, scores);
    g.step = sel.cursor;
    g.lineage = ++maps.last_lineage;
  }
  bool fresh = g.what != what || sel.cursor < g.step || g.lineage == 0 || !g.m.ok();
  for (int s = g.step + 1; !fresh && s <= sel.cursor; ++s) {
    Matrix rows = attention_step_rows(history.trace, layer, head, s, cross, scores);
    if (!rows.error.empty()) {
      fresh = true;
      break;
    }
    append_rows(g.m, rows, history.trace.steps[s].pos0, scores);
    g.step = s;
  }
  if (fresh) {
    g.m = attention_matrix(history.trace, layer, head, sel.cursor, cross, scores);
    g.what = what;
    g.step = sel.cursor;
    g.lineage = ++maps.last_lineage;
  }
  return g;
}

const App::TokenCache& App::token_cache() const {
  TokenCache& c = token_cache_;
  if (c.version != history.version || c.cursor != sel.cursor || c.steps != history.trace.steps.size()) {
    c.version = history.version;
    c.cursor = sel.cursor;
    c.steps = history.trace.steps.size();
    c.before = std::move(c.toks);
    c.toks = std::make_shared<const std::vector<TokenInfo>>(tokens_as_of(history.trace, sel.cursor));
    c.labels.clear();
    for (const TokenInfo& t : *c.toks) c.labels.push_back(shorten(visible(t.text), 10));
  }
  return c;
}

const std::vector<TokenInfo>& App::tokens() const { return *token_cache().toks; }

std::vector<std::string> App::position_labels(int n) const {
  const std::vector<std::string>& all = token_cache().labels;
  std::vector<std::string> out(all.begin(), all.begin() + std::min<ptrdiff_t>(std::max(n, 0), ptrdiff_t(all.size())));
  for (int i = int(out.size()); i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

std::vector<std::string> App::source_labels() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < history.trace.source.size(); ++i)
    out.push_back(shorten(visible(i < history.trace.source_text.size() ? history.trace.source_text[i] : "#"), 10));
  return out;
}

void App::say(const std::string& s) {
  msgs.status = s;
  msgs.status_time = ImGui::GetTime();
}

void App::fail(const std::string& s) {
  msgs.error = s;
  if (!scripted) std::fprintf(stderr, "decoderscope: %s\n", s.c_str());
}

void App::alert(const std::string& s) {
  std::fprintf(stderr, "decoderscope: %s\n", s.c_str());
  msgs.alert = msgs.alert.empty() ? s : msgs.alert + "\n\n" + s;
}

void App::alert_dialog() {
  if (msgs.alert.empty()) return;
  if (!ImGui::IsPopupOpen("Problem##alert")) ImGui::OpenPopup("Problem##alert");
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->Pos.x + vp->Size.x * 0.5f, vp->Pos.y + vp->Size.y * 0.4f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSizeConstraints(ImVec2(ImGui::GetFontSize() * 20, 0),
                                      ImVec2(vp->Size.x * 0.9f, vp->Size.y * 0.8f));
  if (ImGui::BeginPopupModal("Problem##alert", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    // Plain words for the class (file names, not folders; no tensor names); the whole text
    // behind Details.
    const std::string plain = plain_words(msgs.alert);
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
    ImGui::TextUnformatted(plain.c_str());
    if (plain != msgs.alert && ImGui::TreeNode("Details")) {
      ImGui::TextDisabled("%s", msgs.alert.c_str());
      ImGui::TreePop();
    }
    ImGui::PopTextWrapPos();
    ImGui::Spacing();
    if (ImGui::Button("OK", ImVec2(ImGui::GetFontSize() * 6, 0)) ||
        ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Enter)) ||
        ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) {
      msgs.alert.clear();
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
}

// ---- actions

void App::load_model(const std::string& spec, const std::string& tokenizer) {
  engine.worker.cancel();
  play.playing = false;
  engine.ask(cmd::Load{spec, tokenizer, engine.precision, engine.products});
  send_sampler();
  engine.loading = true;
  engine.loading_since = ImGui::GetTime();
  engine.loading_what = spec;
  if (engine.precision != ds::Precision::F32)
    engine.loading_what += std::string(" in ") + ds::precision_name(engine.precision);
  msgs.error.clear();
}

void App::start() {
  if (!engine.model) {
    fail("no model is loaded: pick one in the Model box");
    return;
  }
  engine.worker.cancel();
  play.playing = false;
  // What was shown is pushed for undo once the session has started (a refused prompt keeps it on screen).
  if (!history.trace.steps.empty())
    history.pending_start = snapshot(history.replay ? "Start (the replayed trace)" : "Start (the text before it)", -1);
  else
    history.pending_start.reset();
  send_heads();  // replay ends when the session has started (ev::Started): a refused prompt keeps the replay
  cmd::Start c;
  c.prompt = inputs.prompt;
  c.source = inputs.source;
  c.chat = chat_input();
  c.threads = engine.threads;
  c.kv_cache = engine.kv_cache;
  engine.ask(std::move(c));
  inputs.pending_prompt = inputs.prompt_key();
  inputs.pending_source = inputs.source;
  inputs.start_pending = true;
  msgs.error.clear();
}

void App::step_forward() {
  if (on_screen_arrow(*this, +1)) return;
  if (sel.cursor + 1 < int(history.trace.steps.size())) {
    ++sel.cursor;
    sel.pos = -1;
    return;
  }
  if (input_changed()) {  // the boxes hold new text: start from it, then step
    if (!inputs.start_pending || inputs.prompt_key() != inputs.pending_prompt || inputs.source != inputs.pending_source)
      start();
    inputs.step_after_start = true;
    return;
  }
  if (history.replay || !engine.model || engine.done || engine.worker.busy()) return;
  engine.ask(cmd::Step{1});
  engine.steps_wanted = 1;
}

void App::step_back() {
  if (on_screen_arrow(*this, -1)) return;
  if (sel.cursor > 0) {
    --sel.cursor;
    sel.pos = -1;
  }
}

void App::run_to_end() {
  sel.cursor = int(history.trace.steps.size()) - 1;
  if (history.replay || !engine.model || engine.done) return;
  engine.ask(cmd::Step{-1});
  engine.steps_wanted = -1;
}

void App::reset() {
  play.playing = false;
  if (history.replay) {
    sel.cursor = history.trace.steps.empty() ? -1 : 0;
    return;
  }
  if (!history.trace.steps.empty()) history.undo.push(snapshot("Reset", 0));
  rewind_engine(0);
}

bool App::running_to_end() const { return engine.steps_wanted < 0 && engine.worker.busy(); }

void App::stop_run() {
  engine.worker.cancel();
  engine.steps_wanted = 0;
  say("stopped: the tokens written so far stay");
}

void App::toggle_play() {
  if (running_to_end()) {  // Space stops "Run to end" at once, as Stop does
    play.playing = false;
    stop_run();
    return;
  }
  if (!play.playing && !engine.model && (!history.replay || history.trace.steps.empty())) {
    fail(engine.loading ? "the model is still loading: Play works once it is in"
                        : "there is no model to play: pick one in the Model box");
    return;
  }
  play.playing = !play.playing;
  if (!play.playing) engine.worker.cancel();
  play.next = 0;
}

void App::rewind_engine(int keep) {
  if (history.replay) return;
  engine.worker.cancel();
  engine.ask(cmd::Rewind{keep});
  sel.cursor = std::min(sel.cursor, keep - 1);
  sel.pos = -1;
}

void App::redraw_step(int s) {
  if (history.replay || !engine.model || s < 0 || s >= int(history.trace.steps.size())) return;
  whatif.before = history.trace.steps[s].sample;
  whatif.before_step = s;
  whatif.before_label = "before re-drawing";
  if (!send_sampler()) return;  // refused settings: the step keeps its draw
  Undo u = snapshot("re-draw of step " + std::to_string(s + 1), s);
  u.added_branch = keep_as_branch("before re-drawing step " + std::to_string(s + 1), s);
  history.undo.push(std::move(u));
  rewind_engine(s);
  engine.ask(cmd::Step{1});
  engine.steps_wanted = 1;
}

void App::rerun_with_heads(int s) {
  if (history.replay || !engine.model || s < 0 || s >= int(history.trace.steps.size())) return;
  whatif.before = history.trace.steps[s].sample;
  whatif.before_step = s;
  whatif.before_label = whatif.heads_off.empty() && whatif.cross_heads_off.empty()
                            ? "before switching the heads back on"
                            : "with every head on";
  const size_t n_off = whatif.heads_off.size() + whatif.cross_heads_off.size();
  const std::string what = "re-run of step " + std::to_string(s + 1) + " with " +
                           (n_off == 0 ? std::string("every head on") : std::to_string(n_off) + " heads off");
  Undo u = snapshot(what, s);
  u.added_branch = keep_as_branch("before the " + what, s);
  history.undo.push(std::move(u));
  send_heads();
  rewind_engine(s);
  engine.ask(cmd::Step{1});
  engine.steps_wanted = 1;
}

bool App::send_sampler() {
  try {
    ds::validate(whatif.sampler);
  } catch (const ds::Error& e) {
    fail(e.what());
    return false;
  }
  engine.ask(cmd::Sampler{whatif.sampler});
  return true;
}

void App::send_heads() {
  whatif.heads_engine = whatif.heads_off;
  whatif.cross_heads_engine = whatif.cross_heads_off;
  engine.ask(cmd::Heads{whatif.heads_off, whatif.cross_heads_off});
}

void App::fork_here() {
  if (history.replay || !engine.model || sel.cursor < 0) return;
  Undo u = snapshot("fork at step " + std::to_string(sel.cursor + 1), sel.cursor);
  u.added_branch = int(history.branches.size());
  history.undo.push(std::move(u));
  Branch b;
  b.label = settings_label();
  b.trace = history.trace;
  b.fork_step = sel.cursor;
  history.branches.push_back(std::move(b));
  history.branch_shown = int(history.branches.size()) - 1;
  const int at = sel.cursor;
  rewind_engine(at);
  say("forked at step " + std::to_string(at + 1) + ": change the seed, the temperature or a head, then press Step");
}

void App::forget_branch(int i) {
  if (i < 0 || i >= int(history.branches.size())) return;
  Undo u;
  u.label = "forgetting branch " + std::to_string(i + 1);
  u.has_trace = false;
  u.removed_at = i;
  u.removed_label = std::move(history.branches[size_t(i)].label);
  u.removed_trace = std::move(history.branches[size_t(i)].trace);
  u.removed_fork = history.branches[size_t(i)].fork_step;
  history.undo.push(std::move(u));
  history.branches.erase(history.branches.begin() + i);
  history.branch_shown = std::clamp(history.branch_shown, 0, std::max(0, int(history.branches.size()) - 1));
}

void App::scrub_to(int step) {
  const int n = int(history.trace.steps.size());
  sel.cursor = std::clamp(step, n > 0 ? 0 : -1, n - 1);
  sel.pos = -1;
}

void App::show_view(int v) {
  if (v < 0 || v >= int(all_views().size())) return;
  sel.view = v;
  sel.view_request = true;
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

void App::toggle_head(int l, int h) { toggle_in(whatif.heads_off, l, h); }

void App::toggle_cross_head(int l, int h) { toggle_in(whatif.cross_heads_off, l, h); }

void App::all_heads_on() {
  whatif.heads_off.clear();
  whatif.cross_heads_off.clear();
}

void App::redraw_new_seed(int s) {
  whatif.sampler.seed += 1;
  redraw_step(s);
}

void App::set_theme(bool light_theme) {
  look.light = light_theme;
  look.font_dirty = true;
}

void App::scale_text(int dir) {
  if (dir > 0)
    look.ui_scale = std::min(3.0f, look.ui_scale * 1.15f);
  else if (dir < 0)
    look.ui_scale = std::max(0.6f, look.ui_scale / 1.15f);
  else
    look.ui_scale = 1.0f;
  look.font_dirty = true;
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
  engine.worker.cancel();
  play.playing = false;
  if (!history.trace.steps.empty()) history.undo.push(snapshot("opening " + path, -1));
  history.trace = std::move(t);
  ++history.version;
  ++history.epoch;
  history.replay = true;
  engine.done = true;
  sel.cursor = int(history.trace.steps.size()) - 1;
  sel.pos = -1;
  sel.layer = std::clamp(sel.layer, 0, std::max(0, history.trace.config.n_layers - 1));
  sel.head = std::clamp(sel.head, -1, history.trace.config.n_heads - 1);
  char secs[32] = "";
  if (seconds >= 0 && !scripted) std::snprintf(secs, sizeof secs, " in %.1f s", seconds);
  say("opened " + path + secs + ": " + std::to_string(history.trace.steps.size()) +
      " steps (replay, nothing is recomputed)");
  msgs.error.clear();
  recent_trace(*this, path);
}

bool App::save_trace(const std::string& path) {
  if (history.trace.steps.empty()) {
    fail("there is nothing to save yet: take a step first");
    return false;
  }
  auto t = std::make_shared<ds::Trace>(history.trace);
  if (engine.model && t->model_name.empty()) t->model_name = engine.model->name;
  cmd::SaveTrace c;
  c.path = path;
  c.trace = std::move(t);
  c.progress = trace_save_progress(*this, path);
  engine.ask(std::move(c));
  return true;
}

// ---- events

namespace {

// Another model arrived while the sampling settings are not the window's defaults:
// they carry over, and a note beside the text boxes says so (with a button back).
void kept_sampler_note(App& app) {
  const ds::SamplerConfig d = default_sampler(), &c = app.whatif.sampler;
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
  app.inputs.sampler_note = s.empty() ? "" : "Sampling settings kept from the model before: " + s + ".";
}

// A model arrived: a fresh trace for it, settings that fit it, and a session started.
void on_loaded(App& app, const ev::Loaded& e) {
  app.engine.loading = false;
  app.engine.model = e.info;
  app.history.replay = false;
  app.history.trace = ds::Trace{};
  app.history.trace.config = app.engine.model->cfg;
  app.history.trace.model_name = app.engine.model->name;
  ++app.history.version;
  ++app.history.epoch;
  app.sel.cursor = -1;
  app.sel.pos = -1;
  app.engine.done = false;
  app.whatif.heads_off.clear();
  app.whatif.cross_heads_off.clear();
  app.history.branches.clear();
  app.history.undo.clear();  // its steps were another model's
  app.history.pending_start.reset();
  app.engine.started = false;
  app.whatif.before.reset();
  app.sel.layer = std::min(app.sel.layer, app.engine.model->cfg.n_layers - 1);
  app.sel.head = std::min(app.sel.head, app.engine.model->cfg.n_heads - 1);
  for (const ViewInfo& v : all_views())
    if (v.model_loaded) v.model_loaded(app);
  if (!app.inputs.keep_text) {
    app.inputs.prompt = app.engine.model->prompt;
    app.inputs.source = app.engine.model->source;
  }
  app.inputs.keep_text = false;
  if (!app.inputs.prev_model_spec.empty() && app.inputs.prev_model_spec != app.engine.model->spec)
    kept_sampler_note(app);
  app.inputs.prev_model_spec = app.engine.model->spec;
  recent_model(app, app.engine.model->spec);
  app.inputs.error.clear();
  char buf[64];
  std::snprintf(buf, sizeof buf, ", %.1f s", app.engine.model->load_seconds);
  app.say("loaded " + app.engine.model->name + " in " + app.engine.model->storage_name() + (app.scripted ? "" : buf));
  app.start();
}

// A step arrived: appended (in place of the steps from its index on, when it was taken
// again), and followed by the cursor when the cursor was on the last step.
void on_step(App& app, ev::Step& s) {
  ds::Trace& trace = app.history.trace;
  if (s.index < int(trace.steps.size())) {  // a step taken again
    trace.steps.resize(s.index);
    ++app.history.epoch;
  }
  bool follow = app.sel.cursor >= int(trace.steps.size()) - 1;
  trace.steps.push_back(std::move(s.step));
  ++app.history.version;
  if (follow) {
    app.sel.cursor = int(trace.steps.size()) - 1;
    app.sel.pos = -1;
  }
  app.engine.done = s.done;
  app.engine.last_step_seconds = s.seconds;
  if (app.engine.steps_wanted > 0) --app.engine.steps_wanted;
}

// A command failed: said beside the boxes and on the status line; every view waiting for
// an answer stops waiting.
void on_error(App& app, const ev::Error& e) {
  refused_input(app, e);     // beside the boxes, before loading is cleared
  if (app.engine.loading) {  // the model did not open: the engine has none now (it let the old one go first)
    app.engine.model.reset();
    app.engine.started = false;
    app.engine.done = true;
  }
  app.engine.loading = false;
  app.engine.steps_wanted = 0;
  app.play.playing = false;
  for (const ViewInfo& v : all_views())
    if (v.failed) v.failed(app);
  app.fail(e.msg);
}

// A session began: an empty trace for it (the Start it replaced can be undone).
void on_started(App& app, ev::Started& e) {
  if (app.history.pending_start) {
    app.history.undo.push(std::move(*app.history.pending_start));
    app.history.pending_start.reset();
    app.say("started: Ctrl+Z brings back the text shown before");
  }
  ds::Trace& trace = app.history.trace;
  trace = ds::Trace{};
  trace.config = app.engine.model ? app.engine.model->cfg : trace.config;
  trace.model_name = app.engine.model ? app.engine.model->name : "";
  trace.source = std::move(e.source);
  trace.source_text = std::move(e.source_text);
  trace.encoder = std::move(e.encoder);
  ++app.history.version;
  ++app.history.epoch;
  app.sel.cursor = -1;
  app.sel.pos = -1;
  app.engine.done = false;
  app.engine.started = true;
  app.history.replay = false;
  started_with_text(app);
}

}  // namespace

void App::handle_events() {
  for (Event& e : engine.worker.poll()) {
    std::visit(Overloaded{
                   [&](ev::Loading& l) {
                     engine.loading = true;
                     engine.loading_what = l.spec;
                   },
                   [&](ev::Loaded& l) { on_loaded(*this, l); },
                   [&](ev::Started& s) { on_started(*this, s); },
                   [&](ev::Step& s) { on_step(*this, s); },
                   [&](ev::Truncate& t) {
                     if (t.kept < int(history.trace.steps.size())) history.trace.steps.resize(t.kept);
                     ++history.version;
                     ++history.epoch;
                     sel.cursor = std::min(sel.cursor, int(history.trace.steps.size()) - 1);
                     engine.done = t.done;
                   },
                   [&](ev::Saved& s) {
                     char secs[32] = "";
                     if (!scripted) std::snprintf(secs, sizeof secs, " in %.1f s", s.seconds);
                     say("saved the trace to " + s.path + secs);
                     recent_trace(*this, s.path);
                   },
                   [&](ev::Error& err) { on_error(*this, err); },
                   [&](ev::Idle&) { engine.steps_wanted = 0; },
                   // The rest answer a view's request: the view that asked takes it.
                   [&](auto&) {
                     for (const ViewInfo& v : all_views())
                       if (v.answer && v.answer(*this, e)) break;
                   },
               },
               e);
  }
}

void App::tick(double now) {
  if (!play.playing) return;
  if (!engine.model && !history.replay) {  // the model went away (a load failed): nothing to play
    play.playing = false;
    return;
  }
  if (now < play.next) return;
  if (on_screen_play(*this, play.playing)) {
    play.next = now + 1.0 / std::max(0.1f, play.speed);
    return;
  }
  if (sel.cursor + 1 < int(history.trace.steps.size())) {
    ++sel.cursor;
    sel.pos = -1;
  } else if (engine.done || history.replay) {
    play.playing = false;
    return;
  } else if (!engine.worker.busy()) {
    step_forward();
  } else {
    return;  // wait for the step in progress
  }
  play.next = now + 1.0 / std::max(0.1f, play.speed);
}

bool App::key_pressed(int key, bool repeat) const {
  return ImGui::IsKeyPressed(key, repeat) ||
         std::any_of(frame_taps.begin(), frame_taps.end(), [key](int t) { return (t & 0xffff) == key; });
}

void App::shortcuts() {
  frame_taps = std::exchange(key_taps, {});
  ImGuiIO& io = ImGui::GetIO();
  // Ctrl held now, or held with a key tapped between two frames.
  const bool ctrl = io.KeyCtrl || std::any_of(frame_taps.begin(), frame_taps.end(),
                                              [](int t) { return ((t >> 16) & GLFW_MOD_CONTROL) != 0; });
  if (ctrl) {
    bool plus = key_pressed(GLFW_KEY_EQUAL) || key_pressed(GLFW_KEY_KP_ADD);
    bool minus = key_pressed(GLFW_KEY_MINUS) || key_pressed(GLFW_KEY_KP_SUBTRACT);
    if (plus) scale_text(+1);
    if (minus) scale_text(-1);
    if (key_pressed(GLFW_KEY_0)) scale_text(0);
    if (key_pressed(GLFW_KEY_Q)) requests.quit = true;
    if (key_pressed(GLFW_KEY_Z, false) && !io.WantTextInput) undo();
    return;
  }
  if (key_pressed(GLFW_KEY_F12, false)) {  // never over an earlier picture: the next number
    std::error_code ec;
    const std::string dir = std::filesystem::path(inputs.png_path).parent_path().string();
    requests.screenshot =
        std::filesystem::absolute(next_numbered_png(dir, "decoderscope"), ec).lexically_normal().string();
  }
  if (key_pressed(GLFW_KEY_F11, false)) toggle_presenter(*this);
  if (io.WantTextInput) return;
  if (key_pressed(GLFW_KEY_F, false)) ++look.fit_serial;  // every heatmap fits its area again
  if (look.presenter && !lesson_active(*this) && key_pressed(GLFW_KEY_PAGE_DOWN, false))
    show_view((sel.view + 1) % int(all_views().size()));
  if (look.presenter && !lesson_active(*this) && key_pressed(GLFW_KEY_PAGE_UP, false))
    show_view((sel.view + int(all_views().size()) - 1) % int(all_views().size()));
  if (key_pressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) step_forward();
  if (key_pressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow))) step_back();
  if (key_pressed(ImGui::GetKeyIndex(ImGuiKey_Space), false)) toggle_play();
  if (key_pressed(ImGui::GetKeyIndex(ImGuiKey_Home), false)) scrub_to(0);
  if (key_pressed(ImGui::GetKeyIndex(ImGuiKey_End), false)) run_to_end();
  if (key_pressed(GLFW_KEY_F1, false)) look.keys_help = !look.keys_help;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false)) look.keys_help = false;
  selection_keys();
}

// Up / Down: the layer; [ / ]: the head (before the first head: the layer's mean); , / .:
// the selected token. In presenter mode too, so that a teacher never has to leave it.
void App::selection_keys() {
  const int layers = history.trace.config.n_layers, heads = history.trace.config.n_heads;
  if (layers <= 0) return;
  auto moved = [&](int k) { return key_pressed(k) ? 1 : 0; };
  const int dl = moved(GLFW_KEY_UP) - moved(GLFW_KEY_DOWN);
  const int dh = moved(GLFW_KEY_RIGHT_BRACKET) - moved(GLFW_KEY_LEFT_BRACKET);
  const int dp = moved(GLFW_KEY_PERIOD) - moved(GLFW_KEY_COMMA);
  if (dl) sel.layer = std::clamp(sel.layer + dl, 0, layers - 1);
  if (dh) sel.head = std::clamp(sel.head + dh, -1, std::max(0, heads - 1));
  if (dp) {
    const int p = selected_position();
    const int n =
        sel.cursor >= 0 && sel.cursor < int(history.trace.steps.size()) ? history.trace.positions(sel.cursor) : 0;
    if (n > 0) sel.pos = std::clamp(p + dp, 0, n - 1);
  }
  if (dl || dh || dp) {
    char b[96];
    std::snprintf(b, sizeof b, "layer %d, %s, position %d", sel.layer,
                  sel.head < 0 ? "mean of the heads" : ("head " + std::to_string(sel.head)).c_str(),
                  selected_position());
    say(b);
  }
}

// F1: every key on one card over the window (Esc or F1 again closes it).
void App::keys_overlay() {
  if (!look.keys_help) return;
  static const char* const kKeys[][2] = {
      {"Right / Left", "step forward / step back (nothing recomputed going back)"},
      {"Space", "play / pause; stops Run to end"},
      {"Home / End", "the first step / run to the end"},
      {"Up / Down", "layer up / down"},
      {"[ / ]", "previous / next head (before head 0: the mean of the layer's heads)"},
      {", / .", "previous / next token selected"},
      {"Page Down / Page Up", "next / previous view (presenter mode)"},
      {"F11", "presenter mode: the view alone, full screen"},
      {"F", "fit the heatmaps again"},
      {"F12", "save the window as decoderscope-NNN.png"},
      {"Ctrl + / Ctrl - / Ctrl 0", "bigger / smaller / normal text"},
      {"Ctrl Z", "undo the last what-if"},
      {"F1 / Esc", "show / hide this card"},
  };
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->Pos.x + vp->Size.x * 0.5f, vp->Pos.y + vp->Size.y * 0.5f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowBgAlpha(0.96f);
  if (ImGui::Begin(
          "Keys (F1)", &look.keys_help,
          ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings)) {
    if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
      for (const auto& k : kKeys) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "%s", k[0]);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(k[1]);
      }
      ImGui::EndTable();
    }
  }
  ImGui::End();
}

// ---- the window

void App::menu_bar() {
  if (!ImGui::BeginMenuBar()) return;
  bool open_trace_popup = false, save_trace_popup = false, png_popup = false, open_model_popup = false;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open model file or folder...")) open_model_popup = true;
    if (ImGui::MenuItem("Open a saved trace (replay)...")) open_trace_popup = true;
    recent_menu(*this);
    if (ImGui::MenuItem("Save the trace...", nullptr, false, !history.trace.steps.empty())) save_trace_popup = true;
    if (ImGui::MenuItem("Save a picture (PNG)...")) png_popup = true;
    lesson_menu(*this);
    ImGui::Separator();
    if (ImGui::MenuItem("Quit", "Ctrl+Q")) requests.quit = true;
    ImGui::EndMenu();
  }
  edit_menu();
  if (ImGui::BeginMenu("View")) {
    for (int v = 0; v < int(all_views().size()); ++v)
      if (ImGui::MenuItem(all_views()[v].title, nullptr, sel.view == v)) show_view(v);
    ImGui::Separator();
    if (ImGui::MenuItem("Dark theme", nullptr, !look.light)) set_theme(false);
    if (ImGui::MenuItem("Light theme", nullptr, look.light)) set_theme(true);
    if (ImGui::MenuItem("Bigger", "Ctrl +")) scale_text(+1);
    if (ImGui::MenuItem("Smaller", "Ctrl -")) scale_text(-1);
    if (ImGui::MenuItem("Normal size", "Ctrl 0")) scale_text(0);
    ImGui::MenuItem("Explain on hover (tooltips)", nullptr, &look.tooltips);
    ImGui::MenuItem("Explain each view (caption)", nullptr, &look.captions);
    ImGui::MenuItem("Legend of the token colours", nullptr, &look.show_legend);
    tooltip(*this,
            "Shown under the token strip on a window wide enough for the views' tabs on one row (on a narrower one "
            "they take two rows, and the maps need the height).");
    if (ImGui::MenuItem("Presenter mode", "F11", look.presenter)) toggle_presenter(*this);
    if (ImGui::MenuItem("Fit the heatmaps", "F")) ++look.fit_serial;
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
    ImGui::TextUnformatted("Up / Down: layer   [ / ]: head   , / .: token   (presenter mode too)");
    if (ImGui::MenuItem("Every key (F1)")) look.keys_help = true;
    ImGui::EndMenu();
  }
  ImGui::EndMenuBar();
  if (open_trace_popup || save_trace_popup || png_popup)
    state<FileBrowser>().dir.clear();  // start at the path's folder
  if (open_trace_popup) ImGui::OpenPopup("Open trace");
  if (save_trace_popup) ImGui::OpenPopup("Save trace");
  if (png_popup) ImGui::OpenPopup("Save PNG");
  if (open_model_popup) requests.open_model = true;
  const float w = ImGui::GetFontSize() * 30;
  const float list_h = ImGui::GetFontSize() * 14;
  if (ImGui::BeginPopupModal("Open trace", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("A trace saved before (File > Save, or the command-line tool's generate with a trace).");
    ImGui::TextUnformatted("Every view works on it without a model; nothing is recomputed.");
    const bool picked = file_browser(state<FileBrowser>(), BrowseFor::Trace, inputs.trace_path, list_h);
    ImGui::SetNextItemWidth(w);
    ImGui::InputText("file", &inputs.trace_path);
    if (ImGui::Button("Open") || picked) {
      open_trace_in_background(*this, inputs.trace_path);  // a bad file: a message's dialog when it fails
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
  if (ImGui::BeginPopupModal("Save trace", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("NAME.dstrace: the compact binary format; NAME.json: JSON, for small runs.");
    file_browser(state<FileBrowser>(), BrowseFor::SaveTrace, inputs.trace_path, list_h);
    ImGui::SetNextItemWidth(w);
    ImGui::InputText("file", &inputs.trace_path);
    if (ImGui::Button("Save")) {
      if (save_trace(inputs.trace_path)) ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
  if (ImGui::BeginPopupModal("Save PNG", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    file_browser(state<FileBrowser>(), BrowseFor::SavePng, inputs.png_path, list_h);
    ImGui::SetNextItemWidth(w);
    ImGui::InputText("file", &inputs.png_path);
    if (ImGui::Button("The whole window")) {
      requests.window_shot = inputs.png_path;  // taken next frame, with this dialog gone
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("The current heatmap")) {
      requests.heatmap_png = inputs.png_path;
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
  ImGui::BeginDisabled(engine.loading);
  if (ImGui::BeginCombo(id, ds::precision_name(engine.precision))) {
    for (ds::Precision p : kAll)
      if (ImGui::Selectable(precision_label(p), engine.precision == p) && p != engine.precision) {
        engine.precision = p;
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

// The width of the prompt box (or of each of two boxes: source and target, or a chat's
// system and user messages): what the labels, the Chat check box and Start leave; on a
// narrow window (1024 px with big text) the boxes start a line of their own, so that
// Start stays on screen.
float text_box_width(bool two, const char* label1, const char* label2, bool chat_box) {
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  auto text_w = [&](const char* s) { return ImGui::CalcTextSize(s).x + style.ItemSpacing.x; };
  float fixed = text_w("Start") + style.FramePadding.x * 2 + style.ItemSpacing.x + text_w(label1) +
                (two ? text_w(label2) + style.ItemSpacing.x : 0);
  if (chat_box) fixed += text_w("Chat") + ImGui::GetFrameHeight() + style.ItemInnerSpacing.x;
  float avail = ImGui::GetContentRegionAvail().x;
  if (avail - fixed < font * (two ? 16 : 10)) {
    ImGui::NewLine();
    avail = ImGui::GetContentRegionAvail().x;
  }
  return std::max(font * 6, (avail - fixed) / (two ? 2.0f : 1.0f));
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
  std::string current = history.replay   ? "(replaying a saved trace)"
                        : engine.model   ? engine.model->name
                        : engine.loading ? "(loading)"
                                         : "(none)";
  if (ImGui::BeginCombo("##model", current.c_str())) {
    for (auto& c : choices) {
      if (ImGui::Selectable(c.label.c_str(), engine.model && engine.model->spec == c.spec)) load_model(c.spec, "");
      tooltip(*this, c.help.c_str());
    }
    ImGui::Separator();
    if (ImGui::Selectable("Open file or folder...")) requests.open_model = true;
    ImGui::EndCombo();
  }
  tooltip(*this, "Which transformer writes the text. Built-in and random models load at once; big ones take a while.");
  ImGui::SameLine();
  if (precision_combo("##precision") && engine.model && !history.replay) {
    inputs.keep_text = true;  // the same model again, in the new precision
    load_model(engine.model->spec, engine.model->tokenizer);
  }
  const bool encdec = engine.model && engine.model->cfg.encoder_decoder;
  const bool can_chat = engine.model && engine.model->has_chat && !history.replay;
  const bool chat = can_chat && inputs.chat;
  ImGui::SameLine();
  const float box = text_box_width(encdec || chat,
                                   encdec ? "Source"
                                   : chat ? "System"
                                          : "Prompt",
                                   encdec ? "Target starts" : "User", can_chat);
  if (can_chat) {
    ImGui::Checkbox("Chat", &inputs.chat);
    tooltip(*this,
            "Ask the model as its chat template does: the System and User boxes are put into the conversation "
            "format the model was trained on (its special tokens, shown in purple in the token strip, mark who "
            "speaks), and the model writes the assistant's answer. Off: the prompt is plain text to continue.");
    ImGui::SameLine();
  }
  if (chat) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("System");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##system", &inputs.system, ImGuiInputTextFlags_EnterReturnsTrue) && !engine.loading) start();
    tooltip(*this, "The system message: instructions the model reads before the question (may be empty).");
    ImGui::SameLine();
    ImGui::TextUnformatted("User");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##prompt", &inputs.prompt, ImGuiInputTextFlags_EnterReturnsTrue) && !engine.loading) start();
    tooltip(*this, "The question the class asks. Press Enter or Start, then Step (Right arrow).");
  } else if (encdec) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("Source");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##source", &inputs.source, ImGuiInputTextFlags_EnterReturnsTrue) && engine.model &&
        !engine.loading)
      start();
    tooltip(*this, "The text the encoder reads (for example a sentence to translate).");
    ImGui::SameLine();
    ImGui::TextUnformatted("Target starts");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##prefix", &inputs.prompt, ImGuiInputTextFlags_EnterReturnsTrue) && engine.model &&
        !engine.loading)
      start();
    tooltip(*this, "The first words of the output, if any; the decoder continues from here.");
  } else {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("Prompt");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(box);
    if (ImGui::InputText("##prompt", &inputs.prompt, ImGuiInputTextFlags_EnterReturnsTrue) && engine.model &&
        !engine.loading)
      start();
    tooltip(*this, "The text the model continues. Press Enter or Start, then Step (Right arrow).");
  }
  ImGui::SameLine();
  ImGui::BeginDisabled(!engine.model || engine.loading);
  if (ImGui::Button("Start")) start();
  ImGui::EndDisabled();
  tooltip(*this, "Cut the text into tokens and get ready to generate from it.");
  stepping_row();
}

// Row 2 of the toolbar: stepping, playing, the timeline.
void App::stepping_row() {
  const float font = ImGui::GetFontSize();
  const int n = int(history.trace.steps.size());
  const bool busy = engine.worker.busy();
  if (ImGui::Button("Reset")) reset();
  tooltip(*this, "Forget the generated tokens and go back to the prompt.");
  ImGui::SameLine();
  ImGui::BeginDisabled(sel.cursor <= 0);
  if (ImGui::Button("< Back")) step_back();
  ImGui::EndDisabled();
  tooltip(*this, "Look at the previous step again (Left arrow). Nothing is recomputed.");
  ImGui::SameLine();
  ImGui::BeginDisabled(sel.cursor + 1 >= n &&
                       ((engine.done && !input_changed()) || history.replay || busy || !engine.model));
  if (ImGui::Button("Step >")) step_forward();
  ImGui::EndDisabled();
  tooltip(*this, "Write one more token (Right arrow).");
  ImGui::SameLine();
  const bool to_end = running_to_end();
  ImGui::BeginDisabled(!play.playing && !engine.model && (!history.replay || n == 0));
  if (ImGui::Button(play.playing || to_end ? "Pause" : "Play", ImVec2(font * 4, 0))) toggle_play();
  ImGui::EndDisabled();
  tooltip(*this, "Step again and again at the chosen speed (Space).");
  flow(font * 7);
  ImGui::SetNextItemWidth(font * 7);
  ImGui::SliderFloat("##speed", &play.speed, 0.25f, 20.0f, "%.2g steps/s", ImGuiSliderFlags_Logarithmic);
  tooltip(*this, "How fast Play goes.");
  flow(font * 6);
  // "Run to end" turns into Stop while it runs (Space stops it too).
  const float run_w = std::max(ImGui::CalcTextSize("Run to end").x, ImGui::CalcTextSize("Stop").x) +
                      ImGui::GetStyle().FramePadding.x * 2;
  if (to_end) {
    ImGui::PushStyleColor(ImGuiCol_Button, ImVec4(0.75f, 0.3f, 0.2f, 1));
    if (ImGui::Button("Stop", ImVec2(run_w, 0))) stop_run();
    ImGui::PopStyleColor();
    tooltip(*this, "Stop writing here (Space); the tokens written so far stay.");
  } else {
    ImGui::BeginDisabled(engine.done || history.replay || !engine.model);
    if (ImGui::Button("Run to end", ImVec2(run_w, 0))) run_to_end();
    ImGui::EndDisabled();
    tooltip(*this, "Keep writing until the model stops or its context is full (End). Stop or Space stops it.");
  }
  flow(font * 14);
  timeline(n);
}

// The timeline: a slider over the steps taken, or before the first step an empty frame
// saying so (a slider over nothing would draw its grab half full).
void App::timeline(int n) {
  const float font = ImGui::GetFontSize();
  const float w = std::max(font * 8, ImGui::GetContentRegionAvail().x - font * 10);
  if (n == 0) {
    const ImVec2 p = ImGui::GetCursorScreenPos(), sz(w, ImGui::GetFrameHeight());
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(p, ImVec2(p.x + sz.x, p.y + sz.y), ImGui::GetColorU32(ImGuiCol_FrameBg),
                      ImGui::GetStyle().FrameRounding);
    const char* t = "no steps yet";
    const ImVec2 ts = ImGui::CalcTextSize(t);
    dl->AddText(ImVec2(p.x + (sz.x - ts.x) * 0.5f, p.y + (sz.y - ts.y) * 0.5f),
                ImGui::GetColorU32(ImGuiCol_TextDisabled), t);
    ImGui::Dummy(sz);
    tooltip(*this, "The timeline: once tokens are written, drag it to look at any step taken so far.");
    return;
  }
  int shown = sel.cursor + 1;
  ImGui::SetNextItemWidth(w);
  if (ImGui::SliderInt("##timeline", &shown, 1, std::max(n, 1), "step %d")) scrub_to(shown - 1);
  tooltip(*this, "The timeline: drag to look at any step taken so far.");
  ImGui::SameLine();
  ImGui::Text("of %d%s", n, engine.done ? " (end)" : "");
}

// What a token chip's tooltip says about its token (s: its visible text).
static void token_tooltip(const TokenInfo& t, const std::string& s, bool special) {
  ImGui::BeginTooltip();
  ImGui::Text("position %d, token id %d", t.pos, t.id);
  ImGui::Text("text: \"%s\"", s.c_str());
  if (special)
    ImGui::TextUnformatted(
        "a special token: it marks the start of the text, a turn of a chat or who speaks; the "
        "model reads it as one token, never as the letters it is spelled with");
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
  const ImGuiStyle& style = ImGui::GetStyle();
  const bool encdec = history.trace.config.encoder_decoder;
  const float line = ImGui::GetFrameHeight() + style.ItemSpacing.y;
  // As tall as its chips need (measured last frame), between one and three lines.
  const float lines = std::clamp(look.strip_lines, encdec ? 2.0f : 1.0f, encdec ? 4.0f : 3.0f);
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
      std::string s = visible(i < int(history.trace.source_text.size()) ? history.trace.source_text[i] : "?");
      float w = ImGui::CalcTextSize(s.c_str()).x + style.FramePadding.x * 2;
      if (measure) return w;
      ImGui::PushID(10000 + i);
      ImGui::PushStyleColor(ImGuiCol_Button, ImVec4(0.35f, 0.30f, 0.15f, 1));
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 1, 1, 1));
      ImGui::Button(s.c_str());
      ImGui::PopStyleColor(2);
      if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::Text("source position %d, token id %d", i,
                    i < int(history.trace.source.size()) ? history.trace.source[i] : -1);
        ImGui::Text("text: \"%s\"", s.c_str());
        ImGui::EndTooltip();
      }
      ImGui::PopID();
      return w;
    });
  }
  const auto& toks = tokens();
  const int selected = selected_position();
  int cur0 = -1, cur1 = -1;
  if (sel.cursor >= 0 && sel.cursor < int(history.trace.steps.size())) {
    cur0 = history.trace.steps[sel.cursor].pos0;
    cur1 = cur0 + int(history.trace.steps[sel.cursor].input.size()) - 1;
  }
  if (toks.empty()) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled(encdec ? "target" : "tokens");
    ImGui::SameLine();
    ImGui::TextDisabled(engine.loading ? "loading the model..."
                                       : "press Step (Right arrow) to run the prompt through the model");
  } else {
    chip_row(encdec ? "target" : "tokens", int(toks.size()), [&](int i, bool measure) -> float {
      const TokenInfo& t = toks[i];
      std::string s = visible(t.text);
      float w = ImGui::CalcTextSize(s.c_str()).x + style.FramePadding.x * 2;
      if (measure) return w;
      ImVec4 col = t.prompt ? ImVec4(0.20f, 0.33f, 0.55f, 1) : ImVec4(0.18f, 0.45f, 0.25f, 1);
      if (special_token(t.id)) col = ImVec4(0.45f, 0.22f, 0.55f, 1);  // a chat template's marks: purple
      if (!t.fed) col = ImVec4(0.55f, 0.35f, 0.08f, 1);
      if (t.pos == selected) col = ImVec4(0.85f, 0.55f, 0.05f, 1);
      ImGui::PushID(i);
      ImGui::PushStyleColor(ImGuiCol_Button, col);
      ImGui::PushStyleColor(ImGuiCol_ButtonHovered, ImVec4(col.x + 0.15f, col.y + 0.15f, col.z + 0.15f, 1));
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 1, 1, 1));
      if (ImGui::Button(s.c_str()) && t.fed) sel.pos = t.pos;
      ImGui::PopStyleColor(3);
      ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
      if (t.pos >= cur0 && t.pos <= cur1)
        ImGui::GetWindowDrawList()->AddLine(ImVec2(a.x, b.y + 1), ImVec2(b.x, b.y + 1), IM_COL32(255, 170, 40, 255), 2);
      if (t.pos == cur1 && requests.scrolled_cursor != sel.cursor) {
        // The timeline moved (a scrub, Left, Home): the shown step's token comes into view.
        ImGui::SetScrollFromPosY((a.y + b.y) * 0.5f - ImGui::GetWindowPos().y, 0.5f);
        requests.scrolled_cursor = sel.cursor;
      }
      if (ImGui::IsItemHovered()) token_tooltip(t, s, special_token(t.id));
      ImGui::PopID();
      return w;
    });
    if (requests.scrolled_version != history.version) {  // a new step: the end of the text
      ImGui::SetScrollHereY(1.0f);
      requests.scrolled_version = history.version;
      requests.scrolled_cursor = sel.cursor;
    }
  }
  look.strip_lines = (ImGui::GetCursorPosY() - style.WindowPadding.y + 1) / line;
  ImGui::EndChild();
}

bool App::status_shown() const {
  return !msgs.status.empty() &&
         (scripted || ImGui::GetTime() - msgs.status_time < 8);  // scripted: no clock in pictures
}

int App::status_rows() const {
  const float w = ImGui::GetContentRegionAvail().x, font = ImGui::GetFontSize();
  // An error too long for the line gets a second; a status message never does (it takes
  // the model's place on the line instead, status_bar), so views keep their size.
  return !msgs.error.empty() && ImGui::CalcTextSize(msgs.error.c_str()).x + font * 3 > w ? 2 : 1;
}

namespace {

// Text cut to at most two lines of width w (whole when it fits).
std::string two_lines(const std::string& text, float w) {
  if (ImGui::CalcTextSize(text.c_str(), nullptr, false, w).y <= ImGui::GetTextLineHeightWithSpacing() * 1.9f)
    return text;
  std::string t = fit_text(text, w * 1.85f);
  while (t.size() > 4 &&
         ImGui::CalcTextSize(t.c_str(), nullptr, false, w).y > ImGui::GetTextLineHeightWithSpacing() * 1.9f)
    t = fit_text(text, ImGui::CalcTextSize(t.c_str()).x - ImGui::GetFontSize() * 2);
  return t;
}

// How the weights of a model are computed with, after their storage in the status
// line's tooltip.
const char* storage_note(const ModelInfo& m) {
  if (m.bf16_products())
    return m.products == ds::Products::Fast ? " (fast products: each input rounded to bfloat16, as llama.cpp computes)"
                                            : " (exact products: float32 inputs)";
  if (!ds::is_quantized(m.precision)) return m.precision != ds::Precision::F32 ? " (computed in float32)" : "";
  return m.products == ds::Products::Fast ? " (fast products: each input rounded to 8 bits per block, integer dot "
                                            "products, as llama.cpp computes)"
                                          : " (exact products: decoded block by block, computed in float32)";
}
}  // namespace

void App::status_bar() {
  const float font = ImGui::GetFontSize();
  ImGui::Separator();
  if (!msgs.error.empty()) {  // the ok button first, the message on up to two lines (whole in a tooltip)
    if (ImGui::SmallButton("ok")) msgs.error.clear();
    ImGui::SameLine();
    ImGui::PushStyleColor(ImGuiCol_Text, readable(ImVec4(1.0f, 0.35f, 0.3f, 1)));
    const float w = ImGui::GetContentRegionAvail().x;
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + w);
    ImGui::TextUnformatted(two_lines(msgs.error, w).c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(font * 40);
      ImGui::TextUnformatted(msgs.error.c_str());
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
    return;
  }
  std::string act = engine.worker.activity();
  if (engine.loading) {
    double t = ImGui::GetTime() - engine.loading_since;
    ImVec2 p = ImGui::GetCursorScreenPos();
    float w = font * 8, h = font * 0.8f;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), ImGui::GetColorU32(ImGuiCol_FrameBg));
    float f = float(std::fmod(t, 1.5) / 1.5);
    dl->AddRectFilled(ImVec2(p.x + w * std::max(0.0f, f - 0.25f), p.y), ImVec2(p.x + w * f, p.y + h),
                      ImGui::GetColorU32(ImGuiCol_PlotHistogram));
    ImGui::Dummy(ImVec2(w, h));
    ImGui::SameLine();
    ImGui::Text("loading %s ... %.1f s", engine.loading_what.c_str(), t);
    return;
  }
  // A message too long to go beside the model's name takes the whole line for its
  // 8 seconds (the line never grows: the views keep their size); whole in a tooltip.
  if (status_shown() && ImGui::CalcTextSize(msgs.status.c_str()).x > ImGui::GetContentRegionAvail().x - font * 24) {
    ImGui::TextDisabled("%s", fit_text(msgs.status, ImGui::GetContentRegionAvail().x).c_str());
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", msgs.status.c_str());
    return;
  }
  if (history.replay) {
    ImGui::Text("replaying %s (%d layers x %d heads): nothing is recomputed",
                history.trace.model_name.empty() ? "a saved trace" : history.trace.model_name.c_str(),
                history.trace.config.n_layers, history.trace.config.n_heads);
  } else if (engine.model) {
    // "GPT-2 · 124.4M · bfloat16 (249 MB)": name, size and how the weights are kept.
    const ds::Config& c = engine.model->cfg;
    const double p = double(engine.model->params), b = double(engine.model->weight_bytes);
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
    const bool narrow = engine.model->precision != ds::Precision::F32;
    const std::string storage = engine.model->storage_name();
    ImGui::BeginGroup();
    ImGui::Text("%s \xC2\xB7 %s \xC2\xB7", engine.model->name.c_str(), params);
    ImGui::SameLine(0, font * 0.3f);
    // Quantized weights: which products the engine computes with ("· fast products").
    const std::string products = engine.model->products_label();
    ImGui::TextColored(narrow ? ImVec4(0.45f, 0.8f, 1.0f, 1) : ImGui::GetStyleColorVec4(ImGuiCol_Text), "%s%s%s",
                       storage.c_str(), products.empty() ? "" : " \xC2\xB7 ", products.c_str());
    if (!status_shown() || fb_w > font * 100) {  // the details, when a message does not need the room
      ImGui::SameLine(0, font * 0.3f);
      ImGui::Text("(%s of weights): %s, %d layers x %d heads, d_model %d, vocab %d", bytes,
                  c.encoder_decoder ? "encoder-decoder" : "decoder-only", c.n_layers, c.n_heads, c.d_model,
                  c.vocab_size);
    }
    ImGui::EndGroup();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s\nweights kept as %s%s", c.describe().c_str(), storage.c_str(), storage_note(*engine.model));
  }
  if (!act.empty()) {
    ImGui::SameLine();
    const char* spin = "|/-\\";
    ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "  %c %s", spin[int(ImGui::GetTime() * 8) % 4], act.c_str());
  } else if (engine.last_step_seconds > 0 && !scripted) {
    ImGui::SameLine();
    ImGui::TextDisabled("  last step %.1f ms", engine.last_step_seconds * 1000);
  }
  if (const size_t n_off = whatif.heads_off.size() + whatif.cross_heads_off.size()) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "  %d head%s switched off", int(n_off), n_off == 1 ? "" : "s");
  }
  if (status_shown()) {  // beside the model, whose details step aside for it
    ImGui::SameLine();
    ImGui::TextDisabled("%s", fit_text("  " + msgs.status, ImGui::GetContentRegionAvail().x).c_str());
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", msgs.status.c_str());
  }
}

// One tab per view of the table (views.h); the open one draws below its tab.
namespace {

// The tab row's hover: a tab's explanation shows after the mouse rests on it for a
// moment, above the row (never over the view's controls below), and not again for the
// tab just clicked until the mouse leaves it.
struct TabHover {
  int tab = -1;        // the tab under the mouse, -1 none
  double since = 0;    // when the mouse came onto it
  bool quiet = false;  // clicked: no explanation until the mouse leaves
};

constexpr double kTabTipDelay = 0.6;

void tab_tip(App& app, TabHover& th, int v, const char* help, ImVec2 row_top) {
  const bool hov = ImGui::IsItemHovered();
  if (!hov) {
    if (th.tab == v) th = TabHover{};
    return;
  }
  if (th.tab != v) th = TabHover{v, ImGui::GetTime(), false};
  if (ImGui::IsItemClicked()) th.quiet = true;
  if (th.quiet || !app.look.tooltips || ImGui::GetTime() - th.since < kTabTipDelay) return;
  ImGui::SetNextWindowPos(ImVec2(ImGui::GetItemRectMin().x, row_top.y - 2), ImGuiCond_Always, ImVec2(0, 1));
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
  ImGui::TextUnformatted(help);
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

}  // namespace

// The views' tabs: whole titles on as many rows as the window's width needs (a 1024-pixel
// projector or big text wraps them; nothing is cut). Returns the tab clicked, or -1.
bool App::tabs_wrap() const {
  float all = 0;
  for (const auto& v : all_views()) all += ImGui::CalcTextSize(v.title).x + ImGui::GetStyle().FramePadding.x * 0.8f + 2;
  return all > ImGui::GetContentRegionAvail().x;
}

int App::tab_row(int shown) {
  const auto views = all_views();
  const ImGuiStyle& st = ImGui::GetStyle();
  TabHover& th = state<TabHover>();
  const ImVec2 top = ImGui::GetCursorScreenPos();
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  int clicked = -1;
  // Narrow padding; when the tabs still need two rows (1024 px), flatter ones, so that the
  // view keeps the height.
  const ImVec2 pad(st.FramePadding.x * 0.4f, tabs_wrap() ? st.FramePadding.y * 0.3f : st.FramePadding.y);
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(2, st.ItemInnerSpacing.y * 0.5f));
  ImGui::PushStyleVar(ImGuiStyleVar_FramePadding, pad);
  for (int v = 0; v < int(views.size()); ++v) {
    const float w = ImGui::CalcTextSize(views[v].title).x + pad.x * 2;
    if (v > 0) {
      ImGui::SameLine();
      if (ImGui::GetCursorScreenPos().x + w > right) ImGui::NewLine();
    }
    const bool on = v == shown;
    ImGui::PushStyleColor(ImGuiCol_Button, ImGui::GetStyleColorVec4(on ? ImGuiCol_TabActive : ImGuiCol_Tab));
    ImGui::PushStyleColor(ImGuiCol_ButtonHovered, ImGui::GetStyleColorVec4(ImGuiCol_TabHovered));
    ImGui::PushStyleColor(ImGuiCol_ButtonActive, ImGui::GetStyleColorVec4(ImGuiCol_TabActive));
    if (ImGui::Button(views[v].title)) clicked = v;
    ImGui::PopStyleColor(3);
    tab_tip(*this, th, v, views[v].help, top);
  }
  ImGui::PopStyleVar(2);
  // The line under the tabs, in the open tab's colour.
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::GetWindowDrawList()->AddLine(ImVec2(ImGui::GetWindowPos().x, p.y - 1), ImVec2(right, p.y - 1),
                                      ImGui::GetColorU32(ImGuiCol_TabActive), 2.0f);
  ImGui::Dummy(ImVec2(0, st.ItemSpacing.y * 0.5f));
  return clicked;
}

void App::view_tabs() {
  // A message too long for the status line's one line gets a second (status_bar).
  status_rows_now = status_rows();
  const float status_h = ImGui::GetFrameHeightWithSpacing() * float(status_rows_now) + ImGui::GetStyle().ItemSpacing.y;
  // A view asked for (by a view last frame, the menu or a script) is selected now; a
  // view may ask again during this frame, for the next.
  const bool req = sel.view_request;
  sel.view_request = false;
  const auto views = all_views();
  sel.view = std::clamp(sel.view, 0, int(views.size()) - 1);
  const int clicked = tab_row(sel.view);
  if (clicked >= 0 && !req) sel.view = clicked;
  const int v = sel.view;
  // Over a heatmap (last frame) the wheel zooms it and does not scroll the view.
  const int no_wheel = std::exchange(look.wheel_zooms, false) ? ImGuiWindowFlags_NoScrollWithMouse : 0;
  ImGui::BeginChild("view", ImVec2(0, -status_h), false, ImGuiWindowFlags_HorizontalScrollbar | no_wheel);
  maps.view_rect =
      ImVec4(ImGui::GetWindowPos().x, ImGui::GetWindowPos().y, ImGui::GetWindowSize().x, ImGui::GetWindowSize().y);
  const double t0 = now_s();
  views[size_t(v)].draw(*this);
  view_ms = (now_s() - t0) * 1000.0;
  ImGui::EndChild();
}

void App::frame() {
  maps.placements.clear();
  maps.last_heatmap.clear();
  requests.hide_popups = !requests.window_shot.empty();
  if (requests.hide_popups) {  // the picture shows the window, not the dialog that asked for it, nor a tooltip
    requests.screenshot = requests.window_shot;
    requests.window_shot.clear();
    ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  }
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->Pos);
  ImGui::SetNextWindowSize(vp->Size);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0);
  ImGui::Begin("decoderscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize |
                   (look.presenter ? 0 : ImGuiWindowFlags_MenuBar) | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoBackground);
  ImGui::PopStyleVar();
  if (!scripted) shortcuts();
  trace_io_frame(*this);
  if (look.presenter) {  // presenter.h: the view alone (and a lesson's caption beside it)
    lesson_begin(*this);
    presenter_frame(*this);
    lesson_end(*this);
    alert_dialog();
    ImGui::End();
    keys_overlay();
    return;
  }
  menu_bar();
  lesson_begin(*this);  // a lesson's caption goes beside the rest (lesson_hooks.h)
  if (requests.open_model) {
    ImGui::OpenPopup("Open model##tb");
    state<FileBrowser>().dir.clear();
    requests.open_model = false;
  }
  if (ImGui::BeginPopupModal("Open model##tb", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    // Two lines: the dialog sizes itself to its widest line, and must fit a 1024-pixel window.
    ImGui::TextUnformatted(
        "A GGUF file (.gguf: llama, qwen2, qwen3, gemma3), a llama2.c checkpoint (.bin)\n"
        "or a GPT-2 folder (config.json + model.safetensors).");
    const bool picked =
        file_browser(state<FileBrowser>(), BrowseFor::Model, inputs.model_path, ImGui::GetFontSize() * 14);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    ImGui::InputText("model", &inputs.model_path);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    ImGui::InputText("tokenizer (optional)", &inputs.tokenizer_path);
    precision_combo("weights in memory##open");
    if (ImGui::Button("Open") || picked) {
      load_model(inputs.model_path, inputs.tokenizer_path);
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
  toolbar();
  notices();
  token_strip();
  // A narrow window (1024 px) keeps the legend's row for the views: their tabs take two rows there.
  if (look.show_legend && !tabs_wrap()) chip_legend(*this);
  if (engine.loading) {
    ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "Loading %s ... %.1f s (the window stays usable)",
                       engine.loading_what.c_str(), ImGui::GetTime() - engine.loading_since);
  }

  view_tabs();
  status_bar();
  lesson_end(*this);
  alert_dialog();
  ImGui::End();
  keys_overlay();
}

}  // namespace dsgui
