// Loading straight into 16-bit weights (core/io/model_folder, llama2c, loader): a file
// in the requested 16-bit dtype is copied bit for bit, other dtypes are rounded to
// nearest even, llama2.c checkpoints are narrowed as they are read, 16-bit weights
// are saved in their own type, and 16-bit models compute nearly the float32 logits.
//
// The expected bits come from an independent reading of the file (its JSON header
// and bytes, parsed here) and from a rounding oracle that searches the sorted table
// of every finite 16-bit value, not from the library's conversions.
#include <gtest/gtest.h>

#include <unistd.h>
#include "helpers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/llama2c.h"
#include "io/loader.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "util/error.h"

namespace fs = std::filesystem;
using ds::Precision;
using nlohmann::json;

namespace {

using ds::test::TempDir;

using ds::test::contains;
using ds::test::error_of;

// ------------------------------------------------------------ an independent reader

// A safetensors file parsed here: header JSON and the data section's bytes.
struct RawFile {
  json header;
  std::string data;

  static RawFile read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(size_t(i)));
    RawFile r;
    r.header = json::parse(bytes.substr(8, n));
    r.data = bytes.substr(8 + n);
    return r;
  }
  std::string dtype(const std::string& name) const { return header.at(name).at("dtype"); }
  std::vector<int64_t> shape(const std::string& name) const { return header.at(name).at("shape"); }
  // The tensor's bytes as little-endian 16-bit words.
  std::vector<uint16_t> words16(const std::string& name) const {
    const uint64_t b = header.at(name).at("data_offsets")[0], e = header.at(name).at("data_offsets")[1];
    std::vector<uint16_t> out;
    for (uint64_t i = b; i + 1 < e; i += 2)
      out.push_back(uint16_t(uint8_t(data[i]) | uint16_t(uint8_t(data[i + 1])) << 8));
    return out;
  }
  std::vector<float> floats(const std::string& name) const {
    const uint64_t b = header.at(name).at("data_offsets")[0], e = header.at(name).at("data_offsets")[1];
    std::vector<float> out;
    for (uint64_t i = b; i + 3 < e; i += 4) {
      uint32_t u = 0;
      for (int k = 3; k >= 0; --k) u = (u << 8) | uint8_t(data[i + uint64_t(k)]);
      float f;
      std::memcpy(&f, &u, 4);
      out.push_back(f);
    }
    return out;
  }
};

// ------------------------------------------------------------ a rounding oracle

// The value of a 16-bit pattern with `man` mantissa bits and exponent bias `bias`,
// computed from its fields.
double value_of(uint16_t bits, int man, int bias) {
  const int exp_bits = 15 - man;
  const int e = (bits >> man) & ((1 << exp_bits) - 1);
  const int m = bits & ((1 << man) - 1);
  double v;
  if (e == (1 << exp_bits) - 1)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(double(m), 1 - bias - man);
  else
    v = std::ldexp(double((1 << man) | m), e - bias - man);
  return (bits & 0x8000) ? -v : v;
}
double f16_value(uint16_t b) { return value_of(b, 10, 15); }
double bf16_value(uint16_t b) { return value_of(b, 7, 127); }

// Round-to-nearest-even into a 16-bit format by searching the sorted positive values
// of every finite pattern, plus the infinity pattern standing for the next power of
// two (so values at or beyond the midpoint above the largest finite value round to
// infinity, as IEEE rounding does).
class Rounder {
 public:
  explicit Rounder(Precision p) : p_(p) {
    const uint16_t inf = p == Precision::BF16 ? 0x7F80 : 0x7C00;
    for (uint32_t b = 0; b < inf; ++b) values_.push_back(value(uint16_t(b)));
    // The largest finite value plus one unit in the last place, a power of two.
    values_.push_back(values_.back() + (values_.back() - values_[values_.size() - 2]));
  }
  uint16_t operator()(float x) const {
    if (std::isnan(x)) return p_ == Precision::BF16 ? 0x7FC0 : 0x7E00;
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(double(x));
    auto it = std::lower_bound(values_.begin(), values_.end(), a);
    if (it == values_.end()) return uint16_t(sign | (values_.size() - 1));  // infinity
    size_t hi = size_t(it - values_.begin());
    if (values_[hi] == a || hi == 0) return uint16_t(sign | hi);
    const size_t lo = hi - 1;
    const double dlo = a - values_[lo], dhi = values_[hi] - a;
    const size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return uint16_t(sign | pick);
  }
  double value(uint16_t b) const { return p_ == Precision::BF16 ? bf16_value(b) : f16_value(b); }

 private:
  Precision p_;
  std::vector<double> values_;  // index = pattern
};

const Rounder& rounder(Precision p) {
  static const Rounder bf16(Precision::BF16), f16(Precision::F16);
  return p == Precision::BF16 ? bf16 : f16;
}

// ------------------------------------------------------------ models

std::vector<std::string> chars_vocab(int n) {
  std::vector<std::string> v = {"<pad>", "<s>", "</s>"};
  for (int i = 0; int(v.size()) < n; ++i) v.push_back(std::string(1, char('a' + i % 26)) + std::to_string(i / 26));
  v.resize(size_t(n));
  return v;
}
json chars_tokenizer(int n) { return {{"kind", "chars"}, {"vocab", chars_vocab(n)}}; }

// Decoder-only, RMSNorm, rotary, SwiGLU, grouped keys, untied head.
ds::Config decoder_config() { return ds::test::tiny_llama_config(); }

