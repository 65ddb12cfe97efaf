// llama2.c checkpoints (core/io/llama2c) and the llama2.c tokenizer
// (core/text/llama_tokenizer): round trips, malformed files, encode/decode rules.
#include <gtest/gtest.h>

#include <unistd.h>
#include "helpers.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/llama2c.h"
#include "text/llama_tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;
using ds::Config;
using ds::LlamaTokenizer;
using ds::Weights;

namespace {

using ds::test::TempDir;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<char>& bytes, size_t n = SIZE_MAX) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(std::min(n, bytes.size())));
}

void put_i32(std::vector<char>& b, size_t off, int32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * i)) & 0xFF);
}
void append_i32(std::vector<char>& b, int32_t v) {
  b.resize(b.size() + 4);
  put_i32(b, b.size() - 4, v);
}
void append_f32(std::vector<char>& b, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  append_i32(b, static_cast<int32_t>(u));
}

// Runs load_llama2c and returns the ds::Error message ("" if it loaded). Any other
// exception fails the test.
std::string load_error(const std::string& path) {
  try {
    ds::load_llama2c(path);
    return "";
  } catch (const ds::Error& e) {
    std::string m = e.what();
    EXPECT_FALSE(m.empty());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
}

int64_t expected_bytes(const Config& c, bool shared) {
  const int64_t d = c.d_model, l = c.n_layers, h = c.d_ff, v = c.vocab_size, kv = c.kv_dim();
  int64_t floats = v * d + l * d + l * d * d + 2 * l * kv * d + l * d * d + l * d + 3 * l * h * d + d +
                   int64_t{c.max_seq} * c.d_head + (shared ? 0 : v * d);
  return 28 + 4 * floats;
}

void expect_same_weights(Weights& a, Weights& b) {
  auto ta = a.tensors(), tb = b.tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(ta[i].name, tb[i].name);
    ASSERT_EQ(ta[i].rows, tb[i].rows) << ta[i].name;
    ASSERT_EQ(ta[i].cols, tb[i].cols) << ta[i].name;
    EXPECT_EQ(0, std::memcmp(ta[i].data, tb[i].data, sizeof(float) * ta[i].rows * ta[i].cols)) << ta[i].name;
  }
}

void round_trip(const Config& cfg, uint64_t seed) {
  TempDir tmp;
  const std::string p = tmp.path("model.bin");
  Weights w = Weights::random(cfg, seed);
  ds::save_llama2c(p, cfg, w);
  const bool shared = w.lm_head.size() == 0;
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(p)), expected_bytes(cfg, shared));
  ds::Llama2cModel m = ds::load_llama2c(p);
  EXPECT_EQ(m.shared_classifier, shared);
  const Config& c = m.cfg;
  EXPECT_EQ(c.d_model, cfg.d_model);
  EXPECT_EQ(c.d_ff, cfg.d_ff);
  EXPECT_EQ(c.n_layers, cfg.n_layers);
  EXPECT_EQ(c.n_heads, cfg.n_heads);
  EXPECT_EQ(c.n_kv_heads, cfg.n_kv_heads);
  EXPECT_EQ(c.d_head, cfg.d_head);
  EXPECT_EQ(c.vocab_size, cfg.vocab_size);
  EXPECT_EQ(c.max_seq, cfg.max_seq);
  EXPECT_EQ(c.tied_head, shared);
  EXPECT_EQ(c.norm, ds::NormKind::RMSNorm);
  EXPECT_EQ(c.norm_place, ds::NormPlace::Pre);
  EXPECT_EQ(c.pos, ds::PosKind::Rotary);
  EXPECT_EQ(c.ffn, ds::FFNKind::SwiGLU);
  EXPECT_FALSE(c.attn_bias);
  EXPECT_FALSE(c.ffn_bias);
  EXPECT_FALSE(c.norm_bias);
  EXPECT_TRUE(c.final_norm);
  EXPECT_FALSE(c.encoder_decoder);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_EQ(m.w.lm_head.size() == 0, shared);
  expect_same_weights(w, m.w);
}

// A small valid checkpoint's bytes (dim 8, hidden 12, 2 layers, 2 heads, 1 kv head,
// vocab 10, seq_len 4, shared classifier).
std::vector<char> small_checkpoint(const TempDir& tmp, bool shared = true) {
  Config cfg = ds::llama2c_config(8, 12, 2, 2, 1, 10, 4, shared);
  Weights w = Weights::random(cfg, 11);
  const std::string p = tmp.path("small.bin");
  ds::save_llama2c(p, cfg, w);
  return read_bytes(p);
}

}  // namespace

