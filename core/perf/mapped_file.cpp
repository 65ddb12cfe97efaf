#include "perf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <vector>

#include "perf/memory.h"
#include "util/error.h"

namespace ds {

namespace {

// The mappings the SIGBUS handler watches: a fixed table, so that the handler reads
// it without locks or allocation. A slot is in use while begin is nonzero.
struct Watched {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> cut{false};  // a read met a page past the file's end
};
constexpr int kSlots = 64;
Watched g_watched[kSlots];
std::mutex g_slots_mu;  // taken to claim or free a slot, never by the handler
struct sigaction g_previous {};
uintptr_t g_page = 4096;

// A read of a watched mapping past its file's end: the page becomes a page of zeros
// (an anonymous mapping in its place, made with the raw system call, which is safe in
// a signal handler), the mapping is marked, and the read is retried and sees zeros.
// Any other SIGBUS goes to the handler that was there before, or, for the default
// action, is raised again with it restored.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Watched& w : g_watched) {
    const uintptr_t b = w.begin.load(std::memory_order_acquire), e = w.end.load(std::memory_order_acquire);
    if (b == 0 || a < b || a >= e) continue;
    const long r = ::syscall(SYS_mmap, a & ~(g_page - 1), g_page, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r != -1) {
      w.cut.store(true, std::memory_order_release);
      return;
    }
  }
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    ::signal(sig, SIG_DFL);  // the faulting read runs again and ends the process as it would have
  }
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

