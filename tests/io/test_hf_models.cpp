// Hugging Face folders of the llama family (core/io/hf_model.h) against llama.cpp's
// outputs on the same weights (../shared/fixtures/gguf/models, README there): the
// fixtures' float32 folders (llama with Llama 3.2's rotary scaling, qwen2, qwen3, gemma3)
// give llama.cpp's logits at every position of the sequence within 1e-4 of the logit
// range and its greedy ids; the same weights rounded to bfloat16 and split over three
// shards give what llama.cpp computes on the bfloat16 GGUF; the rotary divisors computed
// from config.json equal the GGUF's rope_freqs.weight; bad folders end in messages.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/gguf.h"
#include "io/hf_model.h"
#include "io/loader.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace {

namespace fs = std::filesystem;
using ds::test::contains;
using ds::test::error_of;
using nlohmann::json;

fs::path models_dir() { return ds::test::fixture("gguf/models"); }
fs::path hf_dir(const std::string& arch) { return models_dir() / (arch + "-hf"); }

std::vector<int> read_ids(const fs::path& p) {
  std::ifstream in(p);
  std::vector<int> ids;
  for (int x; in >> x;) ids.push_back(x);
  return ids;
}

std::vector<float> read_f32(const fs::path& p) {
  const std::string raw = ds::test::read_file(p);
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

// The largest difference from llama.cpp's logits at every position of the sequence,
// as a share of that position's logit range.
double worst_logit_error(const ds::LoadedModel& lm, const std::string& arch, const std::string& reference) {
  const std::vector<int> seq = read_ids(models_dir() / (arch + ".sequence.ids"));
  const std::vector<float> want = read_f32(models_dir() / reference);
  const int V = lm.model->cfg.vocab_size;
  EXPECT_EQ(want.size(), seq.size() * size_t(V));
  if (want.size() != seq.size() * size_t(V)) return 1.0;
  ds::Engine e(lm.model);
  const ds::MatRM got = e.forward_full(seq);
  double worst = 0.0;
  for (size_t p = 0; p < seq.size(); ++p) {
    const float* w = want.data() + p * size_t(V);
    const float range = *std::max_element(w, w + V) - *std::min_element(w, w + V);
    for (int v = 0; v < V; ++v) worst = std::max(worst, double(std::fabs(got(long(p), v) - w[v]) / range));
  }
  return worst;
}

std::vector<int> greedy(const ds::LoadedModel& lm, std::vector<int> ids, size_t n) {
  ds::Engine e(lm.model);
  ds::MatRM logits = e.forward(ids);
  std::vector<int> got;
  for (size_t i = 0; i < n; ++i) {
    Eigen::Index best;
    logits.row(0).maxCoeff(&best);
    got.push_back(int(best));
    logits = e.forward(std::span<const int>(&got.back(), 1));
  }
  return got;
}

// A copy of an HF folder: config.json as given and the tensors over `shards` files
// (tensor i in shard i % shards) with model.safetensors.index.json, the matrices as
// `matrix_dtype` (rounded to nearest even), vectors as F32.
void write_copy(const fs::path& from, const std::string& to, const json& config, int shards,
                const std::string& matrix_dtype) {
  fs::create_directories(to);
  std::ofstream(fs::path(to) / "config.json") << config.dump(1);
  const ds::SafeTensors st = ds::SafeTensors::open((from / "model.safetensors").string());
  std::vector<std::vector<float>> values;
  std::vector<std::vector<ds::SafeTensorOut>> parts{size_t(shards)};
  auto file_of = [shards](size_t s) {
    return shards == 1 ? std::string("model.safetensors")
                       : "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
  };
  values.reserve(st.entries().size());
  json map = json::object();
  for (size_t i = 0; i < st.entries().size(); ++i) {
    const auto& e = st.entries()[i];
    values.emplace_back(size_t(e.numel()));
    st.read_f32(e, values.back().data());
    ds::SafeTensorOut o;
    o.name = e.name;
    o.shape = e.shape;
    o.data = values.back().data();
    o.dtype = e.shape.size() == 2 ? matrix_dtype : "F32";
    map[e.name] = file_of(i % size_t(shards));
    parts[i % size_t(shards)].push_back(o);
  }
  for (size_t s = 0; s < parts.size(); ++s) ds::save_safetensors((fs::path(to) / file_of(s)).string(), parts[s]);
  if (shards > 1) std::ofstream(fs::path(to) / "model.safetensors.index.json") << json{{"weight_map", map}}.dump(1);
}

json config_of(const std::string& arch) { return json::parse(ds::test::read_file(hf_dir(arch) / "config.json")); }

class HfFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { DS_NEED_FIXTURE(hf_dir(GetParam()), "the comparison with llama.cpp"); }
};

