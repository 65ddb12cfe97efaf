#pragma once
// A Hugging Face folder of the llama family written for tests (the shared fixtures hold
// tokenizers and models, but no model with a chat template).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace ds::test {

// Writes into folder d (which exists) a tiny random Qwen3 model as a Hugging Face folder
// (hidden 8, one layer, 2 heads of 4, vocabulary 151,936, tied) with the tokenizer files
// of folder tok linked beside it: a chat model for tests of chat templates.
inline void write_chat_model(const std::string& d, const std::filesystem::path& tok) {
  const int64_t V = 151936, D = 8, H = 2, Dh = 4, F = 16;
  std::vector<std::vector<float>> keep;
  std::vector<ds::SafeTensorOut> out;
  uint64_t seed = 7;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float base = 0) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    keep.emplace_back(size_t(n));
    for (float& v : keep.back()) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      v = base + scale * (float(seed >> 40) / float(1 << 24) - 0.5f);
    }
    out.push_back({name, shape, keep.back().data()});
  };
  add("model.embed_tokens.weight", {V, D}, 2.0f);
  add("model.norm.weight", {D}, 0.0f, 1.0f);
  const std::string l = "model.layers.0.";
  add(l + "input_layernorm.weight", {D}, 0.0f, 1.0f);
  add(l + "post_attention_layernorm.weight", {D}, 0.0f, 1.0f);
  add(l + "self_attn.q_proj.weight", {H * Dh, D}, 0.5f);
  add(l + "self_attn.k_proj.weight", {Dh, D}, 0.5f);
  add(l + "self_attn.v_proj.weight", {Dh, D}, 0.5f);
  add(l + "self_attn.o_proj.weight", {D, H * Dh}, 0.5f);
  add(l + "self_attn.q_norm.weight", {Dh}, 0.0f, 1.0f);
  add(l + "self_attn.k_norm.weight", {Dh}, 0.0f, 1.0f);
  add(l + "mlp.gate_proj.weight", {F, D}, 0.5f);
  add(l + "mlp.up_proj.weight", {F, D}, 0.5f);
  add(l + "mlp.down_proj.weight", {D, F}, 0.5f);
  ds::save_safetensors(d + "/model.safetensors", out);
  const nlohmann::json cfg = {{"architectures", {"Qwen3ForCausalLM"}},
                              {"hidden_size", D},
                              {"num_hidden_layers", 1},
                              {"num_attention_heads", H},
                              {"num_key_value_heads", 1},
                              {"head_dim", Dh},
                              {"intermediate_size", F},
                              {"vocab_size", V},
                              {"max_position_embeddings", 256},
                              {"hidden_act", "silu"},
                              {"tie_word_embeddings", true}};
  std::ofstream(d + "/config.json") << cfg.dump();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::create_symlink(tok / f, std::filesystem::path(d) / f);
}

}  // namespace ds::test
