// decoderscope: the window. GLFW + OpenGL 3.3 core + Dear ImGui; the engine runs on a
// worker thread (worker.h). This file is the window's life: open it, run the frame
// loop, close it. Scripted runs (--screenshot) are in script.cpp, the frame benchmark
// (--bench) in frame_bench.cpp, the command line in options.cpp.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/imgui_impl_glfw.h"
#include "backends/imgui_impl_opengl3.h"
#include "engine_link/models.h"
#include "harness/frame_bench.h"
#include "harness/script.h"
#include "harness/soak.h"
#include "imgui.h"
#include "lessons/lesson_mode.h"
#include "shell/app.h"
#include "shell/notices.h"
#include "shell/options.h"
#include "shell/recent.h"
#include "shell/window_io.h"
#include "views/common.h"
#include "views/views.h"
#include "widgets/gl.h"

namespace {

using namespace dsgui;

std::string g_glfw_error;
void glfw_error(int code, const char* msg) {
  g_glfw_error = msg ? msg : "";
  (void)code;
}

// Frames a second while the window animates (see run_loop), and while the engine works
// and nobody touches the mouse or the keys.
constexpr double kFrameRate = 60.0, kBusyFrameRate = 30.0;

// An interactive window no larger than the primary monitor's work area (a scripted
// run keeps the size asked for: its pictures have that size on any screen).
void fit_work_area(int& w, int& h) {
  GLFWmonitor* mon = glfwGetPrimaryMonitor();
  int x = 0, y = 0, aw = 0, ah = 0;
  if (mon) glfwGetMonitorWorkarea(mon, &x, &y, &aw, &ah);
  if (aw > 0 && ah > 0 && (w > aw || h > ah)) {
    std::fprintf(stderr, "decoderscope: --size %dx%d is larger than the screen; the window is %dx%d\n", w, h,
                 std::min(w, aw), std::min(h, ah));
    w = std::min(w, aw);
    h = std::min(h, ah);
  }
}

// The first size of an interactive window without --size: 90% of the primary
// monitor's work area (so that the toolbar and the status line are on screen on a
// 1024x768 projector and the maps have room on a large screen); 1280x800 when GLFW
// cannot tell.
void first_size(int& w, int& h) {
  GLFWmonitor* mon = glfwGetPrimaryMonitor();
  int x = 0, y = 0, aw = 0, ah = 0;
  if (mon) glfwGetMonitorWorkarea(mon, &x, &y, &aw, &ah);
  if (aw <= 0 || ah <= 0) {
    const GLFWvidmode* mode = mon ? glfwGetVideoMode(mon) : nullptr;
    if (mode) aw = mode->width, ah = mode->height;
  }
  if (aw <= 0 || ah <= 0) return;
  w = std::max(320, int(aw * 0.9));
  h = std::max(240, int(ah * 0.9));
}

// Presenter mode (F11) fills the monitor the window is on; leaving it gives the window
// back its place and size. Scripted runs keep their --size (the layout alone changes).
struct FullScreen {
  bool on = false;
  int x = 0, y = 0, w = 0, h = 0;  // the window before it went full screen
};
void sync_full_screen(GLFWwindow* win, const App& app, FullScreen& fs) {
  if (app.scripted || app.look.presenter == fs.on) return;
  if (app.look.presenter) {
    GLFWmonitor* mon = glfwGetPrimaryMonitor();
    const GLFWvidmode* mode = mon ? glfwGetVideoMode(mon) : nullptr;
    if (!mode) return;  // no monitor to fill: presenter mode keeps the window
    glfwGetWindowPos(win, &fs.x, &fs.y);
    glfwGetWindowSize(win, &fs.w, &fs.h);
    glfwSetWindowMonitor(win, mon, 0, 0, mode->width, mode->height, mode->refreshRate);
  } else {
    glfwSetWindowMonitor(win, nullptr, fs.x, fs.y, std::max(fs.w, 320), std::max(fs.h, 240), GLFW_DONT_CARE);
  }
  fs.on = app.look.presenter;
}

// Keys pressed since the last frame. Dear ImGui 1.86 reads each key as up or down once
// a frame, so a press and its release that both arrive between two frames (a quick tap
// while the engine works, a presentation clicker) would be lost; App::key_pressed also
// looks here. Every key still goes to Dear ImGui's own callback.
App* g_key_app = nullptr;
void key_callback(GLFWwindow* w, int key, int scancode, int action, int mods) {
  ImGui_ImplGlfw_KeyCallback(w, key, scancode, action, mods);
  if (action == GLFW_PRESS && g_key_app && key >= 0 && key < 0x10000) g_key_app->key_taps.push_back(key | (mods << 16));
}

void imgui_up(GLFWwindow* win, bool scripted);

// The window with an OpenGL 3.3 core context and Dear ImGui on it, or null (the
// reason is on stderr).
GLFWwindow* open_window(const Options& o, bool scripted) {
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "decoderscope: cannot open a window (%s); without a display run it as: "
                 "xvfb-run -a decoderscope ...\n",
                 g_glfw_error.empty() ? "no display" : g_glfw_error.c_str());
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
  if (scripted && o.soak == 0) glfwWindowHint(GLFW_RESIZABLE, GL_FALSE);  // a soak resizes it
  int w = o.width, h = o.height;
  if (!scripted && !o.has_size) first_size(w, h);
  if (!scripted) fit_work_area(w, h);
  GLFWwindow* win = glfwCreateWindow(w, h, "decoderscope", nullptr, nullptr);
  if (!win) {
    std::fprintf(stderr, "decoderscope: cannot create an OpenGL 3.3 window (%s)\n", g_glfw_error.c_str());
    glfwTerminate();
    return nullptr;
  }
  glfwMakeContextCurrent(win);
  glfwSwapInterval(scripted ? 0 : 1);
  imgui_up(win, scripted);
  return win;
}