TEST_P(HfFixture, Float32FolderGivesLlamaCppsLogitsAndGreedyIds) {
  const std::string arch = GetParam();
  const ds::LoadedModel lm = ds::load_model(hf_dir(arch).string());
  EXPECT_TRUE(contains(lm.kind, "hf ")) << lm.kind;
  EXPECT_EQ(lm.file_dtypes, "F32");
  EXPECT_LT(worst_logit_error(lm, arch, arch + "-F32.logits.f32"), 1e-4);
  const std::vector<int> want = read_ids(models_dir() / (arch + "-F32.greedy.ids"));
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(greedy(lm, read_ids(models_dir() / (arch + ".prompt.ids")), want.size()), want);
}

// The same weights with the matrices rounded to bfloat16, in three shards: llama.cpp's
// logits on the bfloat16 GGUF (whose matrices are bfloat16 and vectors float32) computed
// in float32. Kept as bfloat16 (--precision bf16) the file's bits are used unchanged, so
// the logits are those of the float32 load of the same folder.
TEST_P(HfFixture, ShardedBfloat16FolderGivesLlamaCppsLogitsOnTheBfloat16Gguf) {
  const std::string arch = GetParam();
  DS_NEED_FIXTURE(models_dir() / (arch + "-BF16.dequantized.logits.f32"), "the bfloat16 comparison");
  ds::test::TempDir tmp;
  const std::string dir = tmp.sub("bf16");
  json cfg = config_of(arch);
  cfg["torch_dtype"] = "bfloat16";
  write_copy(hf_dir(arch), dir, cfg, 3, "BF16");
  const ds::LoadedModel lm = ds::load_model(dir);
  EXPECT_EQ(lm.file_dtypes, "BF16 + F32");  // matrices, then the norms' gains
  EXPECT_LT(worst_logit_error(lm, arch, arch + "-BF16.dequantized.logits.f32"), 1e-4);
  const std::vector<int> want = read_ids(models_dir() / (arch + "-BF16.dequantized.greedy.ids"));
  EXPECT_EQ(greedy(lm, read_ids(models_dir() / (arch + ".prompt.ids")), want.size()), want);

  const ds::LoadedModel kept = ds::load_model(dir, "", ds::Precision::BF16);
  EXPECT_EQ(kept.model->w.blocks[0].attn.q.W16.type, ds::Precision::BF16);
  const std::vector<int> seq = read_ids(models_dir() / (arch + ".sequence.ids"));
  ds::Engine a(lm.model), b(kept.model);
  EXPECT_LT((a.forward_full(seq) - b.forward_full(seq)).cwiseAbs().maxCoeff(), 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(Archs, HfFixture, ::testing::Values("llama", "qwen2", "qwen3", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

// Llama 3.2's rope_scaling in config.json gives the divisors llama.cpp's converter wrote
// into the GGUF as rope_freqs.weight.
TEST(HfModel, Llama3RotaryDivisorsEqualTheGgufsRopeFreqs) {
  DS_NEED_FIXTURE(hf_dir("llama"), "the rotary divisors");
  std::string arch;
  std::vector<int> stops;
  const ds::Config c = ds::hf_config(config_of("llama"), arch, stops);
  const ds::GgufFile f = ds::GgufFile::open((models_dir() / "llama-F32.gguf").string());
  const ds::GgufFile::Tensor* t = f.find("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(c.rope_freq_factors.size(), size_t(t->numel()));
  const float* want = reinterpret_cast<const float*>(f.data(*t));
  int scaled = 0;
  for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
    EXPECT_NEAR(c.rope_freq_factors[i], want[i], 1e-5 * want[i]) << "frequency " << i;
    scaled += want[i] > 1.0f;
  }
  EXPECT_GT(scaled, 0);  // the fixture's scaling does change some frequencies
}

// Gemma's layer kinds: layer_types when given, else every sixth layer global.
TEST(HfModel, GemmaSlidingLayersFollowLayerTypesOrThePattern) {
  json j = {{"architectures", {"Gemma3ForCausalLM"}},
            {"hidden_size", 64},
            {"num_hidden_layers", 7},
            {"num_attention_heads", 2},
            {"num_key_value_heads", 1},
            {"head_dim", 32},
            {"intermediate_size", 128},
            {"vocab_size", 50},
            {"sliding_window", 8}};
  std::string arch;
  std::vector<int> stops;
  ds::Config c = ds::hf_config(j, arch, stops);
  EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1}));
  EXPECT_TRUE(c.tied_head);                     // Gemma's default
  EXPECT_NEAR(c.attn_scale, 1.0 / 16.0, 1e-7);  // query_pre_attn_scalar's default 256
  j["layer_types"] = {"full_attention",    "sliding_attention", "full_attention", "sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention"};
  c = ds::hf_config(j, arch, stops);
  EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{0, 1, 0, 1, 1, 1, 0}));
  j["eos_token_id"] = {1, 49};
  ds::hf_config(j, arch, stops);
  EXPECT_EQ(stops, (std::vector<int>{1, 49}));
}

