#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "util/error.h"

namespace ds {

namespace fs = std::filesystem;

namespace {

// The test seams (fail_writes_after, fail_renames_after): off unless a test sets them.
std::atomic<int64_t> g_write_limit{-1}, g_written{0};
std::atomic<int> g_rename_limit{-1}, g_renames{0};
std::atomic<uint64_t> g_temp_counter{0};

constexpr size_t kStreamBuffer = size_t{1} << 16;

std::string reason(int err) { return std::strerror(err); }

// .NAME.KIND-PID-N in dir, N unique within the process.
fs::path temp_name(const fs::path& dir, const std::string& name, const char* kind) {
  return dir / ("." + name + "." + kind + "-" + std::to_string(::getpid()) + "-" + std::to_string(g_temp_counter++));
}

// rename(2), or the injected failure; returns 0 or the error number.
int forward_rename(const fs::path& from, const fs::path& to) {
  if (g_rename_limit.load() >= 0 && g_renames++ >= g_rename_limit.load()) return EIO;
  return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

// Makes a rename in dir durable. Best effort: some file systems cannot sync a folder,
// and by now the new file is in place, so there is nothing to undo.
void sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

}  // namespace

// ------------------------------------------------------------------ SaveBuf

namespace detail {

bool SaveBuf::put(const char* s, size_t n) {
  if (error_) return false;
  try {
    file_.raw_write(s, n);
    return true;
  } catch (...) {
    error_ = std::current_exception();
    return false;
  }
}

void SaveBuf::drain() {
  if (error_) std::rethrow_exception(error_);
  if (buf_.empty()) return;
  std::string pending;
  pending.swap(buf_);
  file_.raw_write(pending.data(), pending.size());
}

SaveBuf::int_type SaveBuf::overflow(int_type c) {
  if (error_) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) buf_.push_back(traits_type::to_char_type(c));
  if (buf_.size() >= kStreamBuffer) {
    const bool ok = put(buf_.data(), buf_.size());
    buf_.clear();
    if (!ok) return traits_type::eof();
  }
  return traits_type::not_eof(c);
}

std::streamsize SaveBuf::xsputn(const char* s, std::streamsize n) {
  if (error_) return 0;
  buf_.append(s, static_cast<size_t>(n));
  if (buf_.size() >= kStreamBuffer) {
    const bool ok = put(buf_.data(), buf_.size());
    buf_.clear();
    if (!ok) return 0;
  }
  return n;
}

int SaveBuf::sync() {
  if (error_) return -1;
  const bool ok = buf_.empty() || put(buf_.data(), buf_.size());
  buf_.clear();
  return ok ? 0 : -1;
}

}  // namespace detail

// ------------------------------------------------------------------ SaveFile

SaveFile::SaveFile(int fd, std::string target, bool replacing)
    : fd_(fd), target_(std::move(target)), replacing_(replacing), buf_(*this), os_(&buf_) {}

SaveFile::~SaveFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::ostream& SaveFile::stream() { return os_; }

void SaveFile::write(const void* data, size_t n) {
  buf_.drain();
  raw_write(static_cast<const char*>(data), n);
}

// Whole 2 MB pieces at offsets that are multiples of 2 MB go to the file as they are; the
// rest waits in stage_ until its piece is whole (or the save ends). The page cache then
// holds the file in 2 MB folios (Linux 6.x on ext4 or xfs), which a model opened from it
// maps whole: decoding reads huge pages 12-25% faster than 4 KB ones (perf/memory.h),
// and small writes would leave the file in small folios for as long as it stays cached.
void SaveFile::raw_write(const char* data, size_t n) {
  constexpr size_t kPiece = size_t(2) << 20;
  while (n > 0) {
    const uint64_t at = bytes_ + stage_.size();
    if (stage_.empty() && at % kPiece == 0 && n >= kPiece) {
      const size_t whole = n / kPiece * kPiece;
      put_fd(data, whole);
      data += whole;
      n -= whole;
      continue;
    }
    const size_t take = std::min<size_t>(kPiece - at % kPiece, n);
    stage_.insert(stage_.end(), data, data + take);
    data += take;
    n -= take;
    if ((bytes_ + stage_.size()) % kPiece == 0) flush_stage();
  }
}

void SaveFile::flush_stage() {
  if (stage_.empty()) return;
  put_fd(stage_.data(), stage_.size());
  stage_.clear();
}

void SaveFile::put_fd(const char* data, size_t n) {
  size_t allowed = n;
  int injected = 0;
  if (const int64_t limit = g_write_limit.load(); limit >= 0) {
    const int64_t before = g_written.fetch_add(static_cast<int64_t>(n));
    if (before + static_cast<int64_t>(n) > limit) {
      allowed = static_cast<size_t>(std::max<int64_t>(0, limit - before));
      injected = ENOSPC;
    }
  }
  while (allowed > 0) {
    const ssize_t w = ::write(fd_, data, allowed);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(target_ + ": cannot save: " + reason(w < 0 ? errno : EIO));
    data += w;
    allowed -= static_cast<size_t>(w);
    bytes_ += static_cast<uint64_t>(w);
  }
  if (injected) throw Error(target_ + ": cannot save: " + reason(injected));
}

void SaveFile::finish() {
  os_.flush();
  buf_.drain();
  flush_stage();
}

// ------------------------------------------------------------------ save_file

void save_file(const std::string& path, const std::function<void(SaveFile&)>& fill) {
  if (path.empty()) throw Error("cannot save: no file name given");
  fs::path target(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);  // follows symbolic links
  const bool exists = fs::exists(st);
  if (exists && fs::is_directory(st)) throw Error(path + ": is a folder; cannot save a file there");
  if (exists && !fs::is_regular_file(st)) {  // e.g. /dev/stdout: no rename possible
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw Error(path + ": cannot save: " + reason(errno));
    SaveFile f(fd, path, false);
    fill(f);
    f.finish();
    return;
  }
  if (exists && fs::is_symlink(target, ec)) {
    const fs::path real = fs::canonical(target, ec);
    if (!ec) target = real;
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) throw Error(path + ": cannot save: the folder " + dir.string() + " does not exist");
  struct stat old {};
  const bool keep_mode = exists && ::stat(target.c_str(), &old) == 0;

  fs::path temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = temp_name(dir, target.filename().string(), "tmp");
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0 && (errno != EEXIST || attempt > 100))
      throw Error(path + ": cannot save: cannot create a temporary file in " + dir.string() + " (" + reason(errno) +
                  ")");
  }
  if (keep_mode) (void)::fchmod(fd, old.st_mode & 07777);
  SaveFile f(fd, path, exists);
  try {
    fill(f);
    f.finish();
    if (::fsync(f.fd_) != 0) throw Error(path + ": cannot save: " + reason(errno));
    const int closed = ::close(f.fd_);
    f.fd_ = -1;
    if (closed != 0) throw Error(path + ": cannot save: " + reason(errno));
    if (const int err = forward_rename(temp, target))
      throw Error(path + ": cannot save: cannot rename the temporary file over it (" + reason(err) + ")");
  } catch (const Error& e) {
    ::unlink(temp.c_str());
    if (!exists) throw;
    throw Error(std::string(e.what()) + "; the previous file is unchanged");
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  sync_dir(dir);
}

