#include "bench/load_split.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "perf/memory.h"

namespace ds {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The files a load reads: a checkpoint itself, or a folder's weight files.
std::vector<std::string> model_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::string dir = path;
  if (path.rfind("builtin:", 0) == 0) dir = resolve_builtin(path.substr(8));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {dir};
  std::vector<std::string> files;
  if (!fs::exists(fs::path(dir) / "config.json", ec)) return files;  // no model folder: the load says so
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file(ec) && (ext == ".safetensors" || ext == ".bin")) files.push_back(e.path().string());
  }
  return files;
}

// Copies a file through an 8 MB buffer (faulted in beforehand): its bytes.
uint64_t read_file(const std::string& path, std::vector<char>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;  // the load that follows says what is wrong with it
  uint64_t total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r <= 0) break;
    total += uint64_t(r);
  }
  ::close(fd);
  return total;
}

}  // namespace

void process_times(double& user_s, double& system_s) {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  user_s = double(u.ru_utime.tv_sec) + double(u.ru_utime.tv_usec) / 1e6;
  system_s = double(u.ru_stime.tv_sec) + double(u.ru_stime.tv_usec) / 1e6;
}

LoadSplit measure_load(const std::string& path, const std::string& tokenizer, Precision p, LoadedModel& out,
                       bool in_place) {
  LoadSplit s;
  std::vector<char> buf(size_t(8) << 20, 1);
  const std::vector<std::string> files = model_files(path);
  auto t0 = Clock::now();
  for (const std::string& f : files) s.file_bytes += read_file(f, buf);
  s.read_s = seconds_since(t0);
  s.files = int(files.size());

  // Faulting, timed before the load on a block of its own and scaled to the
  // weights' bytes: after it, a second block beside the model (and the page cache's
  // copy of the file) would measure the kernel reclaiming memory instead, and the peak
  // memory of the run would count the block too.
  // A sample of at most 256 MB: a block as large as a big model's would also measure
  // the kernel reclaiming the page cache to find the pages.
  double fault_per_byte = 0;
  const uint64_t sample = std::min<uint64_t>(s.file_bytes, uint64_t(256) << 20);
  if (sample > 0) {
    t0 = Clock::now();
    {
      std::shared_ptr<void> block = allocate_weight_block(size_t(sample));
      char* q = static_cast<char*>(block.get());
      for (uint64_t i = 0; i < sample; i += 4096) q[i] = 1;
    }
    fault_per_byte = seconds_since(t0) / double(sample);
  }

  double u0, s0, u1, s1;
  process_times(u0, s0);
  t0 = Clock::now();
  out = load_model(path, tokenizer, p, in_place);
  s.load_s = seconds_since(t0);
  process_times(u1, s1);
  s.load_user_s = u1 - u0;
  s.load_system_s = s1 - s0;
  s.weight_bytes = uint64_t(out.model->w.bytes());
  s.in_place = out.model->w.mapped && !out.model->w.mapped->copied();
  s.file_copy = out.model->w.mapped && out.model->w.mapped->copied();
  s.fault_s = fault_per_byte * double(s.weight_bytes);
  s.rest_s = std::max(0.0, s.load_s - s.read_s - s.fault_s);
  return s;
}

void print_load_split(std::FILE* f, const LoadSplit& s) {
  std::fprintf(f, "load                    %.3f s (user %.3f s, system %.3f s) for %.1f MB of weights\n", s.load_s,
               s.load_user_s, s.load_system_s, double(s.weight_bytes) / 1e6);
  std::fprintf(f, "  reading               %.3f s: %d file(s), %.1f MB read once (%.2f GB/s)\n", s.read_s, s.files,
               double(s.file_bytes) / 1e6, s.read_s > 0 ? double(s.file_bytes) / s.read_s / 1e9 : 0.0);
  if (s.in_place || s.file_copy) {  // the load is the file's bytes and the value checks
    std::fprintf(f, "%s; the load checked every value\n",
                 s.in_place ? "  in place              the matrices are the mapped file's pages: nothing copied, no "
                              "fresh pages"
                            : "  copied                the file read whole into fresh memory (huge pages from the "
                              "first touch), the matrices used there");
    std::fprintf(f, "  load / read           %.2f\n", s.read_s > 0 ? s.load_s / s.read_s : 0.0);
    return;
  }
  std::fprintf(f,
               "  faulting              %.3f s: fresh pages for the weights, one write per 4 KB page (timed on a "
               "block of up to 256 MB before the load)\n",
               s.fault_s);
  std::fprintf(f, "  converting, checking  %.3f s: the rest of the load (tiles, 16-bit storage, value checks)\n",
               s.rest_s);
  std::fprintf(f, "  load / (read + fault) %.2f\n", s.read_s + s.fault_s > 0 ? s.load_s / (s.read_s + s.fault_s) : 0.0);
}

}  // namespace ds
