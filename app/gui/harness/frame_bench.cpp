#include "harness/frame_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "shell/app.h"
#include "shell/window_io.h"

namespace dsgui {

namespace {

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

}  // namespace

void FrameBench::begin_frame(double t, bool stepping) {
  const double cpu = thread_cpu_s();
  const long faults = major_faults();
  cur_.total = (t - last_frame_) * 1000.0;
  cur_.cpu = (cpu - last_cpu_) * 1000.0;
  cur_.faults = faults - last_faults_;
  if (last_frame_ > 0 && scrubbing)
    scrub_.push_back(cur_);
  else if (last_frame_ > 0 && stepping)
    frames_.push_back(cur_);
  cur_ = FrameTimes{};
  last_cpu_ = cpu;
  last_faults_ = faults;
  last_frame_ = t;
  mark_ = t;
}

void FrameBench::lap(double FrameTimes::*part) {
  const double t = now_s();
  cur_.*part = (t - mark_) * 1000.0;
  mark_ = t;
}

namespace {

// The longest of frames (sorted by total), its 99th percentile and median, and the
// most the window's own thread ran in one frame (what the load of other programs on
// the machine does not inflate).
struct Spread {
  double longest = 0, p99 = 0, median = 0, cpu = 0;
};

Spread spread(std::vector<FrameTimes>& frames) {
  std::sort(frames.begin(), frames.end(), [](const FrameTimes& a, const FrameTimes& b) { return a.total < b.total; });
  Spread s;
  const size_t n = frames.size();
  if (!n) return s;
  s.longest = frames.back().total;
  s.p99 = frames[std::min(n - 1, size_t(std::ceil(0.99 * double(n))) - 1)].total;
  s.median = frames[n / 2].total;
  for (const FrameTimes& f : frames) s.cpu = std::max(s.cpu, f.cpu);
  return s;
}

void print_breakdown(const std::vector<FrameTimes>& frames) {
  const size_t n = frames.size();
  for (size_t i = n; i-- > 0 && i + 3 >= n;) {
    const FrameTimes& f = frames[i];
    std::printf(
        "bench:   a %.1f ms frame: events %.1f, build %.1f (the view %.1f), render %.1f, swap %.1f, rest %.1f ms; "
        "window thread ran %.1f ms of it; %ld page faults read from disk\n",
        f.total, f.events, f.build, f.view, f.render, f.swap,
        std::max(0.0, f.total - f.events - f.build - f.render - f.swap), f.cpu, f.faults);
  }
}

}  // namespace

void FrameBench::report(const App& app) {
  const Spread st = spread(frames_);
  const size_t n = frames_.size();
  const int steps = int(app.history.trace.steps.size());
  const double secs = steps_t1 - steps_t0;
  std::printf(
      "bench: %s (%s, engine %d thread%s), %d steps in %.2f s (%.0f ms a step, %.1f tokens/s), %zu frames "
      "while stepping: longest %.1f ms, 99th percentile %.1f ms, median %.1f ms; the window's thread ran at most "
      "%.1f ms in a frame\n",
      app.engine.model ? app.engine.model->name.c_str() : "?",
      app.engine.model ? app.engine.model->storage_name().c_str() : "?", app.engine.threads,
      app.engine.threads == 1 ? "" : "s", steps, secs, steps ? secs * 1000 / double(steps) : 0.0,
      secs > 0 ? double(steps) / secs : 0.0, n, st.longest, st.p99, st.median, st.cpu);
  if (model_shown_at >= 0)
    std::printf(
        "bench: opening: first frame %.2f s after the program started, the first frame showing the model %.2f s "
        "(its load on the engine's thread: %.2f s)\n",
        first_frame_at, model_shown_at, app.engine.model ? app.engine.model->load_seconds : 0.0);
  print_breakdown(frames_);
  if (!scrub_.empty()) {
    const Spread sc = spread(scrub_);
    std::printf(
        "bench: %zu frames while scrubbing the timeline (back to the first step and forward again): longest %.1f "
        "ms, 99th percentile %.1f ms, median %.1f ms; the window's thread ran at most %.1f ms in a frame\n",
        scrub_.size(), sc.longest, sc.p99, sc.median, sc.cpu);
    print_breakdown(scrub_);
  }
  std::printf("bench: heatmap uploads: %llu whole, %llu only new rows, %.2f MB\n",
              (unsigned long long)app.maps.uploads.whole, (unsigned long long)app.maps.uploads.appends,
              double(app.maps.uploads.bytes) / 1e6);
  std::sort(idle_ms_.begin(), idle_ms_.end());
  if (!idle_ms_.empty())
    std::printf("bench: %zu frames with the engine idle: median %.1f ms, longest %.1f ms\n", idle_ms_.size(),
                idle_ms_[idle_ms_.size() / 2], idle_ms_.back());
}

}  // namespace dsgui
