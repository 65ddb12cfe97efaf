#include "io/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace ds {

int open_regular_file(const std::string& path, uint64_t& size) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat (" + std::strerror(err) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string pread_exact(int fd, void* out, uint64_t n, uint64_t offset) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd, p, want, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return std::string(std::strerror(errno)) + " at file offset " + std::to_string(offset);
    }
    if (r == 0) return "the file ends at offset " + std::to_string(offset) + " (did it change while loading?)";
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return "";
}

}  // namespace ds
