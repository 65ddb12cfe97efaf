#pragma once
// What the window and the engine's thread (worker.h) say to each other: one struct per
// command (window -> worker) and per event (worker -> window), each with only its own
// fields. Command and Event are variants of them; both sides dispatch with std::visit.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine_link/block_data.h"
#include "engine_link/compare.h"
#include "engine_link/patch_messages.h"
#include "model/config.h"
#include "perf/bf16_fast.h"
#include "perf/quant_fast.h"
#include "probe/ablation.h"
#include "probe/attribution.h"
#include "probe/heads.h"
#include "probe/trace.h"
#include "sample/sampler.h"
#include "session/beam.h"
#include "util/precision.h"

namespace dsgui {

// A (layer, head) pair.
using HeadId = std::pair<int, int>;

// ---- answers that views keep (shared, read-only once sent)

struct ModelInfo {
  std::string spec, tokenizer, name, kind, describe;  // tokenizer: the file given with spec, or ""
  ds::Config cfg;
  bool has_tokenizer = false;
  std::string prompt, source;  // suggested text for the boxes
  int64_t params = 0;
  double load_seconds = 0;
  ds::Precision precision = ds::Precision::F32;  // storage of the large weight matrices
  std::string storage;                           // GGUF: every storage type's share ("Q4_K 85% + Q6_K 15%"), else ""
  bool has_chat = false;                         // the tokenizer carries a chat template (an instruct model)
  std::vector<int> special_ids;                  // its control and special tokens, ascending (coloured in the strip)
  int64_t weight_bytes = 0;                      // bytes of every parameter as stored
  ds::Products products = ds::Products::Exact;   // the engine's products with quantized weights
  // What the status line names: the storage of a GGUF model, else the precision.
  std::string storage_name() const { return storage.empty() ? ds::precision_name(precision) : storage; }
  // Whether the products setting reaches the model's BF16 matrices: a GGUF file's (kept
  // row by row), on a processor with AVX-512 BF16 (perf/bf16_fast.h).
  bool bf16_products() const {
    return !storage.empty() && precision == ds::Precision::BF16 && ds::bf16_fast_available();
  }
  // "fast products" or "exact products" when the model has quantized weights (or BF16
  // ones the setting reaches), else "".
  std::string products_label() const {
    return ds::is_quantized(precision) || bf16_products() ? std::string(ds::products_name(products)) + " products"
                                                          : std::string();
  }
};

// The logit lens at one position: what each layer's residual stream would predict if
// the model stopped there (final norm, then the output head).
struct LensRow {
  std::string label;  // "embedding", "after layer 0", ...
  std::vector<int> ids;
  std::vector<std::string> texts;
  std::vector<float> probs;  // top few, descending
};
struct LensColumn {
  int pos = -1;
  std::vector<LensRow> rows;  // in the order the request gave them
};
struct LensResult {
  int step = -1;
  uint64_t version = 0;
  std::vector<LensColumn> columns;
};

// A finished beam search (cmd::Beam), with the text of every token its tree names.
// Texts of several tokens are decoded as generated text is printed (ds::decode_text,
// as decoderscope-cli prints them): pieces side by side lose a word tokenizer's spaces.
struct BeamAnswer {
  ds::BeamResult result;
  std::map<int, std::string> text;  // token id -> its piece
  std::string prompt, source;       // the text it was run on
  std::vector<int> src;             // the source ids (encoder-decoder models)
  int width = 0;
  float length_penalty = 1;
  double seconds = 0;
  std::vector<std::string> finished_text;                        // [finished]: its tokens' text, the end token left out
  std::vector<std::vector<std::string>> hyp_text;                // [step][hyp]: the hypothesis's text so far
  std::vector<std::vector<std::vector<std::string>>> cand_text;  // [step][hyp][cand]: the candidate's text after it
};

// A kept step's candidate table under other settings, with nothing drawn (cmd::Shape):
// what the Next token view shows while a slider moves.
struct ShapeAnswer {
  int step = -1;
  uint64_t version = 0;  // of the request
  ds::SamplerConfig config;
  ds::SampleRecord rec;  // token -1
  std::string error;     // why there is no table (the step's logits were let go)
};

// The measured time of every step of the same tokens with and without the KV cache
// (cmd::Measure): (position of the step's last row, milliseconds), prompt step left out.
struct MeasureAnswer {
  std::vector<std::pair<int, double>> with, without;
  uint64_t version = 0;
};

// The head detector's scores for the loaded model (cmd::Roles), with the text of the
// probe's tokens.
struct RolesAnswer {
  std::string spec;  // the model they are for
  std::string key;   // the request they answer
  ds::HeadRoles roles;
  std::vector<std::string> labels;  // the probe's tokens, visible
  int half = 0;                     // random tokens per half of the probe
};

// Heads switched off alone (cmd::Ablate): at one step, every head ranked (probe/ablation.h);
// or one head at every step, the steps where it matters most first.
struct AblationAnswer {
  std::string key;                         // the request it answers
  bool cancelled = false;                  // stopped by the user: nothing below
  int step = -1;                           // the step ranked (across: -1)
  ds::HeadAblation ranked;                 // heads, largest change first
  ds::HeadSite site = ds::HeadSite::Self;  // across: the head
  int layer = -1, head = -1;
  std::vector<ds::StepEffect> across;  // across: every step, largest change first
  double seconds = 0;
};

// Direct logit attribution at one position (cmd::Attribute, probe/attribution.h): every
// part's contribution (vectors left out), and what the chosen head writes.
struct AttributionAnswer {
  std::string key;  // the request it answers
  ds::Attribution attr;
  int writes_part = -1;             // the part `writes` is of (-1: none asked)
  ds::PartWrites writes;            // its most pushed-up and pushed-down tokens
  std::map<int, std::string> text;  // token id -> its piece (the token, vs, writes' ids)
  double seconds = 0;
};

// ---- commands: window -> worker
namespace cmd {

// Open a model (as --model names it) with its tokenizer file ("": none), keeping the
// large weight matrices in `precision`.
struct Load {
  std::string spec, tokenizer;
  ds::Precision precision = ds::Precision::F32;
  ds::Products products = ds::Products::Exact;  // with quantized weights (the window: --products, fast)
};

// A new session on the text of the boxes: the prompt (an encoder-decoder's target
// prefix) and the source, computed with `threads`, with or without a KV cache (false
// recomputes the whole prefix at every step). `forced`: tokens the first steps take
// instead of drawing one (a beam search's hypothesis replayed, so every view shows it).
// A chat (the prompt box holds the user's message): the model's chat template makes the
// prompt of [system if not empty, user] with the generation prompt added.
struct ChatInput {
  bool on = false;
  std::string system;
};

struct Start {
  std::string prompt, source;
  ChatInput chat;
  int threads = 1;
  bool kv_cache = true;
  std::vector<int> forced;
};

// Take `count` steps (-1: to the end), each sent back as an ev::Step.
struct Step {
  int count = 1;
};

// Forget the steps from `keep` on; the steps taken after it draw with the current settings.
struct Rewind {
  int keep = 0;
};

// The sampling settings of the steps to come.
struct Sampler {
  ds::SamplerConfig config;
};

// The heads switched off from now on: decoder self-attention and cross-attention.
struct Heads {
  std::vector<HeadId> self, cross;
};

// The logit lens of the residual vectors of some positions (each [rows][d_model], with
// their labels), for the step and request (version) they answer. All rows of all
// columns are read through the head together.
struct Lens {
  struct Column {
    int pos = -1;
    std::vector<std::vector<float>> resid;
    std::vector<std::string> labels;
  };
  std::vector<Column> columns;
  int step = -1;
  uint64_t version = 0;
};

// Write the trace to a file, reporting bytes written of the total.
struct SaveTrace {
  std::string path;
  std::shared_ptr<const ds::Trace> trace;
  ds::TraceProgress progress;
};

// Step `step`'s candidate table under `config`, with nothing drawn (request `version`).
struct Shape {
  int step = -1;
  uint64_t version = 0;
  ds::SamplerConfig config;
};

// A beam search on the prompt and source with this width and length penalty, over
// `positions` in all (0 or less: the model's context).
struct Beam {
  std::string prompt, source;
  ChatInput chat;
  int threads = 1;
  int width = 3;
  float length_penalty = 1;
  int positions = 0;
};

// A hypothesis of a beam search as a trace of its own, beside the session (which it
// leaves alone): the prompt, then its tokens, each step's record saying beam search
// chose the token and with what scores (ds::TokenChoice). step -1: the winner; else the
// hypothesis `hyp` of step `step` extended by its candidate `cand`.
struct BeamBranch {
  std::shared_ptr<const BeamAnswer> answer;
  int step = -1, hyp = 0, cand = 0;
  int threads = 1;
};

// Run `tokens` (positions 0 .. n-1; `src`: the source ids of an encoder-decoder) through
// decoder layer `layer`, keeping the numbers of position `pos` and the whole score matrix
// of head `head`; `key` is sent back with the answer (BlockSnapshot).
struct Inspect {
  std::vector<int> tokens, src;
  int layer = 0, pos = 0, head = 0;
  uint64_t key = 0;
  int threads = 1;
};

// Generate the same tokens (the first `prompt_len` are the prompt) and source twice, with
// and without the KV cache, timing each step (request `version`).
struct Measure {
  std::vector<int> tokens, src;
  int prompt_len = 1;
  uint64_t version = 0;
  int threads = 1;
};

// Run the head detector's probe; attention to position 0 (BOS) is left out of the scores
// when exclude_bos. `key` names the request and is sent back.
struct Roles {
  std::string key;
  bool exclude_bos = true;
  int threads = 1;
};

// Switch each head off alone at `step` (across false: `trace` holds the steps up to it)
// and rank them; or (across) switch head (site, layer, head) off at each step of `trace`.
// `trace` needs only each step's input, pos0, kv_cache and drawn token, and the source.
struct Ablate {
  std::string key;
  ds::Trace trace;
  int step = -1;
  bool across = false;
  ds::HeadSite site = ds::HeadSite::Self;
  int layer = 0, head = 0;
  int threads = 1;
};

// Put the session back as an undo left it: the steps from `keep` on are taken again with
// the tokens `forced` (one a step), each with the settings it was drawn with
// (step_samplers, when given). Nothing is sent back: the window already has those steps.
// restart: a new session first, on the prompt ids `prompt` and the source ids `src`
// (with threads and kv_cache), keep 0.
struct Restore {
  int keep = 0;
  std::vector<int> forced;
  std::vector<ds::SamplerConfig> step_samplers;
  bool restart = false;
  std::vector<int> prompt, src;
  int threads = 1;
  bool kv_cache = true;
};

// Direct logit attribution of `token` (-1: the most probable; minus `vs` when >= 0) at
// position `pos` of `tokens` (source `src`), and what head (site, layer, head) writes
// there (layer -1: none), its `top` tokens each way. `key` is sent back.
struct Attribute {
  std::string key;
  std::vector<int> tokens, src;
  int pos = -1, token = -1, vs = -1;
  ds::HeadSite site = ds::HeadSite::Self;
  int layer = -1, head = -1;
  int top = 8;
  int threads = 1;
};

// The Compare view's second run (B): `steps` steps of the prompt and source on the model
// `spec` ("": the loaded one; another must have the same vocabulary) with these
// settings and heads off, beside the session (which it leaves alone). `key` is sent back.
struct Compare {
  std::string key, spec;
  ds::Precision precision = ds::Precision::F32;
  std::string prompt, source;
  ds::SamplerConfig sampler;
  std::vector<HeadId> heads_off;
  int steps = 1;
  int threads = 1;
  bool kv_cache = true;
};

}  // namespace cmd

using Command = std::variant<cmd::Load, cmd::Start, cmd::Step, cmd::Rewind, cmd::Sampler, cmd::Heads, cmd::Lens,
                             cmd::SaveTrace, cmd::Shape, cmd::Beam, cmd::BeamBranch, cmd::Inspect, cmd::Measure,
                             cmd::Roles, cmd::Restore, cmd::Ablate, cmd::Attribute, cmd::Compare, cmd::Patch>;

// ---- events: worker -> window
namespace ev {

// A model is being opened (spec as the Load named it).
struct Loading {
  std::string spec;
};

// The model is open.
struct Loaded {
  std::shared_ptr<const ModelInfo> info;
};

// A session started: its source ids and their text, and what the encoder published once
// (encoder-decoder models).
struct Started {
  std::vector<int> source;
  std::vector<std::string> source_text;
  std::map<std::string, ds::Tensor> encoder;
};

// One step, handed over whole: the session keeps no copy of its tensors.
struct Step {
  int index = 0;       // the step's index in the trace
  bool done = false;   // the session can take no more steps
  double seconds = 0;  // compute time of the step
  ds::TraceStep step;
};

// The session now has `kept` steps (a rewind, or a Step command with nothing left to take).
struct Truncate {
  int kept = 0;
  bool done = false;  // the session can take no more steps
};

// The logit lens asked for (cmd::Lens).
struct Lens {
  LensResult lens;
};

// The trace was written to `path` in `seconds`.
struct Saved {
  std::string path;
  double seconds = 0;
};

// A command failed; start_failed: it was a Start (the text was refused).
struct Error {
  std::string msg;
  bool start_failed = false;
};

// The queue is empty: the worker waits.
struct Idle {};

// Answers to the views' requests.
struct Shape {
  std::shared_ptr<const ShapeAnswer> answer;
};
struct Beam {
  std::shared_ptr<const BeamAnswer> answer;
};
// cmd::BeamBranch's trace, for the window to keep as a branch.
struct BeamBranch {
  std::shared_ptr<const BeamAnswer> answer;
  int step = -1, hyp = 0, cand = 0;
  ds::Trace trace;
};
struct Inspect {
  std::shared_ptr<const BlockSnapshot> answer;
};
struct Measure {
  std::shared_ptr<const MeasureAnswer> answer;
};
struct Roles {
  std::shared_ptr<const RolesAnswer> answer;
};
struct Ablate {
  std::shared_ptr<const AblationAnswer> answer;
};

struct Attribute {
  std::shared_ptr<const AttributionAnswer> answer;
};

struct Compare {
  std::shared_ptr<const CompareAnswer> answer;
};

}  // namespace ev

using Event = std::variant<ev::Loading, ev::Loaded, ev::Started, ev::Step, ev::Truncate, ev::Lens, ev::Saved, ev::Error,
                           ev::Idle, ev::Shape, ev::Beam, ev::BeamBranch, ev::Inspect, ev::Measure, ev::Roles,
                           ev::Ablate, ev::Attribute, ev::Compare, ev::Patch>;

// For std::visit with one lambda per alternative.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace dsgui
