// safetensors (core/io/safetensors), model folders (core/io/model_folder: Hugging Face
// GPT-2 and decoderscope's own), Config <-> JSON, the character tokenizer and the
// loader's folder / builtin: dispatch: round trips, layout checks with teeth, and
// thousands of corrupted files that must load or throw ds::Error.
#include <gtest/gtest.h>

#include <unistd.h>
#include "helpers.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/loader.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/config_json.h"
#include "model/model.h"
#include "model/reference.h"
#include "text/char_tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Shape = std::vector<int64_t>;

namespace {

using ds::test::TempDir;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& bytes) {
  // A new file rather than a truncated one: ext4 flushes files replaced by truncation
  // on close, which makes thousands of rewrites slow.
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs f and returns the ds::Error message, or "" when it did not throw. Any other
// exception fails the test.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
    return "";
  } catch (const ds::Error& e) {
    std::string m = e.what();
    EXPECT_FALSE(m.empty());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ------------------------------------------------- independent 16-bit float oracles

// Value of an IEEE half, by arithmetic on its fields (not by bit moves).
double oracle_f16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 31)
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(double(man), -24);
  else
    v = std::ldexp(double(1024 + man), exp - 25);
  return sign ? -v : v;
}

double oracle_bf16(uint16_t b) {
  const int sign = b >> 15, exp = (b >> 7) & 255, man = b & 127;
  double v;
  if (exp == 255)
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(double(man), -133);
  else
    v = std::ldexp(double(128 + man), exp - 134);
  return sign ? -v : v;
}

// Round x to the 16-bit format whose value function is `val` and whose largest finite
// positive pattern is max_bits: binary search over the (monotonic) positive
// patterns, then nearest with ties to the even pattern; overflow past the midpoint
// to the next power of two gives infinity. Returns the bit pattern.
uint16_t oracle_narrow(float x, double (*val)(uint16_t), uint16_t max_bits, uint16_t inf_bits, uint16_t qnan) {
  if (std::isnan(x)) return qnan;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  const double top = val(max_bits);
  // The would-be next value after max: max + one ulp (max's ulp is val(max) - val(max-1)).
  const double beyond = top + (top - val(static_cast<uint16_t>(max_bits - 1)));
  if (a >= (top + beyond) / 2) return static_cast<uint16_t>(sign | inf_bits);
  uint16_t lo = 0, hi = max_bits;  // val(lo) <= a < ... find the largest lo with val(lo) <= a
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (val(mid) <= a)
      lo = mid;
    else
      hi = static_cast<uint16_t>(mid - 1);
  }
  if (lo == max_bits) return static_cast<uint16_t>(sign | lo);
  const double dl = a - val(lo), du = val(static_cast<uint16_t>(lo + 1)) - a;
  uint16_t r = lo;
  if (du < dl || (du == dl && (lo & 1))) r = static_cast<uint16_t>(lo + 1);
  return static_cast<uint16_t>(sign | r);
}

uint16_t oracle_to_f16(float x) { return oracle_narrow(x, oracle_f16, 0x7BFF, 0x7C00, 0x7E00); }
uint16_t oracle_to_bf16(float x) { return oracle_narrow(x, oracle_bf16, 0x7F7F, 0x7F80, 0x7FC0); }

float round_f16(float x) { return static_cast<float>(oracle_f16(oracle_to_f16(x))); }

std::vector<float> tricky_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          65504.0f,
                          65519.996f,
                          65520.0f,
                          -65520.0f,
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                          std::ldexp(1.5f, -25),
                          std::ldexp(1.0f, -14),
                          std::nextafter(std::ldexp(1.0f, -14), 0.0f),
                          std::ldexp(1023.5f, -24),  // halfway between the largest subnormal and 2^-14
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + 3 * std::ldexp(1.0f, -11),
                          1.0f + std::ldexp(1.0f, -8),
                          1.0f + 3 * std::ldexp(1.0f, -8),
                          std::ldexp(1.0f, 127) * 1.99609375f,
                          3.3895314e38f,
                          1e-40f,
                          0.1f,
                          -3.14159f};
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::normal_distribution<float> nd;
  for (int i = 0; i < 500; ++i) v.push_back(nd(rng));
  return v;
}

// Same float bits, or both NaN with the same sign.
::testing::AssertionResult same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b)) return ::testing::AssertionSuccess();
  if (std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " (0x" << std::hex << std::bit_cast<uint32_t>(a) << ") vs " << b
                                       << " (0x" << std::bit_cast<uint32_t>(b) << ")";
}

// ------------------------------------------------- raw safetensors files

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

std::string raw_st(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

}  // namespace

// ================================================================ 16-bit floats

TEST(Float16, WideningMatchesOracleForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = ds::f16_to_f32(static_cast<uint16_t>(h));
    const double want = oracle_f16(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(ours)) << h;
      ASSERT_EQ(std::signbit(ours), (h & 0x8000) != 0) << h;
    } else {
      ASSERT_TRUE(same_float(ours, static_cast<float>(want))) << "f16 0x" << std::hex << h;
    }
    const float b = ds::bf16_to_f32(static_cast<uint16_t>(h));
    const double wb = oracle_bf16(static_cast<uint16_t>(h));
    if (std::isnan(wb))
      ASSERT_TRUE(std::isnan(b)) << h;
    else
      ASSERT_TRUE(same_float(b, static_cast<float>(wb))) << "bf16 0x" << std::hex << h;
  }
  // A few by hand.
  EXPECT_EQ(ds::f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(ds::f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(ds::f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::signbit(ds::f16_to_f32(0x8000)));
  EXPECT_EQ(ds::f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(ds::bf16_to_f32(0x3F80), 1.0f);
}

TEST(Float16, NarrowingRoundsToNearestEven) {
  for (float x : tricky_values()) {
    const uint16_t h = ds::f32_to_f16(x), want_h = oracle_to_f16(x);
    const uint16_t b = ds::f32_to_bf16(x), want_b = oracle_to_bf16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(ds::f16_to_f32(h)));
      EXPECT_TRUE(std::isnan(ds::bf16_to_f32(b)));
      EXPECT_EQ(h >> 15, want_h >> 15 | (std::signbit(x) ? 1 : 0));
      continue;
    }
    ASSERT_EQ(h, want_h) << x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
    ASSERT_EQ(b, want_b) << x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
  }
  EXPECT_EQ(ds::f32_to_f16(65520.0f), 0x7C00);  // the tie goes to the even infinity
  EXPECT_EQ(ds::f32_to_f16(65519.996f), 0x7BFF);
  EXPECT_EQ(ds::f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(ds::f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(ds::f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(ds::f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(ds::f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
}

// ================================================================ safetensors

TEST(SafeTensors, RoundTripF32F16BF16) {
  TempDir tmp;
  const std::vector<float> v = tricky_values();
  const std::vector<float> small = {1.5f, -2.0f, 0.25f, 7.0f, 8.0f, 9.0f};
  const std::string p = tmp.path("t.safetensors");
  ds::save_safetensors(p,
                       {{"a.f32", {static_cast<int64_t>(v.size())}, v.data(), "F32"},
                        {"b.f16", {static_cast<int64_t>(v.size())}, v.data(), "F16"},
                        {"c.bf16", {static_cast<int64_t>(v.size())}, v.data(), "BF16"},
                        {"m", {2, 3}, small.data(), "F32"},
                        {"scalar", {}, small.data(), "F32"},
                        {"empty", {0, 5}, nullptr, "F32"}},
                       {{"format", "pt"}, {"note", "caf\xC3\xA9"}});
  const std::string bytes = read_text(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));

  ds::SafeTensors st = ds::SafeTensors::open(p);
  ASSERT_EQ(st.entries().size(), 6u);
  EXPECT_EQ(st.entries()[0].name, "a.f32");  // header order
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("note"), "caf\xC3\xA9");
  ASSERT_NE(st.find("m"), nullptr);
  EXPECT_EQ(st.find("m")->shape, (Shape{2, 3}));
  EXPECT_EQ(st.find("scalar")->numel(), 1);
  EXPECT_EQ(st.find("empty")->numel(), 0);
  EXPECT_EQ(st.find("nope"), nullptr);

  std::vector<float> got(v.size());
  st.read_f32(*st.find("a.f32"), got.data());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_TRUE(same_float(got[i], v[i])) << i;
  st.read_f32(*st.find("b.f16"), got.data(), true);
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = static_cast<float>(oracle_f16(oracle_to_f16(v[i])));
    if (std::isnan(v[i]))
      ASSERT_TRUE(std::isnan(got[i]));
    else
      ASSERT_TRUE(same_float(got[i], want)) << i << " " << v[i];
  }
  st.read_f32(*st.find("c.bf16"), got.data());
  st.release(*st.find("c.bf16"));
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = static_cast<float>(oracle_bf16(oracle_to_bf16(v[i])));
    if (std::isnan(v[i]))
      ASSERT_TRUE(std::isnan(got[i]));
    else
      ASSERT_TRUE(same_float(got[i], want)) << i << " " << v[i];
  }
  // Released pages read back from the file.
  st.read_f32(*st.find("a.f32"), got.data());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_TRUE(same_float(got[i], v[i])) << i;
  std::vector<float> m(6);
  st.read_f32(*st.find("m"), m.data());
  EXPECT_EQ(m, small);
  float s = 0;
  st.read_f32(*st.find("scalar"), &s);
  EXPECT_EQ(s, 1.5f);

  // Moving keeps the mapping valid.
  ds::SafeTensors moved = std::move(st);
  moved.read_f32(*moved.find("m"), m.data());
  EXPECT_EQ(m, small);
}

TEST(SafeTensors, SaveRejectsBadInput) {
  TempDir tmp;
  const float x[2] = {1, 2};
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("a"), {{"a", {2}, x}, {"a", {2}, x}}); }), "");
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("a"), {{"__metadata__", {2}, x}}); }), "");
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("a"), {{"a", {2}, x, "I64"}}); }), "");
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("a"), {{"a", {-2}, x}}); }), "");
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("a"), {{"a\xFF", {2}, x}}); }), "");
  EXPECT_NE(error_of([&] { ds::save_safetensors(tmp.path("no/such/dir/a"), {{"a", {2}, x}}); }), "");
}

