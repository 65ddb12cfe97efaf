// decoderscope_bench sampler: what a greedy step's sampling and candidate table cost on
// a vocabulary of Llama 3's size, as a session runs them between two forward passes:
// Sampler::sample at temperature 0 on the engine's thread team (the maximum, the
// softmax's exponentials in double precision and its normalising), then the candidate
// table's selection of the most probable ids on the calling thread (best_ids). Before
// each repetition the team's threads read a buffer larger than the caches and then
// each writes its share of the logits, as a step's weights and its head product leave
// the caches and the team.
//   decoderscope_bench sampler [--threads 2] [--vocab 128256] [--candidates 20] [--reps 400]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "perf/team.h"
#include "sample/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int bench_sampler(int argc, char** argv) {
  int threads = 2, vocab = 128256, candidates = 20, reps = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--vocab"))
      vocab = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--candidates"))
      candidates = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1 || vocab < 1 || candidates < 1 || candidates > vocab || reps < 1) {
    std::fprintf(stderr, "sampler: --threads, --vocab, --reps at least 1, --candidates in [1, vocab]\n");
    return 2;
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> source(static_cast<size_t>(vocab)), logits(source.size());
  for (float& v : source) v = dist(gen);
  std::vector<float> flush(size_t(64) << 20 >> 2, 1.0f);  // 64 MB
  std::vector<float> sums(size_t(threads) * 16, 0.0f);
  ds::ThreadTeam team(threads);
  auto forward_like = [&] {
    team.run([&](int t) {
      const size_t part = flush.size() / size_t(threads), b = part * size_t(t);
      float s = 0;
      for (size_t i = b; i < b + part; i += 16) s += flush[i];
      sums[size_t(t) * 16] += s;
      const size_t n = logits.size(), lb = n * size_t(t) / size_t(threads), le = n * size_t(t + 1) / size_t(threads);
      std::copy(source.begin() + long(lb), source.begin() + long(le), logits.begin() + long(lb));
    });
  };
  ds::Sampler sampler(ds::SamplerConfig{0.0f});
  sampler.set_team(&team);
  ds::SampleResult r;
  std::vector<int> best(static_cast<size_t>(candidates));
  std::vector<uint64_t> heap(best.size());
  std::vector<double> t_sample, t_rank;
  for (int k = 0; k < reps; ++k) {
    source[size_t(k) * 7919 % source.size()] += 0.5f;
    forward_like();
    auto t0 = Clock::now();
    sampler.sample(logits.data(), vocab, r);
    t_sample.push_back(us_since(t0));
    t0 = Clock::now();
    ds::best_ids(r.p_raw.data(), nullptr, vocab, candidates, best.data(), heap.data());  // the session's table
    t_rank.push_back(us_since(t0));
  }
  std::printf("vocabulary %d, %d candidates, %d thread(s), %d repetitions (medians)\n", vocab, candidates, threads,
              reps);
  std::printf("greedy sample (maximum, exponentials, normalising)  %.1f us\n", median(t_sample));
  std::printf("candidate table's ranking of p_raw (one thread)     %.1f us\n", median(t_rank));
  std::printf("(flush checksum %g)\n", double(sums[0]));  // keeps the reads
  return 0;
}
