#pragma once
// A character-level tokenizer: one id per UTF-8 character, as used by the built-in
// models. The vocabulary is one string per id; entries of more than one character
// (specials such as "<pad>", "<s>", "</s>") are only ever produced by the model,
// never by encode.
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"

namespace ds {

class CharTokenizer : public Tokenizer {
 public:
  // Throws ds::Error if the vocabulary is empty, an entry is empty, not valid UTF-8
  // or appears twice, or bos_id is neither -1 nor an id.
  CharTokenizer(std::vector<std::string> vocab, int bos_id);

  int vocab_size() const override { return static_cast<int>(vocab_.size()); }
  // [bos_id if bos and bos_id >= 0] then one id per character. Throws ds::Error on
  // invalid UTF-8 (naming the byte offset) or a character outside the vocabulary.
  std::vector<int> encode(std::string_view text, bool bos) const override;
  std::string piece(int id) const override;
  std::string decode(int prev, int id) const override;
  int bos_id() const { return bos_id_; }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<char32_t, int> ids_;  // single-character entries
  int bos_id_ = -1;
};

// Decodes the UTF-8 character starting at s[i] (strict: no overlong forms,
// surrogates or values above U+10FFFF). Returns its length in bytes and sets cp, or
// returns 0 when the bytes there are not a valid character.
int utf8_next(std::string_view s, size_t i, char32_t& cp);

}  // namespace ds
