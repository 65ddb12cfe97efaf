#pragma once
// The engine's own thread. The worker owns the model and the Session; the window posts
// commands and polls events. Each finished step arrives as a copy of its TraceStep, so
// the window never reads anything the worker is writing and never waits for it.
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

#include "block_data.h"
#include "io/loader.h"
#include "probe/heads.h"
#include "probe/trace.h"
#include "sample/sampler.h"
#include "session/beam.h"
#include "session/session.h"
#include "util/precision.h"

namespace dsgui {

struct ModelInfo {
  std::string spec, tokenizer, name, kind, describe;  // tokenizer: the file given with spec, or ""
  ds::Config cfg;
  bool has_tokenizer = false;
  std::string prompt, source;  // suggested text for the boxes
  int64_t params = 0;
  double load_seconds = 0;
  ds::Precision precision = ds::Precision::F32;  // storage of the large weight matrices
  std::string storage;                           // GGUF: every storage type's share ("Q4_K 85% + Q6_K 15%"), else ""
  int64_t weight_bytes = 0;                      // bytes of every parameter as stored
  // What the status line names: the storage of a GGUF model, else the precision.
  std::string storage_name() const { return storage.empty() ? ds::precision_name(precision) : storage; }
};

// The logit lens at one position: what each layer's residual stream would predict if
// the model stopped there (final norm, then the output head).
struct LensRow {
  std::string label;  // "embed", "layer 0", ...
  std::vector<int> ids;
  std::vector<std::string> texts;
  std::vector<float> probs;  // top few, descending
};
struct LensResult {
  int step = -1, pos = -1;
  uint64_t version = 0;
  std::vector<LensRow> rows;
};

// A finished beam search (Command::Beam), with the text of every token its tree names.
struct BeamAnswer {
  ds::BeamResult result;
  std::map<int, std::string> text;  // token id -> its piece
  std::string prompt, source;       // the text it was run on
  int width = 0;
  float length_penalty = 1;
  double seconds = 0;
};

// A kept step's candidate table under other settings, with nothing drawn
// (Command::Shape): what the Next token view shows while a slider moves.
struct ShapeAnswer {
  int step = -1;
  uint64_t version = 0;  // of the request
  ds::SamplerConfig config;
  ds::SampleRecord rec;  // token -1
  std::string error;     // why there is no table (the step's logits were let go)
};

// The measured time of every step of the same tokens with and without the KV cache
// (Command::Measure): (position of the step's last row, milliseconds), prompt step left out.
struct MeasureAnswer {
  std::vector<std::pair<int, double>> with, without;
  uint64_t version = 0;
};

// The head detector's scores for the loaded model (Command::Roles), with the text of
// the probe's tokens.
struct RolesAnswer {
  std::string spec;  // the model they are for
  std::string key;   // the request they answer
  ds::HeadRoles roles;
  std::vector<std::string> labels;  // the probe's tokens, visible
  int half = 0;                     // random tokens per half of the probe
};

struct Event {
  enum Kind {
    Loading,
    Loaded,
    Started,
    Step,
    Truncate,
    Lens,
    Saved,
    Error,
    Idle,
    Shape,
    Beam,
    Inspect,
    Measure,
    Roles
  };
  Kind kind = Idle;
  std::string msg;
  bool start_failed = false;  // Error: the failed command was a Start (the text was refused)
  std::shared_ptr<const ModelInfo> info;
  int step_index = 0;  // Step: the index of the step
  int kept = 0;        // Truncate: the steps kept
  bool done = false;   // Step, Truncate: the session can take no more steps
  std::shared_ptr<const ds::TraceStep> step;
  std::vector<int> source;
  std::vector<std::string> source_text;
  std::map<std::string, ds::Tensor> encoder;
  LensResult lens;
  std::shared_ptr<const ShapeAnswer> shape;  // Shape
  double seconds = 0;                        // Step: compute time of the step
  std::shared_ptr<const BeamAnswer> beam;
  std::shared_ptr<const BlockSnapshot> block;  // Inspect
  std::shared_ptr<const MeasureAnswer> measure;
  std::shared_ptr<const RolesAnswer> roles;
};

struct Command {
  enum Kind {
    Load,
    Start,
    Step,
    Rewind,
    Sampler,
    Heads,
    Lens,
    SaveTrace,
    Shape,
    Beam,
    Inspect,
    Measure,
    Roles,
    Restore
  };
  Kind kind = Step;
  // Load: the model (as --model names it), its tokenizer file ("": none), and how the
  // weights are kept in memory.
  std::string spec, tokenizer;
  ds::Precision precision = ds::Precision::F32;
  // Start: the prompt (an encoder-decoder's target prefix), the source, and the threads
  // the engine computes a step with.
  std::string prompt, source;
  int threads = 1;
  bool kv_cache = true;  // Start: false recomputes the whole prefix at every step
  // Start: tokens the first steps take instead of drawing one (a beam search's
  // hypothesis replayed, so every view shows it); the steps after them draw as usual.
  std::vector<int> forced;
  // Beam: a beam search on prompt and source, with this width and length penalty, over
  // `count` positions in all (0 or less: the model's context).
  int width = 3;
  float length_penalty = 1;
  int count = 1;                                 // Step: how many steps (-1: to the end)
  int keep = 0;                                  // Rewind: the steps kept
  ds::SamplerConfig sampler;                     // Sampler, Shape (the settings to show)
  std::vector<std::pair<int, int>> heads;        // Heads: (layer, head) switched off
  std::vector<std::pair<int, int>> cross_heads;  // Heads: cross-attention (layer, head) switched off
  // Lens: the residual vectors to read ([rows][d_model]), their labels, and the step,
  // position and request they answer. Shape: step and version.
  std::vector<std::vector<float>> resid;
  std::vector<std::string> labels;
  int step = -1, pos = -1;
  uint64_t version = 0;
  // Measure: the same tokens (the first `count` are the prompt) and source, generated
  // twice, with and without the KV cache, each step timed.
  // Inspect: the tokens to run (positions 0 .. n-1), the source ids (encoder-decoder),
  // the decoder layer, the position whose numbers are kept (pos), the head whose whole
  // score matrix is kept (head), and the request's key (version).
  std::vector<int> tokens, src;
  int layer = 0, head = 0;
  // Roles: the head detector leaves attention to position 0 (BOS) out of its scores;
  // spec: the request's key, sent back.
  bool exclude_bos = true;
  // Restore (an undo puts the session back as it was): the steps from `keep` on are
  // taken again with the tokens `forced` (one a step), each with the settings it was
  // drawn with (step_samplers, when given); nothing is sent back (the window already
  // has those steps). restart: a new session first, on the prompt ids `tokens` and
  // the source ids `src` (with threads and kv_cache), keep 0.
  bool restart = false;
  std::vector<ds::SamplerConfig> step_samplers;
  // SaveTrace: the file and what to write to it.
  std::string path;
  std::shared_ptr<const ds::Trace> trace;
  ds::TraceProgress progress;  // SaveTrace: bytes written of the total
};

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
  // True while a command is queued or running.
  bool busy() const;
  // Drops queued steps and stops a multi-step run after the step in progress.
  void cancel();
  // What the worker is doing now ("" when idle), for the status line.
  std::string activity() const;
  // Called (from the worker thread) after events are posted, to wake the window.
  void set_wake(std::function<void()> fn);

 private:
  void run();
  void handle(Command& c);
  void load(const Command& c);
  void start(const Command& c);
  // A new session on these ids, as Start makes it (a refused prompt keeps the old one).
  void begin(const Command& c, const std::vector<int>& prompt, const std::vector<int>& src);
  void restore(const Command& c);
  void beam(const Command& c);
  void inspect(const Command& c);
  void steps(const Command& c);
  void measure(const Command& c);
  void roles(const Command& c);
  // The prompt and source ids of a Start or Beam command, as the window's boxes say.
  void inputs(const Command& c, std::vector<int>& prompt, std::vector<int>& src) const;
  void emit(Event e);
  void apply_heads();
  void set_activity(std::string s);
  LensRow lens_row(const std::vector<float>& x, const std::string& label);

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
  std::string spec_;  // what the loaded model was opened as (Command::Load's spec)
  std::unique_ptr<ds::Session> session_;
  ds::SamplerConfig sampler_;
  std::vector<std::pair<int, int>> heads_off_, cross_heads_off_;
  std::vector<int> head_handles_;
  std::vector<int> forced_;  // the tokens of the session's first steps (Command::forced)

  std::thread thread_;
};

}  // namespace dsgui
