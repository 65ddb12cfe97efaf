#pragma once
// The Trace: what the observers collected during one generation, step by step.
// With a KV cache each decode step adds one query row per layer and head, so a
// step stores only its own rows ([n_heads, 1, S] for an attention pattern); the
// full attention matrix of any layer and head at any step is rebuilt on demand.
// The GUI, the CLI and the tests all read this one structure; it round-trips
// through JSON (schema in the README) and through the compact binary format (".dstrace",
// also in the README) that holds long generations of real models.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/hooks.h"
#include "model/model.h"
#include "model/weights.h"
#include "sample/sampler.h"

namespace ds {

// What a hook published in one step. Full recordings keep float32 values; the
// compact recording (TraceOptions::compact, the window's default) keeps float16
// values, or for some residual points only the norm of each row.
enum class Storage : uint8_t { F32 = 0, F16 = 1, RowNorms = 2 };

struct Tensor {
  std::vector<int> shape;      // as published
  std::vector<float> data;     // F32: the values; RowNorms: one L2 norm per last-axis row
  std::vector<uint16_t> half;  // F16: the values
  Storage storage = Storage::F32;

  int64_t size() const;  // product of shape
  bool has_values() const { return storage != Storage::RowNorms; }
  float at(int64_t i) const;  // value i (F32 or F16 storage)
  void values(int64_t begin, int64_t n, float* out) const;
  float row_norm(int64_t r) const;       // L2 norm of last-axis row r, any storage
  std::vector<float> row_norms() const;  // L2 norm of each last-axis row, any storage
  size_t bytes() const;                  // heap bytes held by the values
};

// One row of the candidate table of a step.
struct Candidate {
  int id = 0;
  std::string text;
  float p_raw = 0, p_temp = 0, p_topk = 0, p_final = 0;
  float p_rep = 0;        // after the repetition penalty (== p_raw when it is off)
  bool repeated = false;  // already in the sequence: the repetition penalty changed its logit
  uint8_t removed = 0;    // 0 kept, 1 removed by top-k, 2 removed by top-p
  // Contrastive search: set on the top_k candidates the step looked one token ahead for.
  bool lookahead = false;
  float confidence = 0;    // p(v): the model's probability (after the repetition penalty)
  float degeneration = 0;  // max over the context of cos(h_v, h_j), h = the final hidden state
  float score = 0;         // (1 - alpha) * confidence - alpha * degeneration
};

// Who chose a step's token when no draw did: the step was given it (Session::step's
// forced token), so u and the settings below did not decide it. by: "forced" as the
// session marks it, or the caller's name for what chose it ("beam search"); for beam
// search, the scores that chose it.
struct TokenChoice {
  std::string by = "forced";
  int width = 0;              // beam search: the number of hypotheses kept
  double length_penalty = 0;  // beam search: score = sum / length^length_penalty
  double logprob = 0;         // beam search: log p(token | the hypothesis before it)
  double sum = 0;             // beam search: the hypothesis's sum of log-probabilities up to this token
  int rank = -1;              // beam search: the pair's rank among every (hypothesis, token) pair of its step (0: best)
  double score = 0;           // beam search: the finished hypothesis's score (at its last token)
  bool final = false;         // beam search: this token ended the chosen hypothesis
};

struct SampleRecord {
  SamplerConfig config;
  std::optional<TokenChoice> chosen;  // set when the token was given, not drawn (JSON traces keep it)
  bool greedy = false;
  double u = -1;  // the uniform number drawn (-1 when greedy)
  int token = -1;
  int rank = 0;                       // rank of the token by p_temp (0 = most probable)
  int n_kept = 0;                     // tokens left after the filters
  std::vector<Candidate> candidates;  // the most probable by p_temp, plus the drawn token
                                      // (and, for contrastive search, every candidate)
};

struct TraceStep {
  int pos0 = 0;            // position of the first token fed in this step
  std::vector<int> input;  // tokens fed: the prompt at step 0, then one token a step
  std::vector<std::string> input_text;
  std::map<std::string, Tensor> tensors;  // hook name -> what it published in this step
  std::optional<SampleRecord> sample;     // the token drawn from this step's last row
  // The text of every token id the step's logit lens names (probe/lens.h), when the
  // session has a tokenizer: a trace replayed with no model still shows them.
  std::map<int, std::string> token_text;
  // Wall time of the step's forward pass in milliseconds (with contrastive search, its
  // look-aheads too); -1: not measured (traces written before it was recorded).
  double forward_ms = -1;
  // Whether the step read the KV cache. false: it recomputed every position so far
  // (SessionOptions::kv_cache) and recorded only its own rows, as a cached step does.
  bool kv_cache = true;
};

// Progress of a save or an open: bytes done of the total. It may throw to stop (a save
// then leaves the previous file in place).
using TraceProgress = std::function<void(uint64_t done, uint64_t total)>;

struct Trace {
  std::string model_name;
  Config config;
  std::vector<int> source;  // encoder input (encoder-decoder models)
  std::vector<std::string> source_text;
  // Encoder hook points, published once, and the decoder's cross-attention keys and
  // values of the source (blocks.{l}.cross_attn.k / .v, made by the encoder's pass).
  std::map<std::string, Tensor> encoder;
  std::vector<TraceStep> steps;