void imgui_down() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
}

void close_window(GLFWwindow* win) {
  imgui_down();
  glfwDestroyWindow(win);
  glfwTerminate();
}

// Dear ImGui on the window, new (a lesson's slides start each step afresh).
void imgui_up(GLFWwindow* win, bool scripted) {
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  if (scripted) io.ConfigFlags |= ImGuiConfigFlags_NoMouse;
  ImGui_ImplGlfw_InitForOpenGL(win, true);
  glfwSetKeyCallback(win, key_callback);  // after the backend's: ours passes every key on to it
  ImGui_ImplOpenGL3_Init("#version 330 core");
}

// The recent models and traces (--settings, else the XDG settings file; a scripted run
// none), and where pictures and traces are saved by default (interactive runs).
void remember_files(App& app, const Options& o, bool scripted) {
  recent_start(app, !o.settings.empty() ? o.settings : scripted ? std::string() : default_settings_path());
  if (!scripted) default_save_folders(app);
}

// The settings the command line asks for; false when the shaders are missing, or in a
// scripted run when a setting is invalid (interactive: a dialog says which, and the
// default is kept).
bool configure(App& app, const Options& o, bool scripted) {
  bool ok = true;
  auto bad = [&](const std::string& msg) {
    if (scripted)
      std::fprintf(stderr, "decoderscope: %s\n", msg.c_str()), ok = false;
    else
      app.alert(msg);
  };
  app.scripted = scripted;
  app.look.ui_scale = o.scale;
  beams_set(app, o.beam_width, o.length_penalty);
  app.look.light = o.light;
  app.look.presenter = o.presenter;
  heatmaps_start(app, o.last_tokens, o.zoom);
  app.engine.precision = o.precision;
  app.engine.products = o.products;
  app.engine.threads = o.threads;
  app.engine.kv_cache = !o.no_kv_cache;
  if (!o.stage.empty()) block_open_stage(app, o.stage);
  if (!o.kv_pane.empty()) kv_open_pane(app, o.kv_pane);
  app.sel.layer = std::max(0, o.layer);
  app.sel.head = o.head;
  app.look.show_scores = o.scores;
  app.look.mask_only = o.mask_only;
  app.look.log_scale = o.log;
  for (int c = 0; c < 3; ++c)
    if (o.colormap == kColormapNames[c]) app.look.cmap = c;
  if (!o.colormap.empty() && o.colormap != kColormapNames[app.look.cmap])
    bad("unknown colormap '" + o.colormap + "': use viridis, magma or greys");
  app.whatif.sampler = o.sampler;
  if (o.has_sampler) {
    try {
      ds::validate(o.sampler);
    } catch (const std::exception& e) {
      bad(e.what());
      app.whatif.sampler = Options{}.sampler;
    }
  }
  if (!ok) return false;
  apply_fonts_and_style(app, true);
  std::string err;
  const std::string shader_dir = find_shader_dir(&err);
  if (shader_dir.empty() || !app.maps.heat.init(shader_dir, err)) {
    std::fprintf(stderr, "decoderscope: %s\n", err.c_str());
    return false;
  }
  app.engine.worker.set_wake([] { glfwPostEmptyEvent(); });
  remember_files(app, o, scripted);
  return true;
}