TEST(SafeTensors, UnsupportedDtypesAreNamed) {
  TempDir tmp;
  const std::string p = tmp.path("i64.safetensors");
  const std::string h =
      R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"w":{"dtype":"F64","shape":[1],"data_offsets":[16,24]},)"
      R"("u":{"dtype":"U8","shape":[3],"data_offsets":[24,27]}})";
  write_text(p, raw_st(h, std::string(27, '\0')));
  ds::SafeTensors st = ds::SafeTensors::open(p);  // known dtypes open fine
  float out[3];
  for (const char* name : {"ids", "w", "u"}) {
    const std::string m = error_of([&] { st.read_f32(*st.find(name), out); });
    EXPECT_TRUE(contains(m, "unsupported dtype " + st.find(name)->dtype + " for tensor \"" + name + "\"")) << m;
  }
  write_text(p, raw_st(R"({"x":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", "ab"));
  const std::string m = error_of([&] { ds::SafeTensors::open(p); });
  EXPECT_TRUE(contains(m, "unsupported dtype \"Q4_K\"")) << m;
}

TEST(SafeTensors, MalformedFilesAreRejectedWithPlaces) {
  TempDir tmp;
  const std::string p = tmp.path("bad.safetensors");
  auto err = [&](const std::string& bytes) {
    write_text(p, bytes);
    return error_of([&] { ds::SafeTensors::open(p); });
  };
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_EQ(err(raw_st("{" + ok_entry + "}", std::string(8, '\0'))), "");
  EXPECT_TRUE(contains(err(""), "0 bytes"));
  EXPECT_TRUE(contains(err("abc"), "3 bytes"));
  EXPECT_TRUE(contains(err(le64(uint64_t{1} << 62) + "{}"), "limit"));
  EXPECT_TRUE(contains(err(le64(~uint64_t{0}) + "{}"), "limit"));
  std::string m = err(le64(100) + "{}");
  EXPECT_TRUE(contains(m, "past the end")) << m;
  EXPECT_TRUE(contains(m, "bad.safetensors")) << m;
  EXPECT_TRUE(contains(err(raw_st("{\"a\":", "")), "not valid JSON"));
  EXPECT_TRUE(contains(err(raw_st("[1,2]", "")), "not an object"));
  EXPECT_TRUE(contains(err(raw_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                  std::string(8, '\0'))),
                       "twice"));
  // Offsets past the end of the data section, with the offsets in the message.
  m = err(raw_st(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(12, '\0')));
  EXPECT_TRUE(contains(m, "\"w\"")) << m;
  EXPECT_TRUE(contains(m, "[0, 16]")) << m;
  EXPECT_TRUE(contains(m, "12 bytes")) << m;
  // Byte count vs shape.
  m = err(raw_st(R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')));
  EXPECT_TRUE(contains(m, "needs 6")) << m;
  // Overlaps, named both.
  m = err(raw_st(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 std::string(12, '\0')));
  EXPECT_TRUE(contains(m, "overlap")) << m;
  EXPECT_TRUE(contains(m, "\"x\" [0, 8]") && contains(m, "\"y\" [4, 12]")) << m;
  // Same range twice, and a range inside another.
  EXPECT_TRUE(contains(err(raw_st(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                  std::string(8, '\0'))),
                       "overlap"));
  EXPECT_TRUE(contains(err(raw_st(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                  R"("y":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                                  std::string(16, '\0'))),
                       "overlap"));
  // Empty tensors never overlap.
  EXPECT_EQ(err(raw_st(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                       std::string(8, '\0'))),
            "");
  // Shapes whose product overflows.
  m = err(
      raw_st(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", std::string(8, '\0')));
  EXPECT_TRUE(contains(m, "overflow")) << m;
  m = err(raw_st(R"({"w":{"dtype":"F32","shape":[9223372036854775807,0,3],"data_offsets":[0,0]}})", ""));
  EXPECT_EQ(m, "");  // product 0 is fine
  m = err(raw_st(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", std::string(8, '\0')));
  EXPECT_TRUE(contains(m, "overflow")) << m;
  // Wrong JSON types.
  for (const char* bad :
       {R"({"w":3})", R"({"w":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})",
        R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})",
        R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})",
        R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", R"({"w":{"dtype":"F32","shape":[1]}})",
        R"({"__metadata__":{"a":1}})", R"({"__metadata__":[]})"}) {
    EXPECT_NE(err(raw_st(bad, std::string(8, '\0'))), "") << bad;
  }
  // Non-UTF-8 and control characters in a name.
  m = err(raw_st("{\"w\xFF\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0')));
  EXPECT_TRUE(contains(m, "not valid JSON")) << m;
  for (unsigned char c : m) EXPECT_LT(c, 0x80) << m;
  m = err(raw_st(R"({"a\nb":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", std::string(4, '\0')));
  EXPECT_TRUE(contains(m, "a\\x0Ab")) << m;
  // Deep nesting neither overflows the stack when parsed nor when freed.
  EXPECT_TRUE(contains(err(raw_st(std::string(200000, '['), "")), "not valid JSON"));
  EXPECT_TRUE(contains(err(raw_st(std::string(200000, '[') + std::string(200000, ']'), "")), "not an object"));
  EXPECT_NE(err(raw_st("{\"w\":" + std::string(200000, '[') + std::string(200000, ']') + "}", "")), "");
  // Header padded with spaces (as written by save_safetensors) and a directory.
  EXPECT_EQ(err(raw_st("{" + ok_entry + "}      ", std::string(8, '\0'))), "");
  EXPECT_NE(error_of([&] { ds::SafeTensors::open(tmp.path("")); }), "");
  EXPECT_NE(error_of([&] { ds::SafeTensors::open(tmp.path("missing")); }), "");
}

// ================================================================ Config JSON

TEST(ConfigJson, RoundTripsEveryField) {
  ds::Config c;
  c.d_model = 48;
  c.n_layers = 3;
  c.n_enc_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.d_head = 10;
  c.d_ff = 77;
  c.vocab_size = 99;
  c.max_seq = 33;
  c.max_src = 21;
  c.norm = ds::NormKind::RMSNorm;
  c.norm_place = ds::NormPlace::Post;
  c.pos = ds::PosKind::Rotary;
  c.ffn = ds::FFNKind::SwiGLU;
  c.encoder_decoder = true;
  c.tied_head = false;
  c.attn_bias = false;
  c.ffn_bias = true;
  c.norm_bias = false;
  c.final_norm = false;
  c.enc_final_norm = true;
  c.scale_embed = true;
  c.norm_eps = 1e-6f;
  c.rope_theta = 500000.0f;
  c.bos_id = 1;
  c.eos_id = 2;
  c.pad_id = 0;
  const json j = ds::config_to_json(c);
  EXPECT_EQ(j["norm"], "rmsnorm");
  EXPECT_EQ(j["norm_eps"].dump(), "1e-06");
  const ds::Config r = ds::config_from_json(json::parse(j.dump()));
  EXPECT_EQ(ds::config_to_json(r), j);
  EXPECT_EQ(r.norm_eps, c.norm_eps);
  EXPECT_EQ(r.rope_theta, c.rope_theta);
  EXPECT_EQ(r.pos, c.pos);
  EXPECT_EQ(r.n_kv_heads, 2);
  for (float eps : {1e-5f, 1e-12f, 0.3f, 1.0f / 3.0f, 9.99e-6f}) {
    c.norm_eps = eps;
    EXPECT_EQ(ds::config_from_json(ds::config_to_json(c)).norm_eps, eps);
  }
}

TEST(ConfigJson, ErrorsNameTheField) {
  const json good = ds::config_to_json(ds::Config{});
  auto err = [&](const std::string& key, const json& value) {
    json j = good;
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    return error_of([&] { ds::config_from_json(j); });
  };
  EXPECT_EQ(err("d_model", 64), "");
  EXPECT_TRUE(contains(err("d_model", json(json::value_t::discarded)), "\"d_model\" is missing"));
  EXPECT_TRUE(contains(err("d_model", "64"), "\"d_model\" must be an integer"));
  EXPECT_TRUE(contains(err("d_model", 64.5), "\"d_model\""));
  EXPECT_TRUE(contains(err("d_model", 1e12), "\"d_model\""));
  EXPECT_TRUE(contains(err("d_model", 4294967296LL), "out of range"));
  EXPECT_TRUE(contains(err("d_model", -4), "d_model"));
  EXPECT_TRUE(contains(err("tied_head", 1), "\"tied_head\" must be true or false"));
  EXPECT_TRUE(contains(err("norm", "batchnorm"), "\"norm\""));
  EXPECT_TRUE(contains(err("pos", 3), "\"pos\" must be a string"));
  EXPECT_TRUE(contains(err("norm_eps", "small"), "\"norm_eps\" must be a number"));
  EXPECT_TRUE(contains(err("rope_theta", 1e300), "\"rope_theta\" is out of range"));
  EXPECT_TRUE(contains(err("bos_id", -7), "\"bos_id\""));
  EXPECT_NE(err("eos_id", 1000000), "");
  EXPECT_NE(error_of([&] { ds::config_from_json(json::array()); }), "");
  EXPECT_EQ(ds::norm_kind_from_string("rmsnorm"), ds::NormKind::RMSNorm);
  EXPECT_EQ(ds::ffn_kind_from_string("gelu_tanh"), ds::FFNKind::GELUTanh);
  EXPECT_EQ(ds::pos_kind_from_string("sinusoidal"), ds::PosKind::Sinusoidal);
  EXPECT_EQ(ds::norm_place_from_string("post"), ds::NormPlace::Post);
  EXPECT_THROW(ds::ffn_kind_from_string("GELU"), ds::Error);
}

// ================================================================ char tokenizer

TEST(CharTokenizer, EncodeDecode) {
  ds::CharTokenizer t({"<pad>", "<s>", "</s>", "a", "b", " ", "\xC3\xA9", "\xF0\x9F\x99\x82", "\n", "<"}, 1);
  EXPECT_EQ(t.vocab_size(), 10);
  EXPECT_EQ(t.encode("ab a", true), (std::vector<int>{1, 3, 4, 5, 3}));
  EXPECT_EQ(t.encode("ab a", false), (std::vector<int>{3, 4, 5, 3}));
  EXPECT_EQ(t.encode("", true), (std::vector<int>{1}));
  EXPECT_EQ(t.encode("\xC3\xA9\xF0\x9F\x99\x82\n", false), (std::vector<int>{6, 7, 8}));
  // Specials are never produced from text.
  std::string m = error_of([&] { t.encode("<s>", false); });
  EXPECT_EQ(m, "character 's' (U+0073) is not in this model's vocabulary");
  m = error_of([&] { t.encode("a\xE2\x82\xAC", false); });
  EXPECT_TRUE(contains(m, "(U+20AC) is not in this model's vocabulary")) << m;
  m = error_of([&] { t.encode("\t", false); });
  EXPECT_TRUE(contains(m, "'\\t' (U+0009)")) << m;
  // Invalid UTF-8 names the byte offset.
  for (auto [text, offset] : std::vector<std::pair<std::string, int>>{{"ab\xFF", 2},
                                                                      {"a\xC3", 1},
                                                                      {"\x80", 0},
                                                                      {"a\xC0\xAF", 1},
                                                                      {"ab\xED\xA0\x80", 2},
                                                                      {"\xF4\x90\x80\x80", 0},
                                                                      {"a\xE0\x80\xAF", 1}}) {
    m = error_of([&] { t.encode(text, false); });
    EXPECT_TRUE(contains(m, "not valid UTF-8 at byte " + std::to_string(offset))) << m;
  }
  EXPECT_EQ(t.decode(3, 1), "<s>");
  EXPECT_EQ(t.decode(0, 6), "\xC3\xA9");
  EXPECT_EQ(t.piece(2), "</s>");
  EXPECT_THROW(t.piece(10), ds::Error);
  EXPECT_THROW(t.decode(0, -1), ds::Error);
  ds::CharTokenizer nobos({"x", "y"}, -1);
  EXPECT_EQ(nobos.encode("xy", true), (std::vector<int>{0, 1}));
}

TEST(CharTokenizer, BadVocabularies) {
  EXPECT_NE(error_of([] { ds::CharTokenizer({}, -1); }), "");
  EXPECT_NE(error_of([] { ds::CharTokenizer({"a", ""}, -1); }), "");
  EXPECT_TRUE(contains(error_of([] { ds::CharTokenizer({"a", "b", "a"}, -1); }), "entry 2"));
  EXPECT_NE(error_of([] { ds::CharTokenizer({"a", "<s>", "<s>"}, -1); }), "");
  EXPECT_NE(error_of([] { ds::CharTokenizer({"a", "\xFF"}, -1); }), "");
  EXPECT_NE(error_of([] { ds::CharTokenizer({"a", "b"}, 2); }), "");
  EXPECT_NE(error_of([] { ds::CharTokenizer({"a", "b"}, -2); }), "");
}

// ================================================================ Hugging Face GPT-2

namespace {

// A GPT-2 checkpoint as Hugging Face stores it: name -> (shape, values).
struct HFTensor {
  Shape shape;
  std::vector<float> v;
};
using HFState = std::map<std::string, HFTensor>;

struct TinyGPT2 {
  int d = 8, n_layer = 2, n_head = 2, n_pos = 12, vocab = 23, n_inner = 32;
  HFState s;
};

TinyGPT2 make_tiny_gpt2(uint64_t seed, int n_inner, int d_model = 8, int vocab = 23) {
  TinyGPT2 g;
  g.n_inner = n_inner;
  g.d = d_model;
  g.vocab = vocab;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  auto add = [&](const std::string& name, Shape shape, bool gain) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    HFTensor t{shape, std::vector<float>(static_cast<size_t>(n))};
    for (float& x : t.v) x = gain ? 1.0f + 0.1f * nd(rng) : 0.3f * nd(rng);
    g.s[name] = std::move(t);
  };
  const int64_t d = g.d, ff = g.n_inner;
  add("wte.weight", {g.vocab, d}, false);
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

json gpt2_config_json(const TinyGPT2& g, bool explicit_inner) {
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_embd", g.d},
            {"n_layer", g.n_layer},
            {"n_head", g.n_head},
            {"n_positions", g.n_pos},
            {"n_ctx", g.n_pos},
            {"vocab_size", g.vocab},
            {"layer_norm_epsilon", 1e-05},
            {"activation_function", "gelu_new"},
            {"attn_pdrop", 0.1},
            {"bos_token_id", g.vocab - 1},
            {"eos_token_id", g.vocab - 1},
            {"n_inner", nullptr}};
  if (explicit_inner) j["n_inner"] = g.n_inner;
  return j;
}

// The expected ds::Config and Weights, built entry by entry from the HF arrays
// (values passed through `round`, e.g. F16 rounding).
std::pair<ds::Config, ds::Weights> expected_model(const TinyGPT2& g, float (*round)(float)) {
  ds::Config c;
  c.d_model = g.d;
  c.n_layers = g.n_layer;
  c.n_heads = c.n_kv_heads = g.n_head;
  c.d_head = g.d / g.n_head;
  c.d_ff = g.n_inner;
  c.vocab_size = g.vocab;
  c.max_seq = g.n_pos;
  c.norm = ds::NormKind::LayerNorm;
  c.norm_place = ds::NormPlace::Pre;
  c.pos = ds::PosKind::Learned;
  c.ffn = ds::FFNKind::GELUTanh;
  c.tied_head = true;
  c.final_norm = true;
  c.norm_eps = 1e-5f;
  c.bos_id = c.eos_id = g.vocab - 1;
  ds::Weights w = ds::Weights::zeros(c);
  auto at = [&](const std::string& name, int64_t i) { return round(g.s.at(name).v[static_cast<size_t>(i)]); };
  const int d = g.d, ff = g.n_inner;
  for (int i = 0; i < g.vocab; ++i)
    for (int j = 0; j < d; ++j) w.tok_embed(i, j) = at("wte.weight", i * d + j);
  for (int i = 0; i < g.n_pos; ++i)
    for (int j = 0; j < d; ++j) w.pos_embed(i, j) = at("wpe.weight", i * d + j);
  for (int l = 0; l < g.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    ds::Block& b = w.blocks[static_cast<size_t>(l)];
    for (int i = 0; i < d; ++i) {
      b.ln1.g(i) = at(p + "ln_1.weight", i);
      b.ln1.b(i) = at(p + "ln_1.bias", i);
      b.ln3.g(i) = at(p + "ln_2.weight", i);
      b.ln3.b(i) = at(p + "ln_2.bias", i);
      b.attn.o.b(i) = at(p + "attn.c_proj.bias", i);
      b.ffn.down.b(i) = at(p + "mlp.c_proj.bias", i);
      b.attn.q.b(i) = at(p + "attn.c_attn.bias", i);
      b.attn.k.b(i) = at(p + "attn.c_attn.bias", d + i);
      b.attn.v.b(i) = at(p + "attn.c_attn.bias", 2 * d + i);
    }
    // Conv1D: y = x W + b with W [in, out].
    for (int in = 0; in < d; ++in) {
      for (int out = 0; out < d; ++out) {
        b.attn.q.W(out, in) = at(p + "attn.c_attn.weight", in * 3 * d + out);
        b.attn.k.W(out, in) = at(p + "attn.c_attn.weight", in * 3 * d + d + out);
        b.attn.v.W(out, in) = at(p + "attn.c_attn.weight", in * 3 * d + 2 * d + out);
        b.attn.o.W(out, in) = at(p + "attn.c_proj.weight", in * d + out);
      }
      for (int out = 0; out < ff; ++out) b.ffn.up.W(out, in) = at(p + "mlp.c_fc.weight", in * ff + out);
    }
    for (int i = 0; i < ff; ++i) {
      b.ffn.up.b(i) = at(p + "mlp.c_fc.bias", i);
      for (int out = 0; out < d; ++out) b.ffn.down.W(out, i) = at(p + "mlp.c_proj.weight", i * d + out);
    }
  }
  for (int i = 0; i < d; ++i) {
    w.ln_final.g(i) = at("ln_f.weight", i);
    w.ln_final.b(i) = at("ln_f.bias", i);
  }
  return {c, std::move(w)};
}

float no_round(float x) { return x; }

// Writes config.json and model.safetensors into dir.
void write_gpt2_folder(const std::string& dir, const TinyGPT2& g, const json& config, const std::string& prefix,
                       const std::string& dtype, const HFState* override_state = nullptr,
                       bool with_mask_buffer = true) {
  const HFState& s = override_state ? *override_state : g.s;
  std::vector<ds::SafeTensorOut> out;
  std::vector<std::vector<float>> keep;
  for (auto& [name, t] : s) out.push_back({prefix + name, t.shape, t.v.data(), dtype});
  if (with_mask_buffer) {
    keep.reserve(static_cast<size_t>(g.n_layer));
    for (int l = 0; l < g.n_layer; ++l) {
      std::vector<float> mask(static_cast<size_t>(g.n_pos * g.n_pos), 0.0f);
      for (int i = 0; i < g.n_pos; ++i)
        for (int j = 0; j <= i; ++j) mask[static_cast<size_t>(i * g.n_pos + j)] = 1.0f;
      keep.push_back(std::move(mask));
      out.push_back(
          {prefix + "h." + std::to_string(l) + ".attn.bias", {1, 1, g.n_pos, g.n_pos}, keep.back().data(), dtype});
    }
  }
  ds::save_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
  write_text(dir + "/config.json", config.dump(2));
}

// max |a - b| / max |b| over all logits.
double rel_error(const ds::MatRM& got, const ds::ref::Rows& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t v = 0; v < want[i].size(); ++v) {
      num = std::max(num, std::fabs(double(got(long(i), long(v))) - want[i][v]));
      den = std::max(den, std::fabs(want[i][v]));
    }
  return num / den;
}

ds::MatRM engine_logits(ds::Config c, ds::Weights w, const std::vector<int>& toks) {
  auto model = std::make_shared<const ds::Model>(std::move(c), std::move(w));
  ds::Engine e(model);
  return e.forward_full(toks);
}

const std::vector<int> kTokens = {22, 3, 17, 0, 9, 9, 14, 1, 21, 5};

// Loads dir and returns its logits' relative error against the reference of the
// expected model.
double folder_error(const std::string& dir, const TinyGPT2& g, float (*round)(float)) {
  ds::FolderModel m = ds::load_model_folder(dir);
  auto [c, w] = expected_model(g, round);
  const ds::ref::Rows want = ds::ref::logits(c, w, kTokens);
  return rel_error(engine_logits(m.cfg, std::move(m.w), kTokens), want);
}

}  // namespace

// Loaded in tiles (as load_model keeps models), then converted back, the weights are
// bit for bit those of the row-major load, in float32 and in bfloat16; the matrices
// whose shape allows it were in tiles.
void expect_tiles_load_same(const std::string& dir) {
  for (ds::Precision p : {ds::Precision::F32, ds::Precision::BF16}) {
    SCOPED_TRACE(std::string("tiles, ") + ds::precision_name(p));
    ds::FolderModel want = ds::load_model_folder(dir, p);
    ds::FolderModel got = ds::load_model_folder(dir, p, true);
    EXPECT_TRUE(got.w.in_tiles());
    // Rows read through the views before converting back.
    const ds::MatView e = got.w.embed_view();
    std::vector<float> a(static_cast<size_t>(e.cols)), b(a.size());
    for (int64_t r = 0; r < e.rows; ++r) {
      e.row(r, a.data());
      want.w.embed_view().row(r, b.data());
      ASSERT_EQ(a, b) << "embedding row " << r;
    }
    got.w.to_rows();
    auto g = got.w.tensors(), w = want.w.tensors();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(g[i].name, w[i].name);
      const size_t n = size_t(g[i].rows * g[i].cols);
      if (g[i].data)
        EXPECT_EQ(0, std::memcmp(g[i].data, w[i].data, n * sizeof(float))) << g[i].name;
      else
        EXPECT_EQ(0, std::memcmp(g[i].data16, w[i].data16, n * sizeof(uint16_t))) << g[i].name;
    }
  }
}

TEST(GPT2Folder, LoadsHuggingFaceLayout) {
  TempDir tmp;
  struct Case {
    std::string prefix, dtype;
    bool explicit_inner;
  };
  for (const Case& k : {Case{"", "F32", false}, Case{"transformer.", "F32", true}, Case{"", "F16", true},
                        Case{"transformer.", "F16", false}, Case{"", "BF16", false}}) {
    SCOPED_TRACE(k.prefix + " " + k.dtype);
    TinyGPT2 g = make_tiny_gpt2(42, k.explicit_inner ? 20 : 32);
    const std::string dir = tmp.sub("gpt2_" + k.prefix + k.dtype + std::to_string(k.explicit_inner));
    write_gpt2_folder(dir, g, gpt2_config_json(g, k.explicit_inner), k.prefix, k.dtype);
    ds::FolderModel m = ds::load_model_folder(dir);
    EXPECT_EQ(m.format, "gpt2");
    EXPECT_EQ(m.tokenizer_kind, "gpt2-bpe");
    const ds::Config& c = m.cfg;
    EXPECT_EQ(c.d_model, 8);
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(c.n_heads, 2);
    EXPECT_EQ(c.d_head, 4);
    EXPECT_EQ(c.d_ff, k.explicit_inner ? 20 : 32);
    EXPECT_EQ(c.max_seq, 12);
    EXPECT_EQ(c.vocab_size, 23);
    EXPECT_EQ(c.ffn, ds::FFNKind::GELUTanh);
    EXPECT_EQ(c.norm, ds::NormKind::LayerNorm);
    EXPECT_EQ(c.pos, ds::PosKind::Learned);
    EXPECT_TRUE(c.tied_head && c.final_norm && c.attn_bias && c.ffn_bias);
    EXPECT_EQ(c.eos_id, 22);
    EXPECT_EQ(c.bos_id, 22);

    float (*round)(float) = no_round;
    if (k.dtype == "F16") round = round_f16;
    if (k.dtype == "BF16") round = [](float x) { return static_cast<float>(oracle_bf16(oracle_to_bf16(x))); };
    // Every weight exactly as the independent construction, and the logits match the
    // naive reference.
    auto [ec, ew] = expected_model(g, round);
    auto got = m.w.tensors(), want = ew.tensors();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].name, want[i].name);
      ASSERT_EQ(got[i].rows * got[i].cols, want[i].rows * want[i].cols);
      EXPECT_EQ(0, std::memcmp(got[i].data, want[i].data, sizeof(float) * size_t(got[i].rows * got[i].cols)))
          << got[i].name;
    }
    EXPECT_LE(folder_error(dir, g, round), 1e-4);
    expect_tiles_load_same(dir);
  }
}