// ---------------------------------------------------------------- checkpoints

TEST(Llama2c, RoundTripShared) { round_trip(ds::llama2c_config(32, 48, 2, 4, 4, 40, 16, true), 1); }

TEST(Llama2c, RoundTripUnshared) { round_trip(ds::llama2c_config(32, 48, 3, 4, 4, 40, 16, false), 2); }

TEST(Llama2c, RoundTripGroupedQuery) {
  round_trip(ds::llama2c_config(48, 64, 2, 6, 2, 50, 8, true), 3);
  round_trip(ds::llama2c_config(32, 40, 1, 4, 1, 30, 8, false), 4);
}

TEST(Llama2c, HeaderAndLayoutMatchTheFormat) {
  // Hand-check the byte layout: header, then token_embedding_table, then rms_att_weight.
  TempDir tmp;
  Config cfg = ds::llama2c_config(8, 12, 2, 2, 1, 10, 4, false);
  Weights w = Weights::random(cfg, 5);
  const std::string p = tmp.path("m.bin");
  ds::save_llama2c(p, cfg, w);
  std::vector<char> b = read_bytes(p);
  int32_t h[7];
  std::memcpy(h, b.data(), 28);
  EXPECT_EQ(h[0], 8);
  EXPECT_EQ(h[1], 12);
  EXPECT_EQ(h[2], 2);
  EXPECT_EQ(h[3], 2);
  EXPECT_EQ(h[4], 1);
  EXPECT_EQ(h[5], -10);  // unshared classifier
  EXPECT_EQ(h[6], 4);
  float f;
  std::memcpy(&f, b.data() + 28 + 4 * (3 * 8 + 5), 4);
  EXPECT_EQ(f, w.tok_embed(3, 5));
  std::memcpy(&f, b.data() + 28 + 4 * (10 * 8 + 8 + 2), 4);
  EXPECT_EQ(f, w.blocks[1].ln1.g(2));
  std::memcpy(&f, b.data() + b.size() - 4, 4);
  EXPECT_EQ(f, w.lm_head(9, 7));
}

TEST(Llama2c, SaveRejectsOtherArchitectures) {
  TempDir tmp;
  Config gpt;  // defaults: LayerNorm, learned positions, GELU, biases
  Weights w = Weights::random(gpt, 1);
  EXPECT_THROW(ds::save_llama2c(tmp.path("x.bin"), gpt, w), ds::Error);
  Config cfg = ds::llama2c_config(8, 12, 1, 2, 2, 10, 4, true);
  Weights wrong = Weights::random(ds::llama2c_config(8, 16, 1, 2, 2, 10, 4, true), 1);
  EXPECT_THROW(ds::save_llama2c(tmp.path("y.bin"), cfg, wrong), ds::Error);
  EXPECT_THROW(ds::save_llama2c(tmp.path("no/such/dir/z.bin"), cfg, Weights::random(cfg, 1)), ds::Error);
}

TEST(Llama2c, MissingEmptyAndDirectory) {
  TempDir tmp;
  std::string m = load_error(tmp.path("does_not_exist.bin"));
  EXPECT_NE(m.find("does_not_exist.bin"), std::string::npos) << m;
  write_bytes(tmp.path("empty.bin"), {});
  m = load_error(tmp.path("empty.bin"));
  EXPECT_NE(m.find("empty.bin"), std::string::npos) << m;
  EXPECT_NE(m.find("0 bytes"), std::string::npos) << m;
  fs::create_directories(tmp.path("adir"));
  EXPECT_NE(load_error(tmp.path("adir")), "");
}

