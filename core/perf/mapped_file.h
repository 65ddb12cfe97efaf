#pragma once
// A model file mapped into memory, so that a loader can leave weights where the file
// has them: the pages are the page cache's own, so opening a model costs no copy and
// no fresh memory (a float32 llama2.c checkpoint is used in place; see io/llama2c.h).
//
// The mapping is private (copy-on-write): a write through it changes this process's
// copy only. What a mapping cannot prevent is the file changing underneath it. When
// another program truncates the file, reading a page past its new end raises SIGBUS,
// which would end the process; a handler installed with the first mapping replaces
// such a page with zeros and marks the mapping, and the engine checks intact() after
// every forward pass and ends it with a ds::Error naming the file. A file rewritten in
// place (same path, same inode) is caught by its size or modification time changing.
// Replacing the file by renaming a new one over it (as decoderscope's own saves do)
// leaves the mapped file as it was: the old inode lives on until it is unmapped.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ds {

class MappedFile {
 public:
  // Maps the first `bytes` bytes of the file open as fd (which is duplicated; the
  // caller keeps its own) at a 2 MB-aligned address, readable and privately writable.
  // The file is named `path` in messages. Throws ds::Error when it cannot be mapped.
  static std::shared_ptr<const MappedFile> map(int fd, size_t bytes, const std::string& path);
  // The same bytes read into anonymous memory instead (2 MB-aligned, advised for huge
  // pages from the first touch): a copy the file's later changes cannot reach, and whose
  // pages are this process's own rather than the page cache's. A loader reads it as it
  // reads a mapping; `bench --copy` compares the two. Throws ds::Error when the memory
  // is not available or the file ends early.
  static std::shared_ptr<const MappedFile> copy(int fd, size_t bytes, const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& path() const { return path_; }
  // Whether the bytes are a copy in memory (copy()) rather than the file's pages.
  bool copied() const { return copied_; }

  // Reads [at, at + n) of a mapped file (a piece at a 2 MB offset) into the page cache
  // again, so that the cache holds it in 2 MB folios and the mapping takes each one
  // whole: the piece's pages are let go, the cache's pages of it dropped (the kernel
  // keeps any that are dirty or mapped by another process) and the piece faulted back
  // in. The page cache keeps a file in the folios it was written or read in, and a file
  // written a few KB at a time (a download, most tools' saves) stays in 4 KB pages,
  // which decoding reads slower. Values never change: a piece holding any page of this
  // process's own (a private copy, a page put in for a cut-off file) is left as it is.
  // Returns false when the piece could not be read back (the file cut short), or for a
  // copy.
  bool reread_piece(size_t at, size_t n) const;
  // True the first time only: so that of several models sharing the mapping (copies of
  // the weights), one reads it again.
  bool claim_reread() const { return !reread_claimed_.exchange(true); }

  // Whether the file is as it was when it was mapped: no read has met a page cut off
  // by truncation, and its size and modification time are unchanged (one fstat).
  bool intact() const;
  // Why the weights read from it can no longer be trusted: one line naming the file,
  // or "" while intact().
  std::string why_changed() const;

 private:
  MappedFile() = default;
  const char* data_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;  // the mapping's length (bytes rounded up to whole pages)
  int fd_ = -1;
  int slot_ = -1;  // its place in the SIGBUS handler's table, or -1 (not watched)
  bool copied_ = false;
  std::shared_ptr<void> copy_;  // copy(): the memory the file was read into (perf/memory.h's weight block)
  mutable std::atomic<bool> reread_claimed_{false};
  int64_t size_at_map_ = 0, mtime_sec_ = 0, mtime_nsec_ = 0;
  std::string path_;
};

}  // namespace ds