// Matrices larger than one read chunk: the transposed Conv1D weights and the
// embedding are written into tiles a block of rows at a time, with a row-major tail.
TEST(GPT2Folder, LoadsIntoPanelsAcrossReadChunks) {
  TempDir tmp;
  TinyGPT2 g = make_tiny_gpt2(7, 1056, 264, 1001);
  for (const std::string dtype : {"F32", "BF16"}) {
    const std::string dir = tmp.sub("gpt2_chunks_" + dtype);
    write_gpt2_folder(dir, g, gpt2_config_json(g, true), "", dtype);
    expect_tiles_load_same(dir);
  }
}

TEST(GPT2Folder, WrongLayoutsDoNotMatch) {
  // The test has teeth: the same arrays stored the wrong way load (shapes agree) but
  // give different logits.
  TempDir tmp;
  TinyGPT2 g = make_tiny_gpt2(7, 32);
  const json cfg = gpt2_config_json(g, false);
  const std::string good = tmp.sub("good");
  write_gpt2_folder(good, g, cfg, "", "F32");
  EXPECT_LE(folder_error(good, g, no_round), 1e-4);

  // Conv1D weights written [out, in] (PyTorch Linear order) under the [in, out] shape.
  HFState untransposed = g.s;
  for (auto& [name, t] : untransposed) {
    if (t.shape.size() != 2 || name.rfind("h.", 0) != 0) continue;  // the blocks' Conv1D weights
    const int64_t in = t.shape[0], out = t.shape[1];
    std::vector<float> v(t.v.size());
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) v[size_t(o * in + i)] = t.v[size_t(i * out + o)];
    t.v = std::move(v);
  }
  const std::string dir1 = tmp.sub("untransposed");
  write_gpt2_folder(dir1, g, cfg, "", "F32", &untransposed);
  EXPECT_GT(folder_error(dir1, g, no_round), 1e-2);

  // k and v columns of c_attn (weight and bias) swapped.
  HFState swapped = g.s;
  const int64_t d = g.d;
  for (int l = 0; l < g.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".attn.c_attn.";
    auto& w = swapped[p + "weight"].v;
    for (int64_t i = 0; i < d; ++i)
      for (int64_t o = 0; o < d; ++o) std::swap(w[size_t(i * 3 * d + d + o)], w[size_t(i * 3 * d + 2 * d + o)]);
    auto& b = swapped[p + "bias"].v;
    for (int64_t o = 0; o < d; ++o) std::swap(b[size_t(d + o)], b[size_t(2 * d + o)]);
  }
  const std::string dir2 = tmp.sub("kv_swapped");
  write_gpt2_folder(dir2, g, cfg, "", "F32", &swapped);
  EXPECT_GT(folder_error(dir2, g, no_round), 1e-2);

  // ln_2 taken for ln_1.
  HFState norms = g.s;
  for (int l = 0; l < g.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    std::swap(norms[p + "ln_1.weight"], norms[p + "ln_2.weight"]);
    std::swap(norms[p + "ln_1.bias"], norms[p + "ln_2.bias"]);
  }
  const std::string dir3 = tmp.sub("norms");
  write_gpt2_folder(dir3, g, cfg, "", "F32", &norms);
  EXPECT_GT(folder_error(dir3, g, no_round), 1e-3);
}