  void clear();
  // Every decoder token fed, in position order (prompt and generated).
  std::vector<int> tokens() const;
  // Number of query positions seen up to and including step s.
  int positions(int step) const;
  // The step whose rows include position pos (pos0 <= pos < pos0 + inputs), or -1.
  int step_of(int pos) const;

  // The [Q, S] attention matrix of one layer and head as of step `step` (inclusive):
  // row i is query position i (self: S = Q; cross: S = source length). Reads
  // blocks.{l}.attn.pattern (or .scores, or cross_attn.*); cells never published are 0
  // (pattern) or -inf (scores); head -1: the mean of the heads. Throws ds::Error if the
  // trace did not record it.
  MatRM attention(int layer, int head, int step, bool cross = false, bool scores = false) const;
  // The rows step `step` added to that matrix: [T, S] for the step's T query rows, S =
  // the keys as of the step (self: positions(step); cross: the source length). head -1:
  // the mean of the heads (summed in head order, then divided). Cells the step did not
  // publish are 0 (pattern) or -inf (scores). A compact trace's pattern is the softmax
  // of its scores. No rows (rows() == 0) when the step did not record the matrix;
  // throws ds::Error when the recorded tensor has the wrong shape.
  MatRM step_attention(int layer, int head, int step, bool cross = false, bool scores = false) const;
  // Which cells of that matrix a query may read: [T, S] row-major as step_attention's
  // rows, 1 where it may. The one place that answers it for a recorded step: the
  // recorded mask (attn.mask) when the step kept it; else where the recorded scores
  // are finite (a compact trace drops the mask once the layer's scores arrive); else
  // the rule (model/mask.h) with the layer's sliding window. Cells of a recorded mask
  // or scores tensor that are not there (a smaller tensor) stay 0. Throws ds::Error
  // for a step the trace does not have.
  std::vector<uint8_t> step_mask(int layer, int step, bool cross = false) const;
  // Encoder self-attention [S, S] of one layer and head.
  MatRM encoder_attention(int layer, int head, bool scores = false) const;
  // Which cells of a [rows, cols] encoder self-attention matrix a query may read,
  // row-major, 1 where it may: the rule (model/mask.h), every source key but padding.
  std::vector<uint8_t> encoder_mask(int rows, int cols) const;

  // Heap bytes held by every recorded tensor and candidate table (an estimate that
  // counts the values, not the allocator's bookkeeping).
  size_t bytes() const;

