#pragma once
// Llama-family models as Hugging Face folders: config.json with "architectures"
// LlamaForCausalLM (Llama 2 and 3.x, TinyLlama, SmolLM), MistralForCausalLM,
// Qwen2ForCausalLM (Qwen2, Qwen2.5), Qwen3ForCausalLM or Gemma3ForCausalLM (model_type
// gemma3_text), and the weights in model.safetensors or in shards listed by
// model.safetensors.index.json, as F32, BF16 or F16.
//
// Layout facts, compared with the same models as GGUF (io/gguf_model.h):
//  * rotary positions rotate halves (feature i with i + d_head/2) on the q and k rows as
//    stored, for every family (llama.cpp's converter reorders a llama model's rows into
//    pairs instead);
//  * Llama 3.1/3.2's rope_scaling {"rope_type": "llama3", factor, low_freq_factor,
//    high_freq_factor, original_max_position_embeddings} becomes one divisor per
//    frequency (Config::rope_freq_factors): 1 for wavelengths below
//    original/high_freq_factor, factor above original/low_freq_factor, and in between
//    1 / ((1 - s) / factor + s) with s = (original / wavelength - low) / (high - low);
//    "linear" scaling divides the positions by its factor;
//  * Gemma's RMSNorm multiplies by (1 + weight): the gains are stored without the 1,
//    which is added as they are read; its embeddings are scaled by sqrt(hidden_size),
//    queries by query_pre_attn_scalar^-1/2, and the layers listed as
//    "sliding_attention" in layer_types (or, without it, all but every
//    sliding_window_pattern-th, by default 6) see only the last sliding_window keys,
//    with rotary base rope_local_base_freq;
//  * Qwen2 has biases on q, k and v; Qwen3 and Gemma 3 an RMSNorm over each head's q and
//    k; Mistral's sliding_window (when set) applies to every layer.
//
// A field the engine does not follow (another rope_scaling type, an activation other
// than SiLU or GELU-tanh, attention biases on a family without them, logit soft-capping
// inside attention, ...) is refused with a message naming it, never replaced by a
// default.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ds {

// The "architectures" read.
const char* hf_architectures();
// Whether config.json names a llama-family architecture (its first "architectures"
// entry is one of those read, or model_type is gemma3_text).
bool is_hf_llama_family(const nlohmann::json& config);

// Which files of dir hold the weights: model.safetensors, or the shards of
// model.safetensors.index.json. Throws ds::Error when neither is there.
std::vector<std::string> hf_weight_files(const std::string& dir);

struct HfModel {
  Config cfg;
  Weights w;
  std::string arch;           // the "architectures" entry, e.g. "Qwen2ForCausalLM"
  std::string dtype;          // the weights' dtypes in the files, e.g. "BF16" or "F32 + BF16"
  std::vector<int> stop_ids;  // eos_token_id (one id or a list) of config.json and generation_config.json
};

// Reads config.json (already parsed) and the weights of dir. precision: how the large
// matrices are kept (F32, or BF16/F16: a tensor stored in that type is copied bit for
// bit). tiles: as load_model_folder's. Every shard is checked as one safetensors file
// is (io/safetensors.h); the index must name existing files in dir, place every tensor
// in the shard that holds it and no tensor twice; every tensor the architecture needs
// must be there with its shape and nothing else (but rotary_emb.inv_freq buffers).
// Throws ds::Error naming the file, the field or the tensor.
HfModel load_hf_model(const std::string& dir, const nlohmann::json& config, Precision precision, bool tiles);

// The configuration alone (exposed for tests): throws ds::Error naming the field.
Config hf_config(const nlohmann::json& config, std::string& arch, std::vector<int>& stop_ids);

}  // namespace ds
