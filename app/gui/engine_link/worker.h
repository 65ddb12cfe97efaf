#pragma once
// The engine's own thread. The worker owns the model and the Session; the window posts
// commands and polls events (messages.h). Each finished step is handed over whole (the
// session keeps no copy of its tensors), so the window never reads anything the worker
// is writing and never waits for it.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_link/messages.h"
#include "io/loader.h"
#include "session/session.h"

namespace dsgui {

// The hook patterns the window records, kept to those the model has.
std::vector<std::string> record_patterns(const ds::Config& cfg);

class Worker {
 public:
  Worker();
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void post(Command c);
  // Posts c in place of the commands of its kind still waiting in the queue (a
  // request whose answer would be out of date by the time it ran).
  void post_latest(Command c);
  std::vector<Event> poll();
  // True while a command is queued or running, or its events wait to be polled.
  bool busy() const;
  // Drops queued steps and stops a multi-step run after the step in progress.
  void cancel();
  // What the worker is doing now ("" when idle), for the status line.
  std::string activity() const;
  // Called (from the worker thread) after events are posted, to wake the window.
  void set_wake(std::function<void()> fn);

 private:
  void run();
  void handle(cmd::Load& c);
  void handle(cmd::Start& c);
  void handle(cmd::Step& c);
  void handle(cmd::Rewind& c);
  void handle(cmd::Sampler& c);
  void handle(cmd::Heads& c);
  void handle(cmd::Lens& c);
  void handle(cmd::SaveTrace& c);
  void handle(cmd::Shape& c);
  void handle(cmd::Beam& c);
  void handle(cmd::BeamBranch& c);
  void handle(cmd::Inspect& c);
  void handle(cmd::Measure& c);
  void handle(cmd::Roles& c);
  void handle(cmd::Restore& c);
  void handle(cmd::Ablate& c);
  void handle(cmd::Attribute& c);
  void handle(cmd::Compare& c);  // compare.cpp
  void handle(cmd::Patch& c);
  // The options of the window's sessions (what the trace records, the candidate table).
  ds::SessionOptions session_options(int threads, bool kv_cache) const;
  // A new session on these ids (a refused prompt keeps the old one).
  void begin(int threads, bool kv_cache, const std::vector<int>& prompt, const std::vector<int>& src);
  // The prompt and source ids of a Start or Beam command, as the window's boxes say.
  void inputs(const std::string& prompt_text, const std::string& source_text, const cmd::ChatInput& chat,
              std::vector<int>& prompt, std::vector<int>& src) const;
  void emit(Event e);
  void apply_heads();
  void set_activity(std::string s);
  // The lens of every row of the columns, read through the head in one pass.
  std::vector<LensColumn> lens_columns(const std::vector<cmd::Lens::Column>& cols);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;
  std::vector<Event> events_;
  std::string activity_;
  std::function<void()> wake_;
  bool running_ = false, quit_ = false;
  std::atomic<bool> cancel_{false};

  // Owned by the worker thread only.
  ds::LoadedModel lm_;
  std::string spec_;                             // what the loaded model was opened as (cmd::Load::spec)
  ds::Products products_ = ds::Products::Exact;  // every engine's products with quantized weights (cmd::Load)
  std::unique_ptr<ds::Session> session_;
  ds::SamplerConfig sampler_;
  std::vector<HeadId> heads_off_, cross_heads_off_;
  std::vector<int> head_handles_;
  std::vector<int> forced_;  // the tokens of the session's first steps (cmd::Start::forced)

  ds::LoadedModel compare_lm_;  // the Compare view's model B when it is not the loaded one
  std::string compare_spec_;

  std::thread thread_;
};

}  // namespace dsgui
