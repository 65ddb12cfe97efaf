// Tests of the sampler (core/sample): RNG determinism, temperature, top-k, top-p, the
// draw, and a chi-square goodness-of-fit test of the drawn frequencies. Expected
// values are computed independently here (double softmax, full std::sort, brute-force
// prefix search) rather than read back from the sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "perf/team.h"
#include "sample/rng.h"
#include "sample/sampler.h"
#include "util/error.h"

namespace {

using ds::Rng;
using ds::Sampler;
using ds::SamplerConfig;
using ds::SampleResult;

// Logits from a test-side generator; levels > 0 quantises them to that many distinct
// values so that ties are common.
std::vector<float> make_logits(int n, uint64_t seed, float scale = 6.0f, int levels = 0) {
  Rng r(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    double u = r.uniform();
    if (levels > 0) u = std::floor(u * levels) / levels;
    v = static_cast<float>((u - 0.5) * 2.0 * scale);
  }
  return x;
}

// softmax(x / T) in long double, straight from the definition.
std::vector<double> softmax_ref(const std::vector<float>& x, double T) {
  long double m = -std::numeric_limits<long double>::infinity();
  for (float v : x) m = std::max<long double>(m, v);
  std::vector<long double> e(x.size());
  long double s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e[i] = std::exp((static_cast<long double>(x[i]) - m) / T);
    s += e[i];
  }
  std::vector<double> p(x.size());
  for (size_t i = 0; i < x.size(); ++i) p[i] = static_cast<double>(e[i] / s);
  return p;
}

