#pragma once
// Beam search: keep the W most probable continuations (hypotheses) at every step
// instead of one, and return the best finished one.
//
// The rules are those of Hugging Face transformers' `generate(num_beams=W,
// length_penalty=A, early_stopping=False)` (BeamSearchScorer, as of transformers 4.36
// and later, where the length counts generated tokens only):
//   - A hypothesis's running score is the sum of the log-probabilities (log-softmax of
//     the logits, temperature 1, no other filter) of the tokens it generated.
//   - Each step, every kept hypothesis is extended by every token; the 2W best
//     (hypothesis, token) pairs by running score are walked best first (ties: lower
//     hypothesis index, then lower token id). A pair ending on an end-of-sequence id
//     finishes a hypothesis if its rank among the 2W is below W, and is skipped
//     otherwise; the other pairs become the next step's hypotheses until W are kept.
//   - A finished hypothesis is scored sum / L^A, L = tokens it generated counting the
//     end-of-sequence token; at most W finished ones are kept (a better one replaces
//     the worst).
//   - The search stops when W hypotheses have finished and the worst of them scores at
//     least the best running sum of this step / n^A (n = tokens generated so far), or
//     when the positions run out; then the running hypotheses are scored as finished
//     ones (L = their length) and compete with them.
//   - The result is the finished hypotheses, best score first. Width 1 is greedy
//     decoding (the first index of the maximum logit), token for token.
// Each hypothesis keeps its own KV cache (Engine::swap_cache): a step runs one token
// per hypothesis; a hypothesis extended twice copies its parent's cache once.
#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"

namespace ds {

struct BeamOptions {
  int width = 4;             // W >= 1
  float length_penalty = 1;  // A: the exponent of the length (0: plain sum of log-probabilities)
  int steps = 0;             // positions in all, prompt included (0 or past the context: the context)
  std::vector<int> eos_ids;  // tokens that end a hypothesis (kept in its tokens)
  int threads = 1;
  Products products = Products::Exact;  // quantized weights' products (Engine::set_products)
  // Called before each step with its index (0-based); returning false ends the search
  // there, as if the positions had run out (progress and cancelling in the window).
  // The first step always runs, so there is always a hypothesis to return.
  std::function<bool(int)> on_step;
};

// What happened to one (hypothesis, token) pair a step looked at.
enum class BeamFate : uint8_t {
  Kept,      // became a hypothesis of the next step
  Finished,  // an end-of-sequence token ranked below W: a finished hypothesis
  Skipped,   // an end-of-sequence token ranked W or worse: dropped (Hugging Face's rule)
  Pruned,    // not among the pairs kept: the search forgot it
};

struct BeamCandidate {
  int token = 0;
  double logprob = 0;  // log p(token | hypothesis)
  double sum = 0;      // the hypothesis's sum plus logprob
  int rank = -1;       // rank among every pair of the step (0 best), -1 past the 2W looked at
  BeamFate fate = BeamFate::Pruned;
  int child = -1;  // Kept: the index of the hypothesis it became in the next step
  // Its index in BeamResult::finished when it ended a hypothesis there (Finished, or a
  // Kept one of the last step scored when the positions ran out); -1 otherwise, also
  // once a better hypothesis pushed it out.
  int finished = -1;
};

// One hypothesis alive at a step, and the candidates it was extended with.
struct BeamHyp {
  std::vector<int> tokens;  // generated so far (after the prompt)
  double sum = 0;           // sum of their log-probabilities
  int parent = -1;          // its index among the previous step's hypotheses (-1 at step 0)
  // Its best min(2W, vocab) tokens, by log-probability (best first).
  std::vector<BeamCandidate> candidates;
};

struct BeamStep {
  std::vector<BeamHyp> hyps;  // the hypotheses this step extended (one at step 0)
};

struct BeamFinished {
  std::vector<int> tokens;  // generated tokens (ending on the end-of-sequence id if it ended on one)
  double sum = 0;           // sum of log-probabilities
  double score = 0;         // sum / length^A
  bool eos = false;         // ended on an end-of-sequence token
  int step = 0;             // the step whose candidate finished it (for running ones: the last step)
  // The hypothesis index at every step 0..step on its way (path[step] is the one it
  // extended last).
  std::vector<int> path;
};

struct BeamResult {
  std::vector<int> prompt;
  std::vector<BeamStep> steps;
  // Best score first; at most W. Index 0 is the answer.
  std::vector<BeamFinished> finished;
  bool stopped_early = false;  // ended by the early-stopping rule, not by the positions
};

// Runs beam search on a model from a prompt (and a source for encoder-decoder models).
// Throws ds::Error on an empty prompt, ids outside the vocabulary, a prompt longer than
// the positions allowed, a width below 1, a width whose caches would take more than
// 4 GB, or a length penalty that is not a finite number.
BeamResult beam_search(std::shared_ptr<const Model> model, const std::vector<int>& prompt,
                       const std::vector<int>& source, const BeamOptions& opt);

// log-softmax of x[0..n) in double: x - log(sum(exp(x))). -inf stays -inf.
void log_softmax(const float* x, int n, std::vector<double>& out);

}  // namespace ds
