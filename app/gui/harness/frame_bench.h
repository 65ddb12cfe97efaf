#pragma once
// decoderscope --bench: how long the window's frames take while the engine steps and
// after, and where the time of the slowest frames went.
#include <vector>

namespace dsgui {

class App;

// Where the time of one frame went, in ms. A frame runs from the top of the main loop
// to the next top: events (the worker's, folded into the trace), build (ImGui and the
// views, heatmap uploads and passes), render (ImGui's draw lists), swap, and waiting
// for the window system; cpu is what the window's thread ran; view, the part of build
// the shown view's panel took; faults, the page faults that read from disk meanwhile
// (in any thread).
struct FrameTimes {
  double total = 0, events = 0, build = 0, render = 0, swap = 0, cpu = 0, view = 0;
  long faults = 0;
};

class FrameBench {
 public:
  // At the top of a frame at time t: closes the last frame's record (kept when the
  // engine was stepping during it, or the timeline was being scrubbed).
  void begin_frame(double t, bool stepping);
  // Set while the scripted run drags the timeline (the frames go to their own figures).
  bool scrubbing = false;
  // The ms since the last lap, into a part of the current frame.
  void lap(double FrameTimes::*part);
  // The shown view's panel took ms of this frame's build.
  void view_took(double ms) { cur_.view = ms; }
  // A frame's length in ms with the engine idle.
  void idle_frame(double ms) { idle_ms_.push_back(ms); }
  // When the steps started and ended.
  double steps_t0 = 0, steps_t1 = 0;
  // Seconds after main() began at which the first frame, and the first frame showing
  // the loaded model, were on screen (negative until then).
  double first_frame_at = -1, model_shown_at = -1;
  // Prints the figures on stdout.
  void report(const App& app);

 private:
  std::vector<FrameTimes> frames_;  // frames while stepping
  std::vector<FrameTimes> scrub_;   // frames while scrubbing
  std::vector<double> idle_ms_;     // frame times after
  FrameTimes cur_;
  double last_frame_ = 0, last_cpu_ = 0, mark_ = 0;
  long last_faults_ = 0;
};

}  // namespace dsgui
