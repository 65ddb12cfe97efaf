#pragma once
// Helpers shared by the tests: temporary folders, the shared fixtures, running
// decoderscope-cli, reading and writing files, and small models of every kind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "util/error.h"

// DS_TEST_ASAN: the tests are built with AddressSanitizer (its own allocator and shadow
// pages change what allocation and page-fault counts see).
#if defined(__SANITIZE_ADDRESS__)
#define DS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DS_TEST_ASAN 1
#endif
#endif

namespace ds::test {

namespace fs = std::filesystem;

// A fresh folder for one test, named after it, removed at the end.
class TempDir {
 public:
  TempDir() {
    static int n = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "none";
    for (char& ch : name)
      if (ch == '/') ch = '_';  // parameterised tests' names
    dir_ =
        fs::temp_directory_path() / ("ds_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& dir() const { return dir_; }
  // The path of a file in the folder (not created).
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A sub-folder, created.
  std::string sub(const std::string& name) const {
    fs::create_directories(dir_ / name);
    return (dir_ / name).string();
  }
  // Writes bytes to a file in the folder and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return path(name);
  }

 private:
  fs::path dir_;
};

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The message of the ds::Error that f throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A path in single quotes for a shell command.
inline std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// ../shared/fixtures/NAME (which the tests read in place).
inline fs::path fixture(const std::string& name) { return fs::path(DS_SHARED_DIR) / "fixtures" / name; }

// Skips the current test, saying what is not compared, when a fixture file is absent.
#define DS_NEED_FIXTURE(path, what) \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << (path) << " is absent: skipping " << (what)

struct CliRun {
  int code = 0;
  std::string out, err;
};

// Runs decoderscope-cli with args (a shell-quoted string), with stdin_text on its
// standard input; returns its exit code (128 + signal when killed) and output.
inline CliRun run_cli(const std::string& args, const std::string& stdin_text = "") {
  TempDir io;
  const std::string in = io.write("stdin", stdin_text), err = io.path("stderr");
  const std::string cmd =
      std::string(DS_CLI_PATH) + " " + args + " 2>" + ds::test::quoted(err) + " <" + ds::test::quoted(in);
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, k);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = read_file(err);
  return r;
}

// Small models of each kind the Config describes, for tests that need a few.
enum class Arch {
  GPT2,      // pre-LayerNorm, learned positions, GELU-tanh, tied head, biases
  Llama,     // RMSNorm, rotary, SwiGLU, grouped keys (2 of 4 heads), separate head, no biases
  PostNorm,  // post-LayerNorm, sinusoidal positions, no final norm
  EncDec,    // encoder-decoder (2 encoder layers, pad id 0), pre-LayerNorm, learned positions
};

// d_model 32, n_layers 2, 4 heads of 8, d_ff 64, context 64, source 12, bos 1.
inline Config small_config(Arch a, int vocab = 40) {
  Config c;
  c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.d_head = 8, c.d_ff = 64;
  c.vocab_size = vocab, c.max_seq = 64, c.max_src = 12, c.bos_id = 1;
  if (a == Arch::Llama) {
    c.norm = NormKind::RMSNorm, c.pos = PosKind::Rotary, c.ffn = FFNKind::SwiGLU;
    c.n_kv_heads = 2, c.tied_head = false;
    c.attn_bias = c.ffn_bias = c.norm_bias = false;
  }
  if (a == Arch::PostNorm) c.norm_place = NormPlace::Post, c.final_norm = false, c.pos = PosKind::Sinusoidal;
  if (a == Arch::EncDec) c.encoder_decoder = true, c.n_enc_layers = 2, c.pad_id = 0;
  return c;
}

// The two smallest models of the folder and precision tests: decoder-only with
// RMSNorm, rotary (theta 5000), SwiGLU, grouped keys, separate head, no biases...
inline Config tiny_llama_config() {
  Config c;
  c.d_model = 24, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.d_head = 6, c.d_ff = 40;
  c.vocab_size = 45, c.max_seq = 20;
  c.norm = NormKind::RMSNorm, c.pos = PosKind::Rotary, c.ffn = FFNKind::SwiGLU, c.tied_head = false;
  c.attn_bias = c.ffn_bias = c.norm_bias = false;
  c.norm_eps = 1e-6f, c.rope_theta = 5000.0f;
  c.bos_id = 1, c.eos_id = 2, c.pad_id = 0;
  return c;
}

// ... and the original encoder-decoder: post-LayerNorm, sinusoidal positions scaled
// embeddings, ReLU, no final norms, 3 encoder layers.
inline Config tiny_encdec_config() {
  Config c;
  c.d_model = 16, c.n_layers = 2, c.n_enc_layers = 3, c.n_heads = 2, c.n_kv_heads = 2, c.d_head = 8, c.d_ff = 24;
  c.vocab_size = 40, c.max_seq = 10, c.max_src = 14;
  c.norm = NormKind::LayerNorm, c.norm_place = NormPlace::Post, c.pos = PosKind::Sinusoidal, c.ffn = FFNKind::ReLU;
  c.encoder_decoder = true, c.final_norm = false, c.enc_final_norm = false, c.scale_embed = true;
  c.bos_id = 1, c.eos_id = 2, c.pad_id = 0;
  return c;
}

struct Variant {
  std::string name;
  Config cfg;
  uint64_t seed;
};

// gtest prints a parameter on failure: print the variant's name, not its bytes.
inline void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

inline Config base_config() {
  Config c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_enc_layers = 0;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.d_head = 8;
  c.d_ff = 64;
  c.vocab_size = 40;
  c.max_seq = 80;
  c.max_src = 32;
  return c;
}

// Every variant of the engine the Config describes, each with a seed for its random
// weights: the engine's tests run on all of them.
inline std::vector<Variant> variants() {
  std::vector<Variant> v;
  {  // GPT-2: pre-LayerNorm, learned positions, GELU-tanh, tied head, biases.
    Config c = base_config();
    c.norm = NormKind::LayerNorm;
    c.norm_place = NormPlace::Pre;
    c.pos = PosKind::Learned;
    c.ffn = FFNKind::GELUTanh;
    c.tied_head = true;
    v.push_back({"gpt2", c, 11});
  }
  {  // llama2.c: RMSNorm, rotary, SwiGLU, GQA, separate head, no biases.
    Config c = base_config();
    c.norm = NormKind::RMSNorm;
    c.pos = PosKind::Rotary;
    c.ffn = FFNKind::SwiGLU;
    c.n_kv_heads = 2;
    c.tied_head = false;
    c.attn_bias = false;
    c.ffn_bias = false;
    c.norm_bias = false;
    v.push_back({"llama", c, 12});
  }
  {  // Post-norm, sinusoidal, ReLU, scaled embeddings, no final norm, 3 heads.
    Config c = base_config();
    c.d_model = 24;
    c.n_heads = 3;
    c.n_kv_heads = 3;
    c.d_head = 8;
    c.d_ff = 48;
    c.norm_place = NormPlace::Post;
    c.final_norm = false;
    c.pos = PosKind::Sinusoidal;
    c.ffn = FFNKind::ReLU;
    c.scale_embed = true;
    v.push_back({"post_sin_relu", c, 13});
  }
  {  // No positions, exact GELU, multi-query attention, bias-free LayerNorm and FFN,
     // separate head, q_dim != d_model.
    Config c = base_config();
    c.pos = PosKind::None;
    c.ffn = FFNKind::GELU;
    c.n_kv_heads = 1;
    c.d_head = 6;
    c.norm_bias = false;
    c.ffn_bias = false;
    c.attn_bias = true;
    c.tied_head = false;
    v.push_back({"nopos_gelu_mqa", c, 14});
  }
  {  // Post-RMSNorm with rotary (non-default theta), GELU-tanh, biases, GQA.
    Config c = base_config();
    c.norm = NormKind::RMSNorm;
    c.norm_place = NormPlace::Post;
    c.final_norm = false;
    c.pos = PosKind::Rotary;
    c.rope_theta = 500.0f;
    c.ffn = FFNKind::GELUTanh;
    c.n_kv_heads = 2;
    c.norm_bias = false;
    v.push_back({"post_rms_rotary", c, 15});
  }
  {  // The original transformer: post-norm encoder-decoder, sinusoidal, ReLU.
    Config c = base_config();
    c.encoder_decoder = true;
    c.n_enc_layers = 2;
    c.norm_place = NormPlace::Post;
    c.final_norm = false;
    c.enc_final_norm = false;
    c.pos = PosKind::Sinusoidal;
    c.ffn = FFNKind::ReLU;
    c.scale_embed = true;
    c.tied_head = true;
    c.pad_id = 0;
    c.bos_id = 1;
    c.eos_id = 2;
    v.push_back({"encdec_original", c, 16});
  }
  {  // Pre-norm encoder-decoder with RMSNorm, rotary, SwiGLU, GQA, no biases.
    Config c = base_config();
    c.encoder_decoder = true;
    c.n_enc_layers = 1;
    c.norm = NormKind::RMSNorm;
    c.pos = PosKind::Rotary;
    c.ffn = FFNKind::SwiGLU;
    c.n_kv_heads = 2;
    c.tied_head = false;
    c.attn_bias = false;
    c.ffn_bias = false;
    c.norm_bias = false;
    c.pad_id = 0;
    v.push_back({"encdec_rotary_swiglu", c, 17});
  }
  {  // Pre-LayerNorm encoder-decoder, learned positions, exact GELU, more encoder
     // layers than decoder layers, pad id in the middle of the vocabulary.
    Config c = base_config();
    c.encoder_decoder = true;
    c.n_enc_layers = 3;
    c.pos = PosKind::Learned;
    c.ffn = FFNKind::GELU;
    c.scale_embed = true;
    c.pad_id = 5;
    v.push_back({"encdec_learned_gelu", c, 18});
  }
  {  // Llama 3.x as GGUF files hold it: interleaved rotary with per-frequency divisors and
     // linear scaling, GQA, no biases.
    Config c = base_config();
    c.norm = NormKind::RMSNorm, c.pos = PosKind::Rotary, c.ffn = FFNKind::SwiGLU;
    c.n_kv_heads = 2, c.tied_head = false, c.attn_bias = c.ffn_bias = c.norm_bias = false;
    c.rope_theta = 500000.0f, c.rope_scale = 0.5f, c.rope_freq_factors = {1.0f, 1.5f, 4.0f, 32.0f};
    v.push_back({"llama3_rope_factors", c, 19});
  }
  {  // Qwen3: rotate-half rotary, RMSNorm over each head's q and k, biases on q/k/v/o,
     // d_head * heads != d_model.
    Config c = base_config();
    c.norm = NormKind::RMSNorm, c.pos = PosKind::Rotary, c.ffn = FFNKind::SwiGLU;
    c.rope_style = RopeStyle::Half, c.qk_norm = true, c.d_head = 12, c.n_kv_heads = 2;
    c.ffn_bias = c.norm_bias = false, c.attn_bias = true;
    v.push_back({"qwen3_half_qknorm", c, 20});
  }
  {  // Gemma 3: scaled embeddings, norms before and after each sub-layer, GELU-tanh gated
     // FFN, q/k norms, a sliding window of 5 on layer 0 (its own rotary base), global
     // layer 1, a custom score scale and a logit soft-cap, tied head.
    Config c = base_config();
    c.norm = NormKind::RMSNorm, c.pos = PosKind::Rotary, c.ffn = FFNKind::GeGLU;
    c.rope_style = RopeStyle::Half, c.qk_norm = true, c.sandwich_norm = true, c.scale_embed = true;
    c.attn_bias = c.ffn_bias = c.norm_bias = false, c.n_kv_heads = 1;
    c.sliding_window = 5, c.sliding_layers = {1, 0}, c.rope_theta = 1e6f, c.rope_theta_local = 10000.0f;
    c.attn_scale = 0.3f, c.logit_softcap = 3.0f;
    v.push_back({"gemma3_sandwich_window", c, 21});
  }
  return v;
}

// A model of cfg with random weights (normal, standard deviation scale).
inline std::shared_ptr<const Model> random_model(const Config& cfg, uint64_t seed, float scale = 0.08f) {
  return std::make_shared<const Model>(cfg, Weights::random(cfg, seed, scale));
}

}  // namespace ds::test