// The title names the model and the step, for the task bar and the projector.
void set_title(GLFWwindow* win, const App& app, std::string& shown) {
  std::string title = "decoderscope";
  if (app.history.replay)
    title += " - replay of " +
             (app.history.trace.model_name.empty() ? std::string("a trace") : app.history.trace.model_name);
  else if (app.engine.model)
    title += " - " + app.engine.model->name;
  if (!app.history.trace.steps.empty())
    title += " - step " + std::to_string(app.sel.cursor + 1) + " of " + std::to_string(app.history.trace.steps.size());
  if (title != shown) {
    shown = title;
    glfwSetWindowTitle(win, title.c_str());
  }
}

// The saves asked for from the menu during the frame: the last heatmap's cells, the
// whole window (read from the back buffer before the swap).
void serve_save_requests(App& app, int fw, int fh) {
  if (!app.requests.heatmap_png.empty()) {
    auto it = app.maps.targets.find(app.maps.last_heatmap);
    if (it != app.maps.targets.end() && it->second) {
      auto px = it->second->read();
      std::string why;
      if (write_png(app.requests.heatmap_png, it->second->width(), it->second->height(), px, &why))
        app.say("saved the heatmap to " + app.requests.heatmap_png);
      else
        app.fail(why);
    } else {
      app.fail("there is no heatmap on screen to save");
    }
    app.requests.heatmap_png.clear();
  }
  if (!app.requests.screenshot.empty()) {
    std::string why;
    if (save_window(app.requests.screenshot, fw, fh, &why))
      app.say("saved the window to " + app.requests.screenshot);
    else
      app.fail(why);
    app.requests.screenshot.clear();
  }
}

// Builds and renders one frame; returns the framebuffer's size. OpenGL errors are
// counted in gl_errors.
void draw_frame(GLFWwindow* win, App& app, FrameBench* bench, int& fw, int& fh, int& gl_errors) {
  glfwGetFramebufferSize(win, &fw, &fh);
  app.fb_w = fw;
  app.fb_h = fh;
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
  app.frame();
  ImGui::Render();
  if (bench) {
    bench->lap(&FrameTimes::build);
    bench->view_took(app.view_ms);
  }
  glViewport(0, 0, fw, fh);
  const ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  glClearColor(bg.x, bg.y, bg.z, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  for (GLenum e; (e = glGetError()) != GL_NO_ERROR;) {
    ++gl_errors;
    std::fprintf(stderr, "decoderscope: OpenGL error 0x%04x\n", unsigned(e));
  }
  if (bench) bench->lap(&FrameTimes::render);
}

// When main() began (now_s()), for --bench's opening figures.
double g_started = 0;

// Whether the mouse or a key moved this frame (the frame rate stays high while it does).
bool touched() {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.MouseDelta.x != 0 || io.MouseDelta.y != 0 || io.MouseWheel != 0 || io.InputQueueCharacters.Size > 0)
    return true;
  for (bool down : io.MouseDown)
    if (down) return true;
  for (bool down : io.KeysDown)
    if (down) return true;
  return false;
}

