// decoderscope: the window. GLFW + OpenGL 3.3 core + Dear ImGui; the engine runs on a
// worker thread (worker.h). Also runs scripted (--screenshot) for tests, docs and slides.
#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app.h"
#include "backends/imgui_impl_glfw.h"
#include "backends/imgui_impl_opengl3.h"
#include "gl.h"
#include "imgui.h"
#include "models.h"
#include "stb_image_write.h"

namespace {

using dsgui::App;

const char* kUsage = R"(decoderscope: watch a transformer decoder write text one token at a time.

usage: decoderscope [--model M] [--tokenizer F] [--precision f32|bf16|f16] [--threads N]
                    [--prompt T | --source T] [--trace FILE.json]
                    [--steps N] [--view attention|heads|cross|residual|next|lens|branches]
                    [--layer L] [--head H|mean] [--select POS] [--scores] [--mask-only] [--log]
                    [--colormap viridis|magma|greys] [--light] [--scale S]
                    [--temperature T] [--top-k K] [--top-p P] [--seed S] [--head-off L:H ...]
                    [--step-back K] [--fork-at STEP [--fork-seed S]]
                    [--screenshot out.png] [--save-heatmap cells.png] [--save-trace out.json]
                    [--bench] [--size WxH]

--model: a llama2.c .bin, a GPT-2 folder, builtin:NAME, random:decoder, random:encdec or
  random:gpt2-small (default: builtin:dates, else the aidreams260K fixture, else random:decoder).
--precision: how the model's weights are kept in memory: f32 (float32, the default), bf16
  (bfloat16) or f16 (float16). 16-bit weights halve the memory each token reads; the
  arithmetic stays float32, at a small cost in accuracy.
--threads: threads the engine computes a step with (default 1, which leaves the other
  cores to the window).
--prompt (decoder) or --prompt as the target prefix and --source (encoder-decoder).
--trace: open a saved trace instead of a model (replay; nothing is recomputed).
Scripted runs: --screenshot sets up, runs --steps steps (default 8), waits for the engine,
  renders a few frames, saves the window as PNG (and PNG.json with the heatmap cells'
  rectangles, for tests) and exits 0; --save-heatmap also saves the cells of the view's
  heatmap alone. --step-back K then scrubs back K steps and
  regenerates them with the engine (rewind + step) before the picture is taken.
  --head-off L:H (repeatable) re-runs the last step with those heads switched off.
  --fork-at STEP keeps the run as a branch, forks at STEP (1-based) with seed
  --fork-seed and generates again to --steps (for the Branches view).
--bench: runs 50 steps of a GPT-2-small-sized random model (or --model) while the window
  keeps drawing, and prints the longest frame time and the 99th percentile.
Keys: Right step, Left step back, Space play/pause, Ctrl +/- bigger/smaller.
)";

struct Options {
  std::string model, tokenizer, prompt, source, trace, view = "attention", screenshot, save_trace, save_heatmap;
  std::string colormap;
  bool has_prompt = false, has_source = false, has_steps = false;
  int steps = 8, layer = 0, head = 0, select = -1, step_back = 0, fork_at = 0, threads = 1;
  ds::Precision precision = ds::Precision::F32;
  long fork_seed = -1;
  bool scores = false, mask_only = false, log = false, light = false, bench = false;
  float scale = 1.0f;
  int width = 1280, height = 800;
  bool has_sampler = false;
  ds::SamplerConfig sampler{1.0f, 0, 0.9f, 0};
  std::vector<std::pair<int, int>> heads_off;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "decoderscope: %s\n", msg.c_str());
  std::exit(2);
}

long to_int(const std::string& s, const std::string& opt) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end) die(opt + " expects an integer, got '" + s + "'");
  return v;
}

