// Loading a model folder: time against one cold read of the same bytes, and peak
// resident memory against the size of the loaded weights.
//
// Writes two GPT-2-shaped folders (d 768, 12 heads, vocab 50257, 1024 positions;
// layers chosen to reach about --mb megabytes of float32) holding the same streamed
// random values: model.safetensors in F32, and in BF16. --format gpt2 (the default)
// writes Hugging Face GPT-2 folders (Conv1D weights, transposed on load), --format own
// decoderscope's own format (stored as the engine keeps them). Then, --reps times: evicts
// the file from the page cache (posix_fadvise, checked with mincore; --drop-caches
// drops every clean cache instead) and times a plain read() of it; evicts it again
// and times load_model_folder writing the matrices in tiles (as load_model does),
// the F32 file loaded as float32 and the BF16 file as
// bfloat16, reading the peak RSS (VmHWM, reset just before each load, after handing
// the memory earlier rounds freed back to the system). Prints the
// medians (and the best times, less disturbed by other work on the machine) and the
// ratios load/read and peak/weights.
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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
#include "io/safetensors.h"
#include "model/config_json.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Pages of the file in the page cache.
long resident_pages(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  const off_t n = ::lseek(fd, 0, SEEK_END);
  void* p = n > 0 ? ::mmap(nullptr, size_t(n), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> in_core(size_t((n + page - 1) / page));
  long count = -1;
  if (::mincore(p, size_t(n), in_core.data()) == 0) {
    count = 0;
    for (unsigned char c : in_core) count += c & 1;
  }
  ::munmap(p, size_t(n));
  return count;
}

// Drops the file's pages from the page cache (after making them clean), or with
// drop_all every clean page of every file; returns the pages of the file left.
long evict(const std::string& path, bool drop_all) {
  if (drop_all) {
    ::sync();
    std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
  } else {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  return resident_pages(path);
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

double read_file(const std::string& path) {
  const double t0 = now();
  int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(16 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
  return now() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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

// One folder of the benchmark and what its rounds measured.
struct Case {
  const char* label = "";
  std::string dir, file;
  ds::Precision precision = ds::Precision::F32;
  std::vector<double> read_s, load_s, peak_mb, before_mb;  // before: the RSS just before the load
  double weights_mb = 0, warm_s = 0;
  long left_pages = 0;  // most pages of the file found cached after an eviction
};

// Writes dir/model.safetensors with the tensors ts in dtype, and dir/config.json.
void write_folder(const std::string& dir, const std::vector<T>& ts, const std::string& dtype,
                  const nlohmann::json& config) {
  fs::create_directories(dir);
  const int esize = dtype == "F32" ? 4 : 2;
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  int64_t off = 0;
  for (const T& t : ts) {
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {off, off + esize * t.n()}}};
    off += esize * t.n();
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  // Streamed: never more than one chunk of values in memory. Same seed, same values.
  std::ofstream f(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  f << h;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> chunk(1 << 18);
  std::vector<uint16_t> half(chunk.size());
  for (const T& t : ts) {
    const bool gain = t.name.size() > 2 && t.name.compare(t.name.size() - 2, 2, ".g") == 0;
    for (int64_t i = 0; i < t.n(); i += int64_t(chunk.size())) {
      const int64_t m = std::min<int64_t>(int64_t(chunk.size()), t.n() - i);
      for (int64_t k = 0; k < m; ++k) chunk[size_t(k)] = (gain ? 1.0f : 0.0f) + nd(rng);
      if (esize == 4) {
        f.write(reinterpret_cast<const char*>(chunk.data()), std::streamsize(m * 4));
      } else {
        for (int64_t k = 0; k < m; ++k) half[size_t(k)] = ds::f32_to_bf16(chunk[size_t(k)]);
        f.write(reinterpret_cast<const char*>(half.data()), std::streamsize(m * 2));
      }
    }
  }
  if (!f) throw ds::Error(dir + ": write failed");
  std::ofstream(dir + "/config.json") << config.dump();
}

// The tensors of decoderscope's own format for cfg, as Weights::tensors() names them.
std::vector<T> own_tensors(const ds::Config& cfg) {
  std::vector<T> ts;
  ds::Weights w = ds::Weights::zeros(cfg, ds::Precision::F32);  // large matrices never written
  for (auto& t : w.tensors()) {
    const bool vec = t.name.size() > 2 && (t.name.compare(t.name.size() - 2, 2, ".g") == 0 ||
                                           t.name.compare(t.name.size() - 2, 2, ".b") == 0);
    ts.push_back({t.name, vec ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols}});
  }
  return ts;
}

}  // namespace

int bench_load(int argc, char** argv) {
  double mb = 500;
  int reps = 3;
  std::string base = "/tmp";
  bool keep = false, drop_all = false, own = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb") && i + 1 < argc)
      mb = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc)
      base = argv[++i];
    else if (!std::strcmp(argv[i], "--keep"))
      keep = true;
    else if (!std::strcmp(argv[i], "--drop-caches"))
      drop_all = true;
    else if (!std::strcmp(argv[i], "--format") && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "gpt2") || !std::strcmp(argv[i + 1], "own")))
      own = !std::strcmp(argv[++i], "own");
    else {
      std::fprintf(
          stderr, "usage: load [--mb MEGABYTES] [--reps N] [--format gpt2|own] [--dir DIR] [--keep] [--drop-caches]\n");
      return 2;
    }
  }
  const int64_t d = 768, vocab = 50257, n_pos = 1024, ff = 4 * d;
  const double per_layer = (12.0 * d * d + 13.0 * d) * 4 / 1e6, fixed = ((vocab + n_pos) * d + 2.0 * d) * 4 / 1e6;
  const int layers = std::max(1, static_cast<int>((mb - fixed) / per_layer + 0.5));

  const ds::Config cfg = ds::gpt2_config(int(d), layers, 12, int(n_pos), int(vocab));
  nlohmann::json config;
  std::vector<T> ts;
  if (own) {
    config = ds::config_to_json(cfg);
    config["format"] = "decoderscope";
    config["version"] = 1;
    config["tokenizer"] = {{"kind", "gpt2-bpe"}};
    ts = own_tensors(cfg);
  } else {
    config = {{"model_type", "gpt2"},       {"n_embd", d},
              {"n_layer", layers},          {"n_head", 12},
              {"n_positions", n_pos},       {"vocab_size", vocab},
              {"layer_norm_epsilon", 1e-5}, {"activation_function", "gelu_new"},
              {"n_inner", nullptr}};
    ts = {{"wte.weight", {vocab, d}}, {"wpe.weight", {n_pos, d}}};
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
  }
  int64_t params = 0;
  for (const T& t : ts) params += t.n();

  const std::string root = (fs::path(base) / ("ds_bench_load_" + std::to_string(::getpid()))).string();
  Case cases[2];
  cases[0].label = "f32 ";
  cases[1].label = "bf16";
  cases[1].precision = ds::Precision::BF16;
  for (Case& c : cases) {
    c.dir = root + (c.precision == ds::Precision::F32 ? "/f32" : "/bf16");
    c.file = c.dir + "/model.safetensors";
  }
  try {
    write_folder(cases[0].dir, ts, "F32", config);
    write_folder(cases[1].dir, ts, "BF16", config);
  } catch (const ds::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::string loadavg;
  std::getline(std::ifstream("/proc/loadavg"), loadavg);
  std::printf(
      "%s folder, GPT-2 shape, %d layers, %lld parameters: F32 file %.1f MB, BF16 file %.1f MB; cold "
      "runs: median (best) of %d; %ld CPUs, load average %s\n",
      own ? "decoderscope" : "GPT-2", layers, static_cast<long long>(params),
      double(fs::file_size(cases[0].file)) / 1e6, double(fs::file_size(cases[1].file)) / 1e6, reps,
      ::sysconf(_SC_NPROCESSORS_ONLN), loadavg.substr(0, loadavg.find(' ')).c_str());

  for (int r = 0; r < reps; ++r) {
    for (Case& c : cases) {
      c.left_pages = std::max(c.left_pages, evict(c.file, drop_all));
      c.read_s.push_back(read_file(c.file));
      c.left_pages = std::max(c.left_pages, evict(c.file, drop_all));
      ::malloc_trim(0);  // what earlier rounds freed goes back to the system, not into this peak
      reset_peak();
      c.before_mb.push_back(double(status_kb("VmRSS:")) * 1024.0 / 1e6);
      try {
        const double t0 = now();
        ds::FolderModel m = ds::load_model_folder(c.dir, c.precision, true);  // in tiles, as load_model
        c.load_s.push_back(now() - t0);
        c.peak_mb.push_back(double(status_kb("VmHWM:")) * 1024.0 / 1e6);
        c.weights_mb = double(m.w.bytes()) / 1e6;
      } catch (const ds::Error& e) {
        std::fprintf(stderr, "load failed: %s\n", e.what());
        return 1;
      }
    }
  }
  for (Case& c : cases) {  // the file is in the page cache now
    const double t0 = now();
    { ds::FolderModel warm = ds::load_model_folder(c.dir, c.precision, true); }
    c.warm_s = now() - t0;
  }

  const double f32_weights = cases[0].weights_mb;
  for (const Case& c : cases) {
    const double rd = median(c.read_s), ld = median(c.load_s), pk = median(c.peak_mb), bf = median(c.before_mb);
    const double rd1 = *std::min_element(c.read_s.begin(), c.read_s.end());
    const double ld1 = *std::min_element(c.load_s.begin(), c.load_s.end());
    std::printf("%s  read %.3f s (best %.3f)  load %.3f s (best %.3f)  load/read %.2f (best %.2f)  warm load %.3f s\n",
                c.label, rd, rd1, ld, ld1, ld / rd, ld1 / rd1, c.warm_s);
    std::printf("      peak RSS %.1f MB (%.1f MB before the load) / weights %.1f MB = %.3f (%.2fx the f32 weights)\n",
                pk, bf, c.weights_mb, pk / c.weights_mb, pk / f32_weights);
    if (c.left_pages != 0)
      std::printf("%s  warning: %ld pages of the file stayed cached after eviction (try --drop-caches)\n", c.label,
                  c.left_pages);
  }
  if (!keep) fs::remove_all(root);
  return 0;
}
