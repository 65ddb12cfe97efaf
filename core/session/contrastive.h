#pragma once
// Contrastive search (Su et al. 2022), as Hugging Face's generate(penalty_alpha=A,
// top_k=K) defines it. At each step the K most probable tokens are the candidates;
// for each candidate v the model runs one token further with v appended, and h_v is
// its final hidden state (the output of the final norm, hook point ln_final; the last
// layer's resid_post for a model with no final norm). Then
//   degeneration(v) = max over every position j so far (prompt and generated, the
//                     current one included) of cos(h_v, h_j)
//   score(v)        = (1 - A) * p(v) - A * degeneration(v)
// with p(v) the softmax of the logits (after the repetition penalty), and the token
// is the candidate of highest score (ties: the more probable). A = 0 or K <= 1 is
// greedy. ds::Session runs it (SamplerConfig::contrastive); these are its pieces.
#include <vector>

namespace ds {

// The largest cosine similarity of h [d] with the rows of ctx [rows, d], computed in
// double precision; a zero vector has similarity 0 with everything. rows 0: 0.
double degeneration_penalty(const float* h, const float* ctx, int rows, int d);

// One candidate of a step, in the order the sampler ranked them (most probable first).
struct ContrastiveScore {
  int id = 0;
  double confidence = 0;    // p(v)
  double degeneration = 0;  // degeneration_penalty of its hidden state
  double score = 0;         // (1 - alpha) * confidence - alpha * degeneration
};

// Fills every score from confidence and degeneration and returns the index of the
// chosen candidate: the highest score, the earlier one on a tie. -1 when empty.
int contrastive_choice(std::vector<ContrastiveScore>& c, double alpha);

}  // namespace ds
