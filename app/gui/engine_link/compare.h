#pragma once
// The Compare view's data: a second run (B) beside the window's own trace (A), made by the
// worker (cmd::Compare, Worker::handle in compare.cpp), and the pure helpers that line the
// two up: the next-token tables of one step side by side with their differences, the
// tokens that differ at each position, the difference of two attention maps, the logit
// lens of one position, and whether two models share a vocabulary.
#include <string>
#include <vector>

#include "engine_link/trace_view.h"
#include "probe/trace.h"
#include "text/tokenizer.h"

namespace dsgui {

// B's run as the worker made it (cmd::Compare).
struct CompareAnswer {
  std::string key;         // the request it answers
  std::string model_name;  // the model B ran on
  ds::Trace trace;         // B's steps (each as the window records its own)
  bool cancelled = false;  // stopped by the user: the steps made so far
  std::string error;       // why there is no run (a refused prompt, another vocabulary); trace empty
  double seconds = 0;
};

// One token of the side-by-side next-token table. A side's table lists only its most
// probable tokens; a token it does not list has a probability at most that side's
// floor (the smallest it lists among its top ones), so its differences are bounds.
struct CompareRow {
  int id = -1;
  std::string text;
  bool in_a = false, in_b = false;   // listed in that side's table
  float pa = 0, pb = 0;              // the probabilities (when listed)
  float floor_a = -1, floor_b = -1;  // the bound for an unlisted token (-1: none known)
};

// The union of both steps' tables, A's order first, then B's tokens A does not list.
// after_settings: the probabilities after temperature, top-k and top-p (p_final); else
// the model's own (p_raw). top: at most this many of each side's tokens.
std::vector<CompareRow> compare_rows(const ds::SampleRecord* a, const ds::SampleRecord* b, bool after_settings,
                                     int top);
// The smallest probability a record's table lists among its most probable tokens (the
// bound for the tokens it leaves out); -1 when no bound holds (the raw probabilities
// under a repetition penalty, whose table is ordered by the penalised ones).
float table_floor(const ds::SampleRecord& r, bool after_settings);

// The difference pa - pb, or the interval it lies in when a side does not list the token:
// lo <= d <= hi (lo == hi when both are known). known false: no bound at all.
struct Diff {
  bool known = false, exact = false;
  double lo = 0, hi = 0;
};
Diff prob_diff(const CompareRow& r);
// log pa - log pb (natural log), the same way; a probability 0 gives -inf or +inf.
Diff logprob_diff(const CompareRow& r);
// "+0.1234", "-3.2e-05", ">= +0.120", "<= -0.051", "?" (digits: significant).
std::string diff_text(const Diff& d, int digits = 3);
// A probability with `digits` significant digits ("0.4213", "3.1e-05", "0").
std::string prob_text(float p, int digits = 4);

// Whether the tokens at each position differ: [max(len a, len b)], true where one side
// has no token there or the ids differ.
std::vector<bool> token_differences(const std::vector<int>& a, const std::vector<int>& b);

// A - B over the cells both maps have (the top-left min(rows) x min(cols)); a cell is
// allowed when it is in both. The range is symmetric: vmin = -vmax, vmax the largest
// |difference| (at least 1e-6).
Matrix difference_map(const Matrix& a, const Matrix& b);

// The lens at one position of a trace: for the embedding and every layer, the most
// probable token, its probability and text. Empty when the trace did not record the lens
// (or has no such position).
struct LensTop1 {
  std::string label;
  int id = -1;
  float p = 0;
  std::string text;
};
std::vector<LensTop1> lens_at(const ds::Trace& t, int pos);

// Why two models cannot be compared token by token ("" when they can): another
// vocabulary size, a tokenizer on one side only, or a token that reads differently (the
// first such id named). name_a, name_b name them in the message.
std::string vocabulary_mismatch(int vocab_a, const ds::Tokenizer* tok_a, const std::string& name_a, int vocab_b,
                                const ds::Tokenizer* tok_b, const std::string& name_b);

}  // namespace dsgui