// Encoder-decoder, post-norm LayerNorm with biases, learned positions, tied head, final norms.
ds::Config encdec_config() {
  ds::Config c = ds::test::tiny_encdec_config();
  c.n_enc_layers = 1;
  c.pos = ds::PosKind::Learned;
  c.final_norm = c.enc_final_norm = true;
  c.scale_embed = false;
  return c;
}

bool is_vector(const std::string& name) {
  return name.size() > 2 &&
         (name.compare(name.size() - 2, 2, ".g") == 0 || name.compare(name.size() - 2, 2, ".b") == 0);
}

std::vector<uint16_t> bits_of(const ds::Weights::TensorRef& t) {
  return std::vector<uint16_t>(t.data16, t.data16 + t.rows * t.cols);
}
std::vector<uint16_t> bits_of(const ds::Mat16& h) { return std::vector<uint16_t>(h.data.begin(), h.data.end()); }

std::map<std::string, ds::Weights::TensorRef> by_name(ds::Weights& w) {
  std::map<std::string, ds::Weights::TensorRef> m;
  for (auto& t : w.tensors()) m.emplace(t.name, t);
  return m;
}

// Every tensor of a and b: same names, shapes and storage, identical bits.
void expect_identical(ds::Weights& a, ds::Weights& b) {
  auto ta = a.tensors(), tb = b.tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    SCOPED_TRACE(ta[i].name);
    ASSERT_EQ(ta[i].name, tb[i].name);
    ASSERT_EQ(ta[i].rows, tb[i].rows);
    ASSERT_EQ(ta[i].cols, tb[i].cols);
    ASSERT_EQ(ta[i].type, tb[i].type);
    ASSERT_EQ(ta[i].data == nullptr, tb[i].data == nullptr);
    const size_t n = size_t(ta[i].rows * ta[i].cols);
    if (ta[i].data)
      EXPECT_EQ(0, std::memcmp(ta[i].data, tb[i].data, n * sizeof(float)));
    else
      EXPECT_EQ(0, std::memcmp(ta[i].data16, tb[i].data16, n * sizeof(uint16_t)));
  }
}

// A GPT-2 checkpoint as Hugging Face stores it (Conv1D weights [in, out]).
struct TinyGPT2 {
  int d, n_head, n_layer, ff, n_pos, vocab;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
};

TinyGPT2 make_gpt2(int d, int n_head, int ff, int vocab, uint64_t seed) {
  TinyGPT2 g{d, n_head, 2, ff, 9, vocab, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool gain) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = gain ? 1.0f + 0.1f * nd(rng) : 0.2f * nd(rng);
    g.tensors[name] = {shape, v};
  };
  add("wte.weight", {vocab, d}, false);
  add("wpe.weight", {g.n_pos, d}, false);
  for (int l = 0; l < g.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {d}, true);
    add(p + "ln_1.bias", {d}, false);
    add(p + "attn.c_attn.weight", {d, 3 * d}, false);
    add(p + "attn.c_attn.bias", {3 * d}, false);
    add(p + "attn.c_proj.weight", {d, d}, false);
    add(p + "attn.c_proj.bias", {d}, false);
    add(p + "ln_2.weight", {d}, true);
    add(p + "ln_2.bias", {d}, false);
    add(p + "mlp.c_fc.weight", {d, ff}, false);
    add(p + "mlp.c_fc.bias", {ff}, false);
    add(p + "mlp.c_proj.weight", {ff, d}, false);
    add(p + "mlp.c_proj.bias", {d}, false);
  }
  add("ln_f.weight", {d}, true);
  add("ln_f.bias", {d}, false);
  return g;
}

void write_gpt2(const std::string& dir, const TinyGPT2& g, const std::string& dtype, const float* lm_head = nullptr) {
  fs::create_directories(dir);
  std::vector<ds::SafeTensorOut> out;
  for (auto& [name, t] : g.tensors) out.push_back({name, t.first, t.second.data(), dtype});
  if (lm_head) out.push_back({"lm_head.weight", {g.vocab, g.d}, lm_head, dtype});
  ds::save_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
  const json conf = {{"model_type", "gpt2"},
                     {"n_embd", g.d},
                     {"n_layer", g.n_layer},
                     {"n_head", g.n_head},
                     {"n_positions", g.n_pos},
                     {"vocab_size", g.vocab},
                     {"layer_norm_epsilon", 1e-5},
                     {"activation_function", "gelu_new"},
                     {"n_inner", g.ff}};
  std::ofstream(dir + "/config.json") << conf.dump();
}

// Logits of tokens through the engine.
ds::MatRM logits(std::shared_ptr<const ds::Model> m, const std::vector<int>& tokens) {
  ds::Engine e(std::move(m));
  return e.forward_full(tokens);
}

// Largest |a - b| over the logits, and the largest |a|.
std::pair<double, double> logit_gap(const ds::MatRM& a, const ds::MatRM& b) {
  double gap = 0, scale = 0;
  for (int64_t i = 0; i < a.rows(); ++i)
    for (int64_t j = 0; j < a.cols(); ++j) {
      gap = std::max(gap, std::fabs(double(a(i, j)) - double(b(i, j))));
      scale = std::max(scale, std::fabs(double(a(i, j))));
    }
  return {gap, scale};
}

}  // namespace

// ================================================================ the oracle itself