TEST(GPT2Folder, HeadBuffersAndExtras) {
  TempDir tmp;
  TinyGPT2 g = make_tiny_gpt2(3, 32);
  const json cfg = gpt2_config_json(g, false);
  // lm_head equal to wte: tied, ignored.
  HFState s = g.s;
  const std::string dir = tmp.sub("head");
  {
    std::vector<ds::SafeTensorOut> out;
    for (auto& [name, t] : s) out.push_back({"transformer." + name, t.shape, t.v.data()});
    out.push_back({"lm_head.weight", {g.vocab, g.d}, s["wte.weight"].v.data()});
    std::vector<float> mb(1, -1e4f);
    out.push_back({"transformer.h.0.attn.masked_bias", {}, mb.data()});
    ds::save_safetensors(dir + "/model.safetensors", out);
    write_text(dir + "/config.json", cfg.dump());
    ds::FolderModel m = ds::load_model_folder(dir);
    EXPECT_TRUE(m.cfg.tied_head);
    EXPECT_EQ(m.w.lm_head.size(), 0);
    EXPECT_LE(folder_error(dir, g, no_round), 1e-4);
    // A different lm_head is loaded untied.
    std::vector<float> other = s["wte.weight"].v;
    other[5] += 1.0f;
    out[out.size() - 2].data = other.data();
    ds::save_safetensors(dir + "/model.safetensors", out);
    m = ds::load_model_folder(dir);
    EXPECT_FALSE(m.cfg.tied_head);
    EXPECT_EQ(m.w.lm_head(0, 5), other[5]);
  }
  auto load_err = [](const std::string& d) { return error_of([&] { ds::load_model_folder(d); }); };
  // Unknown weights are listed; unknown non-weight buffers are not.
  {
    HFState extra = g.s;
    extra["h.2.ln_1.weight"] = {{g.d}, std::vector<float>(size_t(g.d), 1.0f)};
    extra["h.0.attn.q_proj.weight"] = {{g.d, g.d}, std::vector<float>(size_t(g.d * g.d), 1.0f)};
    const std::string d2 = tmp.sub("extra");
    write_gpt2_folder(d2, g, cfg, "", "F32", &extra);
    const std::string m = load_err(d2);
    EXPECT_TRUE(contains(m, "h.2.ln_1.weight") && contains(m, "h.0.attn.q_proj.weight")) << m;
    HFState buf = g.s;
    buf["position_ids"] = {{3}, {0, 1, 2}};
    write_gpt2_folder(d2, g, cfg, "", "F32", &buf);
    EXPECT_EQ(load_err(d2), "");
  }
  // Missing or mis-shaped tensors are named.
  {
    HFState missing = g.s;
    missing.erase("h.1.mlp.c_fc.bias");
    const std::string d3 = tmp.sub("missing");
    write_gpt2_folder(d3, g, cfg, "", "F32", &missing);
    std::string m = load_err(d3);
    EXPECT_TRUE(contains(m, "h.1.mlp.c_fc.bias") && contains(m, "missing")) << m;
    HFState wrong = g.s;
    wrong["h.0.attn.c_attn.weight"].shape = {24, 8};
    write_gpt2_folder(d3, g, cfg, "", "F32", &wrong);
    m = load_err(d3);
    EXPECT_TRUE(contains(m, "h.0.attn.c_attn.weight") && contains(m, "[24, 8]") && contains(m, "[8, 24]")) << m;
    json more_layers = cfg;
    more_layers["n_layer"] = 3;
    write_gpt2_folder(d3, g, more_layers, "", "F32");
    EXPECT_TRUE(contains(load_err(d3), "h.2."));
  }
  // NaN and infinity are named with the tensor.
  {
    HFState nan = g.s;
    nan["h.1.attn.c_proj.weight"].v[3] = std::numeric_limits<float>::quiet_NaN();
    const std::string d4 = tmp.sub("nan");
    write_gpt2_folder(d4, g, cfg, "", "F32", &nan);
    std::string m = load_err(d4);
    EXPECT_TRUE(contains(m, "h.1.attn.c_proj.weight") && contains(m, "NaN")) << m;
    HFState inf = g.s;
    inf["wpe.weight"].v[0] = std::numeric_limits<float>::infinity();
    write_gpt2_folder(d4, g, cfg, "", "F16", &inf);
    m = load_err(d4);
    EXPECT_TRUE(contains(m, "wpe.weight") && contains(m, "infinite")) << m;
    HFState big = g.s;
    big["ln_f.bias"].v[0] = 1e6f;  // finite in F32, infinite once narrowed to F16
    write_gpt2_folder(d4, g, cfg, "", "F16", &big);
    EXPECT_TRUE(contains(load_err(d4), "ln_f.bias"));
  }
  // Files: pytorch_model.bin only, no config, not a folder, other model types.
  {
    const std::string d5 = tmp.sub("pt");
    write_text(d5 + "/pytorch_model.bin", "PK");
    write_text(d5 + "/config.json", cfg.dump());
    EXPECT_EQ(load_err(d5), d5 + " holds pytorch_model.bin only; decoderscope reads model.safetensors (download it "
                                 "from the same model page)");
    const std::string d6 = tmp.sub("noconfig");
    write_gpt2_folder(d6, g, cfg, "", "F32");
    fs::remove(d6 + "/config.json");
    EXPECT_TRUE(contains(load_err(d6), "config.json"));
    EXPECT_NE(load_err(d6 + "/model.safetensors"), "");
    write_gpt2_folder(d6, g, cfg, "", "F32");
    json llama = cfg;
    llama["model_type"] = "llama";
    write_text(d6 + "/config.json", llama.dump());
    EXPECT_TRUE(contains(load_err(d6), "llama"));
    json act = cfg;
    act["activation_function"] = "swish";
    write_text(d6 + "/config.json", act.dump());
    EXPECT_TRUE(contains(load_err(d6), "activation_function"));
    json relu = cfg;
    relu["activation_function"] = "gelu";
    write_text(d6 + "/config.json", relu.dump());
    EXPECT_EQ(ds::load_model_folder(d6).cfg.ffn, ds::FFNKind::GELU);
    json ctx = cfg;
    ctx.erase("n_positions");
    write_text(d6 + "/config.json", ctx.dump());
    EXPECT_EQ(ds::load_model_folder(d6).cfg.max_seq, g.n_pos);
  }
  // Through load_model: a GPT-2 folder without tokenizer files is an error naming them.
  {
    const std::string d7 = tmp.sub("notok");
    write_gpt2_folder(d7, g, cfg, "", "F32");
    EXPECT_NE(error_of([&] { ds::load_model(d7); }), "");
  }
}

