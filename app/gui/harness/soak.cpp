#include "harness/soak.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "engine_link/models.h"
#include "shell/app.h"
#include "util/error.h"
#include "views/views.h"
#include "widgets/file_browser.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

namespace dsgui {

namespace {

// Seconds an action may take to settle (a model load, a beam search, a step of the
// slowest built-in model under the sanitizers) before it counts as a hang.
constexpr double kHangSeconds = 120;
// Frames drawn after every action, at least.
constexpr int kFrames = 3;

// What the signal handler prints: the action running when the process aborted.
char g_action[160] = "opening the window";

void on_fatal_signal(int sig) {
  char msg[256];
  const int n = std::snprintf(
      msg, sizeof msg, "decoderscope: soak failed at %s: %s\n", g_action,
      sig == SIGABRT ? "aborted (an ImGui assertion, an uncaught exception or abort())" : "crashed (SIGSEGV)");
  if (n > 0) (void)!write(2, msg, size_t(std::min(n, int(sizeof msg) - 1)));
  _exit(4);
}

#ifdef __SANITIZE_ADDRESS__
void on_sanitizer_death() {
  std::fprintf(stderr, "decoderscope: soak failed at %s: the sanitizer stopped the program\n", g_action);
}
#endif

// Peak and current resident memory in MB (/proc/self/status VmHWM, VmRSS); -1 unknown.
void memory_mb(double& peak, double& now) {
  peak = now = -1;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    long kb = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %ld kB", &kb) == 1) peak = double(kb) / 1024.0;
    if (std::sscanf(line.c_str(), "VmRSS: %ld kB", &kb) == 1) now = double(kb) / 1024.0;
  }
}

// The models the soak loads: every choice of the Model box but the GPT-2-sized one
// (seconds a step), so that thousands of actions stay minutes.
std::vector<std::string> soak_models() {
  std::vector<std::string> out;
  for (const ModelChoice& c : model_choices())
    if (c.spec != "random:gpt2-small") out.push_back(c.spec);
  return out;
}

}  // namespace

const char* SoakRun::kind_name(int k) {
  static const char* kNames[kKinds] = {"step",  "back",      "play/pause",  "scrub",   "view",   "layer/head",
                                       "fork",  "heads off", "re-draw",     "sampler", "prompt", "save/open",
                                       "model", "resize",    "theme/scale", "undo"};
  return k >= 0 && k < kKinds ? kNames[k] : "?";
}

SoakRun::SoakRun(const Options& o, App& app, std::function<void(int, int)> resize)
    : o_(o), app_(app), resize_(std::move(resize)), rng_(o.sampler.seed) {
  const std::string base =
      (std::filesystem::temp_directory_path() / ("decoderscope-soak-" + std::to_string(long(getpid())))).string();
  trace_file_ = base + ".dstrace";  // the window's default format
  bad_file_ = base + "-bad.json";
  png_file_ = base + "-window.png";
  std::signal(SIGABRT, on_fatal_signal);
  std::signal(SIGSEGV, on_fatal_signal);
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_set_death_callback(on_sanitizer_death);
#endif
}

SoakRun::~SoakRun() {
  std::error_code ec;
  std::filesystem::remove(trace_file_, ec);
  std::filesystem::remove(bad_file_, ec);
  std::filesystem::remove(png_file_, ec);
  std::signal(SIGABRT, SIG_DFL);
  std::signal(SIGSEGV, SIG_DFL);
}

// Nothing is on its way: no model loading, the engine idle, no view waiting for an
// answer, not playing.
bool SoakRun::settled() const {
  return !app_.engine.loading && !app_.play.playing && !app_.engine.worker.busy() && !views_waiting(app_);
}

std::string SoakRun::waiting() const {
  std::string w;
  auto add = [&](bool on, const char* what) {
    if (on) w += std::string(w.empty() ? "" : ", ") + what;
  };
  add(app_.engine.loading, "loading a model");
  add(app_.play.playing, "playing");
  add(app_.engine.worker.busy(), "the engine is busy");
  const std::string views = views_waiting_list(app_);
  add(!views.empty(), (views + " wait" + (views.find(',') == std::string::npos ? "s" : "")).c_str());
  char state[200];
  std::snprintf(state, sizeof state, " (view %s, step %d of %d%s%s%s)", all_views()[size_t(app_.sel.view)].id,
                app_.sel.cursor + 1, int(app_.history.trace.steps.size()), app_.engine.done ? ", done" : "",
                app_.history.replay ? ", replay" : "", app_.engine.model ? "" : ", no model");
  return w + state;
}

