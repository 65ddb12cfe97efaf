#pragma once
// How the engine's work is spread over threads, kept apart from the math: the model
// code says what to compute ("these matrix-vector products", "these keys of one
// query row") and these primitives decide which thread computes which rows.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "perf/gemv.h"
#include "perf/quant_fast.h"
#include "perf/team.h"
#include "util/aligned.h"

namespace ds {

// The keys thread t of nt takes when one query row's attention over S keys is split:
// [S t / nt, S (t + 1) / nt).
inline std::pair<int, int> key_share(int S, int t, int nt) { return {S * t / nt, S * (t + 1) / nt}; }

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

// Matrix-vector products on a fixed number of threads (a persistent ThreadTeam, which
// the engine's other parallel loops share). The matrices of a group sit one
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
  // The products with quantized and bfloat16 weights (perf/quant_fast.h,
  // perf/bf16_fast.h); Exact by default. With Fast, x is rounded to 8-bit blocks (or to
  // bfloat16) once per run (by the calling thread).
  void set_products(Products p) { products_ = p; }
  Products products() const { return products_; }
  // Whether W's products are the Fast ones: quantized weights, or row-major bfloat16
  // weights where the AVX-512 BF16 kernels run (elsewhere, and in tiles, bfloat16
  // weights keep float32 activations).
  bool fast_products(const MatView& W) const;
  // Every part's product with the same input x, in one parallel region.
  void run(std::span<const MatvecPart> parts, const float* x, const CacheRows* warm = nullptr);
  // Y[t, r] = (W X_t)[r] for the T rows X_t = X + t * W.cols (Y: [T, ldy]) with the
  // Fast products (fast_products(W)): each row rounded once, then the matrix's rows in
  // blocks across the threads, every row of X multiplied with a block while it is in
  // cache.
  void run_fast_rows(const MatView& W, int T, const float* X, float* Y, int64_t ldy);

  // The team's threads, for other work between the products (the sampler's passes).
  ThreadTeam& pool() { return pool_; }

  // f(i) for i = 0 .. n-1, across the threads when par.
  template <class F>
  void parallel_for(int n, bool par, F&& f) {
    pool_.parallel_for(n, par, std::forward<F>(f));
  }
  // f(i, thread) for i = 0 .. n-1, each taken by the next free thread when par.
  template <class F>
  void parallel_claim(int n, bool par, F&& f) {
    pool_.parallel_claim(n, par, std::forward<F>(f));
  }

  // Calls f(thread, j0, j1) for the key ranges of one query row's attention over S
  // keys: one range [0, S) on the calling thread, or one share per thread when split.
  template <class F>
  void over_key_shares(int S, bool split, F&& f) {
    if (!split || threads_ <= 1) return f(0, 0, S);
    pool_.run([&](int t) {
      const auto [j0, j1] = key_share(S, t, threads_);
      f(t, j0, j1);
    });
  }

 private:
  struct RowShare;
  int threads_ = 1;
  ThreadTeam pool_;
  std::unique_ptr<RowShare[]> shares_;  // one per thread
  bool flip_ = false;                   // the shares' order alternates between calls
  Products products_ = Products::Exact;
  void run_fast_bf16(const MatView& W, int T, const float* X, float* Y, int64_t ldy);
  // The current input rounded for each activation block (32, 256), and the rows of
  // run_fast_rows; kept between calls so that a decode step allocates nothing.
  Q8Vector q32_, q256_;
  std::vector<Q8Vector> rows_q_;
  AlignedVector<uint16_t> b16_, rows_b16_;  // the same for bfloat16 weights
};

}  // namespace ds