// ================================================================ decoderscope folders

namespace {

std::vector<std::string> chars_vocab(int n) {
  std::vector<std::string> v = {"<pad>", "<s>", "</s>"};
  const std::string letters = "abcdefghijklmnopqrstuvwxyz .,!?'\n";
  for (char c : letters) v.push_back(std::string(1, c));
  for (int i = 0; static_cast<int>(v.size()) < n; ++i) {
    // Two-byte characters U+00C0.. as the rest.
    const int cp = 0xC0 + i;
    v.push_back(std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))});
  }
  v.resize(static_cast<size_t>(n));
  return v;
}

ds::Config decoder_config() { return ds::test::tiny_llama_config(); }

ds::Config encdec_config() { return ds::test::tiny_encdec_config(); }

json chars_tokenizer(int n) { return {{"kind", "chars"}, {"vocab", chars_vocab(n)}}; }

void expect_same(ds::Weights& a, ds::Weights& b) {
  auto ta = a.tensors(), tb = b.tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(ta[i].name, tb[i].name);
    ASSERT_EQ(ta[i].rows, tb[i].rows) << ta[i].name;
    ASSERT_EQ(ta[i].cols, tb[i].cols) << ta[i].name;
    EXPECT_EQ(0, std::memcmp(ta[i].data, tb[i].data, sizeof(float) * size_t(ta[i].rows * ta[i].cols))) << ta[i].name;
  }
}

}  // namespace

