#pragma once
// A scripted run of the window (--screenshot, --save-heatmap, --bench): load, take
// --steps steps one a frame as a class pressing Right would, optionally scrub back,
// re-run with heads off or fork, let the views settle, then save the pictures and exit.
#include <string>

#include "harness/frame_bench.h"
#include "shell/options.h"

namespace dsgui {

class App;

class ScriptedRun {
 public:
  // bench: the frame benchmark to feed (--bench), or null.
  ScriptedRun(const Options& o, App& app, double t_start, FrameBench* bench);
  // A saved trace was opened instead of a model: nothing to step.
  void replay() { phase_ = kSettle; }
  // Once a frame, before the window is built: moves the run on. False when it failed
  // (the reason is on stderr).
  bool advance(double t, double prev_frame);
  bool stepping() const { return phase_ == kStep; }
  bool shooting() const { return phase_ == kShoot; }
  // The frame to keep is rendered (before the swap): saves the pictures and the
  // sidecar, prints the benchmark; returns the exit code.
  int shoot(int fw, int fh, int gl_errors);

 private:
  enum Phase { kLoad, kStep, kScrub, kRegen, kSettle, kBenchScrub, kShoot, kEnd };
  void settle_settings();  // the layer, head, selection and view asked for
  void after_steps(int have);
  void step(int n);    // asks the worker for n steps
  void bench_scrub();  // a frame of --bench's drag of the timeline

  const Options& o_;
  App& app_;
  FrameBench* bench_;
  double t_start_;
  Phase phase_ = kLoad;
  int phase_frames_ = 0;
  int undone_ = 0;           // Ctrl+Z pressed (--undo)
  bool chosen_ = false;      // --choose-branch done
  bool more_asked_ = false;  // --more-steps asked
  // The last actions once the views have settled (--choose-branch, --undo at the end);
  // true when one was taken (the views settle again).
  bool final_actions();
};

// The sidecar of a screenshot (PNG.json): the window's size, the heatmaps' cell
// rectangles and masks, the tokens, for the tests' checker.
void write_sidecar(const std::string& path, const App& app, const Options& o, int w, int h, int gl_errors);

}  // namespace dsgui
