#pragma once
// The sampler turns one row of logits into the next token, and records every stage
// of the decision so that it can be shown: softmax, temperature, top-k, top-p and the
// uniform number that picked the token.
//
// Pipeline of one step (vocab V):
//   p_raw   = softmax(logits)
//   logits' = the repetition penalty applied to logits (every id already in the
//             sequence: x / r if x > 0, else x * r; Hugging Face's
//             RepetitionPenaltyLogitsProcessor); logits' = logits when r == 1
//   p_rep   = softmax(logits')                       (kept only when r != 1)
//   p_temp  = softmax(logits' / T)                   (T == 0: one-hot on argmax, greedy)
//   p_topk  = p_temp restricted to the k most probable tokens, renormalised
//   p_final = p_topk restricted to the smallest most-probable prefix whose mass
//             reaches top_p, renormalised
//   order   = the kept tokens sorted by p_final descending (ties: lower id first)
//   token   = the first token in order whose cumulative p_final exceeds u = uniform()
// Ties in top-k and top-p are broken by lower id first, so the result is a pure
// function of (logits, sequence, config, RNG state).
//
// Contrastive search (config.contrastive) ranks here and chooses in the session
// (session/contrastive.h): the sampler applies the repetition penalty, ignores
// temperature and top-p (as Hugging Face's contrastive search does), keeps the top_k
// most probable as the candidates (p_topk), draws no random number, and leaves
// token = the first maximum of logits' (what alpha 0 chooses).
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sample/rng.h"

namespace ds {

class ThreadTeam;

struct SamplerConfig {
  float temperature = 1.0f;  // >= 0; 0 = greedy (argmax)
  int top_k = 0;             // >= 0; 0 (or >= vocab) = off
  float top_p = 1.0f;        // in (0, 1]; 1 = off
  uint64_t seed = 0;
  float repetition_penalty = 1.0f;  // > 0; 1 = off; > 1 makes tokens already in the sequence less likely
  bool contrastive = false;         // contrastive search over the top_k candidates (top_k <= 1: greedy)
  float penalty_alpha = 0.0f;       // in [0, 1]: contrastive search's weight of the degeneration penalty
};

// Hugging Face's RepetitionPenaltyLogitsProcessor on one row: for every distinct id in
// seen, logits[id] / r if it is > 0, else logits[id] * r. r == 1 changes nothing.
// Throws ds::Error for an id outside [0, vocab) or r <= 0 or not finite.
void apply_repetition_penalty(float* logits, int vocab, std::span<const int> seen, float r);

// The candidate table of one step; every vector has vocab entries.
struct SampleResult {
  std::vector<float> p_raw;      // softmax(logits)
  std::vector<float> p_rep;      // softmax(logits after the repetition penalty); empty when it is off
  std::vector<float> p_temp;     // softmax(logits / T); for T == 0: one-hot on the argmax
  std::vector<float> p_topk;     // after top-k, renormalised (== p_temp when off)
  std::vector<float> p_final;    // after top-p on p_topk, renormalised: the distribution drawn from
  std::vector<uint8_t> removed;  // 0 kept, 1 removed by top-k, 2 removed by top-p
  std::vector<int> order;        // kept ids sorted by p_final descending (ties: lower id first)
  int token = -1;
  bool greedy = false;  // T == 0: argmax, no random draw
  double u = -1;        // the uniform number drawn, in [0,1); -1 when greedy
  int n_kept = 0;       // == order.size()
  // The sampler's bookkeeping: the id of the one-hot p_temp, p_topk and p_final that a
  // greedy step left (zero elsewhere, nothing removed), so that the next greedy step
  // moves three entries instead of rewriting three rows of vocab floats; -1 otherwise.
  int one_hot = -1;
};

// Values of SampleResult::removed.
inline constexpr uint8_t kKept = 0;
inline constexpr uint8_t kRemovedTopK = 1;
inline constexpr uint8_t kRemovedTopP = 2;

// Throws ds::Error naming the option if c is invalid (temperature < 0 or NaN, top_k < 0,
// top_p outside (0, 1], repetition_penalty <= 0 or not finite, penalty_alpha outside
// [0, 1]).
void validate(const SamplerConfig& c);

// The m most probable of the ids ids[0..n) (nullptr: 0..n-1) by p (ties: the lower id
// first), most probable first, into best[0..m), 0 < m <= n, with heap[0..m) as
// scratch. p is a distribution: no NaN, no negative values. One pass, which over every
// id mostly compares 16 values of p at a time with the m-th best so far.
void best_ids(const float* p, const int* ids, int n, int m, int* best, uint64_t* heap);
// Where id stands in that order over all of p[0..n): how many ids have a higher p, or
// the same p and a lower id.
int rank_of(const float* p, int n, int id);

class Sampler {
 public:
  explicit Sampler(SamplerConfig c = {});

