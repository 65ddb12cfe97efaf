#include "engine_link/choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace dsgui {

namespace {

std::string sampling_text(const ds::SamplerConfig& c) {
  char k[24] = "off", p[24] = "off", b[200];
  if (c.top_k > 0) std::snprintf(k, sizeof k, "%d", c.top_k);
  if (c.top_p < 1.0f) std::snprintf(p, sizeof p, "%.2f", c.top_p);
  std::snprintf(b, sizeof b, "sampling (temperature %.2f, top-k %s, top-p %s, seed %llu", c.temperature, k, p,
                (unsigned long long)c.seed);
  return b;
}

}  // namespace

std::string step_method(const ds::SampleRecord& r) {
  char b[200];
  std::string s;
  if (r.chosen && r.chosen->by == "beam search") {
    std::snprintf(b, sizeof b, "beam search (width %d, length penalty %.2f", r.chosen->width, r.chosen->length_penalty);
    return std::string(b) + ")";  // the sampling settings did not choose these tokens
  }
  if (r.chosen) return r.chosen->by + " (token given, not drawn)";
  const ds::SamplerConfig& c = r.config;
  if (c.contrastive) {
    std::snprintf(b, sizeof b, "contrastive search (alpha %.2f, top-k %d", c.penalty_alpha, std::max(1, c.top_k));
    s = b;
  } else if (r.greedy) {
    s = "greedy (temperature 0";
  } else {
    s = sampling_text(c);
  }
  if (c.repetition_penalty != 1.0f) {
    std::snprintf(b, sizeof b, ", repetition penalty %.2f", c.repetition_penalty);
    s += b;
  }
  return s + ")";
}

std::string branch_method(const ds::Trace& t, int from) {
  std::vector<std::string> seen;
  for (size_t s = size_t(std::max(0, from)); s < t.steps.size(); ++s) {
    if (!t.steps[s].sample) continue;
    std::string m = step_method(*t.steps[s].sample);
    if (std::find(seen.begin(), seen.end(), m) == seen.end()) seen.push_back(std::move(m));
  }
  if (seen.empty()) return "no token drawn yet";
  std::string out;
  for (size_t i = 0; i < seen.size(); ++i) out += (i ? "; then " : "") + seen[i];
  return out;
}

std::string choice_text(const ds::SampleRecord& r, const std::string& token) {
  if (!r.chosen) return "";
  const ds::TokenChoice& ch = *r.chosen;
  char b[600];
  if (ch.by != "beam search") {
    std::snprintf(b, sizeof b,
                  "\"%s\" was %s: given to this step, not drawn, so no random number and none of the sampling "
                  "settings chose it. The table shows what the model would have drawn from.",
                  token.c_str(), ch.by == "forced" ? "forced" : ("chosen by " + ch.by).c_str());
    return b;
  }
  std::snprintf(b, sizeof b,
                "\"%s\" was chosen by beam search, not drawn: no random number and no sampling setting chose it. "
                "log p = %.4f (p = %.4f); cumulative log-probability is %.4f, ranked #%d of the step's (hypothesis, "
                "token) pairs, of which beam search keeps the best %d.",
                token.c_str(), ch.logprob, std::exp(ch.logprob), ch.sum, ch.rank + 1, ch.width);
  std::string s = b;
  if (ch.final) {
    std::snprintf(b, sizeof b, " The hypothesis's last token: score = sum / length^%.2f = %.4f.", ch.length_penalty,
                  ch.score);
    s += b;
  }
  return s;
}

}  // namespace dsgui
