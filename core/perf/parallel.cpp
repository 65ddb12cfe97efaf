#include "perf/parallel.h"

#include <Eigen/Core>
#include <algorithm>

#include "perf/bf16_fast.h"
#include "perf/quant_tiles.h"
#include "perf/vmath.h"

namespace ds {

// A thread's share of the rows of a product group: [front, back) still to do, packed
// in one word so that the owner (taking rows from the front) and a thread that has
// finished its own share (taking rows from the back) claim disjoint rows.
struct MatvecTeam::RowShare {
  alignas(64) std::atomic<uint64_t> fb{0};
};

namespace {

// Loads n floats (one per cache line) so that they are in this core's cache.
void touch(const float* p, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; i += 16) s += p[i];
  volatile float sink = s;
  (void)sink;
}

// Claims rows of a share: a quarter of what is left (at least 8 rows, in multiples of
// 8), from the front or the back. Shares start on a multiple of 8 rows, and a claim
// from the back ends its piece on one too, so that pieces keep to whole groups of
// matrices in tiles (perf/gemv.h) even when the share's length is not a multiple of
// 8. False when nothing is left.
bool claim_rows(std::atomic<uint64_t>& fb, bool front, int64_t& r0, int64_t& r1) {
  uint64_t cur = fb.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t f = uint32_t(cur >> 32), b = uint32_t(cur);
    if (f >= b) return false;
    uint32_t n = std::min(b - f, std::max<uint32_t>(8, (b - f) / 4 / 8 * 8));
    if (!front && b - n > f) n += (b - n) % 8;  // the new back on a multiple of 8
    const uint64_t next = front ? (uint64_t(f + n) << 32) | b : (uint64_t(f) << 32) | (b - n);
    if (fb.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      r0 = front ? f : b - n;
      r1 = front ? f + n : b;
      return true;
    }
  }
}

bool bf16_fast_for(const MatView& W) { return W.type == Precision::BF16 && W.tile_rows == 0 && bf16_fast_available(); }

// The input of a run rounded for the Fast products (null: Exact products).
struct FastInput {
  const Q8Vector* q32 = nullptr;
  const Q8Vector* q256 = nullptr;
  const uint16_t* b16 = nullptr;
};

// y[r - r0] = (W x)[r] for r0 <= r < r1, by the Fast products when fx says so and W
// has them.
void product(const MatView& W, const float* x, const FastInput* fx, float* y, int64_t r0, int64_t r1) {
  if (fx && is_quantized(W.type))
    gemv_quant_fast(W.data, W.type, W.cols, q8_block_for(W.type) == 32 ? *fx->q32 : *fx->q256, y, r0, r1);
  else if (fx && fx->b16 && bf16_fast_for(W))
    gemv_bf16_fast(static_cast<const uint16_t*>(W.data), W.cols, fx->b16, y, r0, r1);
  else
    W.gemv(x, y, r0, r1);
}

// Rows [g0, g1) of the parts' rows taken one after another.
void part_rows(std::span<const MatvecPart> parts, const float* x, const FastInput* fx, int64_t g0, int64_t g1) {
  int64_t base = 0;
  for (const MatvecPart& p : parts) {
    const int64_t a = std::max(g0, base), b = std::min(g1, base + p.W.rows);
    if (a < b) {
      float* y = p.y + (a - base);
      product(p.W, x, fx, y, a - base, b - base);
      if (p.bias)
        Eigen::Map<Eigen::VectorXf>(y, b - a) += Eigen::Map<const Eigen::VectorXf>(p.bias + (a - base), b - a);
      if (p.gelu) gelu_tanh_inplace(y, b - a);
    }
    base += p.W.rows;
  }
}

// Thread t's part of warming the cache rows the attention reads next.
void warm_cache(const CacheRows& warm, int t, int nt) {
  const auto [j0, j1] = warm.split ? key_share(warm.rows, t, nt) : std::pair<int, int>{0, t == 0 ? warm.rows : 0};
  const size_t a = size_t(j0) * warm.width, n = size_t(j1 - j0) * warm.width;
  touch(warm.K + a, n);
  touch(warm.V + a, n);
}

}  // namespace

MatvecTeam::MatvecTeam() { set_threads(1); }
MatvecTeam::~MatvecTeam() = default;

void MatvecTeam::set_threads(int n) {
  threads_ = std::max(1, n);
  pool_.resize(threads_);
  shares_ = std::make_unique<RowShare[]>(size_t(threads_));
}