TEST(PrecisionIO, OracleRoundsKnownValues) {
  // Hand-checked patterns: 1, the halfway cases around 1 (ties to even), overflow.
  const Rounder& bf = rounder(Precision::BF16);
  const Rounder& h = rounder(Precision::F16);
  EXPECT_EQ(bf(1.0f), 0x3F80);
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // halfway, down to even
  EXPECT_EQ(bf(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // halfway, up to even
  EXPECT_EQ(bf(-2.0f), 0xC000);
  EXPECT_EQ(bf(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(h(1.0f), 0x3C00);
  EXPECT_EQ(h(65504.0f), 0x7BFF);
  EXPECT_EQ(h(65519.0f), 0x7BFF);
  EXPECT_EQ(h(65520.0f), 0x7C00);
  EXPECT_EQ(h(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(h(std::ldexp(1.0f, -25)), 0x0000);  // halfway to 0: even
  EXPECT_EQ(h(-0.0f), 0x8000);
  EXPECT_EQ(f16_value(0x3555), 0.333251953125);
}

// ================================================================ allocation

// The large matrices sit in one block, in the order a token reads them (decoder
// blocks, head, token embedding, encoder), without overlaps, 64-byte aligned, and
// read as zeros; the small tensors start as they always did (gains 1, the rest 0).
TEST(PrecisionIO, LargeMatricesShareOneBlockInReadingOrder) {
  ds::Config untied_gpt2 = ds::gpt2_config(32, 2, 4, 16, 50);
  untied_gpt2.tied_head = false;
  for (const ds::Config& cfg : {decoder_config(), encdec_config(), ds::gpt2_config(32, 2, 4, 16, 50), untied_gpt2,
                                ds::llama2c_config(16, 24, 2, 4, 2, 30, 8, true)}) {
    for (Precision p : {Precision::F32, Precision::BF16, Precision::F16}) {
      SCOPED_TRACE(cfg.describe() + " " + ds::precision_name(p));
      ds::Weights w = ds::Weights::zeros(cfg, p);
      EXPECT_EQ(w.precision(), p);
      // Reading order by name: blocks.N (in layer order), lm_head, tok_embed, encoder.
      auto rank = [&](const std::string& n) -> std::pair<int, int> {
        if (n.rfind("blocks.", 0) == 0) return {0, std::stoi(n.substr(7))};
        if (n == "lm_head") return {1, 0};
        if (n == "tok_embed") return {2, 0};
        return {3, n.rfind("encoder.blocks.", 0) == 0 ? std::stoi(n.substr(15)) : 1 << 20};
      };
      struct Placed {
        const char *begin, *end;
        std::pair<int, int> rank;
        std::string name;
      };
      std::vector<Placed> placed;
      for (auto& t : w.tensors()) {
        if (is_vector(t.name)) {
          const float want = t.name.size() > 2 && t.name.substr(t.name.size() - 2) == ".g" ? 1.0f : 0.0f;
          for (int64_t i = 0; i < t.rows; ++i) ASSERT_EQ(t.data[i], want) << t.name;
          continue;
        }
        if (t.name.find("pos_embed") != std::string::npos) continue;  // a float32 table of its own
        EXPECT_EQ(t.type, p) << t.name;
        EXPECT_EQ(t.data == nullptr, p != Precision::F32) << t.name;
        const char* begin = t.data ? reinterpret_cast<const char*>(t.data) : reinterpret_cast<const char*>(t.data16);
        const char* end = begin + t.rows * t.cols * ds::precision_bytes(p);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(begin) % 64, 0u) << t.name;
        for (const char* q = begin; q < end; ++q) ASSERT_EQ(*q, 0) << t.name;
        placed.push_back({begin, end, rank(t.name), t.name});
      }
      const int64_t large = int64_t(placed.size());
      // By address: no overlaps, less than 64 bytes between neighbours (one block),
      // and the reading order never goes back. (Within a block the matrices follow
      // the engine's order, gate before up, which tensors() does not list.)
      std::sort(placed.begin(), placed.end(), [](const Placed& x, const Placed& y) { return x.begin < y.begin; });
      for (size_t i = 1; i < placed.size(); ++i) {
        const Placed &a = placed[i - 1], &b = placed[i];
        EXPECT_GE(b.begin, a.end) << b.name << " overlaps " << a.name;
        EXPECT_LT(b.begin - a.end, 64) << b.name << " is not next to " << a.name;
        EXPECT_LE(a.rank, b.rank) << b.name << " comes after " << a.name;
      }
      EXPECT_GT(large, 2 * cfg.n_layers);
    }
  }
}

TEST(PrecisionIO, WeightMatricesBehaveAsValues) {
  ds::Weights w = ds::Weights::random(decoder_config(), 3);
  ds::WMat& q = w.blocks[0].attn.q.W;
  float* where = q.data();
  const ds::MatRM before = q;
  // A copy is deep.
  ds::WMat copy = q;
  EXPECT_NE(copy.data(), q.data());
  copy(0, 0) += 1.0f;
  EXPECT_EQ(q(0, 0), before(0, 0));
  // Assigning the same shape writes in place; a new shape gets storage of its own.
  q = before * 2.0f;
  EXPECT_EQ(q.data(), where);
  EXPECT_EQ(q(1, 2), 2.0f * before(1, 2));
  q = ds::MatRM::Ones(3, 5);
  EXPECT_NE(q.data(), where);
  EXPECT_EQ(q.rows(), 3);
  EXPECT_EQ(q.sum(), 15.0f);
  // A matrix moved out of weights that are then destroyed keeps its block alive.
  ds::WMat kept;
  float k01 = 0.0f;
  {
    ds::Weights tmp = ds::Weights::random(decoder_config(), 4);
    k01 = tmp.blocks[1].ffn.down.W(0, 1);
    kept = std::move(tmp.blocks[1].ffn.down.W);
    EXPECT_EQ(tmp.blocks[1].ffn.down.W.size(), 0);
  }
  EXPECT_EQ(kept(0, 1), k01);
  // Copied weights compute what the originals do (every tensor equal, none shared).
  ds::Weights a = ds::Weights::random(decoder_config(), 5);
  ds::Weights b = a;
  auto ta = a.tensors(), tb = b.tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_NE(ta[i].data, tb[i].data) << ta[i].name;
    EXPECT_EQ(0, std::memcmp(ta[i].data, tb[i].data, size_t(ta[i].rows * ta[i].cols) * sizeof(float))) << ta[i].name;
  }
  // Narrowing moves the matrices into a 16-bit block and keeps every value's rounding.
  ds::Weights n = a;
  n.narrow(Precision::BF16);
  auto tn = n.tensors();
  for (size_t i = 0; i < ta.size(); ++i) {
    if (!tn[i].data16) continue;
    for (int64_t j = 0; j < ta[i].rows * ta[i].cols; ++j)
      ASSERT_EQ(tn[i].data16[j], ds::f32_to_bf16(ta[i].data[j])) << ta[i].name;  // io/safetensors.h
  }
}

// ================================================================ 16-bit files

TEST(PrecisionIO, SixteenBitFolderLoadsBitExact) {
  TempDir tmp;
  for (const ds::Config& cfg : {decoder_config(), encdec_config()}) {
    for (Precision p : {Precision::BF16, Precision::F16}) {
      const char* dtype = p == Precision::BF16 ? "BF16" : "F16";
      SCOPED_TRACE(cfg.describe() + " " + dtype);
      ds::Weights w = ds::Weights::random(cfg, 7);
      if (cfg.encoder_decoder) w.enc_tok_embed = ds::Weights::random(cfg, 8).tok_embed;
      const std::string dir = tmp.path(std::string(dtype) + (cfg.encoder_decoder ? "_encdec" : "_dec"));
      ds::save_model_folder(dir, cfg, w, chars_tokenizer(cfg.vocab_size), {}, dtype);
      const RawFile file = RawFile::read(dir + "/model.safetensors");

      ds::FolderModel m = ds::load_model_folder(dir, p);
      EXPECT_EQ(m.w.precision(), p);
      if (cfg.encoder_decoder) {
        EXPECT_FALSE(m.w.enc_tok_embed16.empty());
      }
      size_t matrices = 0;
      for (auto& t : m.w.tensors()) {
        SCOPED_TRACE(t.name);
        ASSERT_EQ(file.dtype(t.name), dtype);
        if (t.data) {  // norms, biases, position tables: float32, widened exactly
          EXPECT_TRUE(is_vector(t.name) || t.name.find("pos_embed") != std::string::npos);
          const std::vector<uint16_t> raw = file.words16(t.name);
          ASSERT_EQ(raw.size(), size_t(t.rows * t.cols));
          for (size_t i = 0; i < raw.size(); ++i) ASSERT_EQ(double(t.data[i]), rounder(p).value(raw[i])) << i;
        } else {
          ++matrices;
          EXPECT_EQ(t.type, p);
          EXPECT_EQ(bits_of(t), file.words16(t.name));
        }
      }
      EXPECT_GT(matrices, 8u);
      // No float32 copy of any large matrix is left behind.
      EXPECT_EQ(m.w.tok_embed.size(), 0);
      EXPECT_EQ(m.w.blocks[0].attn.q.W.size(), 0);
    }
  }
}

TEST(PrecisionIO, GPT2SixteenBitFolderTransposesTheFileBits) {
  TempDir tmp;
  struct Size {
    int d, n_head, ff, vocab;
  };
  // 12 and 20 are not multiples of 8 (the edges of the blocked transpose); 16 and 64 are.
  for (const Size& s : {Size{12, 3, 20, 31}, Size{16, 2, 64, 40}}) {
    for (Precision p : {Precision::BF16, Precision::F16}) {
      const char* dtype = p == Precision::BF16 ? "BF16" : "F16";
      SCOPED_TRACE(std::to_string(s.d) + " " + dtype);
      const TinyGPT2 g = make_gpt2(s.d, s.n_head, s.ff, s.vocab, 3);
      const std::string dir = tmp.path("gpt2_" + std::to_string(s.d) + dtype);
      write_gpt2(dir, g, dtype);
      const RawFile file = RawFile::read(dir + "/model.safetensors");
      ds::FolderModel m = ds::load_model_folder(dir, p);
      ASSERT_EQ(m.w.precision(), p);
      EXPECT_TRUE(m.cfg.tied_head);
      EXPECT_EQ(bits_of(m.w.tok_embed16), file.words16("wte.weight"));
      const int64_t d = s.d, ff = s.ff;
      for (int l = 0; l < g.n_layer; ++l) {
        const std::string pre = "h." + std::to_string(l) + ".";
        const ds::Block& b = m.w.blocks[size_t(l)];
        // Linear W [out, in] holds Conv1D [in, out] element (in, out): c_attn's columns
        // are q, then k, then v.
        const std::vector<uint16_t> attn = file.words16(pre + "attn.c_attn.weight");
        const std::vector<uint16_t> proj = file.words16(pre + "attn.c_proj.weight");
        const std::vector<uint16_t> fc = file.words16(pre + "mlp.c_fc.weight");
        const std::vector<uint16_t> down = file.words16(pre + "mlp.c_proj.weight");
        for (int64_t o = 0; o < d; ++o)
          for (int64_t i = 0; i < d; ++i) {
            ASSERT_EQ(b.attn.q.W16.data[size_t(o * d + i)], attn[size_t(i * 3 * d + o)]);
            ASSERT_EQ(b.attn.k.W16.data[size_t(o * d + i)], attn[size_t(i * 3 * d + d + o)]);
            ASSERT_EQ(b.attn.v.W16.data[size_t(o * d + i)], attn[size_t(i * 3 * d + 2 * d + o)]);
            ASSERT_EQ(b.attn.o.W16.data[size_t(o * d + i)], proj[size_t(i * d + o)]);
          }
        for (int64_t o = 0; o < ff; ++o)
          for (int64_t i = 0; i < d; ++i) ASSERT_EQ(b.ffn.up.W16.data[size_t(o * d + i)], fc[size_t(i * ff + o)]);
        for (int64_t o = 0; o < d; ++o)
          for (int64_t i = 0; i < ff; ++i) ASSERT_EQ(b.ffn.down.W16.data[size_t(o * ff + i)], down[size_t(i * d + o)]);
        // The c_attn bias is split into float32 q, k and v biases.
        const std::vector<uint16_t> bias = file.words16(pre + "attn.c_attn.bias");
        for (int64_t i = 0; i < d; ++i) {
          ASSERT_EQ(double(b.attn.q.b(i)), rounder(p).value(bias[size_t(i)]));
          ASSERT_EQ(double(b.attn.v.b(i)), rounder(p).value(bias[size_t(2 * d + i)]));
        }
      }
    }
  }
}

TEST(PrecisionIO, GPT2HeadIsTiedOnlyWhenItEqualsTheEmbedding) {
  TempDir tmp;
  const TinyGPT2 g = make_gpt2(16, 2, 32, 27, 5);
  const std::vector<float>& wte = g.tensors.at("wte.weight").second;
  std::vector<float> other = wte;
  other[5] += 0.5f;
  write_gpt2(tmp.path("same"), g, "BF16", wte.data());
  write_gpt2(tmp.path("other"), g, "BF16", other.data());
  ds::FolderModel same = ds::load_model_folder(tmp.path("same"), Precision::BF16);
  EXPECT_TRUE(same.cfg.tied_head);
  EXPECT_TRUE(same.w.lm_head16.empty());
  ds::FolderModel diff = ds::load_model_folder(tmp.path("other"), Precision::BF16);
  EXPECT_FALSE(diff.cfg.tied_head);
  EXPECT_EQ(bits_of(diff.w.lm_head16), RawFile::read(tmp.path("other/model.safetensors")).words16("lm_head.weight"));
  EXPECT_EQ(diff.w.lm_head.size(), 0);
  ds::Model check(diff.cfg, std::move(diff.w));  // a consistent untied 16-bit model
}

// ================================================================ conversions

TEST(PrecisionIO, Float32FileIsRoundedToNearestEven) {
  TempDir tmp;
  // Own format, with values that sit exactly halfway between two bfloat16 or
  // float16 values, and subnormal float16 values.
  ds::Config cfg = decoder_config();
  ds::Weights w = ds::Weights::random(cfg, 21);
  float* q = w.blocks[0].attn.q.W.data();
  q[0] = 1.0f + std::ldexp(1.0f, -8);       // bf16 tie, rounds down to 1
  q[1] = 1.0f + 3 * std::ldexp(1.0f, -8);   // bf16 tie, rounds up
  q[2] = 1.0f + std::ldexp(1.0f, -11);      // f16 tie, rounds down
  q[3] = 1.0f + 3 * std::ldexp(1.0f, -11);  // f16 tie, rounds up
  q[4] = 3e-6f;                             // a float16 subnormal
  q[5] = -0.0f;
  const std::string own = tmp.path("own");
  ds::save_model_folder(own, cfg, w, chars_tokenizer(cfg.vocab_size));
  const TinyGPT2 g = make_gpt2(12, 3, 20, 31, 9);
  const std::string gpt2 = tmp.path("gpt2");
  write_gpt2(gpt2, g, "F32");

  for (Precision p : {Precision::BF16, Precision::F16}) {
    SCOPED_TRACE(ds::precision_name(p));
    const Rounder& round = rounder(p);
    // Own format: each matrix element is the oracle's rounding of the file's float.
    const RawFile file = RawFile::read(own + "/model.safetensors");
    ds::FolderModel m = ds::load_model_folder(own, p);
    for (auto& t : m.w.tensors()) {
      const std::vector<float> want = file.floats(t.name);
      ASSERT_EQ(want.size(), size_t(t.rows * t.cols)) << t.name;
      for (size_t i = 0; i < want.size(); ++i) {
        if (t.data) {
          ASSERT_EQ(t.data[i], want[i]) << t.name << " " << i;  // small tensors stay float32
        } else {
          ASSERT_EQ(t.data16[i], round(want[i])) << t.name << " " << i << " " << want[i];
        }
      }
    }
    // The library's own narrowing of the float32 load agrees.
    ds::FolderModel f32 = ds::load_model_folder(own, Precision::F32);
    f32.w.narrow(p);
    expect_identical(m.w, f32.w);

    // GPT-2: through the Conv1D transpose.
    ds::FolderModel mg = ds::load_model_folder(gpt2, p);
    const std::vector<float>& fc = g.tensors.at("h.1.mlp.c_fc.weight").second;
    for (int64_t o = 0; o < g.ff; ++o)
      for (int64_t i = 0; i < g.d; ++i)
        ASSERT_EQ(mg.w.blocks[1].ffn.up.W16.data[size_t(o * g.d + i)], round(fc[size_t(i * g.ff + o)]));
    const std::vector<float>& wte = g.tensors.at("wte.weight").second;
    for (size_t i = 0; i < wte.size(); ++i) ASSERT_EQ(mg.w.tok_embed16.data[i], round(wte[i]));
    ds::FolderModel gf32 = ds::load_model_folder(gpt2, Precision::F32);
    gf32.w.narrow(p);
    expect_identical(mg.w, gf32.w);
  }
}

TEST(PrecisionIO, OtherSixteenBitTypeConvertsThroughFloat32) {
  TempDir tmp;
  ds::Config cfg = decoder_config();
  ds::Weights w = ds::Weights::random(cfg, 4, 3.0f);
  ds::save_model_folder(tmp.path("bf16"), cfg, w, chars_tokenizer(cfg.vocab_size), {}, "BF16");
  ds::save_model_folder(tmp.path("f16"), cfg, w, chars_tokenizer(cfg.vocab_size), {}, "F16");
  // F16 file as BF16, BF16 file as F16: the file's value, rounded to the other type.
  for (Precision p : {Precision::BF16, Precision::F16}) {
    const bool from_f16 = p == Precision::BF16;
    SCOPED_TRACE(ds::precision_name(p));
    const std::string dir = tmp.path(from_f16 ? "f16" : "bf16");
    const RawFile file = RawFile::read(dir + "/model.safetensors");
    ds::FolderModel m = ds::load_model_folder(dir, p);
    size_t checked = 0;
    for (auto& t : m.w.tensors()) {
      if (t.data) continue;
      const std::vector<uint16_t> raw = file.words16(t.name);
      ASSERT_EQ(raw.size(), size_t(t.rows * t.cols));
      for (size_t i = 0; i < raw.size(); ++i, ++checked) {
        const double v = from_f16 ? f16_value(raw[i]) : bf16_value(raw[i]);
        ASSERT_EQ(t.data16[i], rounder(p)(float(v))) << t.name << " " << i;
      }
    }
    EXPECT_GT(checked, 1000u);
  }
  // A bfloat16 value beyond the float16 range is refused, naming the tensor.
  w.blocks[0].attn.o.W(1, 2) = 1e5f;
  ds::save_model_folder(tmp.path("big"), cfg, w, chars_tokenizer(cfg.vocab_size), {}, "BF16");
  const std::string m = error_of([&] { ds::load_model_folder(tmp.path("big"), Precision::F16); });
  EXPECT_TRUE(contains(m, "blocks.0.attn.o.W") && contains(m, "float16")) << m;
}

// ================================================================ llama2.c

TEST(PrecisionIO, Llama2cIsNarrowedAsItIsRead) {
  TempDir tmp;
  for (bool shared : {true, false}) {
    const ds::Config cfg = ds::llama2c_config(32, 48, 2, 4, 2, 40, 16, shared);
    const std::string path = tmp.path(shared ? "shared.bin" : "unshared.bin");
    ds::save_llama2c(path, cfg, ds::Weights::random(cfg, 12));
    for (Precision p : {Precision::BF16, Precision::F16}) {
      SCOPED_TRACE(std::string(shared ? "shared " : "unshared ") + ds::precision_name(p));
      ds::Llama2cModel narrowed = ds::load_llama2c(path, p);
      ds::Llama2cModel wide = ds::load_llama2c(path);
      // Independent of Weights::narrow: the oracle on each float32 value.
      auto wide_t = by_name(wide.w);
      for (auto& t : narrowed.w.tensors()) {
        const ds::Weights::TensorRef& f = wide_t.at(t.name);
        if (t.data) {
          ASSERT_EQ(0, std::memcmp(t.data, f.data, size_t(t.rows * t.cols) * sizeof(float))) << t.name;
          continue;
        }
        for (int64_t i = 0; i < t.rows * t.cols; ++i) ASSERT_EQ(t.data16[i], rounder(p)(f.data[i])) << t.name << i;
      }
      wide.w.narrow(p);
      expect_identical(narrowed.w, wide.w);
      EXPECT_EQ(narrowed.w.precision(), p);
      EXPECT_EQ(narrowed.w.lm_head16.empty(), shared);
      EXPECT_EQ(narrowed.w.blocks[1].ffn.gate.W.size(), 0);
    }
  }
}

TEST(PrecisionIO, Llama2cSaveWidensSixteenBitWeights) {
  TempDir tmp;
  const ds::Config cfg = ds::llama2c_config(16, 24, 2, 2, 1, 20, 8, false);
  ds::save_llama2c(tmp.path("a.bin"), cfg, ds::Weights::random(cfg, 2));
  ds::Llama2cModel half = ds::load_llama2c(tmp.path("a.bin"), Precision::BF16);
  ds::save_llama2c(tmp.path("b.bin"), cfg, half.w);
  EXPECT_EQ(fs::file_size(tmp.path("a.bin")), fs::file_size(tmp.path("b.bin")));
  // Widened exactly: read back as float32 each value is the bfloat16 value; read back
  // as bfloat16 the bits are unchanged.
  ds::Llama2cModel wide = ds::load_llama2c(tmp.path("b.bin"));
  auto wide_t = by_name(wide.w);
  for (auto& t : half.w.tensors()) {
    if (t.data) continue;
    for (int64_t i = 0; i < t.rows * t.cols; ++i)
      ASSERT_EQ(double(wide_t.at(t.name).data[i]), bf16_value(t.data16[i])) << t.name;
  }
  ds::Llama2cModel again = ds::load_llama2c(tmp.path("b.bin"), Precision::BF16);
  expect_identical(half.w, again.w);
}

// ================================================================ logits

TEST(PrecisionIO, SixteenBitLogitsStayCloseToFloat32) {
  TempDir tmp;
  const std::vector<int> tokens = {1, 7, 3, 19, 4, 4, 11, 2};
  std::vector<std::string> models;
  ds::Config cfg = decoder_config();
  ds::save_model_folder(tmp.path("own"), cfg, ds::Weights::random(cfg, 31), chars_tokenizer(cfg.vocab_size));
  models.push_back(tmp.path("own"));
  write_gpt2(tmp.path("gpt2"), make_gpt2(16, 2, 64, 30, 13), "F32");
  models.push_back(tmp.path("gpt2"));
  const ds::Config lc = ds::llama2c_config(32, 48, 2, 4, 2, 40, 16, false);
  ds::save_llama2c(tmp.path("l.bin"), lc, ds::Weights::random(lc, 14));
  models.push_back(tmp.path("l.bin"));
  for (const std::string& path : models) {
    // load_model's default: tokenizer-less GPT-2 folders need one, so pass the
    // models through the loaders that load_model uses for each kind.
    const bool folder = fs::is_directory(path);
    auto load = [&](Precision p) -> std::shared_ptr<const ds::Model> {
      if (path == tmp.path("own")) return ds::load_model(path, "", p).model;
      if (folder) {
        ds::FolderModel f = ds::load_model_folder(path, p);
        return std::make_shared<const ds::Model>(f.cfg, std::move(f.w));
      }
      ds::Llama2cModel l = ds::load_llama2c(path, p);
      return std::make_shared<const ds::Model>(l.cfg, std::move(l.w));
    };
    const ds::MatRM want = logits(load(Precision::F32), tokens);
    for (Precision p : {Precision::BF16, Precision::F16}) {
      SCOPED_TRACE(path + " " + ds::precision_name(p));
      auto m = load(p);
      ASSERT_EQ(m->w.precision(), p);
      const auto [gap, scale] = logit_gap(want, logits(m, tokens));
      EXPECT_LE(gap, 2e-2) << "largest logit " << scale;
      EXPECT_GT(gap, 0.0);  // the weights really were rounded
      EXPECT_GT(scale, 0.1);
    }
  }
  // load_model reports the precision it loaded.
  EXPECT_EQ(ds::load_model(tmp.path("own"), "", Precision::BF16).precision, Precision::BF16);
  EXPECT_EQ(ds::load_model(tmp.path("l.bin"), "", Precision::F16).model->w.precision(), Precision::F16);
}

// ================================================================ saving 16-bit weights

TEST(PrecisionIO, SavedSixteenBitFolderRoundTripsTheBits) {
  TempDir tmp;
  for (const ds::Config& cfg : {decoder_config(), encdec_config()}) {
    ds::save_model_folder(tmp.path("src"), cfg, ds::Weights::random(cfg, 41), chars_tokenizer(cfg.vocab_size));
    for (Precision p : {Precision::BF16, Precision::F16}) {
      const char* dtype = p == Precision::BF16 ? "BF16" : "F16";
      SCOPED_TRACE(cfg.describe() + " " + dtype);
      ds::FolderModel m = ds::load_model_folder(tmp.path("src"), p);
      // The dtype argument applies to float32 tensors; 16-bit ones keep their type.
      for (const char* arg : {"F32", "BF16", "F16"}) {
        const std::string dir = tmp.path(std::string("out_") + dtype + "_" + arg);
        ds::save_model_folder(dir, m.cfg, m.w, chars_tokenizer(cfg.vocab_size), {}, arg);
        const RawFile file = RawFile::read(dir + "/model.safetensors");
        for (auto& t : m.w.tensors()) {
          SCOPED_TRACE(t.name);
          EXPECT_EQ(file.dtype(t.name), t.data ? std::string(arg) : std::string(dtype));
          if (!t.data) {
            EXPECT_EQ(file.words16(t.name), bits_of(t));
          }
        }
        ds::FolderModel back = ds::load_model_folder(dir, p);
        auto mine = by_name(m.w);
        for (auto& t : back.w.tensors()) {
          ASSERT_FALSE(t.data == nullptr && t.type != p) << t.name;
          if (!t.data) {
            EXPECT_EQ(bits_of(t), bits_of(mine.at(t.name))) << t.name;
          }
        }
        if (std::string(arg) == "F32") expect_identical(back.w, m.w);
      }
      // Read back as float32: each 16-bit value widened exactly.
      const std::string dir = tmp.path(std::string("out_") + dtype + "_F32");
      ds::FolderModel wide = ds::load_model_folder(dir, Precision::F32);
      auto mine = by_name(m.w);
      for (auto& t : wide.w.tensors()) {
        const auto& h = mine.at(t.name);
        if (h.data) continue;
        for (int64_t i = 0; i < t.rows * t.cols; ++i)
          ASSERT_EQ(double(t.data[i]), rounder(p).value(h.data16[i])) << t.name << " " << i;
      }
    }
  }
}

// ================================================================ errors

TEST(PrecisionIO, ValuesOutsideTheTargetRangeAreNamed) {
  TempDir tmp;
  ds::Config cfg = decoder_config();
  ds::Weights w = ds::Weights::random(cfg, 3);
  w.blocks[1].ffn.down.W(2, 3) = 1e6f;  // finite in float32 and bfloat16, not in float16
  ds::save_model_folder(tmp.path("big"), cfg, w, chars_tokenizer(cfg.vocab_size));
  std::string m = error_of([&] { ds::load_model_folder(tmp.path("big"), Precision::F16); });
  EXPECT_TRUE(contains(m, "blocks.1.mlp.down.W") && contains(m, "float16") && contains(m, "1000000")) << m;
  EXPECT_EQ(error_of([&] { ds::load_model_folder(tmp.path("big"), Precision::BF16); }), "");
  const ds::Config lc = ds::llama2c_config(16, 24, 1, 2, 2, 20, 8, true);
  ds::Weights lw = ds::Weights::random(lc, 3);
  lw.blocks[0].attn.v.W(1, 1) = -2e5f;
  ds::save_llama2c(tmp.path("big.bin"), lc, lw);
  m = error_of([&] { ds::load_llama2c(tmp.path("big.bin"), Precision::F16); });
  EXPECT_TRUE(contains(m, "wv") && contains(m, "attn.v.W") && contains(m, "float16")) << m;
  EXPECT_EQ(error_of([&] { ds::load_llama2c(tmp.path("big.bin"), Precision::BF16); }), "");

  // A NaN stored as bfloat16 bits, loaded as bfloat16 (copied raw, still checked).
  const std::vector<uint16_t> bits = {0x3F80, 0x7FC1, 0x4000};
  const float one = 1.0f;
  ds::save_safetensors(tmp.path("nan.safetensors"), {{"x", {3}, nullptr, "BF16", bits.data()}, {"y", {1}, &one}});
  const RawFile raw = RawFile::read(tmp.path("nan.safetensors"));
  EXPECT_EQ(raw.words16("x"), bits);  // written unchanged
  ds::Config tiny = decoder_config();
  tiny.n_layers = 1;
  ds::Weights tw = ds::Weights::random(tiny, 5);
  tw.blocks[0].attn.k.W(0, 2) = std::numeric_limits<float>::quiet_NaN();
  ds::save_model_folder(tmp.path("nan"), tiny, tw, chars_tokenizer(tiny.vocab_size), {}, "BF16");
  m = error_of([&] { ds::load_model_folder(tmp.path("nan"), Precision::BF16); });
  EXPECT_TRUE(contains(m, "blocks.0.attn.k.W") && contains(m, "NaN") && contains(m, "flat index 2")) << m;
  // 16-bit data must be declared F16 or BF16.
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("bad"), {{"x", {3}, nullptr, "F32", bits.data()}}); }), "");
}

