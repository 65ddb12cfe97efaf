#pragma once
// How the engine's work is spread over threads, kept apart from the math: the model
// code says what to compute ("these matrix-vector products", "these keys of one
// query row") and these primitives decide which thread computes which rows.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "perf/gemv.h"

namespace ds {

// Runs f(0 .. n-1), across nt threads when par. A serial loop never enters OpenMP,
// whose serialised regions allocate.
template <class F>
void parallel_for(int n, int nt, bool par, F&& f) {
  if (!par || nt <= 1) {
    for (int i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int i = 0; i < n; ++i) f(i);
}

// The keys thread t of nt takes when one query row's attention over S keys is split:
// [S t / nt, S (t + 1) / nt).
inline std::pair<int, int> key_share(int S, int t, int nt) { return {S * t / nt, S * (t + 1) / nt}; }

// Calls f(thread, j0, j1) for the key ranges of one query row's attention over S
// keys: one range [0, S) on the calling thread, or one share per thread when split.
template <class F>
void over_key_shares(int S, int nt, bool split, F&& f) {
  if (!split) return f(0, 0, S);
  parallel_for(nt, nt, true, [&](int t) {
    const auto [j0, j1] = key_share(S, t, nt);
    f(t, j0, j1);
  });
}

// One product of a group: y = W x (+ bias), then GELU-tanh when gelu. The bias and
// the activation are applied by whichever thread computed the rows, so they add no
// serial step.
struct MatvecPart {
  MatView W;
  float* y = nullptr;
  const float* bias = nullptr;
  bool gelu = false;
};

// Rows [0, rows) of a layer's cached keys and values ([rows, width] each) that the
// attention after the products reads next: the threads of the products load them
// first (split as the attention splits its keys, or all by the first thread when it
// does not), so the attention finds them in cache instead of waiting on short reads
// from memory.
struct CacheRows {
  const float* K = nullptr;
  const float* V = nullptr;
  int rows = 0, width = 0;
  bool split = false;
};

// Matrix-vector products on a fixed number of threads. The matrices of a group sit one
// after another in the weights' block and the threads split their rows, taken in
// order, into contiguous shares, so each thread reads one sequential stream. A thread
// that finishes its share takes rows from the back of the others' (the owner takes
// rows from the front, in shrinking pieces): at the join at most a few rows of
// waiting instead of the slower thread's lag.
class MatvecTeam {
 public:
  MatvecTeam();
  ~MatvecTeam();
  void set_threads(int n);
  int threads() const { return threads_; }
  // Every part's product with the same input x, in one parallel region.
  void run(std::span<const MatvecPart> parts, const float* x, const CacheRows* warm = nullptr);

 private:
  struct RowShare;
  int threads_ = 1;
  std::unique_ptr<RowShare[]> shares_;  // one per thread
  bool flip_ = false;                   // the shares' order alternates between calls
};

}  // namespace ds
