#include "harness/script.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/loader.h"
#include "shell/app.h"
#include "shell/lesson_hooks.h"
#include "shell/recent.h"
#include "shell/window_io.h"
#include "views/heads_ablation.h"
#include "views/views.h"
#include "widgets/heatmap.h"

namespace dsgui {

ScriptedRun::ScriptedRun(const Options& o, App& app, double t_start, FrameBench* bench)
    : o_(o), app_(app), bench_(bench), t_start_(t_start) {}

void ScriptedRun::step(int n) { app_.engine.ask(cmd::Step{n}); }

void ScriptedRun::settle_settings() {
  const ds::Config& c = app_.history.trace.config;
  app_.sel.layer = std::clamp(o_.layer, 0, std::max(0, c.n_layers - 1));
  app_.sel.head = std::clamp(o_.head, -1, c.n_heads - 1);
  cross_select(app_, app_.sel.layer, app_.sel.head);
  if (o_.select >= 0) app_.sel.pos = o_.select;
  if (o_.cursor > 0) app_.scrub_to(o_.cursor - 1);
  app_.sel.view = view_index(o_.view);
  app_.sel.view_request = true;
}

// The steps asked for are in: re-run with heads off, fork, scrub back, or settle.
void ScriptedRun::after_steps(int have) {
  app_.sel.cursor = have - 1;
  if ((!o_.heads_off.empty() || !o_.cross_heads_off.empty()) && have > 0) {
    // Re-run the last step with these heads switched off, to compare.
    app_.whatif.heads_off = o_.heads_off;
    app_.whatif.cross_heads_off = o_.cross_heads_off;
    app_.rerun_with_heads(have - 1);
    phase_ = kRegen;
  } else if (o_.fork_at > 0 && have > 0) {
    const int keep = std::clamp(o_.fork_at - 1, 0, have - 1);
    app_.sel.cursor = keep;
    app_.fork_here();  // keeps steps < keep in the engine
    if (o_.fork_seed >= 0) app_.whatif.sampler.seed = uint64_t(o_.fork_seed);
    app_.send_sampler();
    step(have - keep);
    phase_ = kRegen;
  } else if (o_.step_back > 0 && have > 0) {
    app_.sel.cursor = std::max(0, have - 1 - o_.step_back);
    phase_ = kScrub;
  } else {
    phase_ = kSettle;
  }
  phase_frames_ = 0;
}

// --bench, once the steps are in and the views settled: drags the timeline back to the
// first step and forward again to the last, a step range a frame as a hand on the
// slider would, then lets the views settle on the last step.
void ScriptedRun::bench_scrub() {
  constexpr int kDrag = 40, kSettleFrames = 30;  // frames each way; frames after
  const int last = int(app_.history.trace.steps.size()) - 1, f = phase_frames_++;
  bench_->scrubbing = f < 2 * kDrag;
  if (f < kDrag)
    app_.scrub_to(last - int(int64_t(last) * (f + 1) / kDrag));
  else if (f < 2 * kDrag)
    app_.scrub_to(int(int64_t(last) * (f + 1 - kDrag) / kDrag));
  else if (f >= 2 * kDrag + kSettleFrames)
    phase_ = kShoot;
}

bool ScriptedRun::advance(double t, double prev_frame) {
  if (!app_.msgs.error.empty()) {
    std::fprintf(stderr, "decoderscope: scripted run failed: %s\n", app_.msgs.error.c_str());
    return false;
  }
  // A benchmark of a long run on a loaded machine may take longer than a screenshot.
  if (t - t_start_ > (bench_ ? 3600 : 600)) {
    std::fprintf(stderr, "decoderscope: scripted run timed out\n");
    return false;
  }
  const int have = int(app_.history.trace.steps.size());
  const bool idle = !app_.engine.worker.busy();
  switch (phase_) {
    case kLoad:
      if (!app_.engine.started || !idle) break;
      settle_settings();                           // the view asked for is on screen while the steps run
      if (bench_ && o_.steps > 0) step(o_.steps);  // the engine at full speed
      if (bench_) bench_->steps_t0 = t;
      phase_ = kStep;
      break;
    case kStep:
      // Screenshots: one step a frame, as a class pressing Right would, so that the
      // views grow with every step as they do in use.
      if (!bench_ && idle && have < o_.steps && !app_.engine.done) {
        step(1);
      } else if (idle && (have >= o_.steps || app_.engine.done)) {
        if (bench_) bench_->steps_t1 = t;
        after_steps(have);
      }
      break;
    case kScrub:
      if (++phase_frames_ >= 3) {
        const int keep = std::max(1, have - o_.step_back);
        app_.rewind_engine(keep);
        step(have - keep);
        app_.sel.cursor = keep - 1;
        phase_ = kRegen;
      }
      break;
    case kRegen:
      if (idle && undone_ < o_.undo && (have >= o_.steps || app_.engine.done)) {
        app_.undo();  // Ctrl+Z: the engine puts the steps back (busy until it has)
        ++undone_;
      } else if (idle && o_.more_steps > 0 && !more_asked_ && undone_ >= o_.undo) {
        step(o_.more_steps);  // --more-steps: the steps after the undo, with the heads it left
        more_asked_ = true;
      } else if (idle && (have >= o_.steps || app_.engine.done)) {
        app_.sel.cursor = have - 1;
        phase_ = kSettle;
        phase_frames_ = 0;
      }
      break;
    case kSettle:
      if (phase_frames_ == 0) {
        settle_settings();
        if (!o_.save_trace.empty()) app_.save_trace(o_.save_trace);
        if (o_.preview_temperature >= 0)
          app_.whatif.sampler.temperature = o_.preview_temperature;  // not sent: a preview
        beams_search_now(app_, o_.beam_width > 0);  // the Beam search view searches once the steps are done
        if (o_.view == "kv") kv_time_now(app_);
        if (o_.rank_heads >= 0) ablation_ask(app_, o_.rank_heads);
        if (!o_.attribute_token.empty() || !o_.attribute_vs.empty() || !o_.attribute_head.empty())
          attribution_script(app_, o_.attribute_token, o_.attribute_vs, o_.attribute_head);
        if (o_.has_compare)
          compare_script(app_, {o_.compare_prompt, o_.compare_source, o_.compare_model, o_.compare_heads_off,
                                o_.compare_temperature, o_.compare_seed, o_.compare_part});
        if (!o_.patch.empty()) patching_script(app_, o_.patch);
      }
      if (bench_ && phase_frames_ > 4) bench_->idle_frame((t - prev_frame) * 1000.0);
      if (++phase_frames_ >= (bench_ ? 64 : 4) && idle && !views_waiting(app_) && !final_actions())
        phase_ = bench_ && have > 1 ? kBenchScrub : kShoot, phase_frames_ = 0;
      break;
    case kBenchScrub:
      bench_scrub();
      break;
    case kShoot:
    case kEnd:
      break;
  }
  return true;
}

bool ScriptedRun::final_actions() {
  if (o_.choose_branch > 0 && !chosen_) {
    chosen_ = true;
    if (!branches_choose(app_, o_.choose_branch - 1))
      std::fprintf(stderr, "decoderscope: --choose-branch %d: there is no such branch to make live\n",
                   o_.choose_branch);
    phase_frames_ = 1;
    return true;
  }
  if (undone_ < o_.undo) {
    app_.undo();
    ++undone_;
    phase_frames_ = 1;
    return true;
  }
  return false;
}

int ScriptedRun::shoot(int fw, int fh, int gl_errors) {
  int rc = 0;
  if (!o_.screenshot.empty()) {
    if (!save_window(o_.screenshot, fw, fh)) {
      std::fprintf(stderr, "decoderscope: cannot write %s\n", o_.screenshot.c_str());
      rc = 1;
    }
    write_sidecar(o_.screenshot + ".json", app_, o_, fw, fh, gl_errors);
  }
  if (!o_.save_heatmap.empty()) {
    auto it = app_.maps.targets.find(app_.maps.last_heatmap);
    if (it == app_.maps.targets.end() || !it->second ||
        !write_png(o_.save_heatmap, it->second->width(), it->second->height(), it->second->read())) {
      std::fprintf(stderr, "decoderscope: cannot save the heatmap to %s\n", o_.save_heatmap.c_str());
      rc = 1;
    }
  }
  if (bench_) bench_->report(app_);
  if (gl_errors) {
    std::fprintf(stderr, "decoderscope: %d OpenGL errors\n", gl_errors);
    rc = 3;
  }
  phase_ = kEnd;
  return rc;
}

namespace {

// Where the window's data came from (util/data_dir.h): the shaders' folder, the font, the
// built-in model's folder; and the recent files remembered (shell/recent.h).
std::string data_sidecar(App& app) {
  nlohmann::json j;
  j["shaders"] = find_shader_dir();
  j["font"] = font_file("DejaVuSans.ttf");
  const std::string spec = app.engine.model ? app.engine.model->spec : "";
  try {
    j["model_dir"] = spec.rfind("builtin:", 0) == 0 ? ds::resolve_builtin(spec.substr(8)) : "";
  } catch (const std::exception& e) {
    j["model_dir"] = std::string("error: ") + e.what();
  }
  j["recent_models"] = recent_settings(app).recent_models;
  j["recent_traces"] = recent_settings(app).recent_traces;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void write_sidecar(const std::string& path, const App& app, const Options& o, int w, int h, int gl_errors) {
  std::ofstream f(path);
  f << "{\n  \"width\": " << w << ", \"height\": " << h << ", \"view\": \"" << o.view
    << "\", \"gl_errors\": " << gl_errors << ",\n";
  f << "  \"mask_colors\": [[" << int(kMaskA[0]) << ", " << int(kMaskA[1]) << ", " << int(kMaskA[2]) << "], ["
    << int(kMaskB[0]) << ", " << int(kMaskB[1]) << ", " << int(kMaskB[2]) << "]],\n";
  // The colormap the heatmaps use, from the C++ function the legends draw with: the
  // checker compares the shader's pixels against it.
  f << "  \"colormap\": {\"index\": " << app.look.cmap << ", \"curve\": [";
  for (int i = 0; i <= 64; ++i) {
    const std::array<float, 3> c = colormap(app.look.cmap, float(i) / 64.0f);
    f << (i ? ", [" : "[") << c[0] * 255.0f << ", " << c[1] * 255.0f << ", " << c[2] * 255.0f << "]";
  }
  f << "]},\n";
  f << "  \"uploads\": {\"whole\": " << app.maps.uploads.whole << ", \"appends\": " << app.maps.uploads.appends
    << ", \"bytes\": " << app.maps.uploads.bytes << "},\n";
  int rk = 0, rl = 0, rh = 0;
  float rs = 0;
  if (roles_selected(const_cast<App&>(app), rk, rl, rh, rs))
    f << "  \"roles\": {\"kind\": " << rk << ", \"layer\": " << rl << ", \"head\": " << rh << ", \"score\": " << rs
      << "},\n";
  f << "  \"head_grids\": [";  // the All heads grids drawn: heads, heads-cross, heads-encoder
  int ng = 0;
  for (const auto& p : app.maps.placements)
    if (p.name.rfind("heads", 0) == 0) f << (ng++ ? ", " : "") << "\"" << p.name << "\"";
  f << "],\n";
  f << "  \"playing\": " << (app.play.playing ? "true" : "false")
    << ", \"running_to_end\": " << (app.running_to_end() ? "true" : "false")
    << ", \"done\": " << (app.engine.done ? "true" : "false") << ",\n";
  heads_sidecar(app, f);
  f << "  \"lesson\": " << lesson_sidecar(app) << ",\n";
  f << "  \"block_ok\": " << (block_ok(const_cast<App&>(app)) ? "true" : "false") << ",\n";
  f << "  \"block_view\": " << block_sidecar(const_cast<App&>(app)) << ",\n";
  f << "  \"kv_view\": " << kv_sidecar(const_cast<App&>(app)) << ",\n";
  f << "  \"attribution\": " << attribution_sidecar(const_cast<App&>(app)) << ",\n";
  f << "  \"compare\": " << compare_sidecar(const_cast<App&>(app)) << ",\n";
  f << "  \"data\": " << data_sidecar(const_cast<App&>(app)) << ",\n";
  f << "  \"patching\": " << patching_sidecar(const_cast<App&>(app)) << ",\n";
  f << "  \"precision\": \"" << (app.engine.model ? ds::precision_name(app.engine.model->precision) : "") << "\",\n";
  f << "  \"storage\": \"" << (app.engine.model ? app.engine.model->storage_name() : "") << "\",\n";
  f << "  \"products\": \"" << (app.engine.model ? app.engine.model->products_label() : "") << "\",\n";
  f << "  \"view_rect\": [" << app.maps.view_rect.x << ", " << app.maps.view_rect.y << ", " << app.maps.view_rect.z
    << ", " << app.maps.view_rect.w << "],\n";
  f << "  \"steps\": " << app.history.trace.steps.size() << ", \"cursor\": " << app.sel.cursor << ",\n  \"tokens\": [";
  const auto& toks = app.tokens();
  for (size_t i = 0; i < toks.size(); ++i) f << (i ? ", " : "") << toks[i].id;
  f << "],\n  \"undo\": " << app.history.undo.size() << ",\n  \"branches\": [";
  for (size_t i = 0; i < app.history.branches.size(); ++i) {
    const Branch& b = app.history.branches[i];
    f << (i ? ", " : "") << "{\"fork_step\": " << b.fork_step << ", \"steps\": " << b.trace.steps.size()
      << ", \"tokens\": [";
    auto bt = tokens_as_of(b.trace, int(b.trace.steps.size()) - 1);
    for (size_t j = 0; j < bt.size(); ++j) f << (j ? ", " : "") << bt[j].id;
    f << "]}";
  }
  f << "],\n";
  for (const auto& [key, value] : beamtab_sidecar(const_cast<App&>(app)))
    f << "  \"" << key << "\": " << value << ",\n";
  f << "  \"heatmaps\": [";
  for (size_t i = 0; i < app.maps.placements.size(); ++i) {
    const auto& p = app.maps.placements[i];
    f << (i ? ",\n" : "\n") << "    {\"name\": \"" << p.name << "\", \"x\": " << p.x << ", \"y\": " << p.y
      << ", \"cell_w\": " << p.cell_w << ", \"cell_h\": " << p.cell_h << ", \"rows\": " << p.rows
      << ", \"cols\": " << p.cols << ", \"row0\": " << p.row0 << ", \"col0\": " << p.col0
      << ", \"matrix_rows\": " << p.matrix_rows << ", \"matrix_cols\": " << p.matrix_cols
      << ", \"causal\": " << (p.causal ? "true" : "false") << ", \"window\": " << p.window << ", \"mask\": [";
    for (size_t j = 0; j < p.mask.size(); ++j) f << (j ? "," : "") << int(p.mask[j]);
    f << "]}";
  }
  f << "\n  ]\n}\n";
}

}  // namespace dsgui
