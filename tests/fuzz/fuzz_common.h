#pragma once
// Shared helpers of the libFuzzer targets tests/fuzz/fuzz_*.cpp (built with
// -DDS_FUZZ=ON by clang, run by scripts/fuzz). Each target feeds its input to one
// reader; every input must load or throw ds::Error. Anything else (a crash, another
// exception type, a sanitizer report, a hang, running out of memory) is a finding:
// an exception other than ds::Error escapes LLVMFuzzerTestOneInput and aborts.
//
// Inputs made of several files separate them with kSplit ("\n--split--\n"); the
// seeds scripts/fuzz writes use the same marker.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace fuzz {

constexpr std::string_view kSplit = "\n--split--\n";

// A private temporary folder, made once and removed at exit (the string is never
// destroyed, so the exit handler can still read it).
inline const std::string& tmp_dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/ds_fuzz_XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    auto* d = new std::string(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(tmp_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

inline void put(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();  // the harness's own folder: never the reader's fault
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input cut at each kSplit, into at most max_parts parts (the last one keeps any
// further markers). Missing parts are empty.
inline std::vector<std::string_view> split(std::string_view in, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = in.find(kSplit);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + kSplit.size());
  }
  parts.push_back(in);
  parts.resize(max_parts);
  return parts;
}

// Runs text through t: encode (with and without BOS), then decode every id after the
// one before it and read every piece; then the pieces of the first ids of the
// vocabulary and of a few ids outside it. Each call may throw ds::Error only.
inline void exercise_tokenizer(const ds::Tokenizer& t, std::string_view text) {
  const int v = t.vocab_size();
  for (bool bos : {false, true}) {
    std::vector<int> ids;
    try {
      ids = t.encode(text, bos);
    } catch (const ds::Error&) {
      continue;
    }
    for (int id : ids)
      if (id < 0 || id >= v) std::abort();  // encode must produce ids of the vocabulary
    for (size_t i = 0; i < ids.size(); ++i) {
      (void)t.piece(ids[i]);
      (void)t.decode(i ? ids[i - 1] : ids[0], ids[i]);
    }
  }
  for (int id = 0; id < v && id < 64; ++id) (void)t.decode(id > 0 ? id - 1 : 0, id);
  for (int id : {-1, v, v + 1000}) {
    try {
      (void)t.piece(id);
    } catch (const ds::Error&) {
    }
  }
}

// Seeds made by the target itself (files that load, tied to what the target builds):
// when the environment names DS_FUZZ_SEED_DIR, they are written there. scripts/fuzz
// runs each target once with it set (and -runs=0) before fuzzing.
inline void seed(const std::string& name, std::string_view bytes) {
  const char* dir = std::getenv("DS_FUZZ_SEED_DIR");
  if (!dir || !*dir) return;
  std::filesystem::create_directories(dir);
  put(std::string(dir) + "/" + name, bytes);
}

// The parts joined with kSplit, after a one-byte prefix (the targets' selector byte).
inline std::string join(char prefix, const std::vector<std::string>& parts) {
  std::string s(1, prefix);
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? std::string(kSplit) : "") + parts[i];
  return s;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A model that loaded runs: its weights become a Model (which checks them), and when
// its KV cache is small, an Engine runs two tokens through it (ids 0 and the last).
inline void run_model(ds::Config cfg, ds::Weights w) {
  auto model = std::make_shared<const ds::Model>(std::move(cfg), std::move(w));
  const ds::Config& c = model->cfg;
  const double kv_bytes = 8.0 * c.n_layers * double(c.max_seq) * c.kv_dim();
  if (kv_bytes > (64 << 20) || c.max_seq < 2 || c.encoder_decoder) return;
  ds::Engine e(model);
  const int ids[2] = {0, c.vocab_size - 1};
  (void)e.forward(ids);
}

}  // namespace fuzz
