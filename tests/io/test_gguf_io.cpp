// The GGUF reader and loader on files the test writes (tests/gguf_writer.h): models of
// each llama-family architecture give the logits of the same weights in memory and of
// the double-precision reference; damaged files end in one clear message, never a crash
// or a large allocation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gguf_writer.h"
#include "helpers.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/loader.h"
#include "model/config_json.h"
#include "model/model.h"
#include "model/reference.h"

namespace {

using ds::test::GgufWriter;
using ds::test::TempDir;

// The test variant (tests/helpers.h) that stands for each GGUF architecture.
struct ArchCase {
  std::string arch, variant;
};

ds::Config variant_config(const std::string& name) {
  for (const auto& v : ds::test::variants())
    if (v.name == name) return v.cfg;
  throw std::runtime_error("no variant " + name);
}

ds::Config arch_config(const ArchCase& a) {
  ds::Config c = variant_config(a.variant);
  c.attn_scale = 0.0f;  // GGUF files do not carry it (gemma3: derived from the layer count)
  if (a.arch == "qwen2") c.qk_norm = false;
  c.bos_id = 1, c.eos_id = 2;
  return c;
}

class GgufArch : public ::testing::TestWithParam<ArchCase> {};

// A GGUF file of random float32 weights opens with the same configuration, and its
// logits equal those of the same weights in memory and the reference's.
TEST_P(GgufArch, LogitsEqualTheWeightsInMemoryAndTheReference) {
  const ArchCase a = GetParam();
  const ds::Config cfg = arch_config(a);
  ds::Weights w = ds::Weights::random(cfg, 7);
  TempDir t;
  const std::string path = t.write("m.gguf", ds::test::gguf_model_bytes(a.arch, cfg, w));
  const ds::LoadedModel lm = ds::load_model(path);
  const ds::Config& got = lm.model->cfg;
  EXPECT_EQ(got.rope_style, a.arch == "llama" ? ds::RopeStyle::Interleaved : ds::RopeStyle::Half);
  EXPECT_EQ(got.qk_norm, cfg.qk_norm);
  EXPECT_EQ(got.sandwich_norm, cfg.sandwich_norm);
  EXPECT_EQ(got.sliding_layers, cfg.sliding_layers);
  EXPECT_EQ(got.rope_freq_factors, cfg.rope_freq_factors);
  EXPECT_EQ(got.ffn, cfg.ffn);
  EXPECT_EQ(lm.kind, "gguf " + a.arch);

  const std::vector<int> ids = {1, 5, 9, 4, 17, 30, 8, 8, 3, 22, 11, 6, 29, 13};
  ds::Engine from_file(lm.model);
  const ds::MatRM got_logits = from_file.forward_full(ids);
  ds::Engine in_memory(std::make_shared<const ds::Model>(cfg, ds::Weights::random(cfg, 7)));
  const ds::MatRM want = in_memory.forward_full(ids);
  EXPECT_LT((got_logits - want).cwiseAbs().maxCoeff(), 1e-5f);
  const auto ref = ds::ref::logits(got, lm.model->w, ids);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int v = 0; v < got.vocab_size; ++v)
      ASSERT_NEAR(got_logits(long(i), v), ref[i][size_t(v)], 2e-4) << "position " << i << " token " << v;
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufArch,
                         ::testing::Values(ArchCase{"llama", "llama3_rope_factors"},
                                           ArchCase{"qwen2", "qwen3_half_qknorm"},
                                           ArchCase{"qwen3", "qwen3_half_qknorm"},
                                           ArchCase{"gemma3", "gemma3_sandwich_window"}),
                         [](const auto& info) { return info.param.arch; });

// A small valid file to damage: a few metadata entries of every kind and one tensor.
std::string small_file(GgufWriter& g) {
  g.str("general.architecture", "llama");
  g.u32("some.u32", 7);
  g.strings("some.strings", {"a", "bc", ""});
  std::vector<float> v(64, 0.5f);
  g.tensor_f32("t.weight", {32, 2}, v.data(), 64);
  return g.bytes();
}

std::string open_error(const std::string& bytes, bool in_place = true) {
  TempDir t;
  const std::string path = t.write("x.gguf", bytes);
  return ds::test::error_of([&] { ds::GgufFile::open(path, in_place); });
}