bool SoakRun::fail(const std::string& what) {
  std::fprintf(stderr, "decoderscope: soak failed at %s: %s\n", g_action, what.c_str());
  rc_ = 1;
  phase_ = kOver;
  return false;
}

void SoakRun::summary(double t) const {
  double peak = 0, now = 0;
  memory_mb(peak, now);
  std::string per;
  for (int k = 0; k < kKinds; ++k)
    per += std::string(k ? ", " : "") + kind_name(k) + " " + std::to_string(count_[size_t(k)]);
  std::printf(
      "soak: %d actions (%s; %d refused as expected) in %.1f s, %zu steps recorded (most: %d), peak RSS %.1f MB (now "
      "%.1f MB)\n",
      done_, per.c_str(), refusals_, t - t_start_, app_.history.trace.steps.size(), most_steps_, peak, now);
  std::fflush(stdout);
}

// An action settled: anything that went wrong fails the run; a refusal of input the
// action may be turned down for is counted and dismissed (the status line's "ok").
bool SoakRun::check(double t, int gl_errors) {
  if (gl_errors > gl_seen_) return fail(std::to_string(gl_errors - gl_seen_) + " OpenGL error(s)");
  if (!app_.msgs.error.empty()) {
    if (!may_refuse_) return fail("the window says: " + app_.msgs.error);
    ++refusals_;
    if (refusal_texts_.insert(app_.msgs.error).second && refusal_texts_.size() <= 40)
      std::fprintf(stderr, "soak: refused as expected: %s\n", app_.msgs.error.c_str());
    app_.msgs.error.clear();
  }
  // The dialog of a problem (a trace that cannot be opened): the same rule, then OK.
  if (!app_.msgs.alert.empty()) {
    if (!may_refuse_) return fail("the window alerts: " + app_.msgs.alert);
    ++refusals_;
    app_.msgs.alert.clear();
  }
  const int n = int(app_.history.trace.steps.size());
  most_steps_ = std::max(most_steps_, n);
  if (app_.sel.cursor < -1 || app_.sel.cursor >= n || (n > 0 && app_.sel.cursor < 0 && !app_.history.replay))
    return fail("the cursor is at step " + std::to_string(app_.sel.cursor) + " of " + std::to_string(n));
  for (int s = 1; s < n; ++s)
    if (app_.history.trace.steps[size_t(s)].pos0 != app_.history.trace.positions(s - 1))
      return fail("step " + std::to_string(s) + " does not start where step " + std::to_string(s - 1) + " ends");
  if (done_ % 1000 == 0 && done_ > 0) summary(t);
  return true;
}

bool SoakRun::advance(double t, int gl_errors) {
  if (t_start_ < 0) t_start_ = t_action_ = t;
  try {
    switch (phase_) {
      case kBoot:
        if (app_.engine.started && settled()) {
          if (!check(t, gl_errors)) return false;
          phase_ = kAct;
        } else if (t - t_action_ > kHangSeconds) {
          return fail("the first model did not open in " + std::to_string(int(kHangSeconds)) + " s");
        }
        return true;
      case kAct: {
        if (done_ >= o_.soak) {
          summary(t);
          phase_ = kOver;
          return false;
        }
        kind_ = int(pick(kKinds));
        std::snprintf(g_action, sizeof g_action, "action %d (%s)", done_ + 1, kind_name(kind_));
        may_refuse_ = false;
        act(kind_);
        ++count_[size_t(kind_)];
        frames_ = 0;
        t_action_ = t;
        phase_ = kSettle;
        return true;
      }
      case kSettle:
        if (kind_ == kPlay && app_.play.playing && app_.sel.cursor == int(app_.history.trace.steps.size()) - 1 &&
            int(app_.history.trace.steps.size()) >= play_until_)
          app_.toggle_play();  // pause (before App::tick asks for another step)
        if (t - t_action_ > kHangSeconds)
          return fail("nothing settled in " + std::to_string(int(kHangSeconds)) + " s (a hang): " + waiting());
        if (++frames_ < kFrames || !settled()) return true;
        if (open_after_save_) {  // the save is written: reopen it
          open_after_save_ = false;
          app_.open_trace(trace_file_);
          frames_ = 0;
          return true;
        }
        ++done_;
        if (!check(t, gl_errors)) return false;
        gl_seen_ = gl_errors;
        phase_ = kAct;
        return true;
      case kOver:
        return false;
    }
  } catch (const std::exception& e) {
    return fail(std::string("exception: ") + e.what());
  }
  return true;
}

