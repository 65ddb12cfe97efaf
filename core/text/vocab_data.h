#pragma once
// A tokenizer as a GGUF file's metadata describes it (the tokenizer.ggml.* keys), in
// plain containers so that the text layer needs no file reader: io/gguf.cpp fills it.
#include <cstdint>
#include <string>
#include <utility>
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

  // What only a Hugging Face tokenizer.json says (text/hf_tokenizer.cpp fills it); a GGUF
  // file leaves these defaults, which are llama.cpp's behaviour.
  struct AddedToken {
    int32_t id = -1;
    bool lstrip = false, rstrip = false, single_word = false;
  };
  struct Hf {
    // The merges as (left id, right id) in rank order; when non-empty they replace
    // `merges`, and "llama" merges adjacent symbols by the rank of their pair (a BPE model
    // with byte fallback) rather than by the score of their concatenation.
    std::vector<std::pair<int32_t, int32_t>> merge_ids;
    // model.ignore_merges (byte-level): -1 = the pre-tokenizer's default (llama-bpe: true).
    int ignore_merges = -1;
    // "llama": a character that is no token becomes its <0xXX> tokens (else unk).
    bool byte_fallback = true;
    // "llama", the Metaspace pre-tokenizer: no "▁" is put in front of a fragment that
    // already starts with a space; first_only: only in front of the text's first fragment
    // (prepend_scheme "first"); split: BPE runs within each piece that a "▁" starts.
    bool metaspace = false, first_only = false, split = false;
    // added_tokens: when non-empty, these (control tokens included) are the tokens taken
    // as themselves in text, instead of the user-defined ones.
    std::vector<AddedToken> added;
  } hf;
};

}  // namespace ds
