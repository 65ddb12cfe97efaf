#pragma once
// How each token of a trace was chosen, in words, read from the step's own record (never
// from the window's sliders, which may only be previewing): drawn by sampling with its
// settings, greedy, contrastive search, beam search or given (forced). The Branches view
// labels branches with it and the Next token view explains a step with it. No ImGui here.
#include <string>

#include "probe/trace.h"

namespace dsgui {

// The method that chose r's token, with its settings: "sampling (temperature 1.00,
// top-k off, top-p 0.90, seed 0)", "greedy (temperature 0)", "contrastive search (alpha
// 0.60, top-k 4)", "beam search (width 3, length penalty 1.00)", "forced (token given)".
std::string step_method(const ds::SampleRecord& r);

// The methods that chose the tokens of steps [from, end) of t, each named once in the
// order they first chose one, joined by "; then ": a branch's label. "no token drawn
// yet" when those steps drew none.
std::string branch_method(const ds::Trace& t, int from);

// Why a token that was given (r.chosen) came out, with the scores that chose it; "" for
// a token the sampler drew (or greedy or contrastive search chose). token: its text.
std::string choice_text(const ds::SampleRecord& r, const std::string& token);

}  // namespace dsgui
