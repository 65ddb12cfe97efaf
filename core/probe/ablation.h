#pragma once
// Which heads matter for one step: every attention head switched off alone (its output
// z set to zero, probe/interventions.h) and the change that makes to the log-probability
// of the token the step chose.
//
// "Switched off" means what the window's "Re-run with heads off" does: the step is
// computed again with the head silenced at the positions the step feeds (the whole
// prompt at the first step, one token a step after that); the keys and values of the
// earlier positions stay as they were computed, with every head on. A step that did not
// read the KV cache (TraceStep::kv_cache false) recomputes every position, so the head is
// off at all of them. The log-probability is the model's: log softmax of the logits, at
// temperature 1, before any top-k, top-p or penalty.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "probe/interventions.h"
#include "probe/trace.h"
#include "util/error.h"

namespace ds {

// One step as the ablation reruns it.
struct AblationStep {
  std::vector<int> tokens;  // every token fed up to and including the step (prefix, then the step's input)
  int pos0 = 0;             // where the step's input starts in tokens
  std::vector<int> source;  // encoder-decoder models: the encoder's source
  int token = -1;           // the token whose log-probability is measured (the one the step chose)
  bool kv_cache = true;     // false: every position recomputed, the head off at all of them
};

// Step s of a trace as an AblationStep (the token it drew). Throws ds::Error when s is
// out of range or the step drew no token.
AblationStep ablation_step(const Trace& t, int s);

// One head switched off alone.
struct HeadEffect {
  HeadSite site = HeadSite::Self;  // Self (decoder self-attention) or Cross
  int layer = 0, head = 0;
  double logp = 0;   // the chosen token's log-probability with this head off
  double delta = 0;  // logp minus the log-probability with every head on
};

struct HeadAblation {
  int token = -1;
  double logp = 0;                // the chosen token's log-probability with every head on
  std::vector<HeadEffect> heads;  // every self-attention head, then every cross-attention head; see rank_by_effect
};

// Called after each forward pass with the passes done and the total; returning false
// stops the computation (it then throws ds::Cancelled).
using AblationProgress = std::function<bool(int done, int total)>;

struct Cancelled : Error {
  Cancelled() : Error("cancelled") {}
};

// Every decoder self-attention head, and on an encoder-decoder model every cross-
// attention head, switched off alone at step `st` (one forward pass of the step's input
// per head, after one of the prefix). Heads in the order layer, head (self first);
// rank_by_effect sorts them. Throws ds::Error on tokens outside the vocabulary, a step
// past the context, or an empty step.
HeadAblation ablate_heads(const std::shared_ptr<const Model>& m, const AblationStep& st, int threads = 1,
                          const AblationProgress& progress = {});

// The heads sorted by how much switching them off moves the chosen token's
// log-probability: largest |delta| first, ties in layer, head order.
void rank_by_effect(std::vector<HeadEffect>& heads);

// One head switched off at each step of a trace in turn.
struct StepEffect {
  int step = 0;
  int token = -1;
  double logp = 0;   // the token's log-probability with every head on
  double delta = 0;  // with the head off, minus logp
};

// The head (site, layer, head) switched off at every step of t that drew a token, one
// step at a time (each step's prefix computed with every head on). Steps in order; sort
// by |delta| for "where it matters most". Throws ds::Error for a head the model lacks.
std::vector<StepEffect> head_across_steps(const std::shared_ptr<const Model>& m, const Trace& t, HeadSite site,
                                          int layer, int head, int threads = 1, const AblationProgress& progress = {});

// log softmax(logits)[token], in double precision.
double token_logprob(const float* logits, int vocab, int token);

}  // namespace ds
