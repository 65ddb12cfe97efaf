#include "bench/bandwidth.h"

#include "perf/memory.h"
#include "perf/team.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ds {

namespace {

// Sums n floats with several independent accumulators so the loop is bound by loads.
float sum_floats(const float* p, size_t n) {
#if defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float v[8];
  _mm256_store_ps(v, t);
  float s = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
#else
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) a[k] += p[i + k];
  float s = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
#endif
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

ReadProbe::ReadProbe(int threads, size_t bytes)
    : threads_(std::max(1, threads)),
      n_(std::max<size_t>(bytes / sizeof(float) / 64, 1) * 64),
      team_(std::make_shared<ThreadTeam>(threads_, 0)) {
  // In huge pages from the first touch: the floor is the best rate memory is read at,
  // which is what weights in huge pages (perf/memory.h's HugePageJob, a file's 2 MB
  // folios) are read at; in 4 KB pages the same read is 12-25% slower here.
  buf_ = allocate_weight_block(n_ * sizeof(float), HugePages::AtFirstTouch);
  float* p = static_cast<float*>(buf_.get());
  // First touch by the thread that later reads the part.
  team_->run([&](int t) {
    const auto [b, e] = part(t);
    std::fill(p + b, p + e, 1.0f);
  });
}

// Thread t's part of the buffer: [first, end) in floats, whole 64-float lines.
std::pair<size_t, size_t> ReadProbe::part(int t) const {
  const size_t nt = size_t(threads_), chunk = (n_ / 64 + nt - 1) / nt * 64;
  const size_t b = std::min(n_, chunk * size_t(t));
  return {b, std::min(n_, b + chunk)};
}

double ReadProbe::pass() {
  const float* p = static_cast<const float*>(buf_.get());
  const size_t n = n_;
  std::vector<float> sums(size_t(threads_), 0.0f);
  auto t0 = std::chrono::steady_clock::now();
  // On a team of threads like the engine's (perf/team.h), not OpenMP's, whose threads
  // would spin beside the engine's after each pass; this team's sleep at once.
  team_->run([&](int t) {
    const auto [b, e] = part(t);
    sums[size_t(t)] = sum_floats(p + b, e - b);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float total = 0;
  for (float x : sums) total += x;
  static volatile float sink = 0;
  sink = sink + total;
  rates_.push_back(double(n * sizeof(float)) / s / 1e9);
  return rates_.back();
}

Bandwidth ReadProbe::measure(int reps) {
  reps = std::max(1, reps);
  pass();
  rates_.pop_back();  // a warm-up pass, not a measurement
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) rates.push_back(pass());
  Bandwidth b;
  b.threads = threads_;
  b.bytes = n_ * sizeof(float);
  std::sort(rates.begin(), rates.end());
  b.gb_per_s = rates.back();
  b.median_gb_per_s = rates[rates.size() / 2];
  return b;
}

Bandwidth measure_read_bandwidth(int threads, size_t bytes, int reps) {
  return ReadProbe(threads, bytes).measure(reps);
}

}  // namespace ds