void MatvecTeam::run(std::span<const MatvecPart> parts, const float* x, const CacheRows* warm) {
  int64_t R = 0;
  FastInput fast;
  for (const MatvecPart& p : parts) {
    R += p.W.rows;
    if (!fast_products(p.W) || p.W.empty()) continue;
    if (!is_quantized(p.W.type)) {  // bfloat16
      if (!fast.b16) {
        b16_.resize(size_t(p.W.cols));
        round_bf16(x, p.W.cols, b16_.data());
      }
      fast.b16 = b16_.data();
      continue;
    }
    const bool b32 = q8_block_for(p.W.type) == 32;
    Q8Vector& q = b32 ? q32_ : q256_;
    const Q8Vector*& slot = b32 ? fast.q32 : fast.q256;
    if (!slot) {
      quantize_q8(x, p.W.cols, b32 ? 32 : 256, q);
      // gemv_quant_fast then takes the tiles' kernels (K types) or the VNNI rows (Q4_0).
      if ((!b32 || p.W.type == Precision::Q4_0) && quant_tiles_available()) prepare_tiles(p.W.type, q);
    }
    slot = &q;
  }
  const FastInput* fx = fast.q32 || fast.q256 || fast.b16 ? &fast : nullptr;
  const int nt = threads_;
  if (nt <= 1 || R < 64) return part_rows(parts, x, fx, 0, R);
  auto start = [&](int t) { return t == 0 ? int64_t(0) : t == nt ? R : R * t / nt / 8 * 8; };
  for (int t = 0; t < nt; ++t)
    shares_[t].fb.store((uint64_t(0) << 32) | uint64_t(start(t + 1) - start(t)), std::memory_order_relaxed);
  // Every other call the shares go to the threads in reverse order: the thread that
  // read the end of the last product's rows starts on the first rows of this one,
  // which sit right after them in memory (and are already on their way into its cache).
  flip_ = !flip_;
  pool_.run([&](int t) {
    // First the cache rows this thread's attention reads next: the other threads'
    // streaming covers the time, and they take over rows of this thread's share.
    if (warm && warm->rows > 0) warm_cache(*warm, t, nt);
    const int own = flip_ ? nt - 1 - t : t;
    int64_t r0, r1;
    while (claim_rows(shares_[own].fb, true, r0, r1)) part_rows(parts, x, fx, start(own) + r0, start(own) + r1);
    for (int k = 1; k < nt; ++k) {
      const int o = (own + k) % nt;
      while (claim_rows(shares_[o].fb, false, r0, r1)) part_rows(parts, x, fx, start(o) + r0, start(o) + r1);
    }
  });
}

bool MatvecTeam::fast_products(const MatView& W) const {
  return products_ == Products::Fast && (is_quantized(W.type) || bf16_fast_for(W));
}

void MatvecTeam::run_fast_rows(const MatView& W, int T, const float* X, float* Y, int64_t ldy) {
  if (!is_quantized(W.type)) return run_fast_bf16(W, T, X, Y, ldy);
  if (rows_q_.size() < size_t(T)) rows_q_.resize(size_t(T));
  const int block = q8_block_for(W.type);
  pool_.parallel_for(T, threads_ > 1 && T >= 4, [&](int t) {
    quantize_q8(X + int64_t(t) * W.cols, W.cols, block, rows_q_[size_t(t)]);
    prepare_tiles(W.type, rows_q_[size_t(t)]);
  });
  // Blocks of weight rows of about 192 KiB (at least 16 rows), which stay in L2 while
  // every row of X passes over them, 4 or 8 rows at a time (perf/quant_tiles.h): the fewer
  // the blocks, the fewer times X is read again.
  const int64_t kRows = quant_tile_rows(W.type, W.cols, W.rows, threads_);
  const int nblocks = int((W.rows + kRows - 1) / kRows);
  pool_.parallel_claim(nblocks, threads_ > 1, [&](int i, int) {
    const int64_t r0 = i * kRows, r1 = std::min(W.rows, r0 + kRows);
    gemm_quant_fast(W.data, W.type, W.cols, rows_q_.data(), T, Y + r0, ldy, r0, r1);
  });
}

// The bfloat16 rows: rounded once, then pieces of about 192 KiB of weight rows (a
// multiple of 4, at least 8, and at least 4 pieces a thread), every activation row
// passing over a piece while it is in cache.
void MatvecTeam::run_fast_bf16(const MatView& W, int T, const float* X, float* Y, int64_t ldy) {
  rows_b16_.resize(size_t(int64_t(T) * W.cols));
  pool_.parallel_for(T, threads_ > 1 && T >= 4, [&](int t) {
    round_bf16(X + int64_t(t) * W.cols, W.cols, rows_b16_.data() + int64_t(t) * W.cols);
  });
  const int64_t by_bytes = (int64_t(192) << 10) / std::max<int64_t>(1, 2 * W.cols);
  const int64_t kRows = std::max<int64_t>(8, std::min(by_bytes, W.rows / (4 * int64_t(threads_))) / 4 * 4);
  const int nblocks = int((W.rows + kRows - 1) / kRows);
  const auto* w = static_cast<const uint16_t*>(W.data);
  pool_.parallel_claim(nblocks, threads_ > 1, [&](int i, int) {
    const int64_t r0 = i * kRows, r1 = std::min(W.rows, r0 + kRows);
    gemm_bf16_fast(w, W.cols, rows_b16_.data(), T, Y + r0, ldy, r0, r1);
  });
}

}  // namespace ds
