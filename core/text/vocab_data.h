#pragma once
// A tokenizer as a GGUF file's metadata describes it (the tokenizer.ggml.* keys), in
// plain containers so that the text layer needs no file reader: io/gguf.cpp fills it.
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6
};

struct VocabData {
  std::string model;                // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
  std::string pre;                  // tokenizer.ggml.pre, "" when absent
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<float> scores;        // tokenizer.ggml.scores (empty when absent)
  std::vector<int32_t> types;       // tokenizer.ggml.token_type (empty when absent)
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "left right" (gpt2 only)
  int bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
  // tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix; -1 when absent
  // (the tokenizer then uses the model kind's default).
  int add_bos = -1, add_eos = -1, add_space_prefix = -1;
  std::string chat_template;  // tokenizer.chat_template, "" when absent
};

}  // namespace ds