TEST(GgufReader, ReadsMetadataOfEveryKindAndTensorInfos) {
  GgufWriter g;
  g.i32("k.i32", -5);
  g.f32("k.f32", 1.5f);
  g.boolean("k.bool", true);
  g.u64("k.u64", 1ull << 40);
  g.ints("k.ints", {1, -2, 3});
  g.floats("k.floats", {0.25f});
  const std::string bytes = small_file(g);
  TempDir t;
  const ds::GgufFile f = ds::GgufFile::open(t.write("x.gguf", bytes));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.get_int("k.i32"), -5);
  EXPECT_EQ(*f.get_float("k.f32"), 1.5);
  EXPECT_TRUE(*f.get_bool("k.bool"));
  EXPECT_EQ(*f.get_int("k.u64"), int64_t(1) << 40);
  EXPECT_EQ(f.get_ints("k.ints"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.get_floats("k.floats"), std::vector<float>{0.25f});
  EXPECT_EQ(f.get_strings("some.strings"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_FALSE(f.get_string("absent").has_value());
  EXPECT_TRUE(ds::test::contains(ds::test::error_of([&] { f.get_string("some.u32"); }), "expected a string"));
  const ds::GgufFile::Tensor* tt = f.find("t.weight");
  ASSERT_NE(tt, nullptr);
  EXPECT_EQ(tt->rows(), 2);
  EXPECT_EQ(tt->cols(), 32);
  EXPECT_EQ(tt->bytes, 256u);
  EXPECT_EQ(tt->offset % 32, 0u);
  float first;
  std::memcpy(&first, f.data(*tt), 4);
  EXPECT_EQ(first, 0.5f);
}

// Cut at every byte of the header and into the data: each prefix is refused with a
// message, none crashes, whether the file is mapped or read into memory.
TEST(GgufReader, EveryTruncationIsRefused) {
  GgufWriter g;
  const std::string bytes = small_file(g);
  for (size_t n = 0; n < bytes.size(); ++n) {
    ASSERT_FALSE(open_error(bytes.substr(0, n)).empty()) << "cut at " << n;
    ASSERT_FALSE(open_error(bytes.substr(0, n), false).empty()) << "cut at " << n << ", read into memory";
  }
  EXPECT_TRUE(open_error(bytes).empty());
  EXPECT_TRUE(open_error(bytes, false).empty());
}

// Patches bytes at `at` of a copy.
std::string patched(std::string b, size_t at, const std::string& with) {
  b.replace(at, with.size(), with);
  return b;
}

TEST(GgufReader, ImpossibleCountsLengthsAndTypesAreNamed) {
  GgufWriter g;
  const std::string b = small_file(g);
  const std::string huge = GgufWriter::pod(uint64_t(1) << 60);
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, 8, huge)), "tensors, more than the file can hold"));
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, 16, huge)), "metadata entries"));
  // The first key's length.
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, 24, huge)), "metadata key 0"));
  // The first value's type (after the 8-byte length and the 20-byte key).
  const size_t type_at = 24 + 8 + 20;
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, type_at, GgufWriter::pod(uint32_t(99)))), "unknown value type"));
  // Its string length, far past the file.
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, type_at + 4, huge)), "general.architecture"));
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, 0, "GGUX")), "not a GGUF file"));
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, 4, GgufWriter::pod(uint32_t(1)))), "version 1"));
}