int watch(uintptr_t begin, uintptr_t end) {
  install_handler();
  const std::lock_guard<std::mutex> lock(g_slots_mu);
  for (int i = 0; i < kSlots; ++i) {
    Watched& w = g_watched[i];
    if (w.begin.load(std::memory_order_relaxed) != 0) continue;
    w.cut.store(false, std::memory_order_relaxed);
    w.end.store(end, std::memory_order_relaxed);
    w.begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;  // all in use: this mapping goes unwatched
}

void unwatch(int slot) {
  if (slot < 0) return;
  const std::lock_guard<std::mutex> lock(g_slots_mu);
  g_watched[slot].begin.store(0, std::memory_order_release);
  g_watched[slot].end.store(0, std::memory_order_release);
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::map(int fd, size_t bytes, const std::string& path) {
  if (bytes == 0) throw Error(path + ": cannot map an empty file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(path + ": cannot map (" + std::strerror(errno) + ")");
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->bytes_ = bytes;
  m->size_at_map_ = static_cast<int64_t>(st.st_size);
  m->mtime_sec_ = static_cast<int64_t>(st.st_mtim.tv_sec);
  m->mtime_nsec_ = static_cast<int64_t>(st.st_mtim.tv_nsec);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  m->mapped_ = (bytes + page - 1) / page * page;
  // A 2 MB-aligned start, so that where the page cache holds the file in 2 MB folios
  // the kernel can map them whole: reserve with room to spare, then map the file over
  // the aligned part and give back the rest.
  constexpr size_t kHuge = size_t(2) << 20;
  void* reserve = ::mmap(nullptr, m->mapped_ + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED)
    throw Error(path + ": cannot map " + std::to_string(bytes >> 20) + " MB (" + std::strerror(errno) + ")");
  const uintptr_t r = reinterpret_cast<uintptr_t>(reserve);
  const uintptr_t start = (r + kHuge - 1) & ~uintptr_t(kHuge - 1);
  void* p = ::mmap(reinterpret_cast<void*>(start), m->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::munmap(reserve, m->mapped_ + kHuge);
    throw Error(path + ": cannot map (" + std::strerror(err) + ")");
  }
#ifdef MADV_HUGEPAGE
  // Pages the cache does not hold yet are then read ahead in 2 MB folios and mapped
  // whole (Linux 6.x, filesystems with large folios such as ext4 and xfs); what the
  // cache already holds keeps the folios it has. Decoding reads huge pages 12-25%
  // faster (perf/memory.h).
  ::madvise(p, m->mapped_, MADV_HUGEPAGE);
#endif
  if (start > r) ::munmap(reserve, start - r);
  if (r + kHuge > start) ::munmap(reinterpret_cast<void*>(start + m->mapped_), r + kHuge - start);
  m->data_ = static_cast<const char*>(p);
  m->fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  m->slot_ = watch(start, start + m->mapped_);
  return m;
}

std::shared_ptr<const MappedFile> MappedFile::copy(int fd, size_t bytes, const std::string& path) {
  if (bytes == 0) throw Error(path + ": cannot read an empty file");
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->bytes_ = bytes;
  m->copied_ = true;
  // Huge pages from the first touch: in 4 KB pages the reads took 5-8 times as long
  // here (one fault per page), and decoding from them stalled as the file's 4 KB pages
  // do (README, "Huge pages").
  try {
    m->copy_ = allocate_weight_block(bytes, HugePages::AtFirstTouch);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what() + " to read the file into");
  }
  char* p = static_cast<char*>(m->copy_.get());
  m->data_ = p;
  constexpr size_t kPiece = size_t(8) << 20;
  for (size_t at = 0; at < bytes;) {
    const ssize_t n = ::pread(fd, p + at, std::min(kPiece, bytes - at), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(path + ": cannot read the file into memory at byte " + std::to_string(at) + " (" +
                  (n < 0 ? std::strerror(errno) : "it ends there") + ")");
    at += size_t(n);
  }
  return m;
}

namespace {

// Whether every page of [p, p + n) that is present is the file's (pagemap bit 61), none
// a private copy or an anonymous page.
bool only_file_pages(const char* p, size_t n) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t page = 4096, first = reinterpret_cast<uintptr_t>(p) / page, count = (n + page - 1) / page;
  std::vector<uint64_t> e(count);
  const ssize_t want = static_cast<ssize_t>(count * sizeof(uint64_t));
  const bool read = ::pread(fd, e.data(), size_t(want), static_cast<off_t>(first * sizeof(uint64_t))) == want;
  ::close(fd);
  if (!read) return false;
  for (uint64_t x : e)
    if ((x >> 63 & 1) && !(x >> 61 & 1)) return false;
  return true;
}

}  // namespace

bool MappedFile::reread_piece(size_t at, size_t n) const {
  if (copied_ || fd_ < 0 || at >= mapped_) return false;
  n = std::min(n, mapped_ - at);
  char* p = const_cast<char*>(data_) + at;
  if (!only_file_pages(p, n)) return true;  // leave it: nothing to gain is worth a changed value
  if (::madvise(p, n, MADV_DONTNEED) != 0) return false;
  (void)::posix_fadvise(fd_, static_cast<off_t>(at), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
#ifdef MADV_POPULATE_READ
  if (::madvise(p, n, MADV_POPULATE_READ) == 0) return true;
  if (errno != EINVAL) return false;  // EFAULT: the file no longer reaches this far
#endif
  // No MADV_POPULATE_READ (Linux before 5.14): fault the piece in by reading it, unless
  // the file has been cut short meanwhile (the SIGBUS handler would put zeros in).
  if (!intact()) return false;
  volatile char sink = 0;
  for (size_t i = 0; i < n; i += 4096) sink = static_cast<char>(sink + p[i]);
  return true;
}

MappedFile::~MappedFile() {
  unwatch(slot_);
  if (data_ && !copied_) ::munmap(const_cast<char*>(data_), mapped_);  // a copy_ lets go of itself
  if (fd_ >= 0) ::close(fd_);
}

bool MappedFile::intact() const {
  if (slot_ >= 0 && g_watched[slot_].cut.load(std::memory_order_acquire)) return false;
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return true;  // nothing to compare with: trust the mapping
  return static_cast<int64_t>(st.st_size) == size_at_map_ && static_cast<int64_t>(st.st_mtim.tv_sec) == mtime_sec_ &&
         static_cast<int64_t>(st.st_mtim.tv_nsec) == mtime_nsec_;
}

std::string MappedFile::why_changed() const {
  if (intact()) return "";
  const bool cut = slot_ >= 0 && g_watched[slot_].cut.load(std::memory_order_acquire);
  return path_ + ": the model file " + (cut ? "was cut short" : "was changed") +
         " by another program while it was open, so the weights read from it are no longer the model's; "
         "open the model again";
}

}  // namespace ds
