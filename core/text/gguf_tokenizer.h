#pragma once
// The tokenizers that a GGUF file's metadata describes (tokenizer.ggml.*, gathered in a
// VocabData by io/gguf.cpp):
//
// - model "llama": SentencePiece BPE (Llama 2, TinyLlama, Mistral, Phi-3, Gemma). The text
//   has ' ' replaced by U+2581 "▁" and, when add_space_prefix (default true), a "▁" put in
//   front; it is split into UTF-8 characters and the adjacent pair whose concatenation is a
//   token of the highest score is merged (the leftmost of equal scores) until no pair
//   concatenates to a token. A character that is no token becomes its byte tokens <0xXX>
//   (byte fallback), or the unknown token when the vocabulary has none.
// - model "gpt2": byte-level BPE (Llama 3, Qwen2/2.5/3, GPT-2, SmolLM). The text is cut
//   by the pre-tokenizer named by tokenizer.ggml.pre (text/pretokenize.h), each piece's
//   bytes become GPT-2's byte-alphabet characters, and adjacent symbols are merged by
//   merge rank, lowest first (leftmost of equals). For Llama 3 ("llama-bpe"), a piece
//   that is a token as a whole is that token without merging (its tokenizer.json has
//   "ignore_merges": true; llama.cpp does the same).
//
// In both, user-defined tokens (type 4) in the text are taken as themselves before the
// rest is tokenized (as SentencePiece, the Hugging Face tokenizers and llama.cpp do);
// control tokens (type 3, e.g. "<|endoftext|>", "<s>") are never produced from text: their
// text is encoded as plain text.
//
// A Hugging Face tokenizer.json (text/hf_tokenizer.h) fills VocabData::hf: then the added
// tokens, control ones included, are taken as themselves in text (longest first at the
// leftmost place, with their lstrip/rstrip/single_word), "llama" merges by the rank of
// each pair in its merges, as the tokenizers library's BPE model does, and the Metaspace
// options decide where "▁" is put in front.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/vocab_data.h"

namespace ds {

class VocabTokenizer final : public Tokenizer {
 public:
  // Checks everything and throws ds::Error naming the key and the problem: an unknown
  // model or pre-tokenizer, sizes of scores/token types unequal to that of the tokens,
  // NaN scores, token types outside 0..6, special ids outside the vocabulary, add_bos/
  // add_eos without the id, merges that are not two tokens whose concatenation is a
  // token, a byte-level vocabulary without the 256 byte symbols, a SentencePiece one with
  // neither byte tokens nor an unknown token.
  explicit VocabTokenizer(const VocabData& v);

  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  // The ids of text; with bos, [BOS] first when the model adds one (add_bos_token, by
  // default true for "llama" and "llama-bpe", false for the other byte-level
  // pre-tokenizers) and [EOS] last when add_eos_token is true (as llama.cpp does).
  // encode(text, false) is the text's ids alone.
  std::vector<int> encode(std::string_view text, bool bos) const override;
  // The vocabulary entry as stored, e.g. "▁dream", "Ġdream", "<0x0A>", "<|im_end|>".
  std::string piece(int id) const override;
  // The bytes printed for id: byte-level BPE maps the alphabet back to bytes;
  // SentencePiece turns "▁" into ' ', <0xXX> into that byte, and drops the leading space
  // of the first token after BOS (or of a first token, prev < 0) when add_space_prefix,
  // as SentencePiece's decoder does. Control tokens (e.g. "<|im_end|>", "</s>") print as
  // their text rather than nothing: a student watching generation should see where the
  // model ends a turn or the text, which an empty string would hide.
  std::string decode(int prev, int id) const override;

  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  bool adds_bos() const { return add_bos_; }
  // The id of a vocabulary entry (the lowest of duplicates), or -1.
  int find(std::string_view token) const;
  TokenType type(int id) const;

 private:
  enum class Kind { SentencePiece, ByteLevel };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // Flags of a token matched in text (VocabData::AddedToken).
  enum : uint8_t { kLstrip = 1, kRstrip = 2, kSingleWord = 4 };

  void check_id(int id) const;
  void init_special(const VocabData& v);
  void init_matched(const VocabData& v);
  void init_sentencepiece(const VocabData& v);
  void init_byte_level(const VocabData& v);
  void init_merges(const VocabData& v);
  bool mergeable(int id) const;
  // The id of the matched token at text[i] (its extent, whitespace taken by lstrip and
  // rstrip included, into [begin, end)), or -1; gap is the start of the text not yet taken.
  int match_at(std::string_view text, size_t gap, size_t i, size_t& begin, size_t& end) const;
  // Text fragments and user-defined token ids of text, in order: (-1, fragment) or (id, "").
  std::vector<std::pair<int, std::string_view>> partition(std::string_view text) const;
  void encode_spm(std::string_view fragment, bool prefix, std::vector<int>& out) const;
  void spm_merge(std::string_view s, std::vector<int>& out) const;
  void encode_bpe(std::string_view fragment, std::vector<int>& out) const;
  void bpe(std::string_view piece, std::vector<int>& out) const;

  Kind kind_ = Kind::SentencePiece;
  PreTokenizer pre_ = PreTokenizer::Default;
  bool ignore_merges_ = false;
  bool by_rank_ = false;  // "llama": merge by the rank of a pair in merges_ rather than by score
  bool metaspace_ = false, first_only_ = false, split_ = false;  // VocabData::Hf
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
  int bos_id_ = -1, eos_id_ = -1, unk_id_ = -1;
  std::vector<std::string> tokens_;  // id -> vocabulary entry
  std::vector<std::string> bytes_;   // id -> what decode prints
  std::vector<float> scores_;        // SentencePiece: id -> score
  std::vector<TokenType> types_;     // id -> type (Normal when the file has none)
  std::unordered_map<std::string, int, Hash, std::equal_to<>> index_;
  // (left id << 32 | right id) -> (rank, merged id): byte-level, or "llama" by rank.
  std::unordered_map<uint64_t, std::pair<int, int>> merges_;
  int byte_id_[256] = {};  // the id of each byte's symbol (byte-level) or <0xXX> (-1: none)
  // The ids of the tokens matched in text (user-defined, or VocabData::hf.added) by their
  // first byte, longest text first, and id -> kLstrip | kRstrip | kSingleWord.
  std::vector<int> user_defined_[256];
  std::vector<uint8_t> match_flags_;
};

// The tokenizer of v (throws ds::Error as VocabTokenizer's constructor does).
std::shared_ptr<const Tokenizer> make_vocab_tokenizer(const VocabData& v);

}  // namespace ds