// The frame loop; returns the exit code. While something moves (the engine, playing,
// loading) frames come at most kFrameRate a second, as a display's refresh would pace
// them: a software renderer (Mesa llvmpipe) draws on the same cores as the engine, and
// frames drawn faster than that only slow the engine down. While the engine works and
// the mouse and keys are still, kBusyFrameRate: on two cores a full-screen frame of
// llvmpipe takes about half a core at 60 a second, which the engine's thread then waits
// for (the logit lens grid at 1,024 GPT-2 positions went to 100 ms frames). Scripted runs
// are unpaced; --bench paces as an interactive window does.
int run_loop(GLFWwindow* win, App& app, const Options& o, bool scripted) {
  FrameBench frame_bench;
  FrameBench* bench = o.bench ? &frame_bench : nullptr;
  ScriptedRun script(o, app, now_s(), bench);
  watch_wide_characters(win, app);  // emoji: the message names the real code point
  std::unique_ptr<SoakRun> soak;
  if (o.soak > 0) soak = std::make_unique<SoakRun>(o, app, [win](int w, int h) { glfwSetWindowSize(win, w, h); });
  // A trace that cannot be opened: a scripted run exits (the reason is on stderr), the
  // window opens on its default model with the reason in a dialog.
  const bool replaying = !o.trace.empty() && app.open_trace(o.trace);
  if (!o.trace.empty() && !replaying && scripted) return 1;
  if (replaying) {
    script.replay();
  } else {
    app.inputs.keep_text = o.has_prompt || o.has_source;
    app.inputs.prompt = o.prompt;
    app.inputs.source = o.source;
    app.inputs.chat = o.chat;
    if (o.has_system) app.inputs.system = o.system;
    app.load_model(o.model.empty() ? default_model_spec() : o.model, o.tokenizer);
  }
  int gl_errors = 0, fw = 0, fh = 0;
  std::string title;
  FullScreen full_screen;
  double next_frame = 0, last_frame = 0, last_touch = 0;
  while (!glfwWindowShouldClose(win) && !app.requests.quit) {
    if (scripted && !o.bench) {
      glfwPollEvents();
    } else if (o.bench || app.play.playing || app.engine.loading || app.engine.worker.busy()) {
      glfwPollEvents();
      for (double now = now_s(); now < next_frame; now = now_s()) glfwWaitEventsTimeout(next_frame - now);
    } else {
      glfwWaitEventsTimeout(0.1);
    }
    const double t = now_s(), prev_frame = last_frame;
    const bool working = app.engine.worker.busy() || app.engine.loading;
    next_frame = t + 1.0 / (working && t - last_touch > 0.5 ? kBusyFrameRate : kFrameRate);
    last_frame = t;
    if (bench) bench->begin_frame(t, script.stepping());
    if (app.look.font_dirty) apply_fonts_and_style(app, false);
    app.handle_events();
    if (soak && !soak->advance(t, gl_errors)) return soak->exit_code();
    app.tick(t);
    if (bench) bench->lap(&FrameTimes::events);
    if (scripted && !soak && !script.advance(t, prev_frame)) return 1;
    set_title(win, app, title);
    sync_full_screen(win, app, full_screen);
    draw_frame(win, app, bench, fw, fh, gl_errors);
    if (touched()) last_touch = t;
    const std::string shot = app.requests.screenshot;
    serve_save_requests(app, fw, fh);
    if (o.sidecar && !shot.empty()) write_sidecar(shot + ".json", app, o, fw, fh, gl_errors);
    if (scripted && !soak && script.shooting()) {
      const int rc = script.shoot(fw, fh, gl_errors);
      glfwSwapBuffers(win);
      return rc;
    }
    glfwSwapBuffers(win);
    if (bench) {
      bench->lap(&FrameTimes::swap);
      if (bench->first_frame_at < 0) bench->first_frame_at = now_s() - g_started;
      if (bench->model_shown_at < 0 && app.engine.model && !app.engine.loading)
        bench->model_shown_at = now_s() - g_started;
    }
  }
  return 0;
}

// The command line; a bad one: exits in a scripted run, else the defaults and the
// message for a dialog.
Options read_options(int argc, char** argv, std::string& problem) {
  try {
    return parse_options(argc, argv);
  } catch (const OptionError& e) {
    std::fprintf(stderr, "decoderscope: %s\n", e.what());
    if (scripted_command_line(argc, argv)) std::exit(2);
    problem = std::string(e.what()) + "\n(the window opened with the default settings; --help lists the options)";
    return Options{};
  }
}

// One window's life: open, configure, `attach` (lesson mode), run, close.
// win: a window already open (kept open), or null.
template <class F>
int run_window(const Options& o, bool scripted, F&& attach, GLFWwindow* keep = nullptr) {
  GLFWwindow* win = keep ? keep : open_window(o, scripted);
  if (!win) return 1;
  int rc = 1;
  {
    App app;
    g_key_app = &app;
    if (configure(app, o, scripted)) {
      attach(app);
      rc = run_loop(win, app, o, scripted);
    }
    app.engine.worker.cancel();
    g_key_app = nullptr;
  }
  if (!keep) close_window(win);
  return rc;
}