void SoakRun::act(int k) {
  const int n = int(app_.history.trace.steps.size());
  switch (k) {
    case kStep:
      may_refuse_ = app_.input_changed();  // Step starts from new text first, which may be refused
      if (pick(20) == 0)
        app_.run_to_end();
      else
        app_.step_forward();
      break;
    case kBack:
      app_.step_back();
      break;
    case kPlay:
      act_play();
      break;
    case kScrub:
      app_.scrub_to(int(pick(uint64_t(std::max(1, n)))));
      break;
    case kView:
      app_.show_view(int(pick(all_views().size())));
      break;
    case kLayerHead:
      act_layer_head();
      break;
    case kFork:
      act_fork();
      break;
    case kHeadsOff:
      act_heads_off();
      break;
    case kRedraw:
      if (pick(2))
        app_.redraw_step(app_.sel.cursor);
      else
        app_.redraw_new_seed(app_.sel.cursor);
      break;
    case kSampler:
      act_sampler();
      break;
    case kPrompt:
      act_prompt();
      break;
    case kSaveOpen:
      act_save_open();
      break;
    case kModel:
      act_model();
      break;
    case kResize:
      resize_(320 + int(pick(961)), 240 + int(pick(561)));
      break;
    case kTheme: {
      const int r = int(pick(4));
      if (r == 0)
        app_.set_theme(!app_.look.light);
      else
        app_.scale_text(r - 2);
      break;
    }
    case kUndo:
      app_.undo();  // Ctrl+Z: the last what-if taken back, in the window and the engine
      break;
    default:
      break;
  }
}

// Play until two more steps are in (or the end), then pause.
void SoakRun::act_play() {
  app_.play.speed = 5.0f + float(pick(16));
  play_until_ = int(app_.history.trace.steps.size()) + 2;
  may_refuse_ = (!app_.engine.model && !app_.history.replay) || app_.input_changed();  // no model: Play says so
  app_.toggle_play();
}

void SoakRun::act_layer_head() {
  const ds::Config& c = app_.history.trace.config;
  switch (pick(3)) {
    case 0:  // the layer slider and head box of the Attention view
      app_.sel.layer = int(pick(uint64_t(std::max(1, c.n_layers))));
      app_.sel.head = int(pick(uint64_t(std::max(1, c.n_heads) + 1))) - 1;
      break;
    case 1:  // a map of the All heads grid, clicked
      app_.sel.layer = int(pick(uint64_t(std::max(1, c.n_layers))));
      app_.sel.head = int(pick(uint64_t(std::max(1, c.n_heads))));
      cross_select(app_, app_.sel.layer, app_.sel.head);
      break;
    default:  // a token chip, clicked
      if (app_.sel.cursor >= 0) app_.sel.pos = int(pick(uint64_t(app_.history.trace.positions(app_.sel.cursor))));
      break;
  }
}

void SoakRun::act_fork() {
  if (!app_.history.branches.empty() && pick(3) == 0) {
    app_.forget_branch(int(pick(app_.history.branches.size())));
    return;
  }
  if (!app_.history.branches.empty() && pick(3) == 0) {
    app_.history.branch_shown = int(pick(app_.history.branches.size()));
    return;
  }
  app_.fork_here();
  if (pick(2)) app_.whatif.sampler.seed = rng_() % 100000, app_.send_sampler();
}

// Right-click one or two maps of the All heads grid (or "All heads on"), then re-run.
void SoakRun::act_heads_off() {
  const ds::Config& c = app_.history.trace.config;
  if (pick(4) == 0) {
    app_.all_heads_on();
  } else {
    for (int i = 0, m = 1 + int(pick(2)); i < m; ++i)
      if (c.encoder_decoder && pick(3) == 0)  // a map of the cross-attention grid
        app_.toggle_cross_head(int(pick(uint64_t(std::max(1, c.n_layers)))),
                               int(pick(uint64_t(std::max(1, c.n_heads)))));
      else
        app_.toggle_head(int(pick(uint64_t(std::max(1, c.n_layers)))), int(pick(uint64_t(std::max(1, c.n_heads)))));
  }
  app_.rerun_with_heads(app_.sel.cursor);
}

