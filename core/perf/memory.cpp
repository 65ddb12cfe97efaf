#include "perf/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

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
  const size_t len = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, len);
  if (!p) throw Error("cannot allocate " + megabytes(bytes));
  std::memset(p, 0, len);
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace ds
