#pragma once
// Saving files and folders so that a failed save never destroys the previous good
// copy. A file is written to a temporary file in the same folder (.NAME.tmp-PID-N),
// flushed, synced to disk, and renamed over the target; the folder is then synced so
// that the rename itself survives a power cut. A folder is written into a temporary
// folder beside the target and renamed into place. Until the final rename the target
// is untouched; a failure (disk full, an I/O error, an exception thrown by the code
// producing the bytes) removes the temporary file or folder and throws ds::Error
// naming the target and the reason ("No space left on device").
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

class SaveFile;

namespace detail {
// The buffered stream of a SaveFile: an error in write() is kept and rethrown when the
// save ends (a std::ostream swallows exceptions of its buffer).
class SaveBuf : public std::streambuf {
 public:
  explicit SaveBuf(SaveFile& f) : file_(f) {}
  // Writes out what is buffered; rethrows a kept error.
  void drain();

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  bool put(const char* s, size_t n);
  SaveFile& file_;
  std::string buf_;
  std::exception_ptr error_;
};
}  // namespace detail

// The file being written by save_file(): write() appends bytes (for large tensors,
// written in pieces so nothing is copied into one buffer); stream() is a buffered
// std::ostream for text. Both may be mixed: stream() output is written out before every
// write(). The file itself is given whole 2 MB pieces at 2 MB offsets (and the tail at
// the end), so that the page cache keeps it in 2 MB folios (see raw_write).
class SaveFile {
 public:
  SaveFile(const SaveFile&) = delete;
  SaveFile& operator=(const SaveFile&) = delete;
  ~SaveFile();

  // Throws ds::Error naming the target and the system's reason when the write fails.
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  std::ostream& stream();
  uint64_t bytes_written() const { return bytes_ + stage_.size(); }
  const std::string& target() const { return target_; }

 private:
  friend void save_file(const std::string&, const std::function<void(SaveFile&)>&);
  friend class detail::SaveBuf;
  SaveFile(int fd, std::string target, bool replacing);
  void raw_write(const char* data, size_t n);  // in 2 MB pieces at 2 MB offsets, via stage_
  void flush_stage();
  void put_fd(const char* data, size_t n);  // the write itself
  void finish();                            // drains the stream and stage_, rethrowing an error

  int fd_;
  std::string target_;
  bool replacing_;           // the target exists: messages say it is unchanged
  uint64_t bytes_ = 0;       // written to the file
  std::vector<char> stage_;  // written after bytes_, not yet given to the file
  detail::SaveBuf buf_;
  std::ostream os_;
};

// Writes path through fill as described above. path may name a new file or an
// existing regular file (a symbolic link is followed: the file it points to is
// replaced); an existing file keeps its permission bits. A path that exists and is not
// a regular file (a terminal, a pipe, /dev/stdout) cannot be replaced and is written in
// place. Throws ds::Error for a folder, for a folder that cannot hold the temporary
// file, and for any write, sync or rename failure; an exception thrown by fill is
// passed on after the temporary file is removed.
void save_file(const std::string& path, const std::function<void(SaveFile&)>& fill);
void save_file(const std::string& path, std::string_view bytes);

// Writes the folder dir: fill receives the path of an empty temporary folder beside dir
// (.NAME.tmp-PID-N) and writes the files into it (with save_file or otherwise). Then, if
// dir does not exist, the new folder is renamed to dir. If it does, the entries of the
// old folder that the new one does not have (files the save does not write, such as a
// training checkpoint or a README) are moved into the new folder, the old folder is
// renamed aside (.NAME.old-PID-N), the new one renamed to dir, and the aside folder,
// which then holds only the replaced files, removed. On any failure everything is moved
// back: dir is as it was, and no temporary folder is left. The new folder keeps the old
// one's permission bits; dir's parent folders are created when missing. Throws ds::Error naming dir and the reason.
void save_folder(const std::string& dir, const std::function<void(const std::string& temp_dir)>& fill);

// Test seams, process-wide, for the tests of failed saves only: after
// fail_writes_after(n), once n more bytes have been written through SaveFile (counted
// across files), every write fails with ENOSPC ("No space left on device"), the bytes
// up to the limit having reached the temporary file. After fail_renames_after(n) the
// (n+1)-th and later renames made by save_file / save_folder fail with EIO (the
// renames that undo a failed folder save are never failed). clear_save_failures()
// turns both off.
void fail_writes_after(int64_t bytes);
void fail_renames_after(int renames);
void clear_save_failures();

}  // namespace ds
