#include "perf/memory.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "util/aligned.h"
#include "util/error.h"

namespace ds {

namespace {
std::string megabytes(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MB"; }

// The deleter of a weight block; it also tells advise_huge_pages the mapping's length.
struct Unmap {
  size_t len;
  void operator()(void* q) const { munmap(q, len); }
};
}  // namespace

std::shared_ptr<void> allocate_weight_block(size_t bytes, HugePages when) {
  if (bytes == 0) return nullptr;
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t len = (bytes + kHuge - 1) / kHuge * kHuge;
  // Over-map by one huge page so that a 2 MB-aligned start exists inside, then
  // unmap the slack on both sides.
  void* raw = mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw Error("cannot reserve " + megabytes(bytes) + " of memory");
  const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (r + kHuge - 1) & ~uintptr_t(kHuge - 1);
  if (start > r) munmap(raw, start - r);
  if (r + len + kHuge > start + len) munmap(reinterpret_cast<void*>(start + len), r + len + kHuge - (start + len));
  void* p = reinterpret_cast<void*>(start);
#ifdef MADV_HUGEPAGE
  if (when == HugePages::AtFirstTouch) madvise(p, len, MADV_HUGEPAGE);  // faults in huge pages
#else
  (void)when;
#endif
  return std::shared_ptr<void>(p, Unmap{len});
}

bool advise_huge_pages(const std::shared_ptr<void>& block) {
  const Unmap* u = block ? std::get_deleter<Unmap>(block) : nullptr;
  if (!u) return false;
#ifdef MADV_HUGEPAGE
  return madvise(block.get(), u->len, MADV_HUGEPAGE) == 0;
#else
  return false;
#endif
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack the name
#endif

struct HugePageJob::State {
  std::shared_ptr<const void> keep;  // the block or the mapped file, alive while the job runs
  size_t len = 0;
  std::function<bool(size_t, size_t)> piece;  // handles [at, at + n); false: stop here
  std::function<void()> no_thread;            // what to do instead when no thread can be started
  std::atomic<bool> stop{false};
  std::mutex m;
  std::condition_variable cv;
  bool done = false, hurry = false;  // hurry: wait() is waiting, so no more pauses
  double seconds = 0;
  std::thread thread;

  // 2 MB at a time, each followed by a pause three times as long as it took (at most
  // 20 ms) until someone waits: a quarter of one core, so that on a two-core machine the
  // window's thread and the engine's keep theirs (collapsing at full speed beside the
  // window lengthened its longest frames from 19-25 ms to 50 ms). The thread also runs
  // at a lower priority (nice +10).
  void run() {
#ifdef __linux__
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
#endif
    const auto t0 = std::chrono::steady_clock::now();
    constexpr size_t kPiece = size_t(2) << 20;
    for (size_t at = 0; at < len && !stop.load(std::memory_order_relaxed); at += kPiece) {
      const auto a = std::chrono::steady_clock::now();
      if (!piece(at, std::min(kPiece, len - at))) break;
      const auto pause = std::min<std::chrono::steady_clock::duration>(3 * (std::chrono::steady_clock::now() - a),
                                                                       std::chrono::milliseconds(20));
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, pause, [&] { return hurry || stop.load(std::memory_order_relaxed); });
    }
    std::lock_guard<std::mutex> lock(m);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done = true;
    cv.notify_all();
  }
};

HugePageJob::HugePageJob(std::shared_ptr<void> block) : s_(std::make_shared<State>()) {
  const Unmap* u = block ? std::get_deleter<Unmap>(block) : nullptr;
  s_->len = u ? u->len : 0;
  char* p = static_cast<char*>(block.get());
  s_->piece = [block, p](size_t at, size_t n) {
    if (::madvise(p + at, n, MADV_COLLAPSE) != 0 && (errno == EINVAL || errno == ENOSYS)) {
      advise_huge_pages(block);  // no MADV_COLLAPSE here: leave it to khugepaged
      return false;
    }
    return true;
  };
  s_->no_thread = [block] { advise_huge_pages(block); };
  s_->keep = std::move(block);
  start();
}

namespace {

// Whether the system maps files' 2 MB folios whole for a region advised for huge pages
// (transparent huge pages not "never").
bool file_huge_pages_possible() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  return std::getline(f, s) && s.find("[never]") == std::string::npos;
}

}  // namespace

HugePageJob::HugePageJob(std::shared_ptr<const MappedFile> file) : s_(std::make_shared<State>()) {
  const bool may_gain = file && !file->copied() && file_huge_pages_possible();
  const PageShare at_start = may_gain ? page_share(file->data(), file->size()) : PageShare{};
  if (at_start.resident > 0 && at_start.fraction() < 0.9 && file->claim_reread())
    s_->len = file->size();  // else len 0: skipped
  const MappedFile* f = file.get();
  // With no page of the file in huge pages at the start, stop after 64 MB if that has
  // not changed: this system (file system, memory) gives it no 2 MB folios, and reading
  // it again is no use. (Any huge page at the start shows that it does.)
  s_->piece = [f, none = at_start.huge == 0](size_t at, size_t n) {
    constexpr size_t kCheck = size_t(64) << 20;
    if (!f->reread_piece(at, n)) return false;
    return !none || at + n != kCheck || page_share(f->data(), f->size()).huge > 0;
  };
  s_->keep = std::move(file);
  start();
}

void HugePageJob::start() {
  const char* env = std::getenv("DECODERSCOPE_HUGE_PAGES");  // "off": leave the weights as they are (to compare)
  if (s_->len < (size_t(2) << 20) || (env && std::string(env) == "off")) {
    s_->done = true;
    return;
  }
  State* s = s_.get();
  try {
    s_->thread = std::thread([s] { s->run(); });
  } catch (const std::system_error&) {  // no thread to be had: a block is advised, a file left as it is
    if (s_->no_thread) s_->no_thread();
    s_->done = true;
  }
}

HugePageJob::~HugePageJob() {
  {
    std::lock_guard<std::mutex> lock(s_->m);
    s_->stop.store(true, std::memory_order_relaxed);
  }
  s_->cv.notify_all();
  if (s_->thread.joinable()) s_->thread.join();
}

double HugePageJob::wait() {
  if (!s_->thread.joinable()) return -1;  // skipped from the start
  std::unique_lock<std::mutex> lock(s_->m);
  s_->hurry = true;
  s_->cv.notify_all();
  s_->cv.wait(lock, [&] { return s_->done; });
  return s_->seconds;
}

PageShare page_share(const void* p, size_t bytes) {
  PageShare s;
  std::ifstream f("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = a + bytes;
  bool in = false;
  std::string line;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    size_t kb = 0;
    char key[64];
    // A mapping's first line is "lo-hi perms offset dev inode path"; its fields' lines
    // ("Rss:      1234 kB") never parse as one.
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      in = lo < b && hi > a;
    } else if (in && std::sscanf(line.c_str(), "%63s %zu kB", key, &kb) == 2) {
      const std::string k = key;
      if (k == "Rss:") s.resident += kb << 10;
      if (k == "AnonHugePages:" || k == "FilePmdMapped:" || k == "ShmemPmdMapped:") s.huge += kb << 10;
    }
  }
  return s;
}

bool populate_for_write(void* p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  return a >= b || ::madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_WRITE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

size_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::shared_ptr<void> allocate_aligned(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t len = (bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  void* p = std::aligned_alloc(kCacheLine, len);
  if (!p) throw Error("cannot allocate " + megabytes(bytes));
  std::memset(p, 0, len);
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace ds
