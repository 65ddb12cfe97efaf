// libFuzzer target: config.json (core/model/config_json.cpp, the config parts of
// core/io/model_folder.cpp and core/io/hf_model.cpp), in three kinds. The first byte
// picks the folder the rest is written to as config.json (its value mod 3): 0, a tiny
// Hugging Face GPT-2 folder; 1, a tiny decoderscope folder (chars tokenizer); 2, a tiny
// Hugging Face llama-family folder in two shards. The folder is then loaded (and run
// when it loads), and the JSON, when it parses, also goes to config_from_json and
// hf_config directly.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "io/hf_model.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/config_json.h"

namespace {

struct Folders {
  std::string gpt2, own, hf;
};

// dm 4, 1 layer, 2 heads, 6 positions, vocab 5, inner 8: GPT2Model's tensors.
std::string write_gpt2(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const int64_t dm = 4, ff = 8, V = 5, P = 6;
  std::vector<float> v(256, 0.5f);
  const float* x = v.data();
  ds::save_safetensors(dir + "/model.safetensors",
                       {{"wte.weight", {V, dm}, x},
                        {"wpe.weight", {P, dm}, x},
                        {"ln_f.weight", {dm}, x},
                        {"ln_f.bias", {dm}, x},
                        {"h.0.ln_1.weight", {dm}, x},
                        {"h.0.ln_1.bias", {dm}, x},
                        {"h.0.attn.c_attn.weight", {dm, 3 * dm}, x},
                        {"h.0.attn.c_attn.bias", {3 * dm}, x},
                        {"h.0.attn.c_proj.weight", {dm, dm}, x},
                        {"h.0.attn.c_proj.bias", {dm}, x},
                        {"h.0.ln_2.weight", {dm}, x},
                        {"h.0.ln_2.bias", {dm}, x},
                        {"h.0.mlp.c_fc.weight", {dm, ff}, x},
                        {"h.0.mlp.c_fc.bias", {ff}, x},
                        {"h.0.mlp.c_proj.weight", {ff, dm}, x},
                        {"h.0.mlp.c_proj.bias", {dm}, x, "F16"},
                        {"h.0.attn.bias", {1, 1, P, P}, x, "BF16"}},
                       {{"format", "pt"}});
  const nlohmann::json conf = {{"model_type", "gpt2"},
                               {"n_embd", dm},
                               {"n_layer", 1},
                               {"n_head", 2},
                               {"n_positions", P},
                               {"vocab_size", V},
                               {"n_inner", ff},
                               {"n_ctx", P},
                               {"activation_function", "gelu_new"},
                               {"layer_norm_epsilon", 1e-5}};
  return conf.dump(2);
}

std::string write_own(const std::string& dir) {
  ds::Config c;
  c.d_model = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_head = 2;
  c.d_ff = 6;
  c.vocab_size = 6;
  c.max_seq = 8;
  c.bos_id = 1;
  c.eos_id = 2;
  ds::save_model_folder(dir, c, ds::Weights::random(c, 1),
                        {{"kind", "chars"}, {"vocab", {"<pad>", "<s>", "</s>", "a", "b", "c"}}});
  return fuzz::slurp(dir + "/config.json");
}

// A Llama 3-style folder (hidden 4, 1 layer, 2 heads of 2, 1 KV head, vocab 5), its
// tensors over two shards listed by model.safetensors.index.json.
std::string write_hf(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<float> v(256, 0.25f);
  const float* x = v.data();
  const std::string l = "model.layers.0.";
  ds::save_safetensors(dir + "/model-00001-of-00002.safetensors",
                       {{"model.embed_tokens.weight", {5, 4}, x},
                        {"model.norm.weight", {4}, x},
                        {l + "input_layernorm.weight", {4}, x},
                        {l + "post_attention_layernorm.weight", {4}, x, "BF16"},
                        {l + "self_attn.q_proj.weight", {4, 4}, x, "BF16"},
                        {l + "self_attn.k_proj.weight", {2, 4}, x, "F16"}});
  ds::save_safetensors(dir + "/model-00002-of-00002.safetensors", {{l + "self_attn.v_proj.weight", {2, 4}, x},
                                                                   {l + "self_attn.o_proj.weight", {4, 4}, x},
                                                                   {l + "mlp.gate_proj.weight", {6, 4}, x},
                                                                   {l + "mlp.up_proj.weight", {6, 4}, x},
                                                                   {l + "mlp.down_proj.weight", {4, 6}, x}});
  nlohmann::json map;
  for (const char* t : {"model.embed_tokens.weight", "model.norm.weight"}) map[t] = "model-00001-of-00002.safetensors";
  for (const char* t : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                        "self_attn.k_proj.weight"})
    map[l + t] = "model-00001-of-00002.safetensors";
  for (const char* t : {"self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                        "mlp.up_proj.weight", "mlp.down_proj.weight"})
    map[l + t] = "model-00002-of-00002.safetensors";
  fuzz::put(dir + "/model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  const nlohmann::json conf = {{"architectures", {"LlamaForCausalLM"}},
                               {"hidden_size", 4},
                               {"num_hidden_layers", 1},
                               {"num_attention_heads", 2},
                               {"num_key_value_heads", 1},
                               {"head_dim", 2},
                               {"intermediate_size", 6},
                               {"vocab_size", 5},
                               {"max_position_embeddings", 8},
                               {"rms_norm_eps", 1e-5},
                               {"rope_theta", 500000.0},
                               {"hidden_act", "silu"},
                               {"tie_word_embeddings", true},
                               {"bos_token_id", 1},
                               {"eos_token_id", {2, 3}},
                               {"rope_scaling",
                                {{"rope_type", "llama3"},
                                 {"factor", 32.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 4}}}};
  return conf.dump(2);
}

const Folders& folders() {
  static const Folders f = [] {
    Folders d{fuzz::tmp_dir() + "/gpt2", fuzz::tmp_dir() + "/own", fuzz::tmp_dir() + "/hf"};
    fuzz::seed("gpt2", fuzz::join('\0', {write_gpt2(d.gpt2)}));
    fuzz::seed("own", fuzz::join('\1', {write_own(d.own)}));
    fuzz::seed("hf", fuzz::join('\2', {write_hf(d.hf)}));
    return d;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)folders();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& dir = data[0] % 3 == 2 ? folders().hf : data[0] % 3 ? folders().own : folders().gpt2;
  const std::string_view text = fuzz::as_view(data + 1, size - 1);
  fuzz::put(dir + "/config.json", text);
  try {
    ds::FolderModel m = ds::load_model_folder(dir);
    fuzz::run_model(std::move(m.cfg), std::move(m.w));
  } catch (const ds::Error&) {
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    try {
      (void)ds::config_from_json(j);
    } catch (const ds::Error&) {
    }
    try {
      std::string arch;
      std::vector<int> stops;
      (void)ds::hf_config(j, arch, stops);
    } catch (const ds::Error&) {
    }
  }
  return 0;
}
