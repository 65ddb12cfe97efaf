// The persistent thread team (perf/team.h) that runs decoding's parallel regions, and
// the matrix-vector products on it. Properties: every thread index runs exactly once a
// region, on distinct threads, with the caller as thread 0; regions see each other's
// writes in order; a team left idle long enough to sleep still runs the next region;
// resizing and destroying while idle work; products on 1 to 4 threads equal a double
// loop, region after region.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "perf/parallel.h"
#include "perf/team.h"

namespace {

TEST(ThreadTeam, EveryIndexOnceADistinctThreadCallerFirst) {
  for (int n : {1, 2, 3, 4}) {
    ds::ThreadTeam team(n);
    ASSERT_EQ(team.size(), n);
    for (int region = 0; region < 2000; ++region) {
      std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
      std::vector<std::thread::id> who(static_cast<size_t>(n));
      team.run([&](int t) {
        calls[size_t(t)].fetch_add(1);
        who[size_t(t)] = std::this_thread::get_id();
      });
      for (int t = 0; t < n; ++t) ASSERT_EQ(calls[size_t(t)].load(), 1) << "n " << n << " region " << region;
      ASSERT_EQ(who[0], std::this_thread::get_id());
      ASSERT_EQ(std::set<std::thread::id>(who.begin(), who.end()).size(), size_t(n));
    }
  }
}

TEST(ThreadTeam, RegionsSeeEarlierRegionsWrites) {
  // Each region adds one to every element from a different thread than the last one
  // did; any write lost or reordered across the join shows up in the totals.
  ds::ThreadTeam team(3);
  std::vector<int> v(3000, 0);
  const int regions = 3000;
  for (int r = 0; r < regions; ++r)
    team.run([&](int t) {
      const int part = (t + r) % 3;
      for (int i = part * 1000; i < (part + 1) * 1000; ++i) v[size_t(i)] += 1;
    });
  for (int x : v) ASSERT_EQ(x, regions);
}

TEST(ThreadTeam, WakesAfterSleepingAndResizes) {
  ds::ThreadTeam team(2);
  std::atomic<int> sum{0};
  for (int k = 0; k < 5; ++k) {
    // Longer than the spin: the other thread is asleep when the region comes.
    std::this_thread::sleep_for(std::chrono::microseconds(ds::ThreadTeam::kSpinMicroseconds * 5));
    team.run([&](int t) { sum += t + 1; });
  }
  EXPECT_EQ(sum.load(), 5 * 3);
  team.resize(4);
  sum = 0;
  team.run([&](int t) { sum += t + 1; });
  EXPECT_EQ(sum.load(), 1 + 2 + 3 + 4);
  team.resize(1);
  sum = 0;
  team.run([&](int t) { sum += t + 1; });
  EXPECT_EQ(sum.load(), 1);
}

TEST(ThreadTeam, ATeamThatSleepsAtOnceRunsEveryRegion) {
  ds::ThreadTeam team(3, 0);  // no spin: every region wakes the others
  std::atomic<int> sum{0};
  for (int r = 0; r < 500; ++r) team.run([&](int t) { sum += t + 1; });
  EXPECT_EQ(sum.load(), 500 * 6);
}

TEST(ThreadTeam, ParallelForCoversTheRangeOnce) {
  ds::ThreadTeam team(2);
  for (int n : {0, 1, 2, 3, 7, 12, 100}) {
    std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
    team.parallel_for(n, true, [&](int i) { hit[size_t(i)].fetch_add(1); });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hit[size_t(i)].load(), 1) << n;
  }
}

// Pieces claimed by whichever thread is free: every index once, each on a thread of
// the team that reports its own number (two calls with one number never run at once,
// as a thread's part of a scratch buffer needs), and a thread held up by a long piece
// leaves the rest to the others.
TEST(ThreadTeam, ClaimedPiecesRunOnceOnTheThreadTheyName) {
  for (int size : {1, 2, 3}) {
    ds::ThreadTeam team(size);
    for (int n : {0, 1, 2, 5, 64}) {
      std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
      std::vector<std::atomic<int>> busy(static_cast<size_t>(size));
      std::vector<std::thread::id> who(static_cast<size_t>(size));
      std::atomic<bool> overlap{false}, stranger{false};
      team.parallel_claim(n, true, [&](int i, int t) {
        if (t < 0 || t >= size) {
          stranger = true;
          return;
        }
        if (busy[size_t(t)].fetch_add(1) != 0) overlap = true;
        if (who[size_t(t)] == std::thread::id()) who[size_t(t)] = std::this_thread::get_id();
        if (who[size_t(t)] != std::this_thread::get_id()) overlap = true;
        hit[size_t(i)].fetch_add(1);
        busy[size_t(t)].fetch_sub(1);
      });
      ASSERT_FALSE(stranger) << size << " " << n;
      ASSERT_FALSE(overlap) << size << " " << n;
      for (int i = 0; i < n; ++i) ASSERT_EQ(hit[size_t(i)].load(), 1) << size << " " << n << " " << i;
    }
  }
  // Piece 0 holds its thread until every other piece is done (or 10 s have passed):
  // only the other thread can do them, as it does when the pieces are claimed and not
  // dealt out in contiguous shares.
  ds::ThreadTeam team(2);
  std::vector<int> by(40, -1);
  std::atomic<int> done{0};
  team.parallel_claim(40, true, [&](int i, int t) {
    if (i == 0) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done.load() < 39 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    by[size_t(i)] = t;
    done.fetch_add(1);
  });
  for (int i = 1; i < 40; ++i) ASSERT_NE(by[size_t(i)], by[0]) << i;
}

TEST(MatvecTeam, ProductsOnTheTeamEqualADoubleLoop) {
  std::mt19937 g(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t cols = 96;
  const int64_t rows[3] = {200, 64, 136};  // three matrices in one group, as q/k/v
  std::vector<std::vector<float>> W(3);
  for (int m = 0; m < 3; ++m) {
    W[size_t(m)].resize(size_t(rows[m] * cols));
    for (float& w : W[size_t(m)]) w = d(g);
  }
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = d(g);
  for (int nt = 1; nt <= 4; ++nt) {
    ds::MatvecTeam team;
    team.set_threads(nt);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::vector<float>> y(3);
      ds::MatvecPart parts[3];
      for (int m = 0; m < 3; ++m) {
        y[size_t(m)].assign(size_t(rows[m]), -1.0f);
        parts[m].W = {W[size_t(m)].data(), ds::Precision::F32, rows[m], cols, 0};
        parts[m].y = y[size_t(m)].data();
      }
      team.run({parts, 3}, x.data());
      for (int m = 0; m < 3; ++m)
        for (int64_t r = 0; r < rows[m]; ++r) {
          double want = 0;
          for (int64_t c = 0; c < cols; ++c) want += double(W[size_t(m)][size_t(r * cols + c)]) * x[size_t(c)];
          ASSERT_NEAR(y[size_t(m)][size_t(r)], want, 1e-3) << "threads " << nt << " matrix " << m << " row " << r;
        }
    }
  }
}

}  // namespace