float to_float(const std::string& s, const std::string& opt) {
  char* end = nullptr;
  float v = std::strtof(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v)) die(opt + " expects a number, got '" + s + "'");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--model")
      o.model = val();
    else if (a == "--tokenizer")
      o.tokenizer = val();
    else if (a == "--precision") {
      std::string v = val();
      if (!dsgui::parse_precision(v, o.precision)) die("--precision expects f32, bf16 or f16, got '" + v + "'");
    } else if (a == "--threads")
      o.threads = int(to_int(val(), a));
    else if (a == "--prompt")
      o.prompt = val(), o.has_prompt = true;
    else if (a == "--source")
      o.source = val(), o.has_source = true;
    else if (a == "--trace")
      o.trace = val();
    else if (a == "--steps")
      o.steps = int(to_int(val(), a)), o.has_steps = true;
    else if (a == "--view")
      o.view = val();
    else if (a == "--layer")
      o.layer = int(to_int(val(), a));
    else if (a == "--head") {
      std::string v = val();
      o.head = v == "mean" ? -1 : int(to_int(v, a));
    } else if (a == "--select")
      o.select = int(to_int(val(), a));
    else if (a == "--step-back")
      o.step_back = int(to_int(val(), a));
    else if (a == "--fork-at")
      o.fork_at = int(to_int(val(), a));
    else if (a == "--fork-seed")
      o.fork_seed = to_int(val(), a);
    else if (a == "--screenshot")
      o.screenshot = val();
    else if (a == "--save-trace")
      o.save_trace = val();
    else if (a == "--save-heatmap")
      o.save_heatmap = val();
    else if (a == "--scores")
      o.scores = true;
    else if (a == "--mask-only")
      o.mask_only = true;
    else if (a == "--log")
      o.log = true;
    else if (a == "--light")
      o.light = true;
    else if (a == "--bench")
      o.bench = true;
    else if (a == "--colormap")
      o.colormap = val();
    else if (a == "--scale")
      o.scale = to_float(val(), a);
    else if (a == "--temperature")
      o.sampler.temperature = to_float(val(), a), o.has_sampler = true;
    else if (a == "--top-k")
      o.sampler.top_k = int(to_int(val(), a)), o.has_sampler = true;
    else if (a == "--top-p")
      o.sampler.top_p = to_float(val(), a), o.has_sampler = true;
    else if (a == "--seed")
      o.sampler.seed = uint64_t(to_int(val(), a)), o.has_sampler = true;
    else if (a == "--head-off") {
      std::string v = val();
      auto c = v.find(':');
      if (c == std::string::npos) die("--head-off expects LAYER:HEAD, got '" + v + "'");
      o.heads_off.push_back({int(to_int(v.substr(0, c), a)), int(to_int(v.substr(c + 1), a))});
    } else if (a == "--size") {
      std::string v = val();
      auto x = v.find('x');
      if (x == std::string::npos) die("--size expects WIDTHxHEIGHT");
      o.width = int(to_int(v.substr(0, x), a));
      o.height = int(to_int(v.substr(x + 1), a));
    } else
      die("unknown option '" + a + "' (try --help)");
  }
  bool known = false;
  for (const char* v : dsgui::kViewIds) known |= o.view == v;
  if (!known) die("unknown view '" + o.view + "': use attention, heads, cross, residual, next, lens or branches");
  if (o.bench && o.model.empty()) o.model = "random:gpt2-small";
  if (o.bench && !o.has_steps) o.steps = 50;
  if (o.steps < 0 || o.steps > 100000) die("--steps out of range");
  if (o.threads < 1 || o.threads > 256) die("--threads must be between 1 and 256");
  if (o.scale < 0.5f || o.scale > 4.0f) die("--scale must be between 0.5 and 4");
  if (o.width < 320 || o.height < 240) die("--size too small");
  return o;
}

std::string g_glfw_error;
void glfw_error(int code, const char* msg) {
  g_glfw_error = msg ? msg : "";
  (void)code;
}

const char* kFontPath = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

// Frames a second while the window animates (see the main loop).
constexpr double kFrameRate = 60.0;