TEST(Llama2c, TruncatedAtManyOffsets) {
  TempDir tmp;
  const std::vector<char> good = small_checkpoint(tmp);
  const std::string p = tmp.path("cut.bin");
  // Every offset in the header and the first weights, then a stride, then the tail.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < good.size(); n += n < 96 ? 1 : 13) cuts.push_back(n);
  for (size_t n = good.size() - 24; n < good.size(); ++n) cuts.push_back(n);
  for (size_t n : cuts) {
    write_bytes(p, good, n);
    std::string m = load_error(p);
    ASSERT_NE(m, "") << "truncated to " << n << " bytes loaded";
    ASSERT_NE(m.find("cut.bin"), std::string::npos) << m;
  }
  write_bytes(p, good, good.size() - 1);
  std::string m = load_error(p);
  EXPECT_NE(m.find(std::to_string(good.size() - 1) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("needs " + std::to_string(good.size())), std::string::npos) << m;
  write_bytes(p, good);
  EXPECT_EQ(load_error(p), "");
}

TEST(Llama2c, TrailingBytes) {
  TempDir tmp;
  std::vector<char> b = small_checkpoint(tmp);
  const std::string p = tmp.path("long.bin");
  for (int extra : {1, 3, 4, 1000}) {
    std::vector<char> c = b;
    c.resize(c.size() + extra, '\x7f');
    write_bytes(p, c);
    std::string m = load_error(p);
    EXPECT_NE(m.find("trailing"), std::string::npos) << m;
  }
}

TEST(Llama2c, BadHeaderValues) {
  TempDir tmp;
  const std::vector<char> good = small_checkpoint(tmp);
  const std::string p = tmp.path("hdr.bin");
  const int32_t values[] = {0, -1, -8, 3, INT_MIN, INT_MAX, 1 << 30, 1 << 20, 65536};
  for (int field = 0; field < 7; ++field) {
    for (int32_t v : values) {
      std::vector<char> b = good;
      put_i32(b, 4 * field, v);
      write_bytes(p, b);
      EXPECT_NE(load_error(p), "") << "field " << field << " = " << v;
    }
  }
  // n_heads not dividing dim, n_kv_heads not dividing n_heads, odd head size.
  auto header_error = [&](std::vector<int32_t> h) {
    std::vector<char> b = good;
    for (int i = 0; i < 7; ++i) put_i32(b, 4 * i, h[i]);
    write_bytes(p, b);
    return load_error(p);
  };
  std::string m = header_error({8, 12, 2, 3, 1, 10, 4});
  EXPECT_NE(m.find("n_heads does not divide dim"), std::string::npos) << m;
  m = header_error({8, 12, 2, 2, 3, 10, 4});
  EXPECT_NE(m.find("n_kv_heads"), std::string::npos) << m;
  m = header_error({6, 12, 2, 2, 1, 10, 4});
  EXPECT_NE(m.find("odd"), std::string::npos) << m;
  // Absurd sizes: huge products must neither overflow nor allocate.
  m = header_error({1 << 30, 1 << 30, INT_MAX, 1, 1, INT_MAX, INT_MAX});
  EXPECT_NE(m, "");
  m = header_error({1 << 30, 12, 2, 2, 1, 10, 4});  // 2 * 2^60 floats overflow the byte count
  EXPECT_NE(m.find("overflow"), std::string::npos) << m;
  m = header_error({1 << 24, 12, 2, 2, 1, 10, 4});
  EXPECT_NE(m.find("needs"), std::string::npos) << m;
  m = header_error({8, 12, INT_MAX, 2, 1, 10, 4});
  EXPECT_NE(m.find("needs"), std::string::npos) << m;
  m = header_error({8, 12, 2, 2, 1, 10, INT_MAX});
  EXPECT_NE(m.find("needs"), std::string::npos) << m;
  // Flipping the classifier sign changes the expected size.
  m = header_error({8, 12, 2, 2, 1, -10, 4});
  EXPECT_NE(m.find("needs"), std::string::npos) << m;
}

TEST(Llama2c, NonFiniteWeightsAreNamed) {
  TempDir tmp;
  const std::vector<char> good = small_checkpoint(tmp);
  const std::string p = tmp.path("nan.bin");
  auto poison = [&](size_t float_index, float value) {
    std::vector<char> b = good;
    std::memcpy(b.data() + 28 + 4 * float_index, &value, 4);
    write_bytes(p, b);
    return load_error(p);
  };
  // dim 8, vocab 10, 2 layers: embedding 80 floats, rms_att 16, then wq.
  std::string m = poison(80 + 16 + 64 + 3, std::numeric_limits<float>::quiet_NaN());  // wq, layer 1
  EXPECT_NE(m.find("wq (layer 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("NaN"), std::string::npos) << m;
  m = poison(5, std::numeric_limits<float>::infinity());
  EXPECT_NE(m.find("token_embedding_table"), std::string::npos) << m;
  // rms_final_weight sits right before the freq_cis arrays (seq_len 4 * 2 floats each).
  const size_t n_floats = (good.size() - 28) / 4;
  m = poison(n_floats - 16 - 1, -std::numeric_limits<float>::infinity());
  EXPECT_NE(m.find("rms_final_weight"), std::string::npos) << m;
  // freq_cis is ignored.
  EXPECT_EQ(poison(n_floats - 1, std::numeric_limits<float>::quiet_NaN()), "");
}

// Every large matrix of w, as the engine reads it.
static std::vector<ds::MatView> matrix_views(const ds::Weights& w) {
  std::vector<ds::MatView> v = {w.embed_view(), w.head_view()};
  for (const ds::Block& b : w.blocks)
    for (const ds::Linear* l : {&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o, &b.ffn.gate, &b.ffn.up, &b.ffn.down})
      v.push_back(l->view());
  return v;
}

// A checkpoint of 16 MB or more is read by several threads, a piece each, and its
// matrices written in tiles as they are read: the same bytes as reading them row-major
// and converting afterwards (Weights::to_tiles), in every precision. The vocabulary
// (5003) leaves a row-major tail of 3 rows after the tiles of the embedding and head.
TEST(Llama2c, TilesWrittenWhileReadingEqualConvertingAfterwards) {
  TempDir tmp;
  for (bool shared : {true, false}) {
    const std::string path = tmp.path(shared ? "shared.bin" : "separate.bin");
    const ds::Config c = ds::llama2c_config(256, 768, 4, 8, 2, 5003, 64, shared);
    ds::save_llama2c(path, c, ds::Weights::random(c, 3));
    ASSERT_GE(std::filesystem::file_size(path), uint64_t{16} << 20);
    for (ds::Precision p : {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16}) {
      SCOPED_TRACE(std::string(ds::precision_name(p)) + (shared ? ", shared head" : ", separate head"));
      ds::Llama2cModel a = ds::load_llama2c(path, p, ds::Llama2cStorage::Tiles);
      ds::Llama2cModel b = ds::load_llama2c(path, p);
      EXPECT_FALSE(b.w.in_tiles());
      b.w.to_tiles();
      const std::vector<ds::MatView> va = matrix_views(a.w), vb = matrix_views(b.w);
      ASSERT_EQ(va.size(), vb.size());
      for (size_t i = 0; i < va.size(); ++i) {
        ASSERT_EQ(va[i].type, vb[i].type);
        ASSERT_EQ(va[i].rows, vb[i].rows);
        ASSERT_EQ(va[i].cols, vb[i].cols);
        EXPECT_EQ(va[i].tile_rows, vb[i].tile_rows) << "matrix " << i;
        EXPECT_EQ(
            std::memcmp(va[i].data, vb[i].data, size_t(va[i].rows * va[i].cols) * ds::precision_bytes(va[i].type)), 0)
            << "matrix " << i;
      }
      EXPECT_EQ(a.w.blocks[3].ln3.g, b.w.blocks[3].ln3.g);
      EXPECT_EQ(a.w.ln_final.g, b.w.ln_final.g);
    }
  }
}

// With several threads reading, the error is the one a single reader would meet
// first: two NaNs far apart in the file, the earlier one is named, every time.
TEST(Llama2c, SeveralReadersNameTheFirstBadValueInTheFile) {
  TempDir tmp;
  const std::string good = tmp.path("good.bin"), path = tmp.path("two_nans.bin");
  const ds::Config c = ds::llama2c_config(256, 768, 4, 8, 8, 4096, 64, true);
  ds::save_llama2c(good, c, ds::Weights::random(c, 4));
  std::ifstream in(good, std::ios::binary);
  const std::vector<char> orig((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<char> b = orig;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // token_embedding_table row 4000, then w3 of the last layer (the file's last matrix).
  const size_t early = 28 + 4 * (size_t{4000} * 256 + 7);
  const size_t late = b.size() - 4 * (size_t{64} * 32 + 256 + 768 * 256 / 2);
  std::memcpy(b.data() + early, &nan, 4);
  std::memcpy(b.data() + late, &nan, 4);
  write_bytes(path, b);
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string m = load_error(path);
    EXPECT_TRUE(ds::test::contains(m, "token_embedding_table") &&
                ds::test::contains(m, "at index " + std::to_string(4000 * 256 + 7)))
        << m;
  }
  // Only the late one: named too.
  std::memcpy(b.data() + early, orig.data() + early, 4);
  write_bytes(path, b);
  const std::string m = load_error(path);
  EXPECT_TRUE(ds::test::contains(m, "w3 (layer 3)") && ds::test::contains(m, "NaN")) << m;
}

TEST(Llama2c, RandomMutationsLoadOrThrow) {
  TempDir tmp;
  const std::vector<char> good = small_checkpoint(tmp, false);
  const std::string p = tmp.path("fuzz.bin");
  std::mt19937 rng(20240611);
  const int32_t interesting[] = {0, 1, 2, 3, 4, 8, 10, 12, -1, -10, INT_MAX, INT_MIN, 1 << 30, 1 << 16, 46341};
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<char> b = good;
    const int n_mut = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_mut; ++k) {
      const int field = static_cast<int>(rng() % 7);
      int32_t v;
      switch (rng() % 3) {
        case 0:
          v = interesting[rng() % std::size(interesting)];
          break;
        case 1:
          v = static_cast<int32_t>(rng() % 40) - 12;
          break;
        default:
          v = static_cast<int32_t>(rng());
          break;
      }
      if (rng() % 4 != 0)
        put_i32(b, 4 * field, v);
      else
        b[rng() % 28] ^= static_cast<char>(1u << (rng() % 8));
    }
    switch (rng() % 4) {
      case 0:
        b.resize(rng() % (b.size() + 1));
        break;
      case 1:
        b.resize(b.size() + rng() % 64, '\x01');
        break;
      default:
        break;
    }
    write_bytes(p, b);
    try {
      ds::load_llama2c(p);
      ++loaded;
    } catch (const ds::Error&) {
    }
  }
  (void)loaded;
  // The untouched file still loads.
  write_bytes(p, good);
  EXPECT_EQ(load_error(p), "");
}

// ---------------------------------------------------------------- tokenizer

namespace {

// ids: 0 <unk>, 1 \n<s>\n, 2 \n</s>\n, 3..258 <0x00>..<0xFF>, then the pieces below.
enum : int { kSpace = 259, kA, kB, kC, kAB, kSpA, kSpAB, kBC, kEAcute, kABC, kCC, kCA, kVocab };

struct TokSpec {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

TokSpec test_vocab() {
  TokSpec s;
  auto add = [&](std::string p, float sc) {
    s.pieces.push_back(std::move(p));
    s.scores.push_back(sc);
  };
  add("<unk>", 0);
  add("\n<s>\n", 0);
  add("\n</s>\n", 0);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0);
  }
  add(" ", -100);
  add("a", -100);
  add("b", -100);
  add("c", -100);
  add("ab", 5);
  add(" a", 3);
  add(" ab", 10);
  add("bc", 5);           // ties with "ab": the first pair wins
  add("\xC3\xA9", -100);  // é
  add("abc", 1);
  add("cc", -2e10f);  // below run.c's starting best score: never merged
  add("ca", 7);
  return s;
}

std::vector<char> tokenizer_bytes(const TokSpec& s, int32_t max_len = -1) {
  std::vector<char> b;
  if (max_len < 0) {
    max_len = 0;
    for (auto& p : s.pieces) max_len = std::max<int32_t>(max_len, static_cast<int32_t>(p.size()));
  }
  append_i32(b, max_len);
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    append_f32(b, s.scores[i]);
    append_i32(b, static_cast<int32_t>(s.pieces[i].size()));
    b.insert(b.end(), s.pieces[i].begin(), s.pieces[i].end());
  }
  return b;
}

LlamaTokenizer load_test_tokenizer(const TempDir& tmp, const TokSpec& s) {
  const std::string p = tmp.path("tok.bin");
  write_bytes(p, tokenizer_bytes(s));
  return LlamaTokenizer::load(p, static_cast<int>(s.pieces.size()));
}

std::string tok_error(const std::string& path, int vocab) {
  try {
    LlamaTokenizer::load(path, vocab);
    return "";
  } catch (const ds::Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
}

using Ids = std::vector<int>;

std::string detok(const LlamaTokenizer& t, const Ids& ids) {
  std::string out;
  for (size_t i = 1; i < ids.size(); ++i) out += t.decode(ids[i - 1], ids[i]);
  return out;
}

}  // namespace

TEST(LlamaTokenizer, LoadsPiecesAndScores) {
  TempDir tmp;
  LlamaTokenizer t = load_test_tokenizer(tmp, test_vocab());
  EXPECT_EQ(t.vocab_size(), kVocab);
  EXPECT_EQ(t.piece(1), "\n<s>\n");
  EXPECT_EQ(t.piece(3 + 0x0A), "<0x0A>");
  EXPECT_EQ(t.piece(kSpAB), " ab");
  EXPECT_FLOAT_EQ(t.score(kSpAB), 10.0f);
  EXPECT_EQ(t.find("ab"), kAB);
  EXPECT_EQ(t.find("zz"), -1);
  EXPECT_EQ(t.max_token_length(), 6);
  EXPECT_THROW(t.piece(-1), ds::Error);
  EXPECT_THROW(t.piece(kVocab), ds::Error);
  EXPECT_THROW(t.decode(0, kVocab), ds::Error);
  EXPECT_THROW(t.decode(0, -5), ds::Error);
}

TEST(LlamaTokenizer, EncodeMergesByScore) {
  TempDir tmp;
  LlamaTokenizer t = load_test_tokenizer(tmp, test_vocab());
  // [BOS, " ", a, b] -> "ab" (5) beats " a" (3) -> " ab" (10).
  EXPECT_EQ(t.encode("ab", true), (Ids{1, kSpAB}));
  EXPECT_EQ(t.encode("ab", false), (Ids{kSpAB}));
  // [" ", a, b, c]: "ab" and "bc" tie at 5, the first wins; then " ab" (10) beats "abc" (1).
  EXPECT_EQ(t.encode("abc", false), (Ids{kSpAB, kC}));
  // [" ", b, c, a]: "ca" (7) beats the earlier "bc" (5).
  EXPECT_EQ(t.encode("bca", false), (Ids{kSpace, kB, kCA}));
  // "cc" scores below -1e10, which run.c never merges.
  EXPECT_EQ(t.encode("cc", false), (Ids{kSpace, kC, kC}));
  // " a" then nothing else merges with "a".
  EXPECT_EQ(t.encode("aa", false), (Ids{kSpA, kA}));
  // The text's own spaces are pieces too.
  EXPECT_EQ(t.encode("ab ab", true), (Ids{1, kSpAB, kSpAB}));
}

TEST(LlamaTokenizer, EncodeBytesAndUtf8) {
  TempDir tmp;
  LlamaTokenizer t = load_test_tokenizer(tmp, test_vocab());
  // A whole UTF-8 character that is a piece.
  EXPECT_EQ(t.encode("\xC3\xA9", false), (Ids{kSpace, kEAcute}));
  EXPECT_EQ(t.encode("a\xC3\xA9", false), (Ids{kSpA, kEAcute}));
  // A character that is not: its bytes + 3 (euro sign E2 82 AC).
  EXPECT_EQ(t.encode("\xE2\x82\xAC", false), (Ids{kSpace, 0xE2 + 3, 0x82 + 3, 0xAC + 3}));
  // ASCII not in the vocabulary, and a newline.
  EXPECT_EQ(t.encode("z\n", true), (Ids{1, kSpace, 'z' + 3, '\n' + 3}));
  // Empty text: BOS only, no dummy prefix.
  EXPECT_EQ(t.encode("", true), (Ids{1}));
  EXPECT_EQ(t.encode("", false), (Ids{}));
}

TEST(LlamaTokenizer, EncodeInvalidUtf8) {
  TempDir tmp;
  LlamaTokenizer t = load_test_tokenizer(tmp, test_vocab());
  EXPECT_EQ(t.encode("\xFF\xFE", false), (Ids{kSpace, 0xFF + 3, 0xFE + 3}));
  // Stray continuation bytes: at most 4 per buffer.
  EXPECT_EQ(t.encode("\x80\x80\x80\x80\x80"
                     "a",
                     false),
            (Ids{kSpace, 0x83, 0x83, 0x83, 0x83, 0x83, kA}));
  // A lead byte cut short by ASCII.
  EXPECT_EQ(t.encode("\xC3"
                     "a",
                     false),
            (Ids{kSpace, 0xC3 + 3, kA}));
  // Like run.c's C string, the text ends at a NUL.
  EXPECT_EQ(t.encode(std::string_view("ab\0ab", 5), true), (Ids{1, kSpAB}));
  // Random bytes never crash and give ids in range.
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s(rng() % 24, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    for (int id : t.encode(s, iter % 2 == 0)) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, kVocab);
    }
  }
}

