#pragma once
// Model folders: config.json + model.safetensors.
//
// Three kinds are read:
//  * Hugging Face folders of the llama family (Llama, Mistral, Qwen2, Qwen3, Gemma 3):
//    io/hf_model.h; their tokenizer is tokenizer.json beside the weights;
//  * Hugging Face GPT-2 folders (gpt2, distilgpt2, gpt2-medium/large/xl): the HF
//    config keys (n_embd, n_layer, n_head, n_positions or n_ctx, vocab_size,
//    layer_norm_epsilon, activation_function, n_inner) and the GPT2Model tensor
//    names, with or without the "transformer." prefix. Conv1D weights are stored
//    [in, out] and are transposed to Linear::W's [out, in]; c_attn's 3*d output
//    columns are q, then k, then v. The tokenizer is GPT-2's byte-level BPE
//    (vocab.json + merges.txt, or tokenizer.json) beside the model.
//  * decoderscope's own folders (the built-in models): config.json holds
//    "format": "decoderscope", "version": 1, every Config field (see
//    model/config_json.h), "tokenizer": {"kind": "chars", "vocab": [...]} (one
//    character or special per id, text/char_tokenizer.h), {"kind": "words", "vocab":
//    [...]} (one word, punctuation mark or special per id, text/word_tokenizer.h) or
//    {"kind": "gpt2-bpe"}, and optionally free-form "training": {...}. The tensors
//    are named as Weights::tensors() names them, shaped [rows, cols] for matrices and
//    [n] for vectors, stored as F32, F16 or BF16.
//
// The weights are loaded straight into the precision asked for: the large matrices
// (linear layers, token embeddings, head) as float32, or as bfloat16/float16 with no
// float32 copy of them ever held (a tensor stored in that 16-bit dtype is copied bit
// for bit, one in another dtype is rounded to nearest even); norms, biases and
// position tables stay float32. Every expected tensor is checked (present, with its
// shape, nothing unexpected) before any value is read; tensors are then read in file
// order, straight into the weights, so loading streams the file once and peak memory
// stays near the size of the weights themselves.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ds {

struct FolderModel {
  Config cfg;
  Weights w;
  std::string format;                    // "gpt2", "decoderscope" or "hf" (io/hf_model.h)
  std::string tokenizer_kind;            // "gpt2-bpe", "chars", "words" or "hf" (tokenizer.json)
  std::vector<std::string> chars_vocab;  // for "chars": one entry per id
  std::vector<std::string> words_vocab;  // for "words": one entry per id
  std::string training;                  // the "training" object of our own format as JSON text, or ""
  std::string dir;
  // "hf" folders: the architecture ("Qwen2ForCausalLM", ...), the weights' dtypes in the
  // files ("BF16"), and the ids that end generation (eos_token_id, one or several).
  std::string arch, dtype;
  std::vector<int> stop_ids;
};

// Throws ds::Error naming the folder or file and the problem: missing files (with a
// hint when only pytorch_model.bin is there), bad JSON, wrong or missing config
// fields, missing or mis-shaped tensors, unexpected weight tensors, unsupported
// dtypes, NaN or infinite values or values beyond kMaxWeightMagnitude (model/weights.h),
// values too large for float16 when loading as F16
// (naming the tensor).
// tiles: the large matrices are written in tiles (perf/gemv.h) as they are read, as
// load_model keeps them, instead of row-major.
// in_place: in decoderscope's own format at float32, when the file holds every large
// matrix as F32 (at a 4-byte boundary, as its writer puts them), the matrices are
// checked and left where the mapped file holds them, row-major (perf/mapped_file.h):
// nothing is copied, and the file must stay as it is while the model is used (the
// engine ends a forward pass with an error when it changes). Otherwise as `tiles`.
FolderModel load_model_folder(const std::string& dir, Precision precision = Precision::F32, bool tiles = false,
                              bool in_place = false);

// Writes dir/config.json and dir/model.safetensors in decoderscope's own format,
// creating dir. tokenizer: {"kind": "chars" or "words", "vocab": [...vocab_size
// strings]} or {"kind": "gpt2-bpe"}; the vocabulary is checked as the loader checks it. extra: more top-level keys for
// config.json (e.g.
// {"training": {...}}); they may not replace the format's own keys. dtype: "F32",
// "F16" or "BF16": the type of the float32 tensors in the file; tensors w keeps as
// 16-bit floats are written in their own type, bit for bit. Throws ds::Error if a
// tensor does not have the shape cfg implies. The folder is replaced atomically
// (save_folder, util/atomic_file.h): other files in it are kept, and a failed save
// leaves the previous config.json and model.safetensors as they were.
void save_model_folder(const std::string& dir, const Config& cfg, const Weights& w, const nlohmann::json& tokenizer,
                       const nlohmann::json& extra = {}, const std::string& dtype = "F32");

}  // namespace ds
