#include "shell/trace_io.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "imgui.h"
#include "shell/app.h"
#include "util/error.h"

namespace dsgui {

namespace {

// What one save or open has done so far, shared with the thread doing it.
struct Progress {
  std::atomic<uint64_t> done{0}, total{0};
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};  // an open: stop at the next progress report
  std::string path;
  std::chrono::steady_clock::time_point start;
};

// The window's trace file jobs (App::state): the open's thread and result, and the
// progress of the save running on the engine thread.
struct TraceIoState {
  std::shared_ptr<Progress> save = std::make_shared<Progress>();
  std::shared_ptr<Progress> open = std::make_shared<Progress>();
  std::thread thread;
  std::mutex mu;
  std::optional<ds::Trace> opened;  // set by the thread when it succeeds
  std::string error;                // set by the thread when it fails
  bool finished = false;
  ~TraceIoState() {
    open->stop = true;
    if (thread.joinable()) thread.join();
  }
};

std::string megabytes(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", double(b) / (1 << 20));
  return buf;
}

void progress_line(const char* verb, const Progress& p) {
  const uint64_t done = p.done, total = p.total;
  const float f = total ? float(double(done) / double(total)) : 0.0f;
  const std::string text = std::string(verb) + " " + p.path + ": " + megabytes(done) + " of " + megabytes(total);
  ImGui::TextUnformatted(text.c_str());
  ImGui::ProgressBar(f, ImVec2(std::max(ImGui::GetFontSize() * 24, ImGui::CalcTextSize(text.c_str()).x), 0));
}

}  // namespace

ds::TraceProgress trace_save_progress(App& app, const std::string& path) {
  std::shared_ptr<Progress> p = app.state<TraceIoState>().save;
  p->done = 0;
  p->total = 0;
  p->path = path;
  p->running = true;
  return [p](uint64_t done, uint64_t total) {
    p->done = done;
    p->total = total;
    if (done >= total) p->running = false;
  };
}

bool open_trace_in_background(App& app, const std::string& path) {
  TraceIoState& s = app.state<TraceIoState>();
  if (s.open->running) {
    app.fail("a trace is being opened: wait for it to finish");
    return false;
  }
  if (s.thread.joinable()) s.thread.join();
  s.finished = false;
  s.opened.reset();
  s.error.clear();
  s.open->done = 0;
  s.open->total = 0;
  s.open->stop = false;
  s.open->path = path;
  s.open->running = true;
  s.open->start = std::chrono::steady_clock::now();
  s.thread = std::thread([&s, path, p = s.open] {
    std::optional<ds::Trace> t;
    std::string err;
    try {
      t = ds::Trace::load(path, [p](uint64_t done, uint64_t total) {
        if (p->stop) throw ds::Error("the window closed");
        p->done = done;
        p->total = total;
      });
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::lock_guard<std::mutex> lk(s.mu);
    s.opened = std::move(t);
    s.error = std::move(err);
    s.finished = true;
    p->running = false;
  });
  return true;
}

// A save is under way while the engine thread works on it (a failed save reports no end).
bool saving(App& app, const TraceIoState& s) { return s.save->running && app.engine.worker.busy(); }

bool trace_io_busy(App& app) {
  TraceIoState& s = app.state<TraceIoState>();
  return s.open->running || saving(app, s);
}

void trace_io_frame(App& app) {
  TraceIoState& s = app.state<TraceIoState>();
  {
    std::unique_lock<std::mutex> lk(s.mu);
    if (s.finished) {
      s.finished = false;
      std::optional<ds::Trace> t = std::move(s.opened);
      const std::string err = s.error;
      lk.unlock();
      if (s.thread.joinable()) s.thread.join();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.open->start).count();
      if (t)
        app.show_trace(std::move(*t), s.open->path, secs);
      else
        app.alert("cannot open the trace: " + err);
    }
  }
  if (!s.open->running && !saving(app, s)) return;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->Pos.x + vp->Size.x * 0.5f, vp->Pos.y + vp->Size.y * 0.5f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::Begin("Trace file", nullptr,
               ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoCollapse);
  if (s.open->running) progress_line("opening", *s.open);
  if (saving(app, s)) progress_line("saving", *s.save);
  ImGui::End();
}

}  // namespace dsgui