TEST(LlamaTokenizer, NoDummyPrefixWithoutSpacePiece) {
  TempDir tmp;
  TokSpec s = test_vocab();
  s.pieces[kSpace] = "zz";
  LlamaTokenizer t = load_test_tokenizer(tmp, s);
  EXPECT_EQ(t.encode("ab", true), (Ids{1, kAB}));
}

TEST(LlamaTokenizer, ByteFallbackOutsideVocabThrows) {
  TempDir tmp;
  TokSpec s;
  for (const char* p : {"<unk>", "<s>", "</s>", " ", "a"}) {
    s.pieces.push_back(p);
    s.scores.push_back(0);
  }
  LlamaTokenizer t = load_test_tokenizer(tmp, s);
  EXPECT_EQ(t.encode("a", true), (Ids{1, 3, 4}));
  EXPECT_THROW(t.encode("q", true), ds::Error);
}

TEST(LlamaTokenizer, DecodeRules) {
  TempDir tmp;
  LlamaTokenizer t = load_test_tokenizer(tmp, test_vocab());
  EXPECT_EQ(t.decode(1, kSpAB), "ab");    // leading space dropped after BOS
  EXPECT_EQ(t.decode(kA, kSpAB), " ab");  // kept elsewhere
  EXPECT_EQ(t.decode(1, kA), "a");
  EXPECT_EQ(t.decode(1, kSpace), "");
  EXPECT_EQ(t.decode(kA, kSpace), " ");
  EXPECT_EQ(t.decode(kA, 3 + 0x0A), "\n");  // <0x0A>
  EXPECT_EQ(t.decode(kA, 3 + 0x09), "\t");
  EXPECT_EQ(t.decode(kA, 3 + 'A'), "A");
  EXPECT_EQ(t.decode(kA, 3 + 0x00), "");  // unprintable single bytes vanish
  EXPECT_EQ(t.decode(kA, 3 + 0x01), "");
  EXPECT_EQ(t.decode(kA, 3 + 0x7F), "");
  EXPECT_EQ(t.decode(kA, 3 + 0xC3), "");  // high bytes are not printable in the C locale
  EXPECT_EQ(t.decode(kA, 1), "\n<s>\n");
  EXPECT_EQ(t.decode(kA, kEAcute), "\xC3\xA9");
  EXPECT_EQ(t.piece(3 + 0x0A), "<0x0A>");
}

