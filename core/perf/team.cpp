#include "perf/team.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DS_PAUSE() _mm_pause()
#else
#define DS_PAUSE() ((void)0)
#endif

namespace ds {

namespace {

using Clock = std::chrono::steady_clock;

// Spins until pred() or the time is up: true when pred() held. The clock is read every
// 64 pauses only.
template <class P>
bool spin_until(P&& pred, Clock::duration limit) {
  const Clock::time_point end = Clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      DS_PAUSE();
    }
    if (Clock::now() >= end) return pred();
  }
}

}  // namespace

void ThreadTeam::resize(int n) {
  n = n < 1 ? 1 : n;
  if (n == size()) return;
  stop();
  quit_ = false;
  const uint64_t now = epoch_.load(std::memory_order_relaxed);
  for (int t = 1; t < n; ++t) threads_.emplace_back([this, t, now] { worker(t, now); });
}

void ThreadTeam::stop() {
  if (threads_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(m_);
    quit_ = true;
    epoch_.fetch_add(1, std::memory_order_seq_cst);
  }
  cv_.notify_all();
  for (std::thread& th : threads_) th.join();
  threads_.clear();
}

void ThreadTeam::dispatch(Job job, void* ctx) {
  job_ = job;
  ctx_ = ctx;
  pending_.store(int(threads_.size()), std::memory_order_relaxed);
  // seq_cst on both sides: either a thread about to sleep sees the new number, or this
  // thread sees it counted among the sleepers and wakes it.
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(m_); }
    cv_.notify_all();
  }
  job(ctx, 0);
  // The others usually finish within microseconds of this thread; if one was asleep,
  // its wake-up can take longer, so the wait yields after a while.
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  while (!spin_until(done, std::chrono::microseconds(kSpinMicroseconds))) std::this_thread::yield();
}

void ThreadTeam::worker(int t, uint64_t seen) {
  for (;;) {
    auto started = [&] { return epoch_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(started, std::chrono::microseconds(spin_us_))) {
      std::unique_lock<std::mutex> lock(m_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = epoch_.load(std::memory_order_acquire);
    if (quit_) return;
    job_(ctx_, t);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace ds