// The options of lesson step i (lesson_mode.h), or of the rest of the command line
// alone when the step cannot be shown (its caption says why).
Options lesson_step_options(const Lesson& l, int i, const std::vector<std::string>& rest) {
  auto argv = lesson_step_argv(l, i, rest);
  std::vector<char*> ptrs;
  for (std::string& a : argv) ptrs.push_back(a.data());
  try {
    return parse_options(int(ptrs.size()), ptrs.data());
  } catch (const OptionError& e) {
    std::fprintf(stderr, "decoderscope: %s: %s\n", lesson_step_name(l, i).c_str(), e.what());
    argv = lesson_step_argv(l, -1, rest);
    ptrs.clear();
    for (std::string& a : argv) ptrs.push_back(a.data());
    return parse_options(int(ptrs.size()), ptrs.data());
  }
}

// --lesson NAME: the window opens on the lesson; with --lesson-step K --screenshot F a
// scripted run takes step K's picture; --export DIR takes every step's (NN.png, the
// caption under the view).
int lesson_main(const LessonCommand& lc) {
  const Lesson l = open_lesson(lc.path);
  for (const std::string& e : l.errors) std::fprintf(stderr, "decoderscope: %s\n", e.c_str());
  if (l.steps.empty()) return 1;
  const int n = int(l.steps.size());
  if (lc.step > n) {
    std::fprintf(stderr, "decoderscope: --lesson-step %d: %s has %d steps\n", lc.step, l.name.c_str(), n);
    return 2;
  }
  const int first = std::max(0, lc.step - 1);
  Options o = lesson_step_options(l, first, lc.rest);
  if (lc.export_dir.empty() && o.screenshot.empty())  // the window, on the lesson
    return run_window(lesson_step_options(l, -1, lc.rest), false, [&](App& app) { lesson_open(app, l, first); });
  int rc = 0;
  if (!lc.export_dir.empty() && !o.has_size) o.width = 1920, o.height = 1080;  // slides: a projector's size
  GLFWwindow* win = open_window(o, true);  // one window for every picture, Dear ImGui new for each
  if (!win) return 1;
  for (int i = lc.export_dir.empty() ? first : 0; i < (lc.export_dir.empty() ? first + 1 : n); ++i) {
    o = lesson_step_options(l, i, lc.rest);
    const bool skipped = lesson_step_skipped(l, i, lc.rest);
    if (!lc.export_dir.empty()) {
      if (skipped || !l.steps[size_t(i)].error.empty()) {
        std::fprintf(stderr, "decoderscope: %s: not exported (%s)\n", lesson_step_name(l, i).c_str(),
                     skipped ? "it needs --model FILE, a GGUF or Hugging Face model" : "see above");
        continue;
      }
      char name[32];
      std::snprintf(name, sizeof name, "/%02d.png", i + 1);
      std::error_code ec;
      std::filesystem::create_directories(lc.export_dir, ec);
      o.screenshot = lc.export_dir + name;
      if (!o.has_size) o.width = 1920, o.height = 1080;
      o.presenter = true;  // a slide is the view and its caption, without the window's controls
      const size_t dot = o.save_trace.find_last_of('.');  // one trace a step: NAME-NN.json
      if (!o.save_trace.empty() && dot != std::string::npos)
        o.save_trace = o.save_trace.substr(0, dot) + "-" + std::string(name + 1, 2) + o.save_trace.substr(dot);
    }
    if (i > 0 && !lc.export_dir.empty()) imgui_down(), imgui_up(win, true);
    const int r = run_window(
        o, true, [&](App& app) { lesson_attach(app, l, i, !lc.export_dir.empty(), skipped); }, win);
    rc = std::max(rc, r);
    if (!lc.export_dir.empty() && r == 0) std::printf("%s\n", o.screenshot.c_str());
  }
  close_window(win);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  g_started = now_s();
  try {
    LessonCommand lc;
    if (lesson_command(argc, argv, lc)) return lesson_main(lc);
  } catch (const OptionError& e) {
    std::fprintf(stderr, "decoderscope: %s\n", e.what());
    return 2;
  }
  std::string problem;
  const Options o = read_options(argc, argv, problem);
  const bool scripted = !o.screenshot.empty() || !o.save_heatmap.empty() || o.bench || o.soak > 0;
  GLFWwindow* win = open_window(o, scripted);
  if (!win) return 1;
  int rc = 1;
  {
    App app;
    g_key_app = &app;
    app.msgs.alert = problem;  // already on stderr
    if (configure(app, o, scripted)) rc = run_loop(win, app, o, scripted);
    app.engine.worker.cancel();
    g_key_app = nullptr;
  }
  close_window(win);
  return rc;
}