TEST(GgufReader, TensorsOutOfRangeMisalignedOverlappingOrOfUnknownTypeAreNamed) {
  auto with_tensor = [](std::vector<int64_t> dims, uint32_t type, size_t data_bytes, int tensors = 1) {
    GgufWriter g;
    for (int i = 0; i < tensors; ++i) g.tensor("w" + std::to_string(i), dims, type, std::string(data_bytes, '\0'));
    return g.bytes();
  };
  // Find the first tensor info's offset field: after the name and dims and type.
  auto offset_at = [](const std::string&, size_t n_dims) { return 24 + 8 + 2 + 4 + 8 * n_dims + 4; };
  std::string b = with_tensor({32, 2}, 0, 256);
  EXPECT_TRUE(
      ds::test::contains(open_error(patched(b, offset_at(b, 2), GgufWriter::pod(uint64_t(64)))), "past the end"));
  EXPECT_TRUE(ds::test::contains(open_error(patched(b, offset_at(b, 2), GgufWriter::pod(uint64_t(4)))), "not aligned"));
  EXPECT_TRUE(ds::test::contains(open_error(with_tensor({32, 2}, 16, 256)), "iq2_xxs"));
  EXPECT_TRUE(ds::test::contains(open_error(with_tensor({32, 2}, 16, 256)), "w0"));
  EXPECT_TRUE(ds::test::contains(open_error(with_tensor({32, 2}, 77, 256)), "type 77"));
  EXPECT_TRUE(ds::test::contains(open_error(with_tensor({30, 2}, 8, 256)), "not a multiple"));  // Q8_0 rows of 30
  EXPECT_TRUE(ds::test::contains(open_error(with_tensor({0, 2}, 0, 0)), "dimension of 0"));
  const int64_t big = int64_t(1) << 40;
  EXPECT_TRUE(ds::test::contains(open_error(with_tensor({big, big}, 0, 0)), "overflows"));
  std::string two = with_tensor({32, 2}, 0, 256, 2);
  // The second tensor's offset moved onto the first's data.
  const size_t second = offset_at(two, 2) + 8 + 8 + 2 + 4 + 16 + 4;
  EXPECT_TRUE(ds::test::contains(open_error(patched(two, second, GgufWriter::pod(uint64_t(32)))), "overlap"));
}

TEST(GgufReader, ArraysOfHugeCountsAndDeepNestingAreRefused) {
  GgufWriter g;
  g.strings("s", {"x"});
  std::string b = g.bytes();
  // The array's count: after the key (8 + 1), the type (4) and the element type (4).
  EXPECT_TRUE(
      ds::test::contains(open_error(patched(b, 24 + 9 + 4 + 4, GgufWriter::pod(uint64_t(1) << 62))), "does not fit"));
  // An array of arrays of arrays ... nested 20 deep.
  std::string nested;
  for (int i = 0; i < 20; ++i) nested += GgufWriter::pod(uint32_t(9)) + GgufWriter::pod(uint64_t(1));
  nested += GgufWriter::pod(uint32_t(4)) + GgufWriter::pod(uint64_t(0));
  std::string deep = "GGUF" + GgufWriter::pod(uint32_t(3)) + GgufWriter::pod(uint64_t(0)) +
                     GgufWriter::pod(uint64_t(1)) + GgufWriter::string("deep") + GgufWriter::pod(uint32_t(9)) + nested;
  EXPECT_TRUE(ds::test::contains(open_error(deep), "nested"));
}

// The loader names the tensor and key behind each problem.
TEST(GgufLoader, BadModelsAreNamed) {
  const ds::Config cfg = arch_config({"llama", "llama3_rope_factors"});
  TempDir t;
  auto load_error = [&](const std::string& arch, ds::Weights& w, const std::string& tag) {
    const std::string path = t.write(tag + ".gguf", ds::test::gguf_model_bytes(arch, cfg, w));
    return ds::test::error_of([&] { ds::load_model(path); });
  };
  ds::Weights w = ds::Weights::random(cfg, 3);
  EXPECT_TRUE(ds::test::contains(load_error("mamba", w, "a"), "architecture 'mamba' is not supported"));
  EXPECT_TRUE(ds::test::contains(load_error("mamba", w, "a"), "qwen3"));
  w.blocks[1].ffn.up.W(3, 4) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(ds::test::contains(load_error("llama", w, "nan"), "blk.1.ffn_up.weight"));
  ds::Config wide = cfg;
  wide.d_ff = 80;  // the file's ffn tensors stay at 64
  ds::Weights w2 = ds::Weights::random(cfg, 3);
  const std::string path = t.write("shape.gguf", ds::test::gguf_model_bytes("llama", wide, w2));
  EXPECT_TRUE(ds::test::contains(ds::test::error_of([&] { ds::load_model(path); }), "ffn_gate.weight has shape"));
  // A vocabulary-only file is not a model.
  GgufWriter g;
  ds::test::write_spm_vocab(g, 12);
  g.str("general.architecture", "llama");
  const std::string vocab = t.write("vocab.gguf", g.bytes());
  EXPECT_TRUE(ds::test::contains(ds::test::error_of([&] { ds::load_model(vocab); }), "vocabulary only"));
}

