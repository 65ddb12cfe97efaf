// decoderscope_bench team: what starting and joining one parallel region costs, with
// OpenMP's fork and join (what decoding used before) and with the engine's persistent
// ThreadTeam (perf/team.h), in the same run. Each region does a little work per thread
// (a sum over 4 KB of its own), and between regions the calling thread works alone
// for a few microseconds, as between the products of a token (a norm, a residual).
//   decoderscope_bench team [--threads 2] [--regions 200000] [--gap-us 5]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "perf/team.h"

namespace {

using Clock = std::chrono::steady_clock;

// About `us` microseconds of work on the calling thread.
void serial_work(double us) {
  const auto end = Clock::now() + std::chrono::nanoseconds(int64_t(us * 1000));
  while (Clock::now() < end) {
  }
}

float region_work(const std::vector<float>& v, int t) {
  float s = 0;
  for (size_t i = 0; i < 1024; ++i) s += v[size_t(t) * 1024 + i];
  return s;
}

}  // namespace

int bench_team(int argc, char** argv) {
  int threads = 2, regions = 200000;
  double gap = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--regions"))
      regions = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--gap-us"))
      gap = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (threads < 2 || regions < 1) {
    std::fprintf(stderr, "team: --threads must be at least 2 and --regions at least 1\n");
    return 2;
  }
  std::vector<float> v(size_t(threads) * 1024, 1.0f);
  std::vector<float> out(size_t(threads) * 16);
  auto serial_only = [&] {
    const auto t0 = Clock::now();
    for (int r = 0; r < regions; ++r) {
      for (int t = 0; t < threads; ++t) out[size_t(t) * 16] += region_work(v, t);
      serial_work(gap);
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / regions;
  };
  auto openmp = [&] {
    const auto t0 = Clock::now();
    for (int r = 0; r < regions; ++r) {
#pragma omp parallel num_threads(threads)
      out[size_t(omp_get_thread_num()) * 16] += region_work(v, omp_get_thread_num());
      serial_work(gap);
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / regions;
  };
  ds::ThreadTeam team(threads);
  auto persistent = [&] {
    const auto t0 = Clock::now();
    for (int r = 0; r < regions; ++r) {
      team.run([&](int t) { out[size_t(t) * 16] += region_work(v, t); });
      serial_work(gap);
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / regions;
  };
  openmp();  // warm-up: OpenMP's threads started
  persistent();
  double s = serial_only(), o = 0, p = 0;
  for (int k = 0; k < 3; ++k) {  // alternating
    o += openmp() / 3;
    p += persistent() / 3;
  }
  std::printf("threads %d, %d regions, %.1f us of serial work between regions\n", threads, regions, gap);
  std::printf("one region + gap, all on one thread   %.2f us\n", s);
  std::printf("OpenMP fork and join                  %.2f us  (%.2f us over the serial loop)\n", o, o - s);
  std::printf("persistent ThreadTeam                 %.2f us  (%.2f us over the serial loop)\n", p, p - s);
  std::printf("OpenMP / team, per region             %.2f\n", o / p);
  return 0;
}