// Fonts and style for the current scale and theme. The first call happens before the
// backend builds its font texture; later ones rebuild it.
void apply_fonts_and_style(App& app, bool first) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  const float px = std::round(18.0f * app.ui_scale);
  static const ImWchar ranges[] = {0x0020, 0x00FF, 0x2013, 0x2026, 0x2190, 0x2193, 0x2205, 0x2205, 0x2212, 0x2212,
                                   0x221E, 0x221E, 0x23CE, 0x23CE, 0x2423, 0x2423, 0x25B2, 0x25C0, 0};
  ImFont* f = nullptr;
  std::error_code ec;
  if (std::filesystem::exists(kFontPath, ec)) {
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    f = io.Fonts->AddFontFromFileTTF(kFontPath, px, &cfg, ranges);
  }
  dsgui::set_unicode_font(f != nullptr);
  if (!f) {
    ImFontConfig cfg;
    cfg.SizePixels = px;
    io.Fonts->AddFontDefault(&cfg);
  }
  if (!first) {
    ImGui_ImplOpenGL3_DestroyFontsTexture();
    ImGui_ImplOpenGL3_CreateFontsTexture();
  }
  ImGuiStyle st;
  if (app.light)
    ImGui::StyleColorsLight(&st);
  else
    ImGui::StyleColorsDark(&st);
  st.FrameRounding = 4;
  st.GrabRounding = 4;
  st.TabRounding = 4;
  st.WindowBorderSize = 0;
  st.ItemSpacing = ImVec2(8, 6);
  st.FramePadding = ImVec2(6, 4);
  if (!app.light) st.Colors[ImGuiCol_WindowBg] = ImVec4(0.09f, 0.09f, 0.10f, 1);
  st.ScaleAllSizes(app.ui_scale);
  ImGui::GetStyle() = st;
  app.font_dirty = false;
}

bool write_png(const std::string& path, int w, int h, const std::vector<uint8_t>& rgba_top_down) {
  stbi_flip_vertically_on_write(0);
  return stbi_write_png(path.c_str(), w, h, 4, rgba_top_down.data(), w * 4) != 0;
}

// The whole window: read the back buffer before the swap.
bool save_window(const std::string& path, int w, int h) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, px.data());
  stbi_flip_vertically_on_write(1);
  bool ok = stbi_write_png(path.c_str(), w, h, 3, px.data(), w * 3) != 0;
  stbi_flip_vertically_on_write(0);
  return ok;
}