TEST(PrecisionIO, FileShrinkingWhileReadingIsNamed) {
  TempDir tmp;
  std::vector<float> v(1000, 0.5f);
  const std::string p = tmp.path("t.safetensors");
  ds::save_safetensors(p, {{"first", {1000}, v.data()}, {"second", {1000}, v.data()}});
  ds::SafeTensors st = ds::SafeTensors::open(p);
  fs::resize_file(p, fs::file_size(p) - 4000);  // "second" is gone
  std::vector<float> out(1000);
  st.read_f32(*st.find("first"), out.data());
  EXPECT_EQ(out, v);
  std::vector<uint16_t> h(1000);
  const std::string m = error_of([&] { st.read_16(*st.find("second"), Precision::BF16, h.data()); });
  EXPECT_TRUE(contains(m, "\"second\"") && contains(m, "t.safetensors") && contains(m, "change")) << m;
  // Ranges outside the tensor are refused.
  EXPECT_NE(error_of([&] { st.read_f32(*st.find("first"), 990, 20, out.data()); }), "");
}

TEST(PrecisionIO, LargeModelsLoadIntact) {
  // Enough float32 weights (about 40 MB) that the loader faults pages in on a second
  // thread while it reads; every value must still arrive unchanged.
  TempDir tmp;
  ds::Config cfg = decoder_config();
  cfg.d_model = 128;
  cfg.n_heads = 8;
  cfg.n_kv_heads = 4;
  cfg.d_head = 16;
  cfg.d_ff = 256;
  cfg.vocab_size = 36000;
  cfg.n_layers = 2;
  ds::Weights w = ds::Weights::random(cfg, 77);
  ds::save_model_folder(tmp.path("big"), cfg, w, {{"kind", "gpt2-bpe"}});
  ds::FolderModel m = ds::load_model_folder(tmp.path("big"), Precision::F32);
  expect_identical(m.w, w);
  ds::FolderModel h = ds::load_model_folder(tmp.path("big"), Precision::BF16);
  w.narrow(Precision::BF16);
  expect_identical(h.w, w);
}