  const SamplerConfig& config() const { return cfg_; }
  // Validates c; keeps the RNG state unless c.seed differs from the current seed.
  void set_config(SamplerConfig c);
  // Restarts the RNG from seed (and records it in the config).
  void reseed(uint64_t seed);

  // Fills out (reusing its buffers: no heap allocation once they are sized for this
  // vocab) and returns the sampled token. Throws ds::Error on empty or NaN logits.
  // Greedy (T == 0): token = argmax(logits), p_temp = p_topk = p_final = one-hot,
  // nothing marked removed, order = {the argmax}, n_kept = 1, no RNG draw.
  // The draw walks order accumulating p_final; if rounding leaves the sum below u,
  // the last kept token with nonzero p_final is taken.
  // +inf logits share the mass equally; -inf logits get probability 0.
  // seen: the sequence so far (prompt and generated), which the repetition penalty
  // reads; ids outside the vocabulary throw ds::Error when the penalty is on.
  int sample(const float* logits, int vocab, SampleResult& out, std::span<const int> seen = {});
  // The same distribution without drawing: out as sample() fills it, with the RNG left
  // as it was (token: the most probable kept token). For showing what settings would
  // do to a step before drawing with them.
  void shape(const float* logits, int vocab, SampleResult& out, std::span<const int> seen = {});

  Rng& rng() { return rng_; }
  const Rng& rng() const { return rng_; }

  // Threads for the passes over the vocabulary (the exponentials and the normalising of
  // every softmax): a team that sits idle while the sampler runs, such as the engine's
  // (not owned; nullptr, the default: the calling thread only). The vocabulary is cut
  // into the same pieces either way, so every result has the same bits with or
  // without a team.
  void set_team(ThreadTeam* team) { team_ = team; }

 private:
  // Vocabularies from this size on use the team.
  static constexpr int kParallelMin = 16384;
  template <class F>
  void over_chunks(int n, F&& body) const;
  double weights(const float* x, int n, float xmax, double T, double* w) const;
  // max_and_nan (perf/vmath.h) piece by piece, across the team; each piece's maximum is
  // kept for first_max, the first i with x[i] == xmax for the x and xmax of the last
  // max_nan (searching only the first piece that holds it).
  float max_nan(const float* x, int n, bool* nan);
  int first_max(const float* x, int n, float xmax) const;
  void normalise(const double* w, int n, double sum, float* p) const;
  int prepare(int vocab, SampleResult& out);
  const float* penalise(const float* logits, int vocab, std::span<const int> seen, SampleResult& out, float& xmax);
  int filter(const float* logits, int vocab, SampleResult& out, std::span<const int> seen, bool draw_token);
  int greedy(const float* logits, int vocab, float xmax, int hot, SampleResult& out);
  void top_k(int vocab, int k, SampleResult& out);
  int top_p_prefix(const int* cand, int n_cand, SampleResult& out);
  void top_p(const int* cand, int n_cand, int vocab, SampleResult& out);
  int draw(SampleResult& out);
  // Sorts ids[0..n) by p descending, ties lower id first.
  void rank(int* ids, int n, const float* p);
  // Writes the best m of ids[0..n) (nullptr: 0..n-1) by p to dst[0..m).
  void select_best(const int* ids, int n, int m, const float* p, int* dst);

  SamplerConfig cfg_;
  Rng rng_;
  std::vector<double> w_;                               // unnormalised weights exp((x - max) / T)
  std::vector<int> idx_;                                // ids kept by top-k
  std::vector<int> sel_;                                // top-p candidates, ranked
  std::vector<uint64_t> keys_, keys2_;                  // packed sort keys (selection, radix sort)
  static constexpr int kRadixBits = 11;                 // the radix sort's digit
  std::vector<std::array<int, 1 << kRadixBits>> hist_;  // its counts, a digit each
  std::vector<float> pen_;                              // logits after the repetition penalty
  std::vector<uint8_t> seen_;                           // scratch: ids already penalised
  ThreadTeam* team_ = nullptr;
  std::array<float, 8> piece_max_{};  // max_nan's pieces' maxima (kChunks pieces)
};

// First index of the maximum of x[0..n) (llama2.c's run.c rule: strictly greater
// replaces). Throws ds::Error if n <= 0.
int argmax(const float* x, int n);

}  // namespace ds
