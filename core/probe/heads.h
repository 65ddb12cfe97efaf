#pragma once
// The head detector: which decoder self-attention heads act as previous-token,
// duplicate-token and induction heads. It follows TransformerLens's head_detector
// (transformer_lens/head_detector.py, detect_head with error_measure "mul"), measured
// on one probe sequence: random tokens repeated twice.
//
// The probe (head_probe): [BOS when the model has one] + r + r, where r is `half`
// random ids. The ids of one half are distinct while the usable ids last (a random
// permutation of them; a half longer than that takes further permutations), so the
// only repeats are those of the second half. Never used: bos_id, eos_id, pad_id and
// the ids in HeadDetectOptions::avoid (probe_avoid_ids: ids the tokenizer does not
// know or that are special pieces). half 0 picks min(50, (max_seq - BOS) / 2, usable
// ids). With T = the probe's length, every pattern below is [T, T], row i the query
// position, column j the key position, and counts the BOS (TransformerLens's tokens
// include it too).
//
// The detection patterns, exactly as TransformerLens builds them from the tokens t:
//   previous token   P[i][j] = 1 when j == i - 1 (the sub-diagonal; row 0 is empty)
//   duplicate token  D[i][j] = 1 when j < i and t[j] == t[i] (an earlier position
//                    holding the same token; the diagonal is excluded)
//   induction        I[i][j] = D[i][j - 1] for j >= 1, I[i][0] = 0: the duplicate
//                    pattern shifted one column to the right, i.e. the token after an
//                    earlier occurrence of t[i]. Lower-triangular like the others
//                    (torch.tril keeps j <= i), so when t[i - 1] == t[i] the cell
//                    (i, i) is 1: the token after the earlier copy is t[i] itself.
// All three are lower-triangular, 0/1.
//
// The score (detection_score, TransformerLens's "mul" error measure) of an attention
// pattern A [T, T] (post-softmax, every row of a real head sums to 1) and a detection
// pattern X:
//   exclude_bos:           column 0 of A is set to 0 first (whatever token is there:
//                          the BOS when the model has one; TransformerLens does the same)
//   exclude_current_token: the diagonal of A is set to 0 first
//   score = sum_ij A[i][j] X[i][j] / sum_ij A[i][j]     (over every cell, every row)
// the fraction of the head's attention that falls on the cells the pattern names.
// Both options default to false, TransformerLens's defaults. A sum of 0 (everything
// excluded) scores 0 (TransformerLens: NaN).
//
// What the defaults mean on this probe (h = half, T = 1 + 2h with a BOS): the BOS row
// and the first half have no earlier copy to look at, so their rows are empty in D and
// I yet still count in the denominator. A perfect induction head that parks those rows
// on the BOS scores h / (2h + 1) (just under 0.5) by default, and 1 with exclude_bos;
// a perfect previous-token head scores (T - 1) / T by default (row 0 can only attend to
// itself), 1 with exclude_current_token.
//
// Encoder-decoder models: the decoder's self-attention heads (cross-attention is not
// scored). The encoder's source is the probe without its BOS, cut to max_src tokens.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace ds {

// The three kinds of head, the `kind` of HeadRoles::score.
enum HeadKind : int { kPreviousHead = 0, kDuplicateHead = 1, kInductionHead = 2 };
inline constexpr int kHeadKinds = 3;
// "previous", "duplicate", "induction"; throws ds::Error for another kind.
const char* head_kind_name(int kind);

struct HeadDetectOptions {
  int half = 0;                         // random tokens per half; 0: min(50, (max_seq - BOS) / 2, usable ids)
  uint64_t seed = 1;                    // of the random tokens
  bool exclude_bos = false;             // TransformerLens's default
  bool exclude_current_token = false;   // TransformerLens's default
  int threads = 1;                      // the engine's threads (detect_heads with a model)
  Products products = Products::Exact;  // its products with quantized weights (detect_heads with a model)
  std::vector<int> avoid;               // more ids the probe must not use (probe_avoid_ids)
  bool keep_patterns = true;            // false: HeadRoles::patterns stays empty
};

struct HeadRoles {
  int n_layers = 0, n_heads = 0;
  int half = 0;                                       // random tokens per half
  bool bos = false;                                   // the probe starts with the model's BOS
  std::vector<int> probe;                             // the probe sequence: [BOS if the model has one] + r + r
  std::vector<int> source;                            // encoder-decoder models: the encoder's source; else empty
  HeadDetectOptions options;                          // as used (half resolved)
  std::vector<float> previous, duplicate, induction;  // [layer * n_heads + head]
  std::vector<MatRM> patterns;  // [layer * n_heads + head]: each head's attention on the probe [T, T]

  // The score of one kind (HeadKind) of one head; throws ds::Error when out of range.
  float score(int kind, int layer, int head) const;
  // The index layer * n_heads + head of the head with the highest score of a kind (the
  // first on ties), -1 when there are no heads.
  int strongest(int kind) const;
};

// The probe's half when half is 0 (see the top of the file); throws ds::Error when the
// context cannot hold two tokens after the BOS or no id is usable.
int auto_probe_half(const Config& cfg, const std::vector<int>& avoid = {});
// [BOS if the model has one] + r + r with `half` random usable ids r (half 0: the
// automatic one), the same for the same seed on every platform. Throws ds::Error when
// half < 0, the probe would not fit the context, or no id is usable.
std::vector<int> head_probe(const Config& cfg, int half, uint64_t seed, const std::vector<int>& avoid = {});
// The ids a probe should not use for a model whose tokenizer has tokenizer_vocab
// entries and names an id piece(id): ids >= tokenizer_vocab (the tokenizer does not
// know them), ids with an empty piece, and special pieces written "<...>" ("<unk>",
// "<s>", "<|endoftext|>"; byte pieces "<0xHH>" stay usable). Ascending.
std::vector<int> probe_avoid_ids(const Config& cfg, int tokenizer_vocab, const std::function<std::string(int)>& piece);

// The detection patterns of a token sequence, [T, T] (definitions at the top).
MatRM previous_token_detection(const std::vector<int>& tokens);
MatRM duplicate_token_detection(const std::vector<int>& tokens);
MatRM induction_detection(const std::vector<int>& tokens);
// The "mul" score of an attention pattern against a detection pattern (definition at
// the top). Throws ds::Error when they are not square matrices of the same size.
float detection_score(const MatRM& attention, const MatRM& detection, bool exclude_bos, bool exclude_current_token);

// Runs the probe once through a new engine of the model (every decoder layer's
// attn.pattern observed) and scores every head against the three patterns.
HeadRoles detect_heads(const std::shared_ptr<const Model>& m, const HeadDetectOptions& o = {});
// The same on an existing engine, with whatever its hooks already do: observers
// subscribed before the call run first, so an intervention that changes a pattern in
// place is what the detector reads. The engine's cache (and an encoder-decoder's
// source) are replaced by the probe's; its thread setting is kept (o.threads unused).
HeadRoles detect_heads(Engine& e, const HeadDetectOptions& o = {});

}  // namespace ds