// Ids sorted by q descending, ties lower id first (full sort).
std::vector<int> ranked(const std::vector<double>& q, const std::vector<int>& ids) {
  std::vector<int> r = ids;
  std::sort(r.begin(), r.end(), [&](int a, int b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
  return r;
}

struct Expected {
  std::vector<double> p_topk, p_final;
  std::vector<int> kept_k;  // ids kept by top-k
  std::vector<int> kept;    // ids kept after top-p
};

void renormalise(std::vector<double>& q, const std::vector<int>& kept) {
  std::vector<double> r(q.size(), 0.0);
  double s = 0;
  for (int id : kept) s += q[id];
  for (int id : kept) r[id] = q[id] / s;
  q = r;
}

// The whole filter pipeline by brute force (T > 0).
Expected reference(const std::vector<float>& x, const SamplerConfig& c) {
  const int n = static_cast<int>(x.size());
  std::vector<double> q = softmax_ref(x, c.temperature);
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  Expected e;
  std::vector<int> r = ranked(q, all);
  if (c.top_k > 0 && c.top_k < n) r.resize(static_cast<size_t>(c.top_k));
  e.kept_k = r;
  renormalise(q, r);
  e.p_topk = q;
  if (c.top_p < 1.0f) {
    std::vector<int> r2 = ranked(q, r);
    double cum = 0;
    size_t m = 0;
    while (m < r2.size()) {
      cum += q[r2[m++]];
      if (cum >= c.top_p) break;
    }
    r2.resize(m);
    r = r2;
    renormalise(q, r);
  }
  e.p_final = q;
  std::sort(r.begin(), r.end());
  e.kept = r;
  std::sort(e.kept_k.begin(), e.kept_k.end());
  return e;
}

std::vector<int> kept_ids(const SampleResult& s) {
  std::vector<int> k;
  for (size_t i = 0; i < s.removed.size(); ++i)
    if (s.removed[i] == ds::kKept) k.push_back(static_cast<int>(i));
  return k;
}

double sum(const std::vector<float>& v) {
  double s = 0;
  for (float f : v) s += f;
  return s;
}

// Walks order accumulating p_final: the first whose cumulative sum exceeds u.
int walk(const SampleResult& s) {
  double cum = 0;
  int last = -1;
  for (int id : s.order) {
    if (s.p_final[static_cast<size_t>(id)] > 0) last = id;
    cum += s.p_final[static_cast<size_t>(id)];
    if (cum > s.u) return id;
  }
  return last;
}

// ---------------------------------------------------------------- RNG

TEST(Rng, KnownAnswers) {
  // splitmix64 from state 0: the published reference sequence starts 0xe220a8397b1dcdaf.
  uint64_t st = 0;
  EXPECT_EQ(ds::splitmix64(st), 0xe220a8397b1dcdafull);
  EXPECT_EQ(ds::splitmix64(st), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(ds::splitmix64(st), 0x06c45d188009454full);
  // xoshiro256** seeded by four splitmix64 outputs; values from an independent
  // arbitrary-precision (Python) implementation, so every platform must agree.
  Rng r0(0);
  EXPECT_EQ(r0.next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(r0.next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(r0.next(), 0x1a5f849d4933e6e0ull);
  EXPECT_EQ(r0.next(), 0x6aa594f1262d2d2cull);
  Rng r42(42);
  EXPECT_EQ(r42.next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r42.next(), 0x6104d9866d113a7eull);
}

TEST(Rng, UniformIsTop53BitsInUnitInterval) {
  Rng a(7), b(7);
  double mean = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = a.uniform();
    const uint64_t bits = b.next();
    EXPECT_EQ(u, std::ldexp(static_cast<double>(bits >> 11), -53));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u;
  }
  mean /= n;
  // Standard error of the mean of U(0,1) over 1e5 draws is 0.00091; allow 5 sigma.
  EXPECT_NEAR(mean, 0.5, 0.0046);
}

// ---------------------------------------------------------------- determinism

std::vector<int> draw_sequence(uint64_t seed, int steps) {
  SamplerConfig c;
  c.temperature = 0.9f;
  c.top_k = 30;
  c.top_p = 0.95f;
  c.seed = seed;
  Sampler s(c);
  SampleResult out;
  std::vector<int> toks;
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> x = make_logits(100, 1000 + static_cast<uint64_t>(t), 3.0f);
    toks.push_back(s.sample(x.data(), 100, out));
  }
  return toks;
}

TEST(Sampler, FixedSeedRepeatsSequence) {
  const std::vector<int> a = draw_sequence(1234, 1000);
  const std::vector<int> b = draw_sequence(1234, 1000);
  const std::vector<int> c = draw_sequence(1235, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 900);  // different seeds give largely different draws
}

TEST(Sampler, SetConfigKeepsRngUnlessSeedChanges) {
  Sampler s(SamplerConfig{1.0f, 0, 1.0f, 5});
  const std::vector<float> x = make_logits(50, 3);
  SampleResult out;
  for (int i = 0; i < 10; ++i) s.sample(x.data(), 50, out);
  const Rng before = s.rng();
  s.set_config(SamplerConfig{0.5f, 10, 0.8f, 5});
  EXPECT_TRUE(s.rng() == before);
  EXPECT_EQ(s.config().top_k, 10);
  s.set_config(SamplerConfig{0.5f, 10, 0.8f, 6});
  EXPECT_TRUE(s.rng() == Rng(6));
  s.sample(x.data(), 50, out);
  s.reseed(6);
  EXPECT_TRUE(s.rng() == Rng(6));
  EXPECT_EQ(s.config().seed, 6u);
}

// ---------------------------------------------------------------- top-k

TEST(Sampler, TopKLeavesExactlyKWithTies) {
  // Many equal logits: ties must be broken by lower id so that exactly k remain.
  const std::vector<float> x = {1, 3, 3, 2, 3, 0, 2, 5, 5, 1, 3, -1, 5, 2, 2, 0};
  const int n = static_cast<int>(x.size());
  for (int k : {1, 2, 3, 4, 5, 6, 7, 9, 12, n - 1, n, n + 5, 0}) {
    SamplerConfig c;
    c.top_k = k;
    c.seed = static_cast<uint64_t>(k);
    Sampler s(c);
    SampleResult out;
    s.sample(x.data(), n, out);
    const int expect = (k == 0 || k >= n) ? n : k;
    int kept = 0, nonzero = 0;
    for (int i = 0; i < n; ++i) {
      kept += out.removed[i] == ds::kKept;
      nonzero += out.p_final[i] != 0.0f;
      EXPECT_TRUE(out.removed[i] == ds::kKept || out.removed[i] == ds::kRemovedTopK);
    }
    EXPECT_EQ(kept, expect) << "k=" << k;
    EXPECT_EQ(nonzero, expect) << "k=" << k;
    EXPECT_EQ(out.n_kept, expect);
    EXPECT_EQ(kept_ids(out), reference(x, c).kept_k) << "k=" << k;
    EXPECT_EQ(out.removed[out.token], ds::kKept);
  }
}

TEST(Sampler, TopKLargeVocabMatchesFullSort) {
  const int n = 50257;
  const std::vector<float> x = make_logits(n, 77, 8.0f, 200);  // heavy ties
  for (int k : {1, 40, 1000, 20000}) {
    SamplerConfig c;
    c.temperature = 0.8f;
    c.top_k = k;
    Sampler s(c);
    SampleResult out;
    s.sample(x.data(), n, out);
    const Expected e = reference(x, c);
    EXPECT_EQ(kept_ids(out), e.kept_k) << "k=" << k;
    EXPECT_EQ(out.n_kept, k);
    for (int i = 0; i < n; ++i) ASSERT_NEAR(out.p_topk[i], e.p_topk[i], 1e-6) << "k=" << k << " i=" << i;
    // order: the kept ids by p_final descending, ties lower id first (full sort here).
    std::vector<int> want = e.kept_k;
    std::sort(want.begin(), want.end(), [&](int a, int b) {
      return out.p_final[a] > out.p_final[b] || (out.p_final[a] == out.p_final[b] && a < b);
    });
    EXPECT_EQ(out.order, want) << "k=" << k;
  }
}

// The candidate table's selection: best_ids and rank_of against a full sort, on
// distributions with many ties and with blocks of 16 that straddle the running
// threshold, over lengths that are and are not multiples of 16.
TEST(Sampler, BestIdsAndRankMatchFullSort) {
  for (int n : {1, 15, 16, 17, 50257}) {
    for (int levels : {0, 7, 300}) {
      std::vector<float> p(static_cast<size_t>(n));
      Rng r(uint64_t(n) * 31 + uint64_t(levels));
      for (float& v : p) {
        double u = r.uniform();
        if (levels > 0) u = std::floor(u * levels) / levels;
        v = static_cast<float>(u * u);  // some exact zeros with levels
      }
      std::vector<int> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      auto before = [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
      std::sort(all.begin(), all.end(), before);
      for (int m : {1, 5, 20, n}) {
        if (m > n) continue;
        std::vector<int> best(static_cast<size_t>(m));
        std::vector<uint64_t> heap(static_cast<size_t>(m));
        ds::best_ids(p.data(), nullptr, n, m, best.data(), heap.data());
        EXPECT_EQ(best, std::vector<int>(all.begin(), all.begin() + m))
            << "n=" << n << " levels=" << levels << " m=" << m;
      }
      for (int at : {0, n / 3, n - 1}) {
        const int id = all[static_cast<size_t>(at)];
        EXPECT_EQ(ds::rank_of(p.data(), n, id), at) << "n=" << n << " levels=" << levels;
      }
    }
  }
}

// ---------------------------------------------------------------- top-p

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  int cases = 0;
  for (int n : {10, 50, 1000, 5000}) {
    for (float scale : {1.0f, 4.0f}) {
      for (int k : {0, 7, 300}) {
        for (float p : {0.05f, 0.3f, 0.5f, 0.9f, 0.99f}) {
          const std::vector<float> x = make_logits(n, static_cast<uint64_t>(n) * 31 + k, scale);
          SamplerConfig c;
          c.temperature = 1.3f;
          c.top_k = k;
          c.top_p = p;
          Sampler s(c);
          SampleResult out;
          s.sample(x.data(), n, out);
          const Expected e = reference(x, c);
          const std::vector<int> kept = kept_ids(out);
          ASSERT_EQ(kept, e.kept) << "n=" << n << " k=" << k << " p=" << p;
          // The defining property on independently computed probabilities.
          double mass = 0, smallest = 1;
          for (int id : kept) {
            mass += e.p_topk[id];
            smallest = std::min(smallest, e.p_topk[id]);
          }
          EXPECT_GE(mass, p);
          EXPECT_LT(mass - smallest, p);
          // Labels: top-k removals are 1, top-p removals are 2.
          for (int i = 0; i < n; ++i) {
            const bool in_k = std::binary_search(e.kept_k.begin(), e.kept_k.end(), i);
            const bool in_p = std::binary_search(e.kept.begin(), e.kept.end(), i);
            const uint8_t want = !in_k ? ds::kRemovedTopK : (!in_p ? ds::kRemovedTopP : ds::kKept);
            ASSERT_EQ(out.removed[i], want);
          }
          for (int i = 0; i < n; ++i) ASSERT_NEAR(out.p_final[i], e.p_final[i], 1e-6);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 2 * 3 * 5);
}

TEST(Sampler, TopPBoundaryIsInclusive) {
  // Four equal logits: p_topk = 0.25 exactly, so two tokens reach top_p = 0.5 exactly
  // and must be enough ("mass >= p"); ties go to the lower ids.
  const std::vector<float> x = {2, 2, 2, 2};
  Sampler s(SamplerConfig{1.0f, 0, 0.5f, 0});
  SampleResult out;
  s.sample(x.data(), 4, out);
  EXPECT_EQ(out.p_topk[0], 0.25f);
  EXPECT_EQ(kept_ids(out), (std::vector<int>{0, 1}));
  EXPECT_EQ(out.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(out.removed[2], ds::kRemovedTopP);
  EXPECT_EQ(out.p_final[1], 0.5f);
}

TEST(Sampler, OrderExactForNearlyEqualLogits) {
  // Logits one float ulp apart: the float probabilities tie in some roundings and not
  // in others, so the order must be settled on p_final itself.
  for (int n : {300, 5000}) {
    std::vector<float> x(static_cast<size_t>(n));
    Rng r(static_cast<uint64_t>(n));
    float v = 1.0f;
    for (float& xi : x) {
      xi = v;
      if (r.uniform() < 0.7) v = std::nextafter(v, 2.0f);
    }
    for (float p : {0.3f, 0.7f}) {
      for (int k : {0, n / 2}) {
        Sampler s(SamplerConfig{3.0f, k, p, 0});  // T = 3: weights 4e-8 apart, ties common
        SampleResult out;
        s.sample(x.data(), n, out);
        std::vector<int> want = kept_ids(out);
        std::sort(want.begin(), want.end(), [&](int a, int b) {
          return out.p_final[a] > out.p_final[b] || (out.p_final[a] == out.p_final[b] && a < b);
        });
        ASSERT_EQ(out.order, want) << "n=" << n << " p=" << p << " k=" << k;
      }
    }
  }
}

TEST(Sampler, TopPAlwaysKeepsOne) {
  const std::vector<float> x = {0, 10, 1, 2};
  SamplerConfig c;
  c.top_p = 1e-6f;
  Sampler s(c);
  SampleResult out;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(x.data(), 4, out), 1);
  EXPECT_EQ(out.n_kept, 1);
  EXPECT_FLOAT_EQ(out.p_final[1], 1.0f);
}

// ---------------------------------------------------------------- temperature

TEST(Sampler, TinyTemperatureDrawsArgmax) {
  std::vector<float> x = make_logits(300, 9, 2.0f);
  x[123] = 2.5f;  // unique maximum
  x[7] = 2.49f;   // close runner-up: exp(-0.01 / 1e-4) = exp(-100)
  SamplerConfig c;
  c.temperature = 1e-4f;
  c.seed = 99;
  Sampler s(c);
  SampleResult out;
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.sample(x.data(), 300, out), 123);
  EXPECT_FALSE(out.greedy);
  EXPECT_GE(out.u, 0.0);
  EXPECT_FLOAT_EQ(out.p_temp[123], 1.0f);
}

TEST(Sampler, ZeroTemperatureIsGreedyFirstIndexWins) {
  const std::vector<float> x = {1, 5, 2, 5, -3, 5, 0};
  SamplerConfig c;
  c.temperature = 0.0f;
  c.top_k = 2;  // filters are not applied when greedy
  c.top_p = 0.1f;
  Sampler s(c);
  const Rng before = s.rng();
  SampleResult out;
  EXPECT_EQ(s.sample(x.data(), 7, out), 1);
  EXPECT_TRUE(out.greedy);
  EXPECT_EQ(out.token, 1);
  EXPECT_EQ(out.u, -1.0);
  EXPECT_TRUE(s.rng() == before);  // no draw consumed
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(out.removed[i], ds::kKept);
    EXPECT_EQ(out.p_temp[i], i == 1 ? 1.0f : 0.0f);
    EXPECT_EQ(out.p_final[i], i == 1 ? 1.0f : 0.0f);
  }
  const std::vector<double> q = softmax_ref(x, 1.0);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(out.p_raw[i], q[i], 1e-7);
  EXPECT_EQ(out.order, (std::vector<int>{1}));  // only the argmax is kept
  EXPECT_EQ(out.n_kept, 1);
}

TEST(Sampler, ArgmaxFirstIndexOfMaximum) {
  const std::vector<float> x = make_logits(1000, 4, 3.0f, 12);  // ties
  int want = 0;
  for (int i = 1; i < 1000; ++i)
    if (x[i] > x[want]) want = i;
  EXPECT_EQ(ds::argmax(x.data(), 1000), want);
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> y = {ninf, -7, -7, ninf};
  EXPECT_EQ(ds::argmax(y.data(), 4), 1);
  EXPECT_EQ(ds::argmax(y.data(), 1), 0);
  EXPECT_THROW(ds::argmax(y.data(), 0), ds::Error);
}

// ---------------------------------------------------------------- chi-square

TEST(Sampler, ChiSquareMatchesFinalDistribution) {
  // 20 tokens; T = 0.7, top_k = 12, top_p = 0.9 must all act on this row.
  const std::vector<float> x = {0.3f, 1.9f,  -0.4f, 1.2f, 2.1f, 0.0f,  1.5f, -1.0f, 0.8f, 1.7f,
                                0.5f, -0.2f, 1.0f,  2.0f, 0.9f, -0.7f, 1.4f, 0.1f,  1.6f, 0.6f};
  SamplerConfig c;
  c.temperature = 0.7f;
  c.top_k = 12;
  c.top_p = 0.9f;
  c.seed = 20240601;
  const Expected e = reference(x, c);
  const int kept = static_cast<int>(e.kept.size());
  ASSERT_GT(kept, 2);
  ASSERT_LT(kept, 12);  // top-p removed some of the top-k survivors

  Sampler s(c);
  SampleResult out;
  const int draws = 200000;
  std::vector<long> count(20, 0);
  for (int i = 0; i < draws; ++i) {
    const int t = s.sample(x.data(), 20, out);
    ASSERT_EQ(t, walk(out));  // the draw rule, recomputed from u
    ++count[static_cast<size_t>(t)];
  }
  EXPECT_EQ(kept_ids(out), e.kept);
  double chi2 = 0;
  for (int i = 0; i < 20; ++i) {
    if (e.p_final[i] == 0) {
      EXPECT_EQ(count[i], 0) << "removed token " << i << " was drawn";
      continue;
    }
    const double expected = draws * e.p_final[i];
    ASSERT_GE(expected, 5.0);  // the chi-square approximation needs >= 5 per cell
    chi2 += (count[i] - expected) * (count[i] - expected) / expected;
  }
  // Upper 0.999 quantiles of the chi-square distribution for df = 1..20, from the
  // NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.4 (also reproduced
  // by bisection on the regularised incomplete gamma function).
  static const double q999[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588,
                                31.264, 32.909, 34.528, 36.123, 37.697, 39.252, 40.790, 42.312, 43.820, 45.315};
  const int df = kept - 1;
  EXPECT_LT(chi2, q999[df - 1]) << "df=" << df;
}

// ---------------------------------------------------------------- invariants

TEST(Sampler, DistributionsSumToOneAndOrderIsSorted) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows = {make_logits(20, 1), make_logits(3000, 2, 10.0f, 30),
                                          make_logits(50257, 3, 8.0f, 500), make_logits(50257, 4, 2.0f)};
  rows[0][3] = ninf;
  rows[3][100] = ninf;
  const std::vector<SamplerConfig> configs = {{1.0f, 0, 1.0f, 1},     {0.7f, 0, 1.0f, 2},   {1.5f, 40, 1.0f, 3},
                                              {0.8f, 0, 0.9f, 4},     {0.6f, 50, 0.95f, 5}, {0.0f, 0, 1.0f, 6},
                                              {3.0f, 5000, 0.99f, 7}, {1e-3f, 0, 1.0f, 8}};
  for (const auto& x : rows) {
    const int n = static_cast<int>(x.size());
    for (const SamplerConfig& c : configs) {
      Sampler s(c);
      SampleResult out;
      for (int rep = 0; rep < 3; ++rep) {
        const int t = s.sample(x.data(), n, out);
        EXPECT_NEAR(sum(out.p_raw), 1.0, 1e-5);
        EXPECT_NEAR(sum(out.p_temp), 1.0, 1e-5);
        EXPECT_NEAR(sum(out.p_topk), 1.0, 1e-5);
        EXPECT_NEAR(sum(out.p_final), 1.0, 1e-5);
        ASSERT_EQ(out.p_raw.size(), static_cast<size_t>(n));
        ASSERT_EQ(out.removed.size(), static_cast<size_t>(n));
        // order = kept ids sorted by p_final descending, ties lower id, by full sort;
        // greedy keeps only the argmax (the other ids have p_final 0).
        std::vector<int> want = c.temperature > 0 ? kept_ids(out) : std::vector<int>{ds::argmax(x.data(), n)};
        std::sort(want.begin(), want.end(), [&](int a, int b) {
          return out.p_final[a] > out.p_final[b] || (out.p_final[a] == out.p_final[b] && a < b);
        });
        ASSERT_EQ(out.order, want) << "n=" << n << " T=" << c.temperature;
        EXPECT_EQ(out.n_kept, static_cast<int>(want.size()));
        EXPECT_EQ(out.removed[t], ds::kKept);
        EXPECT_GT(out.p_final[t], 0.0f);
        if (c.temperature > 0) {
          EXPECT_EQ(t, walk(out));
          const std::vector<double> q = softmax_ref(x, c.temperature);
          for (int i = 0; i < n; ++i) ASSERT_NEAR(out.p_temp[i], q[i], 1e-6);
        } else {
          EXPECT_EQ(t, ds::argmax(x.data(), n));
        }
      }
    }
  }
}

TEST(Sampler, InfiniteLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1, -inf, inf, 3, inf, -inf};
  Sampler s;
  SampleResult out;
  for (int i = 0; i < 200; ++i) {
    const int t = s.sample(x.data(), 6, out);
    EXPECT_TRUE(t == 2 || t == 4);
  }
  EXPECT_FLOAT_EQ(out.p_final[2], 0.5f);
  EXPECT_FLOAT_EQ(out.p_final[4], 0.5f);
  EXPECT_EQ(out.p_final[1], 0.0f);
  const std::vector<float> all_ninf(5, -inf);
  s.sample(all_ninf.data(), 5, out);
  EXPECT_FLOAT_EQ(out.p_final[0], 0.2f);
}

TEST(Sampler, ReusesBuffers) {
  const int n = 50257;
  const std::vector<float> x = make_logits(n, 11);
  Sampler s;
  SampleResult out;
  s.sample(x.data(), n, out);
  const void* ptrs[] = {out.p_raw.data(),   out.p_temp.data(),  out.p_topk.data(),
                        out.p_final.data(), out.removed.data(), out.order.data()};
  const std::vector<SamplerConfig> configs = {
      {0.7f, 10, 1.0f, 1}, {1.0f, 0, 0.5f, 2}, {0.0f, 0, 1.0f, 3}, {1.2f, 0, 1.0f, 4}};
  for (const SamplerConfig& c : configs) {
    s.set_config(c);
    s.sample(x.data(), n, out);
    const void* now[] = {out.p_raw.data(),   out.p_temp.data(),  out.p_topk.data(),
                         out.p_final.data(), out.removed.data(), out.order.data()};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(ptrs[i], now[i]) << "buffer " << i << " reallocated";
  }
}

// Every table of two results equal, bit for bit.
void expect_same(const SampleResult& a, const SampleResult& b) {
  EXPECT_EQ(a.p_raw, b.p_raw);
  EXPECT_EQ(a.p_rep, b.p_rep);
  EXPECT_EQ(a.p_temp, b.p_temp);
  EXPECT_EQ(a.p_topk, b.p_topk);
  EXPECT_EQ(a.p_final, b.p_final);
  EXPECT_EQ(a.removed, b.removed);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.n_kept, b.n_kept);
  EXPECT_EQ(a.greedy, b.greedy);
  EXPECT_EQ(a.u, b.u);
}

// A result reused across steps (greedy steps move their one-hot rows in place) holds
// exactly what a fresh result would: greedy after greedy with another argmax, greedy
// after sampled steps that cut tokens, sampled after greedy, with and without the
// repetition penalty, and a vocabulary that changes size.
TEST(Sampler, ReusedResultEqualsAFreshOne) {
  struct Step {
    int n;
    uint64_t seed;
    SamplerConfig c;
  };
  const SamplerConfig greedy{0.0f, 0, 1.0f, 1};
  SamplerConfig penalised = greedy;
  penalised.repetition_penalty = 1.5f;
  const std::vector<Step> steps = {{300, 1, greedy},  {300, 2, greedy},
                                   {300, 2, greedy},  {300, 3, {0.8f, 5, 0.9f, 7}},
                                   {300, 4, greedy},  {300, 5, {1.0f, 0, 0.3f, 8}},
                                   {300, 6, greedy},  {300, 7, penalised},
                                   {300, 8, greedy},  {120, 9, greedy},
                                   {120, 10, greedy}, {300, 11, greedy}};
  const std::vector<int> seen = {3, 17, 42};
  Sampler reused_sampler;
  SampleResult reused;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& st = steps[k];
    const std::vector<float> x = make_logits(st.n, st.seed);
    reused_sampler.set_config(st.c);
    Sampler fresh_sampler(st.c);
    fresh_sampler.rng() = reused_sampler.rng();
    SampleResult fresh;
    const int a = reused_sampler.sample(x.data(), st.n, reused, seen);
    const int b = fresh_sampler.sample(x.data(), st.n, fresh, seen);
    ASSERT_EQ(a, b) << "step " << k;
    SCOPED_TRACE("step " + std::to_string(k));
    expect_same(reused, fresh);
  }
}

