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
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& path() const { return path_; }

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
  int64_t size_at_map_ = 0, mtime_sec_ = 0, mtime_nsec_ = 0;
  std::string path_;
};

}  // namespace ds