// A config.json or weights the engine cannot follow end in a message naming the problem.
TEST(HfModel, BadConfigsAreRefusedByName) {
  DS_NEED_FIXTURE(hf_dir("llama"), "the bad configs");
  const json good = config_of("llama");
  struct Bad {
    std::string key;
    json value;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "yarn"},
      {"hidden_act", "gelu_new", "gelu_new"},
      {"architectures", {"MixtralForCausalLM"}, "MixtralForCausalLM"},
      {"architectures", "LlamaForCausalLM", "architectures"},
      {"hidden_size", -3, "hidden_size"},
      {"num_attention_heads", 5, ""},  // 256 is no multiple of 5 heads: Config's check
      {"eos_token_id", 100000, "eos_token_id"},
      {"mlp_bias", true, "mlp_bias"},
      {"rms_norm_eps", "small", "rms_norm_eps"},
  };
  for (const Bad& b : bad) {
    json j = good;
    j[b.key] = b.value;
    std::string arch;
    std::vector<int> stops;
    const std::string err = error_of([&] { ds::hf_config(j, arch, stops); });
    EXPECT_NE(err, "") << b.key;
    EXPECT_TRUE(contains(err, b.says)) << b.key << ": " << err;
  }
  json g = config_of("gemma3");
  g["layer_types"] = {"full_attention"};
  std::string arch;
  std::vector<int> stops;
  EXPECT_TRUE(contains(error_of([&] { ds::hf_config(g, arch, stops); }), "layer_types"));
}

