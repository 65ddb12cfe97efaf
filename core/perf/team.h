#pragma once
// A persistent team of threads for the short parallel regions of decoding. A token of
// GPT-2 small is about 49 regions (the products of each layer, the head), each a few
// hundred microseconds at 2 threads, so what a region costs to start and to join is
// paid 49 times a token. The team's threads stay alive between regions: after one they
// spin for a short while on the next region's number (a start then costs a cache line
// going from one core to the other), and only when no region comes do they sleep, so
// an engine left idle costs nothing.
//
// run(f) calls f(t) for t = 0 .. size()-1, t = 0 on the calling thread, and returns
// when every call has returned. One caller at a time (an engine's own thread).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ds {

class ThreadTeam {
 public:
  // spin_us: how long a thread spins waiting for the next region before it sleeps.
  explicit ThreadTeam(int n = 1, int spin_us = kSpinMicroseconds) : spin_us_(spin_us) { resize(n); }
  ~ThreadTeam() { stop(); }
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  // The team's size, the calling thread included (at least 1).
  void resize(int n);
  int size() const { return int(threads_.size()) + 1; }

  template <class F>
  void run(F&& f) {
    if (threads_.empty()) return f(0);
    using Fn = std::remove_reference_t<F>;
    dispatch([](void* ctx, int t) { (*static_cast<Fn*>(ctx))(t); }, const_cast<void*>(static_cast<const void*>(&f)));
  }

  // f(i) for i = 0 .. n-1, in contiguous shares across the team when par.
  template <class F>
  void parallel_for(int n, bool par, F&& f) {
    const int nt = size();
    if (!par || nt <= 1 || n <= 1) {
      for (int i = 0; i < n; ++i) f(i);
      return;
    }
    run([&](int t) {
      for (int i = n * t / nt; i < n * (t + 1) / nt; ++i) f(i);
    });
  }

  // f(i, t) for i = 0 .. n-1, each i taken in order by the next thread t that is free
  // (when par): for pieces of about equal work, where a thread slowed by something else
  // on its core should hold the others up by one piece at most, not by the rest of a
  // contiguous share.
  template <class F>
  void parallel_claim(int n, bool par, F&& f) {
    if (!par || size() <= 1 || n <= 1) {
      for (int i = 0; i < n; ++i) f(i, 0);
      return;
    }
    std::atomic<int> next{0};
    run([&](int t) {
      for (int i = next.fetch_add(1, std::memory_order_relaxed); i < n;
           i = next.fetch_add(1, std::memory_order_relaxed))
        f(i, t);
    });
  }

  // The default spin: longer than the serial work between two products of a token
  // (a norm, a short attention, the sampler), far shorter than a token.
  static constexpr int kSpinMicroseconds = 100;

 private:
  using Job = void (*)(void*, int);
  void dispatch(Job job, void* ctx);
  void worker(int t, uint64_t seen);  // seen: the region number when it started
  void stop();

  int spin_us_;
  std::vector<std::thread> threads_;
  // The current region: its number (counts regions, and the stop), what to call, and
  // how many of the team's threads have not finished it yet.
  alignas(64) std::atomic<uint64_t> epoch_{0};
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  bool quit_ = false;
  alignas(64) std::atomic<int> pending_{0};
  // Sleeping: a thread that spun long enough waits on cv_ (sleepers_ counts them, so a
  // region wakes them only when one sleeps).
  alignas(64) std::atomic<int> sleepers_{0};
  std::mutex m_;
  std::condition_variable cv_;
};

}  // namespace ds
