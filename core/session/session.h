#pragma once
// A generation session: prompt -> step() -> tokens, with everything the observers
// saw recorded in a Trace. Owns its engine (model, KV cache), sampler and trace.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "probe/trace.h"
#include "sample/sampler.h"
#include "session/contrastive.h"
#include "text/tokenizer.h"

namespace ds {

struct SessionOptions {
  SamplerConfig sampler;
  // Positions in all, prompt included (llama2.c run.c's -n); 0 or more than the
  // model's context means the whole context.
  int steps = 0;
  // Generation ends after drawing one of these (the drawn token is not fed again).
  std::vector<int> stop_ids;
  // Hook patterns the trace records; empty records nothing but the samples.
  std::vector<std::string> record;
  TraceOptions trace_options;  // compact storage for long generations; the logit lens (its threads: the engine's)
  int candidates = 20;         // rows of the candidate table kept per step
  int threads = 1;
  Products products = Products::Exact;  // quantized weights' products (Engine::set_products)
  // Bytes of raw logits rows the session keeps, the latest steps' first, for shape()
  // (a row is vocab floats); 0 keeps none.
  size_t keep_logits_bytes = 0;
  // true: each step runs only its new tokens, reading the keys and values of the
  // earlier positions from the KV cache. false: each step recomputes every position
  // so far with Engine::forward_full and samples from the last row, as a model with no
  // cache must; the trace records exactly what a cached step records (the step's own
  // rows, TraceRecorder::set_first_row) and each step's forward_ms shows the cost.
  // Contrastive search's look-aheads recompute too. (An encoder-decoder model still
  // encodes the source once: the cache in question is the decoder's.)
  bool kv_cache = true;
};

// Throws ds::Error for an empty prompt, ids outside the vocabulary or a prompt longer
// than `limit` positions (what Session::start and beam_search accept).
void check_prompt(const Config& c, const std::vector<int>& prompt, int limit);

class Session {
 public:
  Session(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer, SessionOptions opt);
  ~Session();

  // Encodes the source (encoder-decoder) and queues the prompt; nothing runs yet.
  // Throws ds::Error for an empty prompt, a prompt longer than the steps, or ids
  // outside the vocabulary.
  void start(const std::vector<int>& prompt, const std::vector<int>& source = {});
  // Runs one step: the whole prompt the first time, then the last drawn token, and
  // draws the next token. Returns it, or -1 when the session is done. With contrastive
  // search (SamplerConfig::contrastive, session/contrastive.h) the step also runs each
  // candidate one token ahead through the KV cache and takes it back; the trace does
  // not record those forwards, and the cache is left as a sampled step leaves it.
  // forced >= 0: the step takes that token instead of the one drawn (a beam search's
  // hypothesis replayed); the candidate table still shows the distribution it came from.
  int step(int forced = -1);
  bool done() const;
  // Forgets steps >= k (their tokens, trace and cached keys) and restores the
  // sampler's random state to what it was before step k, so the next step() redoes
  // step k: the same draw with the same settings, another with new ones.
  void rewind(int k);
  // Sampling settings for the steps to come (the RNG restarts only if the seed changes).
  void set_sampler(const SamplerConfig& c) { sampler_.set_config(c); }
  int steps_done() const { return int(generated_.size()); }
  // The candidate table step k's logits give with settings c, without drawing: the
  // trace and the random state are untouched (token -1: nothing drawn). Contrastive
  // settings give the candidates and their probabilities with no look-ahead. Throws
  // ds::Error when step k's logits are not kept (SessionOptions::keep_logits_bytes).
  SampleRecord shape(int k, const SamplerConfig& c) const;
  bool has_logits(int k) const;
  // The final hidden state of every position run so far, [positions, d_model]
  // (contrastive search's context).
  const std::vector<float>& hidden_states() const { return hidden_; }

  const std::vector<int>& prompt() const { return prompt_; }
  const std::vector<int>& generated() const { return generated_; }
  bool stopped_on_token() const { return stopped_; }
  int steps_limit() const { return steps_; }
  Engine& engine() { return engine_; }
  Sampler& sampler() { return sampler_; }
  const Trace& trace() const { return trace_; }
  // The newest step, for a caller that keeps the trace itself (the window): its recorded
  // tensors and token texts are moved out, the rest copied. The session keeps what it
  // goes on from (positions, tokens, the draw), so trace() holds that step without
  // tensors from then on. Throws ds::Error when no step was taken.
  TraceStep hand_over_last_step();
  const SampleResult& last_sample() const { return last_; }

 private:
  std::string text_of(int id) const;
  void on_hidden(const HookEvent& ev);
  // The step's forward pass (with the KV cache or a full recompute), its wall time in
  // milliseconds into ms. Returns its logits [vocab]: the engine's own row while nothing
  // runs the engine again, else the copy in logits_ (contrastive search's look-aheads
  // and the recomputes without the cache use the engine's buffer).
  const float* run_forward(const std::vector<int>& feed, int pos0, double& ms);
  // Contrastive search: looks each candidate one token ahead and returns the token.
  int contrastive(std::vector<ContrastiveScore>& scores);
  SampleRecord record(const SampleResult& r, const SamplerConfig& c, int token, std::span<const int> seq,
                      const std::vector<ContrastiveScore>& scores, std::vector<uint64_t>& scratch) const;
  void keep_logits(const float* logits);
  std::vector<int> sequence_at(int k) const;  // every token fed up to step k

  std::shared_ptr<const Tokenizer> tok_;
  SessionOptions opt_;
  Engine engine_;
  Sampler sampler_;
  Trace trace_;
  std::unique_ptr<TraceRecorder> recorder_;
  SampleResult last_;
  std::vector<uint64_t> best_heap_;              // scratch: the candidate table's selection
  std::vector<float> logits_;                    // a copy of the step's logits [vocab] (run_forward)
  std::vector<std::vector<float>> kept_logits_;  // by step; empty rows were let go
  size_t first_kept_ = 0;                        // rows before it are empty
  std::vector<float> hidden_;                    // [positions, d_model]
  std::vector<float> ahead_;                     // a look-ahead's final hidden state [d_model]
  bool looking_ahead_ = false;
  int hidden_handle_ = 0;
  std::vector<int> seq_;  // the tokens fed so far (what the repetition penalty reads)
  std::vector<ContrastiveScore> scores_;
  std::vector<int> prompt_, generated_;
  std::vector<Rng> rng_before_;  // the sampler's state before each step
  int steps_ = 0;
  bool started_ = false, stopped_ = false;
};

}  // namespace ds