// The passes over a large vocabulary run on a team when the sampler has one: every
// field of the result has the bits of the sampler without one, for greedy, sampling,
// top-k, top-p and the repetition penalty, and p_raw is the softmax.
TEST(Sampler, TeamGivesTheBitsOfOneThread) {
  const int n = 50021;  // large enough for the team, not a multiple of 16
  SamplerConfig greedy{0.0f, 0, 1.0f, 1};
  SamplerConfig penalised{0.7f, 40, 0.9f, 2};
  penalised.repetition_penalty = 1.3f;
  const std::vector<SamplerConfig> configs = {greedy, {1.0f, 0, 0.95f, 3}, {0.6f, 50, 1.0f, 4}, penalised};
  const std::vector<int> seen = {3, 17, 42, 49999};
  ds::ThreadTeam team(2);
  for (size_t k = 0; k < configs.size(); ++k) {
    const std::vector<float> x = make_logits(n, 100 + k, 9.0f);
    Sampler alone(configs[k]), with_team(configs[k]);
    with_team.set_team(&team);
    SampleResult a, b;
    for (int rep = 0; rep < 2; ++rep) {  // the second reuses the buffers (and a greedy one-hot row)
      ASSERT_EQ(alone.sample(x.data(), n, a, seen), with_team.sample(x.data(), n, b, seen)) << "config " << k;
      SCOPED_TRACE("config " + std::to_string(k));
      expect_same(a, b);
    }
    const std::vector<double> want = softmax_ref(x, 1.0);
    double worst = 0;
    for (int i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(double(b.p_raw[size_t(i)]) - want[size_t(i)]) / want[size_t(i)]);
    EXPECT_LE(worst, 1.5e-7) << "config " << k;  // float rounding of each probability
  }
}