TEST(HfModel, BadShardsAndTensorsAreRefusedByName) {
  DS_NEED_FIXTURE(hf_dir("qwen2"), "the bad folders");
  ds::test::TempDir tmp;
  const json cfg = config_of("qwen2");
  auto fresh = [&](const std::string& name) {
    const std::string d = tmp.sub(name);
    write_copy(hf_dir("qwen2"), d, cfg, 2, "BF16");
    return d;
  };
  auto index = [](const std::string& d) {
    return json::parse(ds::test::read_file(fs::path(d) / "model.safetensors.index.json"));
  };
  auto load = [](const std::string& d) { return error_of([&] { ds::load_model(d); }); };
  {  // the index names a shard that is not there
    const std::string d = fresh("missing");
    fs::remove(fs::path(d) / "model-00002-of-00002.safetensors");
    EXPECT_TRUE(contains(load(d), "model-00002-of-00002.safetensors")) << load(d);
  }
  {  // a tensor listed twice in the index
    const std::string d = fresh("twice");
    std::string text = ds::test::read_file(fs::path(d) / "model.safetensors.index.json");
    const size_t at = text.find("\"model.norm.weight\"");
    ASSERT_NE(at, std::string::npos);
    text.insert(at, "\"model.norm.weight\": \"model-00001-of-00002.safetensors\",\n");
    std::ofstream(fs::path(d) / "model.safetensors.index.json") << text;
    EXPECT_TRUE(contains(load(d), "model.norm.weight")) << load(d);
    EXPECT_TRUE(contains(load(d), "twice")) << load(d);
  }
  {  // the index places a tensor in the wrong shard
    const std::string d = fresh("wrong");
    json j = index(d);
    const std::string was = j["weight_map"]["lm_head.weight"];
    j["weight_map"]["lm_head.weight"] = was == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                                                  : "model-00001-of-00002.safetensors";
    std::ofstream(fs::path(d) / "model.safetensors.index.json") << j.dump();
    EXPECT_TRUE(contains(load(d), "lm_head.weight")) << load(d);
  }
  {  // a shard path that leaves the folder
    const std::string d = fresh("escape");
    json j = index(d);
    j["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors";
    std::ofstream(fs::path(d) / "model.safetensors.index.json") << j.dump();
    EXPECT_TRUE(contains(load(d), "elsewhere")) << load(d);
  }
  {  // a shard cut short
    const std::string d = fresh("short");
    const fs::path s = fs::path(d) / "model-00001-of-00002.safetensors";
    fs::resize_file(s, fs::file_size(s) - 100);
    EXPECT_TRUE(contains(load(d), "model-00001-of-00002.safetensors")) << load(d);
  }
  {  // a tensor missing, and one the architecture does not have
    const std::string d = tmp.sub("names");
    json c2 = cfg;
    c2["num_hidden_layers"] = 3;
    write_copy(hf_dir("qwen2"), d, c2, 1, "F32");
    EXPECT_TRUE(contains(load(d), "model.layers.2.")) << load(d);
    c2["num_hidden_layers"] = 1;
    std::ofstream(fs::path(d) / "config.json") << c2.dump();
    EXPECT_TRUE(contains(load(d), "model.layers.1.")) << load(d);
  }
  {  // NaN in a weight
    const std::string d = tmp.sub("nan");
    const ds::SafeTensors st = ds::SafeTensors::open((hf_dir("qwen2") / "model.safetensors").string());
    std::vector<std::vector<float>> v;
    std::vector<ds::SafeTensorOut> out;
    v.reserve(st.entries().size());
    for (const auto& e : st.entries()) {
      v.emplace_back(size_t(e.numel()));
      st.read_f32(e, v.back().data());
      if (e.name == "model.layers.1.mlp.up_proj.weight") v.back()[77] = std::nanf("");
      out.push_back({e.name, e.shape, v.back().data()});
    }
    ds::save_safetensors((fs::path(d) / "model.safetensors").string(), out);
    std::ofstream(fs::path(d) / "config.json") << cfg.dump();
    EXPECT_TRUE(contains(load(d), "model.layers.1.mlp.up_proj.weight")) << load(d);
    EXPECT_TRUE(contains(load(d), "NaN")) << load(d);
  }
}

}  // namespace
