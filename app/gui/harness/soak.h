#pragma once
// A soak of the window (--soak N --seed S): N random user actions (step, back, play,
// scrub, views, layer and head, fork, heads off, re-draw, sampler settings, prompts,
// save and reopen a trace, models, window size, theme and text size) through the App
// functions the widgets call, with frames drawn between them. The first failure (an
// exception, an error or a problem dialog that is not an expected refusal, an OpenGL
// error, an abort such as an ImGui assertion, a hang) ends the run with the action's
// number and kind.
#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "shell/options.h"

namespace dsgui {

class App;

class SoakRun {
 public:
  enum Kind {
    kStep,
    kBack,
    kPlay,
    kScrub,
    kView,
    kLayerHead,
    kFork,
    kHeadsOff,
    kRedraw,
    kSampler,
    kPrompt,
    kSaveOpen,
    kModel,
    kResize,
    kTheme,
    kUndo,
    kKinds
  };
  static const char* kind_name(int k);

  // resize: sets the window's size (glfwSetWindowSize).
  SoakRun(const Options& o, App& app, std::function<void(int, int)> resize);
  ~SoakRun();
  SoakRun(const SoakRun&) = delete;
  SoakRun& operator=(const SoakRun&) = delete;

  // Once a frame, after the worker's events are handled and before App::tick. False
  // when the run is over: exit_code() then says how it ended (the reason is on stderr).
  bool advance(double t, int gl_errors);
  int exit_code() const { return rc_; }

 private:
  enum Phase { kBoot, kAct, kSettle, kOver };
  bool settled() const;
  std::string waiting() const;  // what keeps the window from settling
  void act(int k);
  void act_play();
  void act_layer_head();
  void act_fork();
  void act_heads_off();
  void act_sampler();
  void act_prompt();
  void act_save_open();
  void act_model();
  bool check(double t, int gl_errors);  // after an action settled: false on a failure
  bool fail(const std::string& what);
  void summary(double t) const;
  uint64_t pick(uint64_t n) { return n ? rng_() % n : 0; }
  std::string random_text(int words);

  const Options& o_;
  App& app_;
  std::function<void(int, int)> resize_;
  std::mt19937_64 rng_;
  Phase phase_ = kBoot;
  int done_ = 0, kind_ = -1, frames_ = 0, gl_seen_ = 0, rc_ = 0;
  double t_start_ = -1, t_action_ = 0;
  std::array<int, kKinds> count_{};
  int refusals_ = 0;
  int most_steps_ = 0;  // the longest trace the window held
  std::set<std::string> refusal_texts_;
  bool may_refuse_ = false;  // the action gave the window input it may turn down
  bool open_after_save_ = false;
  int play_until_ = 0;  // Play: pause once the trace has this many steps
  std::string trace_file_, bad_file_, png_file_;
  bool saved_ = false;
};

}  // namespace dsgui