TEST(OwnFolder, RoundTripsDecoderAndEncoderDecoder) {
  TempDir tmp;
  for (const ds::Config& cfg : {decoder_config(), encdec_config()}) {
    SCOPED_TRACE(cfg.describe());
    ds::Weights w = ds::Weights::random(cfg, 17);
    if (cfg.encoder_decoder) w.enc_tok_embed = ds::Weights::random(cfg, 18).tok_embed;
    const std::string dir = tmp.path(cfg.encoder_decoder ? "encdec/nested" : "dec");
    const json training = {{"steps", 1200}, {"loss", 1.25}, {"data", "tiny \xC3\xA9"}};
    ds::save_model_folder(dir, cfg, w, chars_tokenizer(cfg.vocab_size), {{"training", training}});
    const json conf = json::parse(read_text(dir + "/config.json"));
    EXPECT_EQ(conf["format"], "decoderscope");
    EXPECT_EQ(conf["version"], 1);
    ds::FolderModel m = ds::load_model_folder(dir);
    EXPECT_EQ(m.format, "decoderscope");
    EXPECT_EQ(m.tokenizer_kind, "chars");
    EXPECT_EQ(m.chars_vocab, chars_vocab(cfg.vocab_size));
    EXPECT_EQ(json::parse(m.training), training);
    EXPECT_EQ(ds::config_to_json(m.cfg), ds::config_to_json(cfg));
    EXPECT_EQ(m.cfg.norm_eps, cfg.norm_eps);
    EXPECT_EQ(m.cfg.pad_id, cfg.pad_id);
    EXPECT_EQ(m.cfg.encoder_decoder, cfg.encoder_decoder);
    expect_same(w, m.w);
    expect_tiles_load_same(dir);

    // Through load_model: chars tokenizer, BOS prompts, EOS stops.
    ds::LoadedModel lm = ds::load_model(dir);
    EXPECT_EQ(lm.kind, "decoderscope");
    EXPECT_EQ(lm.stop_ids, std::vector<int>{2});
    EXPECT_TRUE(lm.bos_prompt);
    ASSERT_TRUE(lm.tokenizer);
    EXPECT_EQ(ds::encode_prompt(lm, "ab"), (std::vector<int>{1, 3, 4}));
    EXPECT_EQ(lm.tokenizer->decode(1, 3), "a");
  }
  // F16 storage rounds each value.
  ds::Config cfg = decoder_config();
  ds::Weights w = ds::Weights::random(cfg, 5);
  ds::save_model_folder(tmp.path("f16"), cfg, w, chars_tokenizer(cfg.vocab_size), {}, "F16");
  ds::FolderModel m = ds::load_model_folder(tmp.path("f16"));
  EXPECT_EQ(m.w.blocks[1].attn.k.W(3, 7), round_f16(w.blocks[1].attn.k.W(3, 7)));
  EXPECT_LT(fs::file_size(tmp.path("f16/model.safetensors")),
            fs::file_size(tmp.path("dec/model.safetensors")) * 6 / 10);
}