TEST(LlamaTokenizer, DecodeNearBytePieces) {
  TempDir tmp;
  TokSpec s = test_vocab();
  s.pieces.push_back("<0x4G>");   // not hex
  s.pieces.push_back("<0x41");    // no closing bracket
  s.pieces.push_back(" <0x42>");  // byte after BOS-stripping
  s.pieces.push_back("<0x6a>");   // lower-case hex
  s.scores.resize(s.pieces.size(), 0.0f);
  LlamaTokenizer t = load_test_tokenizer(tmp, s);
  EXPECT_EQ(t.decode(0, kVocab), "<0x4G>");
  EXPECT_EQ(t.decode(0, kVocab + 1), "<0x41");
  EXPECT_EQ(t.decode(1, kVocab + 2), "B");
  EXPECT_EQ(t.decode(0, kVocab + 2), " <0x42>");
  EXPECT_EQ(t.decode(0, kVocab + 3), "j");
}

TEST(LlamaTokenizer, EncodeDecodeRoundTripsPrintableText) {
  TempDir tmp;
  LlamaTokenizer t = load_test_tokenizer(tmp, test_vocab());
  std::mt19937 rng(3);
  const std::string alphabet = "abc abc xyz!\n\t~\xC3\xA9";
  for (int iter = 0; iter < 500; ++iter) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      size_t k = rng() % (alphabet.size() - 1);
      if (alphabet[k] == '\xC3')
        s += "\xC3\xA9";
      else if (alphabet[k] != '\xA9')
        s += alphabet[k];
    }
    EXPECT_EQ(detok(t, t.encode(s, true)), s);
  }
}