void save_file(const std::string& path, std::string_view bytes) {
  save_file(path, [&](SaveFile& f) { f.write(bytes); });
}

// ------------------------------------------------------------------ save_folder

namespace {

// What save_folder moves, so that a failure can put it all back.
struct FolderSwap {
  fs::path target, temp, aside;
  std::vector<fs::path> carried;  // names moved from the old folder into the new one

  // Moves back whatever was moved and removes the temporary folder.
  void undo() {
    if (!aside.empty()) (void)::rename(aside.c_str(), target.c_str());
    for (const fs::path& n : carried) (void)::rename((temp / n).c_str(), (target / n).c_str());
    std::error_code ec;
    fs::remove_all(temp, ec);
  }
};

void checked_rename(const std::string& dir, const fs::path& from, const fs::path& to) {
  if (const int err = forward_rename(from, to))
    throw Error(dir + ": cannot save: cannot rename " + from.string() + " to " + to.string() + " (" + reason(err) +
                ")");
}

// Puts the filled temporary folder in place of the existing folder (see save_folder).
void swap_in(const std::string& dir, FolderSwap& s) {
  std::vector<fs::path> extra;
  for (const fs::directory_entry& e : fs::directory_iterator(s.target)) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(s.temp / e.path().filename(), ec))) extra.push_back(e.path().filename());
  }
  for (const fs::path& n : extra) {
    checked_rename(dir, s.target / n, s.temp / n);
    s.carried.push_back(n);
  }
  const fs::path aside = temp_name(s.target.parent_path(), s.target.filename().string(), "old");
  checked_rename(dir, s.target, aside);
  s.aside = aside;
  checked_rename(dir, s.temp, s.target);
  s.aside.clear();
  s.carried.clear();
  sync_dir(s.target.parent_path());
  std::error_code ec;
  fs::remove_all(aside, ec);  // the replaced files only; a failure leaves a hidden folder, nothing lost
}

}  // namespace