TEST(OwnFolder, SaveChecks) {
  TempDir tmp;
  ds::Config cfg = decoder_config();
  ds::Weights w = ds::Weights::random(cfg, 1);
  const json tok = chars_tokenizer(cfg.vocab_size);
  EXPECT_NE(error_of([&] { ds::save_model_folder(tmp.path("a"), cfg, w, chars_tokenizer(3)); }), "");
  EXPECT_NE(error_of([&] { ds::save_model_folder(tmp.path("a"), cfg, w, {{"kind", "words"}}); }), "");
  EXPECT_NE(error_of([&] { ds::save_model_folder(tmp.path("a"), cfg, w, tok, {{"d_model", 3}}); }), "");
  ds::Weights bad = w;
  bad.blocks[0].attn.q.W.resize(3, 3);
  EXPECT_TRUE(contains(error_of([&] { ds::save_model_folder(tmp.path("a"), cfg, bad, tok); }), "blocks.0.attn.q.W"));
  ds::Weights few = w;
  few.blocks.pop_back();
  EXPECT_NE(error_of([&] { ds::save_model_folder(tmp.path("a"), cfg, few, tok); }), "");
  // GPT-2 BPE tokenizer kind is recorded.
  ds::save_model_folder(tmp.path("bpe"), cfg, w, {{"kind", "gpt2-bpe"}});
  EXPECT_EQ(ds::load_model_folder(tmp.path("bpe")).tokenizer_kind, "gpt2-bpe");
}

TEST(OwnFolder, LoadErrors) {
  TempDir tmp;
  ds::Config cfg = decoder_config();
  ds::Weights w = ds::Weights::random(cfg, 1);
  const std::string dir = tmp.path("m");
  ds::save_model_folder(dir, cfg, w, chars_tokenizer(cfg.vocab_size));
  const json conf = json::parse(read_text(dir + "/config.json"));
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = conf;
    edit(j);
    write_text(dir + "/config.json", j.dump());
    return error_of([&] { ds::load_model_folder(dir); });
  };
  EXPECT_EQ(with([](json&) {}), "");
  EXPECT_TRUE(contains(with([](json& j) { j["version"] = 2; }), "version"));
  EXPECT_TRUE(contains(with([](json& j) { j["format"] = "other"; }), "format"));
  EXPECT_TRUE(contains(with([](json& j) { j.erase("d_ff"); }), "\"d_ff\" is missing"));
  std::string m = with([](json& j) { j["n_layers"] = 3; });
  EXPECT_TRUE(contains(m, "parameters")) << m;  // more than the file holds
  m = with([](json& j) { j["ffn_bias"] = true; });
  EXPECT_TRUE(contains(m, "blocks.0.mlp.up.b") && contains(m, "missing")) << m;
  m = with([](json& j) { j["d_ff"] = 39; });
  EXPECT_TRUE(contains(m, "blocks.0.mlp.up.W") && contains(m, "[39, 24]")) << m;
  m = with([](json& j) { j["n_layers"] = 1; });
  EXPECT_TRUE(contains(m, "blocks.1.")) << m;  // unused tensors listed
  m = with([](json& j) { j["d_model"] = 1 << 20; });
  EXPECT_TRUE(contains(m, "parameters")) << m;  // refused before allocating
  m = with([](json& j) { j["vocab_size"] = 16 << 20; });
  EXPECT_NE(m, "");
  m = with([](json& j) {
    j["max_seq"] = 1 << 20;
    j["n_layers"] = 4096;
  });
  EXPECT_NE(m, "");
  EXPECT_TRUE(contains(with([](json& j) { j["tokenizer"]["vocab"][5] = "a"; }), "repeats"));
  EXPECT_TRUE(contains(with([](json& j) { j["tokenizer"]["vocab"][5] = 5; }), "not a string"));
  EXPECT_TRUE(contains(with([](json& j) { j["tokenizer"]["vocab"].erase(0); }), "entries"));
  EXPECT_TRUE(contains(with([](json& j) { j["tokenizer"]["kind"] = "bytes"; }), "kind"));
  EXPECT_TRUE(contains(with([](json& j) { j.erase("tokenizer"); }), "tokenizer"));
  EXPECT_TRUE(contains(with([](json& j) { j["bos_id"] = 99; }), "special token"));
  write_text(dir + "/config.json", "{\"format\": \"decoderscope\", ");
  EXPECT_TRUE(contains(error_of([&] { ds::load_model_folder(dir); }), "not valid JSON"));
  write_text(dir + "/config.json", "[1]");
  EXPECT_NE(error_of([&] { ds::load_model_folder(dir); }), "");
  write_text(dir + "/config.json", conf.dump());
  // A NaN weight is named.
  ds::Weights nan = w;
  nan.blocks[1].ln3.g(2) = std::numeric_limits<float>::quiet_NaN();
  ds::save_model_folder(dir, cfg, nan, chars_tokenizer(cfg.vocab_size));
  m = error_of([&] { ds::load_model_folder(dir); });
  EXPECT_TRUE(contains(m, "blocks.1.ln3.g") && contains(m, "NaN")) << m;
}

TEST(Loader, BuiltinNamesResolveThroughTheDataVariable) {
  TempDir tmp;
  ds::Config cfg = decoder_config();
  const std::string assets = tmp.sub("assets");
  ds::save_model_folder(assets + "/models/tiny", cfg, ds::Weights::random(cfg, 2), chars_tokenizer(cfg.vocab_size));
  const char* old = std::getenv("DECODERSCOPE_DATA");
  const std::string saved = old ? old : "";
  ::setenv("DECODERSCOPE_DATA", assets.c_str(), 1);
  ds::LoadedModel m = ds::load_model("builtin:tiny");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.kind, "decoderscope");
  EXPECT_EQ(ds::resolve_builtin("tiny"), fs::path(assets + "/models/tiny").lexically_normal().string());
  std::string e = error_of([] { ds::load_model("builtin:no_such_model"); });
  EXPECT_TRUE(contains(e, assets)) << e;
  EXPECT_TRUE(contains(e, std::string(DS_SOURCE_DIR) + "/assets")) << e;
  EXPECT_NE(error_of([] { ds::load_model("builtin:../models/tiny"); }), "");
  EXPECT_NE(error_of([] { ds::load_model("builtin:"); }), "");
  if (old)
    ::setenv("DECODERSCOPE_DATA", saved.c_str(), 1);
  else
    ::unsetenv("DECODERSCOPE_DATA");
}

// ================================================================ corrupted files

namespace {

// Loads whatever is in dir; returns true if it loaded, false on ds::Error.
bool loads(const std::string& dir) {
  try {
    ds::FolderModel m = ds::load_model_folder(dir);
    ds::Model model(std::move(m.cfg), std::move(m.w));  // the loaded model is consistent
    return true;
  } catch (const ds::Error&) {
    return false;
  }
}

std::string mutate_bytes(std::string b, std::mt19937& rng, size_t header_end) {
  if (b.size() < 16 || header_end < 16) return b + static_cast<char>(rng());
  const int kind = static_cast<int>(rng() % 8);
  auto pos = [&](size_t limit) { return limit ? rng() % limit : 0; };
  switch (kind) {
    case 0:
      b.resize(pos(b.size() + 1));
      break;  // truncation
    case 1:   // flips in the header
      for (int k = 0; k < 1 + int(rng() % 4); ++k)
        b[8 + pos(std::min(b.size(), header_end) - 8)] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 2: {  // a digit in the header changed
      std::vector<size_t> digits;
      for (size_t i = 8; i < std::min(b.size(), header_end); ++i)
        if (b[i] >= '0' && b[i] <= '9') digits.push_back(i);
      if (!digits.empty()) b[digits[pos(digits.size())]] = static_cast<char>('0' + rng() % 10);
      if (rng() % 3 == 0 && !digits.empty()) b.insert(digits[pos(digits.size())], std::to_string(rng()));
      break;
    }
    case 3: {  // header length
      const uint64_t choices[] = {0,
                                  1,
                                  7,
                                  header_end - 9,
                                  header_end - 7,
                                  header_end,
                                  b.size(),
                                  uint64_t{1} << 40,
                                  ~uint64_t{0},
                                  static_cast<uint64_t>(rng())};
      const std::string n = le64(choices[pos(std::size(choices))]);
      std::copy(n.begin(), n.end(), b.begin());
      break;
    }
    case 4:  // random bytes anywhere
      for (int k = 0; k < 1 + int(rng() % 8); ++k) b[pos(b.size())] = static_cast<char>(rng());
      break;
    case 5: {  // a JSON token replaced
      const char* tokens[] = {
          "\"F16\"",   "\"I64\"",          "null",      "[]", "{}", "-1", "1e300", "\"\xFF\xFE\"", "[0,0]",
          "\"shape\"", "\"data_offsets\"", "\"dtype\"", ",",  ":"};
      const std::string t = tokens[pos(std::size(tokens))];
      const size_t at = 8 + pos(std::min(b.size(), header_end) - 8);
      b.replace(at, std::min<size_t>(1 + rng() % 6, b.size() - at), t);
      break;
    }
    case 6:
      b += std::string(pos(64), static_cast<char>(rng()));
      break;    // trailing bytes
    default: {  // swap two header digits runs: overlapping / shifted offsets
      const std::string find = "\"data_offsets\":[";
      size_t a = b.find(find, pos(header_end));
      if (a != std::string::npos && a < header_end) {
        a += find.size();
        const size_t e = b.find(']', a);
        if (e != std::string::npos)
          b.replace(a, e - a, std::to_string(rng() % 64) + "," + std::to_string(rng() % 2048));
      }
      break;
    }
  }
  return b;
}

}  // namespace