void write_sidecar(const std::string& path, const App& app, const Options& o, int w, int h, int gl_errors) {
  std::ofstream f(path);
  f << "{\n  \"width\": " << w << ", \"height\": " << h << ", \"view\": \"" << o.view
    << "\", \"gl_errors\": " << gl_errors << ",\n";
  f << "  \"mask_colors\": [[" << int(dsgui::kMaskA[0]) << ", " << int(dsgui::kMaskA[1]) << ", "
    << int(dsgui::kMaskA[2]) << "], [" << int(dsgui::kMaskB[0]) << ", " << int(dsgui::kMaskB[1]) << ", "
    << int(dsgui::kMaskB[2]) << "]],\n";
  f << "  \"uploads\": {\"whole\": " << app.uploads.whole << ", \"appends\": " << app.uploads.appends
    << ", \"bytes\": " << app.uploads.bytes << "},\n";
  f << "  \"precision\": \"" << (app.model ? ds::precision_name(app.model->precision) : "") << "\",\n";
  f << "  \"view_rect\": [" << app.view_rect.x << ", " << app.view_rect.y << ", " << app.view_rect.z << ", "
    << app.view_rect.w << "],\n";
  f << "  \"steps\": " << app.trace.steps.size() << ", \"cursor\": " << app.cursor << ",\n  \"tokens\": [";
  auto toks = app.tokens();
  for (size_t i = 0; i < toks.size(); ++i) f << (i ? ", " : "") << toks[i].id;
  f << "],\n  \"heatmaps\": [";
  for (size_t i = 0; i < app.placements.size(); ++i) {
    const auto& p = app.placements[i];
    f << (i ? ",\n" : "\n") << "    {\"name\": \"" << p.name << "\", \"x\": " << p.x << ", \"y\": " << p.y
      << ", \"cell_w\": " << p.cell_w << ", \"cell_h\": " << p.cell_h << ", \"rows\": " << p.rows
      << ", \"cols\": " << p.cols << ", \"causal\": " << (p.causal ? "true" : "false") << ", \"mask\": [";
    for (size_t j = 0; j < p.mask.size(); ++j) f << (j ? "," : "") << int(p.mask[j]);
    f << "]}";
  }
  f << "\n  ]\n}\n";
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread, in seconds (what the window's thread itself ran).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Page faults of the whole process that had to read from disk (code or data the
// system had dropped from memory), so far.
long major_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_majflt;
}

// --bench: where the time of one frame went, in ms. A frame runs from the top of the
// main loop to the next top: events (the worker's, folded into the trace), build
// (ImGui and the panels, heatmap uploads and passes), render (ImGui's draw lists),
// swap, and waiting for the window system; cpu is what the window's thread ran;
// faults, the page faults that read from disk meanwhile (in any thread).
struct FrameTimes {
  double total = 0, events = 0, build = 0, render = 0, swap = 0, cpu = 0;
  long faults = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  const bool scripted = !o.screenshot.empty() || !o.save_heatmap.empty() || o.bench;

  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "decoderscope: cannot open a window (%s); without a display run it as: "
                 "xvfb-run -a decoderscope ...\n",
                 g_glfw_error.empty() ? "no display" : g_glfw_error.c_str());
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
  if (scripted) glfwWindowHint(GLFW_RESIZABLE, GL_FALSE);
  GLFWwindow* win = glfwCreateWindow(o.width, o.height, "decoderscope", nullptr, nullptr);
  if (!win) {
    std::fprintf(stderr, "decoderscope: cannot create an OpenGL 3.3 window (%s)\n", g_glfw_error.c_str());
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(win);
  glfwSwapInterval(scripted ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  if (scripted) io.ConfigFlags |= ImGuiConfigFlags_NoMouse;
  ImGui_ImplGlfw_InitForOpenGL(win, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  int rc = 0;
  {
    App app;
    app.scripted = scripted;
    app.ui_scale = o.scale;
    app.light = o.light;
    app.precision = o.precision;
    app.engine_threads = o.threads;
    app.layer = std::max(0, o.layer);
    app.head = o.head;
    app.show_scores = o.scores;
    app.mask_only = o.mask_only;
    app.log_scale = o.log;
    for (int c = 0; c < 3; ++c)
      if (o.colormap == dsgui::kColormapNames[c]) app.cmap = c;
    if (!o.colormap.empty() && o.colormap != dsgui::kColormapNames[app.cmap])
      die("unknown colormap '" + o.colormap + "': use viridis, magma or greys");
    if (o.has_sampler) {
      try {
        ds::validate(o.sampler);
      } catch (const std::exception& e) {
        die(e.what());
      }
    }
    app.sampler = o.sampler;
    apply_fonts_and_style(app, true);

    std::string shader_dir = dsgui::find_shader_dir();
    std::string err;
    if (shader_dir.empty() || !app.heat.init(shader_dir, err)) {
      std::fprintf(stderr, "decoderscope: %s\n",
                   shader_dir.empty() ? "cannot find the shaders folder (heatmap.frag) beside the program or in the "
                                        "source tree"
                                      : err.c_str());
      rc = 1;
    }
    app.worker.set_wake([] { glfwPostEmptyEvent(); });

    // What a scripted run does, in order.
    enum Phase { kLoad, kStep, kScrub, kRegen, kSettle, kShoot, kEnd };
    Phase phase = kLoad;
    int phase_frames = 0;
    const double t_start = now_s();
    std::vector<FrameTimes> frames;  // --bench: frames while stepping
    std::vector<double> idle_ms;     // --bench: frame times after
    FrameTimes cur;
    double bench_t0 = 0, bench_t1 = 0, last_frame = 0, last_cpu = 0, mark = 0;
    long last_faults = 0;
    auto lap = [&] {  // ms since the last lap
      const double t = now_s(), d = (t - mark) * 1000.0;
      mark = t;
      return d;
    };
    int gl_errors = 0;
    std::string window_title;

    if (!o.trace.empty()) {
      if (!app.open_trace(o.trace)) rc = 1;
      phase = kSettle;
    } else {
      app.keep_text = o.has_prompt || o.has_source;
      app.prompt = o.prompt;
      app.source = o.source;
      app.load_model(o.model.empty() ? dsgui::default_model_spec() : o.model, o.tokenizer);
    }

    auto settle_settings = [&] {
      const ds::Config& c = app.trace.config;
      app.layer = std::clamp(o.layer, 0, std::max(0, c.n_layers - 1));
      app.cross_layer = app.layer;
      app.head = std::clamp(o.head, -1, c.n_heads - 1);
      app.cross_head = app.head;
      if (o.select >= 0) app.sel_pos = o.select;
      for (int v = 0; v < dsgui::kViewCount; ++v)
        if (o.view == dsgui::kViewIds[v]) app.view = v;
      app.view_request = true;
    };

    // While something moves (the engine, playing, loading) frames come at most
    // kFrameRate a second, as a display's refresh would pace them: a software renderer
    // (Mesa llvmpipe) draws on the same cores as the engine, and frames drawn faster
    // than that only slow the engine down. Scripted screenshots run unpaced.
    const double frame_period = 1.0 / kFrameRate;
    double next_frame = 0;
    while (rc == 0 && !glfwWindowShouldClose(win) && !app.quit) {
      if (scripted && !o.bench) {
        glfwPollEvents();
      } else if (o.bench || app.playing || app.loading || app.worker.busy()) {
        glfwPollEvents();
        for (double now = now_s(); now < next_frame; now = now_s()) glfwWaitEventsTimeout(next_frame - now);
      } else {
        glfwWaitEventsTimeout(0.1);
      }
      const double t = now_s();
      next_frame = t + frame_period;
      if (o.bench) {
        const double cpu = thread_cpu_s();
        const long faults = major_faults();
        cur.total = (t - last_frame) * 1000.0;
        cur.cpu = (cpu - last_cpu) * 1000.0;
        cur.faults = faults - last_faults;
        if (last_frame > 0 && phase == kStep) frames.push_back(cur);
        cur = FrameTimes{};
        last_cpu = cpu;
        last_faults = faults;
        mark = t;
      }
      const double prev_frame = last_frame;
      last_frame = t;

      if (app.font_dirty) apply_fonts_and_style(app, false);
      app.handle_events();
      app.tick(t);
      if (o.bench) cur.events = lap();

      if (scripted) {
        if (!app.error.empty()) {
          std::fprintf(stderr, "decoderscope: scripted run failed: %s\n", app.error.c_str());
          rc = 1;
          break;
        }
        if (t - t_start > 600) {
          std::fprintf(stderr, "decoderscope: scripted run timed out\n");
          rc = 1;
          break;
        }
        const int have = int(app.trace.steps.size());
        switch (phase) {
          case kLoad:
            if (app.started && !app.worker.busy()) {
              settle_settings();             // the view asked for is on screen while the steps run
              if (o.bench && o.steps > 0) {  // the engine at full speed
                dsgui::Command c;
                c.kind = dsgui::Command::Step;
                c.n = o.steps;
                app.worker.post(c);
              }
              bench_t0 = t;
              phase = kStep;
            }
            break;
          case kStep:
            // Screenshots: one step a frame, as a class pressing Right would, so that
            // the views grow with every step as they do in use.
            if (!o.bench && !app.worker.busy() && have < o.steps && !app.done) {
              dsgui::Command c;
              c.kind = dsgui::Command::Step;
              c.n = 1;
              app.worker.post(c);
              break;
            }
            if (!app.worker.busy() && (have >= o.steps || app.done)) {
              bench_t1 = t;
              app.cursor = have - 1;
              if (!o.heads_off.empty() && have > 0) {
                // Re-run the last step with these heads switched off, to compare.
                app.heads_off = o.heads_off;
                app.cursor = have - 1;
                app.rerun_with_heads(have - 1);
                phase = kRegen;
              } else if (o.fork_at > 0 && have > 0) {
                const int keep = std::clamp(o.fork_at - 1, 0, have - 1);
                app.cursor = keep;
                app.fork_here();  // keeps steps < keep in the engine
                if (o.fork_seed >= 0) app.sampler.seed = uint64_t(o.fork_seed);
                app.send_sampler();
                dsgui::Command c;
                c.kind = dsgui::Command::Step;
                c.n = have - keep;
                app.worker.post(c);
                phase = kRegen;
              } else if (o.step_back > 0 && have > 0) {
                app.cursor = std::max(0, have - 1 - o.step_back);
                phase = kScrub;
              } else {
                phase = kSettle;
              }
              phase_frames = 0;
            }
            break;
          case kScrub:
            if (++phase_frames >= 3) {
              int keep = std::max(1, have - o.step_back);
              app.rewind_engine(keep);
              dsgui::Command c;
              c.kind = dsgui::Command::Step;
              c.n = have - keep;
              app.worker.post(c);
              app.cursor = keep - 1;
              phase = kRegen;
            }
            break;
          case kRegen:
            if (!app.worker.busy() && (have >= o.steps || app.done)) {
              app.cursor = have - 1;
              phase = kSettle;
              phase_frames = 0;
            }
            break;
          case kSettle:
            if (phase_frames == 0) {
              settle_settings();
              if (!o.save_trace.empty()) app.save_trace(o.save_trace);
            }
            if (o.bench && phase_frames > 4) idle_ms.push_back((t - prev_frame) * 1000.0);
            if (++phase_frames >= (o.bench ? 64 : 4) && !app.worker.busy() && !app.lens_pending) phase = kShoot;
            break;
          case kShoot:
          case kEnd:
            break;
        }
      }

      // The title names the model and the step, for the task bar and the projector.
      std::string title = "decoderscope";
      if (app.replay)
        title += " - replay of " + (app.trace.model_name.empty() ? std::string("a trace") : app.trace.model_name);
      else if (app.model)
        title += " - " + app.model->name;
      if (!app.trace.steps.empty())
        title += " - step " + std::to_string(app.cursor + 1) + " of " + std::to_string(app.trace.steps.size());
      if (title != window_title) {
        window_title = title;
        glfwSetWindowTitle(win, title.c_str());
      }

      int fw, fh;
      glfwGetFramebufferSize(win, &fw, &fh);
      app.fb_w = fw;
      app.fb_h = fh;
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      app.frame();
      ImGui::Render();
      if (o.bench) cur.build = lap();
      glViewport(0, 0, fw, fh);
      ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
      glClearColor(bg.x, bg.y, bg.z, 1.0f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      for (GLenum e; (e = glGetError()) != GL_NO_ERROR;) {
        ++gl_errors;
        std::fprintf(stderr, "decoderscope: OpenGL error 0x%04x\n", unsigned(e));
      }
      if (o.bench) cur.render = lap();

      if (!app.heatmap_png_request.empty()) {
        auto it = app.targets.find(app.last_heatmap);
        if (it != app.targets.end() && it->second) {
          auto px = it->second->read();
          if (write_png(app.heatmap_png_request, it->second->width(), it->second->height(), px))
            app.say("saved the heatmap to " + app.heatmap_png_request);
          else
            app.fail("cannot write " + app.heatmap_png_request);
        } else {
          app.fail("there is no heatmap on screen to save");
        }
        app.heatmap_png_request.clear();
      }
      if (!app.screenshot_request.empty()) {
        if (save_window(app.screenshot_request, fw, fh))
          app.say("saved the window to " + app.screenshot_request);
        else
          app.fail("cannot write " + app.screenshot_request);
        app.screenshot_request.clear();
      }

      if (scripted && phase == kShoot) {
        if (!o.screenshot.empty()) {
          if (!save_window(o.screenshot, fw, fh)) {
            std::fprintf(stderr, "decoderscope: cannot write %s\n", o.screenshot.c_str());
            rc = 1;
          }
          write_sidecar(o.screenshot + ".json", app, o, fw, fh, gl_errors);
        }
        if (!o.save_heatmap.empty()) {
          auto it = app.targets.find(app.last_heatmap);
          if (it == app.targets.end() || !it->second ||
              !write_png(o.save_heatmap, it->second->width(), it->second->height(), it->second->read())) {
            std::fprintf(stderr, "decoderscope: cannot save the heatmap to %s\n", o.save_heatmap.c_str());
            rc = 1;
          }
        }
        if (o.bench) {
          std::sort(frames.begin(), frames.end(),
                    [](const FrameTimes& a, const FrameTimes& b) { return a.total < b.total; });
          size_t n = frames.size();
          double p99 = n ? frames[std::min(n - 1, size_t(std::ceil(0.99 * double(n))) - 1)].total : 0;
          double med = n ? frames[n / 2].total : 0;
          const int steps = int(app.trace.steps.size());
          std::printf(
              "bench: %s (%s, engine %d thread%s), %d steps in %.2f s (%.0f ms a step, %.1f tokens/s), %zu frames "
              "while stepping: longest %.1f ms, 99th percentile %.1f ms, median %.1f ms\n",
              app.model ? app.model->name.c_str() : "?", app.model ? ds::precision_name(app.model->precision) : "?",
              app.engine_threads, app.engine_threads == 1 ? "" : "s", steps, bench_t1 - bench_t0,
              steps ? (bench_t1 - bench_t0) * 1000 / double(steps) : 0.0,
              bench_t1 > bench_t0 ? double(steps) / (bench_t1 - bench_t0) : 0.0, n, n ? frames.back().total : 0.0, p99,
              med);
          for (size_t i = n; i-- > 0 && i + 3 >= n;) {
            const FrameTimes& f = frames[i];
            std::printf(
                "bench:   a %.1f ms frame: events %.1f, build %.1f, render %.1f, swap %.1f, rest %.1f ms; "
                "window thread ran %.1f ms of it; %ld page faults read from disk\n",
                f.total, f.events, f.build, f.render, f.swap,
                std::max(0.0, f.total - f.events - f.build - f.render - f.swap), f.cpu, f.faults);
          }
          std::printf("bench: heatmap uploads: %llu whole, %llu only new rows, %.2f MB\n",
                      (unsigned long long)app.uploads.whole, (unsigned long long)app.uploads.appends,
                      double(app.uploads.bytes) / 1e6);
          std::sort(idle_ms.begin(), idle_ms.end());
          if (!idle_ms.empty())
            std::printf("bench: %zu frames with the engine idle: median %.1f ms, longest %.1f ms\n", idle_ms.size(),
                        idle_ms[idle_ms.size() / 2], idle_ms.back());
        }
        if (gl_errors) {
          std::fprintf(stderr, "decoderscope: %d OpenGL errors\n", gl_errors);
          rc = 3;
        }
        phase = kEnd;
        glfwSwapBuffers(win);
        break;
      }
      glfwSwapBuffers(win);
      if (o.bench) cur.swap = lap();
    }
    app.worker.cancel();
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(win);
  glfwTerminate();
  return rc;
}
