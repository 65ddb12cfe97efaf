// Loading a Hugging Face GPT-2 folder: time against one cold read of the same bytes,
// and peak resident memory against the float32 weights.
//
// Writes a GPT-2-shaped (d 768, 12 heads, vocab 50257, 1024 positions; layers chosen
// to reach about --mb megabytes) F32 model.safetensors with streamed random values,
// then: evicts it from the page cache and times a plain read of the file; evicts it
// again and times load_model_folder, reading the peak RSS (VmHWM, reset just before)
// and getrusage's ru_maxrss.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/model_folder.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Drops the file's pages from the page cache (after making them clean).
void evict(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::atol(line.c_str() + n + 1);
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0).
void reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

struct T {
  std::string name;
  std::vector<int64_t> shape;
  int64_t n() const {
    int64_t k = 1;
    for (int64_t x : shape) k *= x;
    return k;
  }
};

}  // namespace

int bench_load(int argc, char** argv) {
  double mb = 500;
  std::string base = "/tmp";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) mb = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) base = argv[++i];
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else {
      std::fprintf(stderr, "usage: load [--mb MEGABYTES] [--dir DIR] [--keep]\n");
      return 2;
    }
  }
  const int64_t d = 768, vocab = 50257, n_pos = 1024, ff = 4 * d;
  const double per_layer = (12.0 * d * d + 13.0 * d) * 4 / 1e6, fixed = ((vocab + n_pos) * d + 2.0 * d) * 4 / 1e6;
  const int layers = std::max(1, static_cast<int>((mb - fixed) / per_layer + 0.5));

  std::vector<T> ts = {{"wte.weight", {vocab, d}}, {"wpe.weight", {n_pos, d}}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (auto& t : std::vector<T>{{p + "ln_1.weight", {d}},
                                  {p + "ln_1.bias", {d}},
                                  {p + "attn.c_attn.weight", {d, 3 * d}},
                                  {p + "attn.c_attn.bias", {3 * d}},
                                  {p + "attn.c_proj.weight", {d, d}},
                                  {p + "attn.c_proj.bias", {d}},
                                  {p + "ln_2.weight", {d}},
                                  {p + "ln_2.bias", {d}},
                                  {p + "mlp.c_fc.weight", {d, ff}},
                                  {p + "mlp.c_fc.bias", {ff}},
                                  {p + "mlp.c_proj.weight", {ff, d}},
                                  {p + "mlp.c_proj.bias", {d}}})
      ts.push_back(t);
  }
  ts.push_back({"ln_f.weight", {d}});
  ts.push_back({"ln_f.bias", {d}});

  const std::string dir = (fs::path(base) / ("ds_bench_load_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  const std::string file = dir + "/model.safetensors";
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  int64_t off = 0, params = 0;
  for (const T& t : ts) {
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + 4 * t.n()}}};
    off += 4 * t.n();
    params += t.n();
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  {
    // Streamed: never more than one chunk of values in memory.
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    f << h;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> chunk(1 << 18);
    for (const T& t : ts) {
      for (int64_t i = 0; i < t.n(); i += int64_t(chunk.size())) {
        const int64_t m = std::min<int64_t>(int64_t(chunk.size()), t.n() - i);
        for (int64_t k = 0; k < m; ++k) chunk[size_t(k)] = nd(rng);
        f.write(reinterpret_cast<const char*>(chunk.data()), std::streamsize(m * 4));
      }
    }
    if (!f) {
      std::fprintf(stderr, "write failed\n");
      return 1;
    }
  }
  std::ofstream(dir + "/config.json") << nlohmann::json{{"model_type", "gpt2"},
                                                        {"n_embd", d},
                                                        {"n_layer", layers},
                                                        {"n_head", 12},
                                                        {"n_positions", n_pos},
                                                        {"vocab_size", vocab},
                                                        {"layer_norm_epsilon", 1e-5},
                                                        {"activation_function", "gelu_new"},
                                                        {"n_inner", nullptr}}
                                                            .dump();
  const double file_mb = double(fs::file_size(file)) / 1e6, weights_mb = double(params) * 4 / 1e6;
  std::printf("file      %s: %.1f MB, %d layers, %lld parameters (%.1f MB as float32)\n", file.c_str(), file_mb,
              layers, static_cast<long long>(params), weights_mb);

  // One cold read of the same bytes.
  evict(file);
  double t0 = now();
  {
    int fd = ::open(file.c_str(), O_RDONLY);
    std::vector<char> buf(16 << 20);
    ssize_t r;
    while ((r = ::read(fd, buf.data(), buf.size())) > 0) {
    }
    ::close(fd);
  }
  const double read_s = now() - t0;

  evict(file);
  const long rss_before = status_kb("VmRSS:");
  reset_peak();
  double load_s = 0;
  try {
    t0 = now();
    ds::FolderModel m = ds::load_model_folder(dir);
    load_s = now() - t0;
    std::printf("loaded    %s\n", m.cfg.describe().c_str());
  } catch (const ds::Error& e) {
    std::fprintf(stderr, "load failed: %s\n", e.what());
    return 1;
  }
  const long hwm = status_kb("VmHWM:");
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);

  t0 = now();
  { ds::FolderModel warm = ds::load_model_folder(dir); }
  const double warm_s = now() - t0;

  std::printf("cold read %.3f s (%.0f MB/s)\n", read_s, file_mb / read_s);
  std::printf("cold load %.3f s (%.0f MB/s), %.2fx the read\n", load_s, file_mb / load_s, load_s / read_s);
  std::printf("warm load %.3f s (file in the page cache)\n", warm_s);
  auto kb_mb = [](long kb) { return double(kb) * 1024.0 / 1e6; };
  std::printf("peak RSS  VmHWM %.1f MB (RSS before load %.1f MB), ru_maxrss %.1f MB; weights %.1f MB -> peak/weights %.3f\n",
              kb_mb(hwm), kb_mb(rss_before), kb_mb(ru.ru_maxrss), weights_mb, kb_mb(hwm) / weights_mb);
  if (!keep) fs::remove_all(dir);
  return 0;
}