void save_folder(const std::string& dir, const std::function<void(const std::string& temp_dir)>& fill) {
  if (dir.empty()) throw Error("cannot save: no folder name given");
  std::error_code ec;
  FolderSwap s;
  s.target = fs::absolute(fs::path(dir), ec).lexically_normal();
  if (ec) throw Error(dir + ": cannot save: " + ec.message());
  if (!s.target.has_filename()) s.target = s.target.parent_path();  // "out/" -> "out"
  if (fs::is_symlink(s.target, ec) && fs::exists(s.target, ec)) s.target = fs::canonical(s.target, ec);
  const fs::file_status st = fs::status(s.target, ec);
  const bool exists = fs::exists(st);
  if (exists && !fs::is_directory(st)) throw Error(dir + ": exists and is not a folder");
  const fs::path parent = s.target.parent_path();
  if (s.target == parent || !s.target.has_filename()) throw Error(dir + ": cannot save over the root folder");
  fs::create_directories(parent, ec);
  if (ec) throw Error(dir + ": cannot create the folder " + parent.string() + " (" + ec.message() + ")");
  for (int attempt = 0; s.temp.empty(); ++attempt) {
    const fs::path t = temp_name(parent, s.target.filename().string(), "tmp");
    if (::mkdir(t.c_str(), 0777) == 0) {
      s.temp = t;
    } else if (errno != EEXIST || attempt > 100) {
      throw Error(dir + ": cannot save: cannot create a temporary folder in " + parent.string() + " (" + reason(errno) +
                  ")");
    }
  }
  struct stat old {};
  if (exists && ::stat(s.target.c_str(), &old) == 0) (void)::chmod(s.temp.c_str(), old.st_mode & 07777);
  std::string shown = dir;
  while (shown.size() > 1 && shown.back() == '/') shown.pop_back();
  try {
    fill(s.temp.string());
    sync_dir(s.temp);
    if (!exists) {
      checked_rename(dir, s.temp, s.target);
      sync_dir(parent);
      return;
    }
    swap_in(dir, s);
  } catch (const Error& e) {
    s.undo();
    // Messages about files in the temporary folder name them where they were going.
    std::string msg = replace_all(e.what(), s.temp.string(), shown);
    throw Error(msg + (exists ? "; the previous folder is unchanged" : ""));
  } catch (const fs::filesystem_error& e) {
    s.undo();
    throw Error(dir + ": cannot save: " + e.code().message() + (exists ? "; the previous folder is unchanged" : ""));
  } catch (...) {
    s.undo();
    throw;
  }
}

// ------------------------------------------------------------------ test seams

void fail_writes_after(int64_t bytes) {
  g_written = 0;
  g_write_limit = bytes;
}

void fail_renames_after(int renames) {
  g_renames = 0;
  g_rename_limit = renames;
}

void clear_save_failures() {
  g_write_limit = -1;
  g_rename_limit = -1;
}

}  // namespace ds
