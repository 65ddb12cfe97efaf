#include "session/contrastive.h"

#include <cmath>

namespace ds {

double degeneration_penalty(const float* h, const float* ctx, int rows, int d) {
  double hh = 0;
  for (int i = 0; i < d; ++i) hh += double(h[i]) * h[i];
  const double hn = std::sqrt(hh);
  double best = 0;
  for (int j = 0; j < rows; ++j) {
    const float* c = ctx + size_t(j) * d;
    double dot = 0, cc = 0;
    for (int i = 0; i < d; ++i) {
      dot += double(h[i]) * c[i];
      cc += double(c[i]) * c[i];
    }
    const double den = hn * std::sqrt(cc);
    const double cos = den > 0 ? dot / den : 0.0;
    if (j == 0 || cos > best) best = cos;
  }
  return best;
}

int contrastive_choice(std::vector<ContrastiveScore>& c, double alpha) {
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i) {
    c[i].score = (1.0 - alpha) * c[i].confidence - alpha * c[i].degeneration;
    if (best < 0 || c[i].score > c[size_t(best)].score) best = int(i);
  }
  return best;
}

}  // namespace ds
