#pragma once
// A STREAM-style read-bandwidth probe: the rate at which `threads` threads can read a
// buffer much larger than the caches. Decoding one token reads every weight once, so
// (weight bytes) / (this rate) is the floor of the time per token.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace ds {

class ThreadTeam;

struct Bandwidth {
  double gb_per_s = 0;  // best of the repetitions, 1 GB = 1e9 bytes
  double median_gb_per_s = 0;
  size_t bytes = 0;  // buffer size read per repetition
  int threads = 1;
};

// A buffer of `bytes` (default 512 MB, 16 times a 32 MB last-level cache), in huge
// pages from its first touch (the best rate memory is read at), kept so that the probe
// can be repeated between other measurements without faulting in fresh memory each time.
// measure() reads it `reps` times after one warm-up pass, each thread summing its own
// contiguous part (256-bit loads, as the decode kernels use).
class ReadProbe {
 public:
  explicit ReadProbe(int threads, size_t bytes = size_t(512) << 20);
  Bandwidth measure(int reps = 7);
  // One pass over the buffer, no warm-up: GB/s (also recorded in rates()).
  double pass();
  // Every pass's rate so far, warm-up passes excepted.
  const std::vector<double>& rates() const { return rates_; }

 private:
  std::pair<size_t, size_t> part(int t) const;
  int threads_;
  size_t n_;  // floats
  std::shared_ptr<ThreadTeam> team_;
  std::shared_ptr<void> buf_;
  std::vector<double> rates_;
};

// One probe: reads a buffer of `bytes` (default 512 MB, 16 times a 32 MB last-level cache)
// `reps` times after one warm-up pass, each thread summing its own contiguous part.
Bandwidth measure_read_bandwidth(int threads, size_t bytes = size_t(512) << 20, int reps = 7);

}  // namespace ds