TEST(LlamaTokenizer, MalformedFiles) {
  TempDir tmp;
  const TokSpec spec = test_vocab();
  const std::vector<char> good = tokenizer_bytes(spec);
  const std::string p = tmp.path("bad_tok.bin");
  std::string m = tok_error(tmp.path("missing.bin"), kVocab);
  EXPECT_NE(m.find("missing.bin"), std::string::npos) << m;
  write_bytes(p, {});
  EXPECT_NE(tok_error(p, kVocab), "");
  // Truncations: every offset in the first tokens, then a stride.
  for (size_t n = 0; n < good.size(); n += n < 128 ? 1 : 5) {
    write_bytes(p, good, n);
    m = tok_error(p, kVocab);
    ASSERT_NE(m, "") << n;
    ASSERT_NE(m.find("bad_tok.bin"), std::string::npos) << m;
  }
  write_bytes(p, good);
  EXPECT_EQ(tok_error(p, kVocab), "");
  // A vocabulary larger or smaller than the file's.
  EXPECT_NE(tok_error(p, kVocab + 1).find("truncated"), std::string::npos);
  EXPECT_NE(tok_error(p, kVocab - 1).find("bytes after"), std::string::npos);
  EXPECT_NE(tok_error(p, 0), "");
  EXPECT_NE(tok_error(p, -3), "");
  EXPECT_NE(tok_error(p, INT_MAX), "");
  // Trailing bytes.
  std::vector<char> b = good;
  b.push_back('x');
  write_bytes(p, b);
  EXPECT_NE(tok_error(p, kVocab), "");
  // max_token_length zero, negative, huge, or below a token's length.
  for (int32_t v : {0, -1, INT_MIN, INT_MAX, 5}) {
    b = good;
    put_i32(b, 0, v);
    write_bytes(p, b);
    EXPECT_NE(tok_error(p, kVocab), "") << v;
  }
  // Token 0's length: negative, huge, past the end.
  for (int32_t v : {-1, INT_MIN, INT_MAX, 7}) {
    b = good;
    put_i32(b, 8, v);
    write_bytes(p, b);
    m = tok_error(p, kVocab);
    EXPECT_NE(m.find("token 0"), std::string::npos) << v << ": " << m;
  }
  // NaN score.
  b = good;
  uint32_t nan_bits = 0x7FC00000u;
  put_i32(b, 4, static_cast<int32_t>(nan_bits));
  write_bytes(p, b);
  EXPECT_NE(tok_error(p, kVocab).find("NaN"), std::string::npos);
  // Random byte mutations: load or throw ds::Error.
  std::mt19937 rng(99);
  for (int iter = 0; iter < 1000; ++iter) {
    b = good;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] = static_cast<char>(rng() % 256);
    if (rng() % 3 == 0) b.resize(rng() % b.size());
    write_bytes(p, b);
    try {
      LlamaTokenizer t = LlamaTokenizer::load(p, kVocab);
      (void)t.encode("abc \xC3\xA9 xyz", true);
    } catch (const ds::Error&) {
    }
  }
}