  // JSON, for small runs: throws ds::Error pointing to the binary format when the text
  // would be over 200 MB (check_json_size; json_bytes_estimate is a lower estimate).
  void write_json(std::ostream& os) const;
  uint64_t json_bytes_estimate() const;
  void check_json_size() const;
  // The binary format (trace_bin.cpp); binary_bytes() is the size it writes.
  void write_binary(std::ostream& os, const TraceProgress& progress = {}) const;
  uint64_t binary_bytes() const;
  // A path ending in ".json" is written as JSON, any other in the binary format, through a
  // temporary file renamed over path (util/atomic_file.h).
  void save(const std::string& path, const TraceProgress& progress = {}) const;
  // Throws ds::Error naming what is wrong in a malformed file.
  static Trace read_json(std::istream& is);
  // size: the bytes the stream holds from its position (nothing past them is read).
  static Trace read_binary(std::istream& is, uint64_t size, const TraceProgress& progress = {});
  static Trace read_binary(const void* data, size_t size);
  // Either format, told by the file's first bytes (the binary magic "DSTRACE\x1a").
  static Trace load(const std::string& path, const TraceProgress& progress = {});
  static bool is_binary(const std::string& path);
};

struct TraceOptions {
  // Compact storage, sized for long generations of real models:
  //  * attention scores are kept as float16 (masked cells stay -inf);
  //  * an attention pattern whose scores are recorded in the same step is not kept:
  //    Trace::attention rebuilds it as the softmax of the scores;
  //  * an attention mask is dropped once the same layer's scores arrive (masked cells
  //    are the -inf scores);
  //  * resid_post and layer 0's resid_pre (what the logit lens reads) are float16;
  //    the other residual points keep only the norm of each row;
  //  * everything else is float16.
  bool compact = false;
  // > 0: every step also records the logit lens of each of its rows, the k most
  // probable tokens and their probabilities (names in probe/lens.h). The recorder
  // then needs the model's weights.
  int lens_top_k = 0;
  // Threads the lens's products use (the Session sets its own thread count).
  int threads = 1;
};

// An attention pattern row rebuilt from its recorded scores (a compact trace keeps
// only the scores): the softmax of row[0..n), masked (-inf) cells 0, an all-masked
// row all 0.
void pattern_from_scores(float* row, int64_t n);

// The logit lens the window records (TraceOptions::lens_top_k): the tokens its panel
// shows for each layer.
inline constexpr int kWindowLensTopK = 5;

// The hook patterns the window records by default (attention scores, patterns and
// masks, self and cross, the residual stream: resid_pre, resid_mid, resid_mid_cross
// in encoder-decoder models, resid_post), kept to those the model has. With
// TraceOptions{.compact = true} this is the "default observers" set the benchmarks
// time; the window also records the logit lens (kWindowLensTopK).
std::vector<std::string> default_record_patterns(const Config& cfg);

class LensRecorder;

// Copies what the hook points publish into a Trace. Subscribes on construction to
// every hook matching the patterns and unsubscribes on destruction. With
// options.lens_top_k > 0 it also records the logit lens, computed with `model` (the
// one the hooks belong to); throws ds::Error when that model is missing or does not
// fit cfg, or lens_top_k < 0.
class TraceRecorder {
 public:
  TraceRecorder(Hooks& hooks, const Config& cfg, Trace& trace, const std::vector<std::string>& patterns,
                TraceOptions options = {}, std::shared_ptr<const Model> model = nullptr);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // While paused, nothing the hooks publish is recorded (contrastive search's
  // look-ahead forwards stay out of the trace).
  void set_paused(bool paused);
  // Decoder rows of positions below pos are not recorded: a step that recomputes its
  // whole prefix (generation without the KV cache) records only its own rows, the
  // same tensors a cached step records (the [n_heads, T, S] attention tensors lose
  // rows of their T axis, the others of their first). 0 (the default) keeps every row.
  void set_first_row(int pos);

 private:
  void record(const HookEvent& ev);
  bool paused_ = false;
  int first_row_ = 0;
  std::vector<float> kept_;  // scratch: the rows of an event from first_row_ on
  Hooks& hooks_;
  Trace& trace_;
  std::vector<int> handles_;
  std::vector<std::string> names_;  // by slot: stack, layer + 1, point
  int n_layers_ = 0;
  TraceOptions opt_;
  std::unique_ptr<LensRecorder> lens_;
};

}  // namespace ds
