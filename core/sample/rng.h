#pragma once
// A small deterministic random number generator for sampling: xoshiro256** (Blackman
// and Vigna, 2018) seeded through splitmix64. Only fixed-width integer arithmetic is
// used, so the same seed gives the same sequence on every platform and compiler
// (unlike std:: distributions, whose algorithms are implementation-defined).
#include <cstdint>

namespace ds {

// One step of splitmix64: advances state and returns the next output.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  // The four state words are the first four splitmix64 outputs from seed; splitmix64
  // is a bijection of its counter, so they are never all zero in practice.
  explicit Rng(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& w : s_) w = splitmix64(sm);
  }

  // The next 64 random bits (xoshiro256**).
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // A uniform double in [0, 1): the top 53 bits of next() times 2^-53.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  bool operator==(const Rng& o) const {
    return s_[0] == o.s_[0] && s_[1] == o.s_[1] && s_[2] == o.s_[2] && s_[3] == o.s_[3];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace ds