// ---------------------------------------------------------------- real fixture

namespace {
std::string fixture(const std::string& name) { return std::string(DS_SHARED_DIR) + "/fixtures/aidreams260K/" + name; }
}  // namespace

TEST(Llama2cFixture, Aidreams260K) {
  if (!fs::exists(fixture("model.bin"))) GTEST_SKIP() << "fixture " << fixture("model.bin") << " is absent";
  ds::Llama2cModel m = ds::load_llama2c(fixture("model.bin"));
  EXPECT_EQ(m.cfg.d_model, 64);
  EXPECT_EQ(m.cfg.d_ff, 172);
  EXPECT_EQ(m.cfg.n_layers, 4);
  EXPECT_EQ(m.cfg.n_heads, 4);
  EXPECT_EQ(m.cfg.n_kv_heads, 4);
  EXPECT_EQ(m.cfg.d_head, 16);
  EXPECT_EQ(m.cfg.vocab_size, 512);
  EXPECT_EQ(m.cfg.max_seq, 128);
  EXPECT_TRUE(m.shared_classifier);
  EXPECT_TRUE(m.cfg.tied_head);
  EXPECT_EQ(m.w.lm_head.size(), 0);
  EXPECT_NO_THROW(m.w.check_finite());

  // Saving it again gives the same bytes except the ignored freq_cis arrays.
  TempDir tmp;
  ds::save_llama2c(tmp.path("again.bin"), m.cfg, m.w);
  std::vector<char> a = read_bytes(fixture("model.bin")), b = read_bytes(tmp.path("again.bin"));
  ASSERT_EQ(a.size(), b.size());
  const size_t freq_bytes = 4 * 128 * 16;
  const size_t weights_end = a.size() - freq_bytes;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), weights_end));
}

TEST(Llama2cFixture, Tok512) {
  if (!fs::exists(fixture("tok512.bin"))) GTEST_SKIP() << "fixture " << fixture("tok512.bin") << " is absent";
  LlamaTokenizer t = LlamaTokenizer::load(fixture("tok512.bin"), 512);
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.piece(1), "\n<s>\n");
  EXPECT_EQ(t.piece(2), "\n</s>\n");
  EXPECT_EQ(t.piece(3 + 0x0A), "<0x0A>");
  const std::string prompt = "The robot dreams of";
  Ids ids = t.encode(prompt, true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(detok(t, ids), prompt);

  // run.c's printed text of the greedy run is the decode of its ids, then "\n".
  if (!fs::exists(fixture("greedy_from_bos.ids"))) return;
  std::ifstream in(fixture("greedy_from_bos.ids"));
  Ids drawn{1};
  for (int id; in >> id;) drawn.push_back(id);
  ASSERT_EQ(drawn.size(), 129u);
  std::vector<char> txt = read_bytes(fixture("greedy_from_bos.txt"));
  EXPECT_EQ(detok(t, drawn) + "\n", std::string(txt.begin(), txt.end()));
}
