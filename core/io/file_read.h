#pragma once
// Reading model files: opening a regular file, and reads at an offset that either
// deliver every byte asked for or say why not. Several threads may read one descriptor
// at once (pread keeps no file position).
#include <cstdint>
#include <string>

namespace ds {

// Opens a regular file read-only; returns the descriptor and sets size. Throws
// ds::Error naming the path when it cannot be opened or is not a regular file.
int open_regular_file(const std::string& path, uint64_t& size);

// Reads exactly n bytes at offset into out, or says why not (an empty string on success).
std::string pread_exact(int fd, void* out, uint64_t n, uint64_t offset);

}  // namespace ds
