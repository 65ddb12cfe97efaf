#pragma once
// The sentencepiece-style BPE tokenizer of llama2.c (tokenizer.bin), with encode and
// decode reproducing llama2.c's run.c.
//
// File: int32 max_token_length; then for each of vocab_size tokens: float32 score,
// int32 len, len bytes (no terminator). Little-endian.
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"

namespace ds {

class LlamaTokenizer : public Tokenizer {
 public:
  // Reads vocab_size tokens from a tokenizer.bin; throws ds::Error naming the file and
  // the problem (missing or truncated file, bad lengths, NaN scores, trailing bytes).
  static LlamaTokenizer load(const std::string& path, int vocab_size);
  // From pieces and scores directly (same checks; vocab_size = pieces.size() >= 3).
  LlamaTokenizer(std::vector<std::string> pieces, std::vector<float> scores);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  // run.c's encode: [BOS 1], the " " piece when text is non-empty, one token per UTF-8
  // character (or its bytes as <0xHH> tokens, id byte + 3, when the character is not a
  // piece), then merges of adjacent pairs, best score first (first of equals), until no
  // pair concatenates to a piece. No EOS. Like run.c, text ends at its first NUL byte.
  // Throws ds::Error only if a byte-fallback id would lie outside the vocabulary.
  std::vector<int> encode(std::string_view text, bool bos) const override;
  std::string piece(int id) const override;
  // run.c's decode + safe_printf: a leading space is dropped right after BOS (prev == 1),
  // "<0xHH>" becomes that byte, and a lone byte that is neither printable nor
  // whitespace (C locale) gives "".
  std::string decode(int prev, int id) const override;

  float score(int id) const;
  // The id of an exact piece, or -1 (the lowest id when a piece occurs twice).
  int find(std::string_view piece) const;
  int max_token_length() const { return max_token_length_; }

 private:
  void check_id(int id) const;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int, Hash, std::equal_to<>> index_;
  int max_token_length_ = 0;
};

}  // namespace ds