// Greedy's maximum and its first index are found piece by piece (on the team when
// there is one): the token is the naive first argmax wherever the maximum lies, when
// it is repeated in an earlier or a later piece, at the first and last id, and for
// a row of -inf; a NaN anywhere, the last piece included, is an error.
TEST(Sampler, GreedyPiecesFindTheFirstMaximum) {
  const int n = 50021;
  ds::ThreadTeam team(2);
  Sampler with_team(SamplerConfig{0.0f, 0, 1.0f, 1}), alone(SamplerConfig{0.0f, 0, 1.0f, 1});
  with_team.set_team(&team);
  const std::vector<float> base = make_logits(n, 7, 4.0f);
  const float top = *std::max_element(base.begin(), base.end()) + 1.0f;
  const std::vector<std::vector<int>> placements = {{0},          {n - 1},        {31000, 9000}, {9000, 31000},
                                                    {6300, 6301}, {44000, 49990}, {12500},       {n - 1, 0}};
  for (const auto& at : placements) {
    std::vector<float> x = base;
    for (int i : at) x[size_t(i)] = top;
    SampleResult a, b;
    const int want = ds::argmax(x.data(), n);
    EXPECT_EQ(want, *std::min_element(at.begin(), at.end()));
    EXPECT_EQ(with_team.sample(x.data(), n, a), want) << "maximum at " << at.front();
    EXPECT_EQ(alone.sample(x.data(), n, b), want) << "maximum at " << at.front();
  }
  const std::vector<float> none(size_t(n), -std::numeric_limits<float>::infinity());
  SampleResult r;
  EXPECT_EQ(with_team.sample(none.data(), n, r), 0);
  for (int i : {5, 25000, n - 1}) {
    std::vector<float> x = base;
    x[size_t(i)] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THROW(with_team.sample(x.data(), n, r), ds::Error) << "NaN at " << i;
  }
}