// One setting of the Next token view, often at an edge (0, 1, the sliders' ends) and
// sometimes outside what the engine takes (as Ctrl+click lets a slider be typed).
void SoakRun::act_sampler() {
  ds::SamplerConfig& s = app_.whatif.sampler;
  const ds::SamplerConfig was = s;
  static const float kTemps[] = {0.0f, 1.0f, 0.5f, 2.0f, 1e-6f, -1.0f};
  static const int kTopK[] = {0, 1, 2, 5, 50, -3};
  static const float kTopP[] = {1.0f, 0.05f, 0.5f, 0.9f, 0.0f, 1.5f};
  static const float kRep[] = {1.0f, 0.5f, 2.0f, 1.3f, 0.0f};
  static const float kAlpha[] = {0.0f, 1.0f, 0.6f, 2.0f};
  switch (pick(7)) {
    case 6:  // "Use the defaults" beside the note of settings kept from the model before
      app_.use_default_sampler();
      return;
    case 0:
      s.temperature = kTemps[pick(std::size(kTemps))];
      break;
    case 1:
      s.top_k = kTopK[pick(std::size(kTopK))];
      break;
    case 2:
      s.top_p = kTopP[pick(std::size(kTopP))];
      break;
    case 3:
      s.seed = pick(2) ? rng_() : pick(3);
      break;
    case 4:
      s.repetition_penalty = kRep[pick(std::size(kRep))];
      break;
    default:
      s.contrastive = !s.contrastive;
      s.penalty_alpha = kAlpha[pick(std::size(kAlpha))];
      break;
  }
  may_refuse_ = true;
  if (!app_.send_sampler()) s = was;  // refused: put the last good settings back, as a user would
}

std::string SoakRun::random_text(int words) {
  static const char* kWords[] = {"Once",
                                 "upon",
                                 "a",
                                 "time",
                                 ",",
                                 "Lily",
                                 "the",
                                 "cat",
                                 "22",
                                 "Nov",
                                 "2026",
                                 "57",
                                 "+",
                                 "68",
                                 "=",
                                 "and",
                                 "saw",
                                 "dog",
                                 "March",
                                 "3rd",
                                 "\xC3\xA9t\xC3\xA9",
                                 "\xE2\x82\xAC",
                                 "\xF0\x9F\x90\x88",
                                 "\n",
                                 "\t",
                                 "  "};
  std::string s;
  for (int i = 0; i < words; ++i) s += std::string(i ? " " : "") + kWords[pick(std::size(kWords))];
  return s;
}

// The prompt (and an encoder-decoder's source) typed, then Enter: often ordinary,
// sometimes empty, very long or not UTF-8.
void SoakRun::act_prompt() {
  auto text = [&]() -> std::string {
    switch (pick(6)) {
      case 0:
        return "";
      case 1:
        return random_text(400 + int(pick(800)));  // longer than any context here
      case 2:
        return "ab\xFF\xFE" + random_text(2) + "\xC3(\xE2\x82 \xF0\x9F\x90";  // invalid UTF-8
      case 3:
        return app_.engine.model ? app_.engine.model->prompt : "";
      default:
        return random_text(1 + int(pick(6)));
    }
  };
  app_.inputs.prompt = text();
  if (app_.history.trace.config.encoder_decoder || pick(4) == 0) app_.inputs.source = text();
  may_refuse_ = true;
  app_.start();
}

// File > Save the trace, then File > Open it (replay); or open the last one saved
// again (perhaps another model's by now); or open a file that is no trace.
void SoakRun::act_save_open() {
  const int r = int(pick(4));
  if (r == 0 && saved_) {
    may_refuse_ = false;
    app_.open_trace(trace_file_);
    return;
  }
  if (r == 1 && pick(3) == 0) {  // File > Save a picture > The whole window (saved next frame), after browsing
    std::string why;
    list_folder(std::filesystem::temp_directory_path().string(), BrowseFor(pick(4)), why);
    list_folder(bad_file_ + ".missing", BrowseFor::Trace, why);  // an error in words, no throw
    app_.requests.window_shot = png_file_;
    may_refuse_ = false;
    return;
  }
  if (r == 1) {
    std::ofstream(bad_file_, std::ios::binary) << (pick(2) ? "{\"steps\": [1, 2" : "\x89PNG\r\n\x1a\n\xff");
    may_refuse_ = true;
    app_.open_trace(pick(2) ? bad_file_ : bad_file_ + ".missing");
    return;
  }
  may_refuse_ = app_.history.trace.steps.empty();  // nothing to save yet
  if (app_.save_trace(trace_file_)) {
    open_after_save_ = true;
    saved_ = true;
  }
}

void SoakRun::act_model() {
  static const std::vector<std::string> models = soak_models();
  static const ds::Precision kPrec[] = {ds::Precision::F32, ds::Precision::F32, ds::Precision::BF16,
                                        ds::Precision::F16};
  app_.engine.precision = kPrec[pick(std::size(kPrec))];
  if (pick(10) == 0) {  // File > Open model with a path that is no model
    may_refuse_ = true;
    app_.load_model(pick(2) ? bad_file_ : "/nonexistent/model.bin", "");
    return;
  }
  app_.load_model(models[pick(models.size())], "");
}

}  // namespace dsgui