TEST(Robustness, CorruptedSafetensorsLoadOrThrow) {
  TempDir tmp;
  TinyGPT2 g = make_tiny_gpt2(11, 16);
  g.n_layer = 1;
  for (auto it = g.s.begin(); it != g.s.end();) it = it->first.rfind("h.1.", 0) == 0 ? g.s.erase(it) : std::next(it);
  const std::string gdir = tmp.sub("gpt2");
  write_gpt2_folder(gdir, g, gpt2_config_json(g, true), "", "F16");
  const std::string gpt2_good = read_text(gdir + "/model.safetensors");
  ds::Config cfg = decoder_config();
  cfg.n_layers = 1;
  const std::string odir = tmp.path("own");
  ds::save_model_folder(odir, cfg, ds::Weights::random(cfg, 3), chars_tokenizer(cfg.vocab_size));
  const std::string own_good = read_text(odir + "/model.safetensors");
  ASSERT_TRUE(loads(gdir));
  ASSERT_TRUE(loads(odir));

  std::mt19937 rng(20240612);
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const bool gpt2 = iter % 2 == 0;
    const std::string& good = gpt2 ? gpt2_good : own_good;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(good[i]);
    std::string b = mutate_bytes(good, rng, 8 + n);
    if (rng() % 4 == 0) b = mutate_bytes(b, rng, 8 + n);
    const std::string dir = gpt2 ? gdir : odir;
    write_text(dir + "/model.safetensors", b);
    if (loads(dir)) ++loaded;
    // The bare reader too: open, then read every float tensor.
    try {
      ds::SafeTensors st = ds::SafeTensors::open(dir + "/model.safetensors");
      std::vector<float> buf;
      for (const auto& e : st.entries()) {
        if (e.numel() > (1 << 20)) continue;
        buf.resize(static_cast<size_t>(e.numel()) + 1);
        try {
          st.read_f32(e, buf.data(), iter % 3 == 0);
        } catch (const ds::Error&) {
        }
      }
    } catch (const ds::Error&) {
    }
  }
  EXPECT_GT(loaded, 0);  // some mutations are harmless (e.g. a flipped weight byte)
  write_text(gdir + "/model.safetensors", gpt2_good);
  EXPECT_TRUE(loads(gdir));
}

TEST(Robustness, CorruptedConfigsLoadOrThrow) {
  TempDir tmp;
  TinyGPT2 g = make_tiny_gpt2(12, 16);
  const std::string gdir = tmp.sub("gpt2");
  const json gconf = gpt2_config_json(g, true);
  write_gpt2_folder(gdir, g, gconf, "transformer.", "F32");
  ds::Config cfg = encdec_config();
  const std::string odir = tmp.path("own");
  ds::save_model_folder(odir, cfg, ds::Weights::random(cfg, 3), chars_tokenizer(cfg.vocab_size),
                        {{"training", {{"a", 1}}}});
  const json oconf = json::parse(read_text(odir + "/config.json"));
  ASSERT_TRUE(loads(gdir));
  ASSERT_TRUE(loads(odir));

  const std::vector<json> values = {nullptr,
                                    "x",
                                    "",
                                    -1,
                                    0,
                                    1,
                                    2,
                                    3,
                                    7,
                                    8,
                                    16,
                                    1e12,
                                    -1e12,
                                    1.5,
                                    1e-5,
                                    true,
                                    false,
                                    json::array(),
                                    json::object(),
                                    2147483647,
                                    -2147483648LL,
                                    2147483648LL,
                                    4294967296LL,
                                    9223372036854775807LL,
                                    18446744073709551615ULL,
                                    1048576,
                                    1e308,
                                    "gelu",
                                    "relu",
                                    "swiglu",
                                    "rotary",
                                    "layernorm",
                                    "post",
                                    "chars",
                                    "gpt2-bpe",
                                    json::array({"a", "b"}),
                                    json::array({1, 2})};
  std::mt19937 rng(77);
  int loaded = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const bool gpt2 = iter % 2 == 0;
    json j = gpt2 ? gconf : oconf;
    const int n_mut = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_mut; ++k) {
      std::vector<std::string> keys;
      for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
      if (keys.empty()) break;
      const std::string key = keys[rng() % keys.size()];
      switch (rng() % 5) {
        case 0:
          j.erase(key);
          break;
        case 1:
          if (j[key].is_number_integer())
            j[key] = j[key].get<int64_t>() + static_cast<int>(rng() % 5) - 2;
          else
            j[key] = values[rng() % values.size()];
          break;
        case 2:
          if (key == "tokenizer" && j[key].contains("vocab") && !j[key]["vocab"].empty()) {
            auto& v = j[key]["vocab"];
            const size_t i = rng() % v.size();
            switch (rng() % 4) {
              case 0:
                v[i] = values[rng() % values.size()];
                break;
              case 1:
                v[i] = v[(i + 1) % v.size()];
                break;  // duplicate
              case 2:
                v.erase(i);
                break;
              default:
                v[i] = "ab";
                break;
            }
            break;
          }
          [[fallthrough]];
        default:
          j[key] = values[rng() % values.size()];
          break;
      }
    }
    std::string text = j.dump();
    switch (rng() % 6) {
      case 0:
        text.resize(rng() % (text.size() + 1));
        break;
      case 1:
        text[rng() % text.size()] = static_cast<char>(0x80 + rng() % 128);
        break;  // non-UTF-8
      case 2:
        text[rng() % text.size()] = static_cast<char>(rng());
        break;
      default:
        break;
    }
    const std::string dir = gpt2 ? gdir : odir;
    write_text(dir + "/config.json", text);
    if (loads(dir)) ++loaded;
  }
  EXPECT_GT(loaded, 0);
  // Non-UTF-8 in a vocabulary entry of the raw file.
  std::string raw = oconf.dump();
  const size_t at = raw.find("\"</s>\"");
  ASSERT_NE(at, std::string::npos);
  raw.replace(at + 1, 4,
              "\xC3\x28"
              "ab");
  write_text(odir + "/config.json", raw);
  const std::string m = error_of([&] { ds::load_model_folder(odir); });
  EXPECT_TRUE(contains(m, "config.json")) << m;
  for (unsigned char c : m) EXPECT_LT(c, 0x80);
  // Absurd sizes in the GPT-2 config.
  for (auto [key, value] : std::vector<std::pair<std::string, json>>{{"n_embd", 1e12},
                                                                     {"n_embd", 1 << 20},
                                                                     {"n_embd", -8},
                                                                     {"n_layer", 100000},
                                                                     {"n_head", 0},
                                                                     {"n_head", 3},
                                                                     {"vocab_size", 2147483647},
                                                                     {"n_positions", -1},
                                                                     {"n_inner", "big"},
                                                                     {"layer_norm_epsilon", -1}}) {
    json j = gconf;
    j[key] = value;
    write_text(gdir + "/config.json", j.dump());
    const std::string e = error_of([&] { ds::load_model_folder(gdir); });
    EXPECT_NE(e, "") << key;
  }
}
