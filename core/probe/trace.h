#pragma once
// The Trace: what the observers collected during one generation, step by step.
// With a KV cache each decode step adds one query row per layer and head, so a
// step stores only its own rows ([n_heads, 1, S] for an attention pattern); the
// full attention matrix of any layer and head at any step is rebuilt on demand.
// The GUI, the CLI and the tests all read this one structure; it round-trips
// through JSON (schema in the README).
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "probe/hooks.h"
#include "sample/sampler.h"

namespace ds {

struct Tensor {
  std::vector<int> shape;
  std::vector<float> data;
  int64_t size() const;
};

// One row of the candidate table of a step.
struct Candidate {
  int id = 0;
  std::string text;
  float p_raw = 0, p_temp = 0, p_topk = 0, p_final = 0;
  uint8_t removed = 0;  // 0 kept, 1 removed by top-k, 2 removed by top-p
};

struct SampleRecord {
  SamplerConfig config;
  bool greedy = false;
  double u = -1;     // the uniform number drawn (-1 when greedy)
  int token = -1;
  int rank = 0;      // rank of the token by p_temp (0 = most probable)
  int n_kept = 0;    // tokens left after the filters
  std::vector<Candidate> candidates;  // the most probable by p_temp, plus the drawn token
};

struct TraceStep {
  int pos0 = 0;                // position of the first token fed in this step
  std::vector<int> input;      // tokens fed: the prompt at step 0, then one token a step
  std::vector<std::string> input_text;
  std::map<std::string, Tensor> tensors;  // hook name -> what it published in this step
  std::optional<SampleRecord> sample;     // the token drawn from this step's last row
};

struct Trace {
  std::string model_name;
  Config config;
  std::vector<int> source;  // encoder input (encoder-decoder models)
  std::vector<std::string> source_text;
  std::map<std::string, Tensor> encoder;  // encoder hook points, published once
  std::vector<TraceStep> steps;

  void clear();
  // Every decoder token fed, in position order (prompt and generated).
  std::vector<int> tokens() const;
  // Number of query positions seen up to and including step s.
  int positions(int step) const;

  // The [Q, S] attention matrix of one layer and head as of step `step` (inclusive):
  // row i is query position i (self: S = Q; cross: S = source length). Reads
  // blocks.{l}.attn.pattern (or .scores, or cross_attn.*); cells never published are 0
  // (pattern) or -inf (scores). Throws ds::Error if the trace did not record it.
  MatRM attention(int layer, int head, int step, bool cross = false, bool scores = false) const;
  // Encoder self-attention [S, S] of one layer and head.
  MatRM encoder_attention(int layer, int head, bool scores = false) const;

  void write_json(std::ostream& os) const;
  void save(const std::string& path) const;
  // Throws ds::Error naming what is wrong in a malformed file.
  static Trace read_json(std::istream& is);
  static Trace load(const std::string& path);
};

// Copies what the hook points publish into a Trace. Subscribes on construction to
// every hook matching the patterns and unsubscribes on destruction.
class TraceRecorder {
 public:
  TraceRecorder(Hooks& hooks, const Config& cfg, Trace& trace, const std::vector<std::string>& patterns);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

 private:
  Hooks& hooks_;
  Trace& trace_;
  std::vector<int> handles_;
  std::vector<std::string> names_;  // by slot: stack, layer + 1, point
  int n_layers_ = 0;
};

}  // namespace ds