// A GGUF file read into memory (load_model's in_place false, the bench's --copy) gives
// the bits of the same file mapped, and the reference's logits; once read it no longer
// depends on the file: cut short, the file ends the mapped model's next step in an
// error and leaves the copy's steps as they were.
TEST(GgufLoader, ReadIntoMemoryGivesTheMappedLogitsAndOutlivesTheFile) {
  const ds::Config cfg = arch_config({"llama", "llama3_rope_factors"});
  ds::Weights w = ds::Weights::random(cfg, 11);
  TempDir t;
  const std::string path = t.write("m.gguf", ds::test::gguf_model_bytes("llama", cfg, w));
  const ds::LoadedModel mapped = ds::load_model(path);
  const ds::LoadedModel copy = ds::load_model(path, "", ds::Precision::F32, false);
  ASSERT_TRUE(mapped.model->w.mapped && copy.model->w.mapped);
  EXPECT_FALSE(mapped.model->w.mapped->copied());
  EXPECT_TRUE(copy.model->w.mapped->copied());
  EXPECT_NE(copy.model->w.mapped->data(), mapped.model->w.mapped->data());

  const std::vector<int> ids = {1, 5, 9, 4, 17, 30, 8, 8, 3, 22, 11, 6};
  ds::Engine a(mapped.model), b(copy.model);
  const ds::MatRM from_map = a.forward_full(ids), from_copy = b.forward_full(ids);
  EXPECT_EQ((from_map - from_copy).cwiseAbs().maxCoeff(), 0.0f);
  const auto ref = ds::ref::logits(copy.model->cfg, copy.model->w, ids);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int v = 0; v < cfg.vocab_size; ++v)
      ASSERT_NEAR(from_copy(long(i), v), ref[i][size_t(v)], 2e-4) << "position " << i << " token " << v;

  std::filesystem::resize_file(path, 64);
  const int id = 7;
  EXPECT_TRUE(ds::test::contains(ds::test::error_of([&] { a.forward(std::span<const int>(&id, 1)); }), "m.gguf"));
  ds::Engine c(copy.model);
  const ds::MatRM again = c.forward_full(ids);
  EXPECT_EQ((again - from_copy).cwiseAbs().maxCoeff(), 0.0f);
}

}  // namespace

namespace {

// The llama-family options survive a config's JSON (traces and model folders carry it):
// every variant reads back equal, and a config without them writes none of their keys.
TEST(ConfigJson, LlamaFamilyOptionsRoundTrip) {
  for (const auto& v : ds::test::variants()) {
    SCOPED_TRACE(v.name);
    const nlohmann::json j = ds::config_to_json(v.cfg);
    const ds::Config r = ds::config_from_json(nlohmann::json::parse(j.dump()));
    EXPECT_EQ(r.rope_style, v.cfg.rope_style);
    EXPECT_EQ(r.rope_scale, v.cfg.rope_scale);
    EXPECT_EQ(r.rope_freq_factors, v.cfg.rope_freq_factors);
    EXPECT_EQ(r.qk_norm, v.cfg.qk_norm);
    EXPECT_EQ(r.sandwich_norm, v.cfg.sandwich_norm);
    EXPECT_EQ(r.attn_scale, v.cfg.attn_scale);
    EXPECT_EQ(r.logit_softcap, v.cfg.logit_softcap);
    EXPECT_EQ(r.sliding_window, v.cfg.sliding_window);
    EXPECT_EQ(r.sliding_layers, v.cfg.sliding_layers);
    EXPECT_EQ(r.rope_theta_local, v.cfg.rope_theta_local);
    EXPECT_EQ(r.ffn, v.cfg.ffn);
    EXPECT_EQ(ds::config_to_json(r), j);
  }
  const nlohmann::json plain = ds::config_to_json(ds::Config{});
  for (const char* key : {"rope_style", "qk_norm", "sandwich_norm", "sliding_window", "logit_softcap"})
    EXPECT_FALSE(plain.contains(key)) << key;
}

}  // namespace
