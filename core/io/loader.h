#pragma once
// Opens any model the engine knows from a path, with its tokenizer.
#include <memory>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "text/tokenizer.h"

namespace ds {

struct LoadedModel {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when none was found
  std::string kind;                            // "llama2c", "gpt2", "decoderscope", "gguf ARCH" or "hf ARCH"
  std::string name;                            // file or folder name, for titles
  std::vector<int> stop_ids;                   // tokens that end generation
  bool bos_prompt = false;                     // the tokenizer's encode starts with BOS
  std::string training;                        // decoderscope folders: the "training" JSON, or ""
  Precision precision = Precision::F32;        // storage of the large weight matrices (GGUF: the main one)
  // The chat template (text/chat_template.h) the tokenizer's files carry, with the texts
  // of their bos and eos tokens; template "" when there is none.
  struct Chat {
    std::string template_text, bos_token, eos_token;
    // The tokenizer takes special tokens' texts as those tokens itself (Hugging Face
    // tokenizers do; a GGUF file's tokenizer leaves control tokens to encode_chat).
    bool tokenizer_matches_specials = false;
  } chat;
  std::vector<int> special_ids;  // control and added special tokens, ascending (the window colours them)
  std::string storage;           // GGUF: every storage type's share, e.g. "Q4_K 85% + Q6_K 15%"
  std::string file_dtypes;       // Hugging Face folders of the llama family: the files' dtypes, e.g. "BF16"
};

// path:
//  * a GGUF file (io/gguf_model.h: llama, qwen2, qwen3, gemma3), with the tokenizer its
//    metadata describes;
//  * a llama2.c .bin checkpoint; tokenizer_path: a tokenizer.bin, or when empty the
//    tokenizer.bin beside the model if present;
//  * a model folder (see io/model_folder.h): a Hugging Face folder of the llama family
//    (io/hf_model.h; tokenizer.json from the folder, or from tokenizer_path, when there);
//    a Hugging Face GPT-2 folder (GPT-2 BPE
//    tokenizer from the folder, or from the folder tokenizer_path when given) or
//    decoderscope's own (its tokenizer);
//  * "builtin:NAME": the folder models/NAME of decoderscope's data (util/data_dir.h:
//    installed share/decoderscope, then the build tree's assets/, then $DECODERSCOPE_DATA).
// precision: how the linear layers, embeddings and head are kept in memory (F32, or
// BF16/F16 to halve the bytes each token reads; the arithmetic stays float32).
// in_place: float32 weights that the file holds as the engine reads them (llama2.c
// checkpoints, decoderscope's own folders) are used in the mapped file (io/llama2c.h);
// false reads them into tiles in memory instead (the bench's --copy, to compare), and
// reads a GGUF file whole into memory instead of mapping it (MappedFile::copy).
// Throws ds::Error.
LoadedModel load_model(const std::string& path, const std::string& tokenizer_path = "",
                       Precision precision = Precision::F32, bool in_place = true);

// The folder "builtin:NAME" refers to; throws ds::Error listing the places searched.
std::string resolve_builtin(const std::string& name);

// The prompt ids this model expects for text: the tokenizer's encode (with BOS when
// bos_prompt). A text that encodes to nothing becomes [eos_id] for models whose
// prompts carry no BOS (GPT-2 starts from <|endoftext|>). Throws ds::Error when the
// model has no tokenizer.
std::vector<int> encode_prompt(const LoadedModel& m, std::string_view text);

// A tokenizer alone (no model): a GGUF file's (a vocabulary-only file too) or a Hugging
// Face tokenizer.json folder's, with its chat template and special tokens. Throws ds::Error.
LoadedModel load_tokenizer(const std::string& path);

// The prompt a chat template makes of messages ([{"role", "content"}, ...]) with the
// generation prompt added, as the transformers library's apply_chat_template(...,
// add_generation_prompt=True, tokenize=False) renders it (text/chat_template.h). Throws
// ds::Error when there is no template (naming the model) or the template or the messages
// are refused.
std::string render_chat(const LoadedModel::Chat& chat, const nlohmann::ordered_json& messages, const std::string& name);

// The ids of a rendered chat prompt, as apply_chat_template(..., tokenize=True) makes
// them: the texts of the special tokens (special_ids) written by the template become
// those tokens, the text between is encoded without BOS (the template writes it).
std::vector<int> encode_chat(const Tokenizer& tok, const LoadedModel::Chat& chat, const std::vector<int>& special_ids,
                             std::string_view text);

}  // namespace ds