// ---------------------------------------------------------------- errors

template <typename F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no ds::Error (expected one naming '" << needle << "')";
  } catch (const ds::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Sampler, InvalidConfigsThrow) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<SamplerConfig, std::string>> bad = {
      {{-0.1f, 0, 1.0f, 0}, "temperature"}, {{nan, 0, 1.0f, 0}, "temperature"}, {{1.0f, -1, 1.0f, 0}, "top_k"},
      {{1.0f, 0, 0.0f, 0}, "top_p"},        {{1.0f, 0, -0.5f, 0}, "top_p"},     {{1.0f, 0, 1.01f, 0}, "top_p"},
      {{1.0f, 0, nan, 0}, "top_p"}};
  for (const auto& item : bad) {
    const SamplerConfig c = item.first;
    const std::string& name = item.second;
    expect_error([&] { Sampler s(c); }, name);
    Sampler s;
    expect_error([&] { s.set_config(c); }, name);
    EXPECT_EQ(s.config().temperature, 1.0f);  // unchanged after a rejected config
    EXPECT_EQ(s.config().top_k, 0);
    EXPECT_EQ(s.config().top_p, 1.0f);
  }
  // Valid edge values.
  EXPECT_NO_THROW(Sampler(SamplerConfig{0.0f, 0, 1.0f, 0}));
  EXPECT_NO_THROW(Sampler(SamplerConfig{1.0f, 100000, 1e-7f, 0}));
}

TEST(Sampler, BadLogitsThrow) {
  Sampler s;
  SampleResult out;
  const std::vector<float> x = {1, 2, std::numeric_limits<float>::quiet_NaN(), 0};
  expect_error([&] { s.sample(x.data(), 4, out); }, "NaN");
  expect_error([&] { s.sample(x.data(), 0, out); }, "logits");
  expect_error([&] { s.sample(nullptr, 4, out); }, "logits");
  s.set_config(SamplerConfig{0.0f, 0, 1.0f, 0});
  expect_error([&] { s.sample(x.data(), 4, out); }, "NaN");  // greedy checks too
}

}  // namespace
