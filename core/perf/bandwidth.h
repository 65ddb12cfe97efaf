#pragma once
// A STREAM-style read-bandwidth probe: the rate at which `threads` threads can read a
// buffer much larger than the caches. Decoding one token reads every weight once, so
// (weight bytes) / (this rate) is the floor of the time per token.
#include <cstddef>

namespace ds {

struct Bandwidth {
  double gb_per_s = 0;  // best of the repetitions, 1 GB = 1e9 bytes
  double median_gb_per_s = 0;
  size_t bytes = 0;     // buffer size read per repetition
  int threads = 1;
};

// Reads a buffer of `bytes` (default 512 MB, 16 times a 32 MB last-level cache)
// `reps` times after one warm-up pass, each thread summing its own contiguous part.
Bandwidth measure_read_bandwidth(int threads, size_t bytes = size_t(512) << 20, int reps = 7);

}  // namespace ds
