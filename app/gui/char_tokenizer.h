#pragma once
// A character tokenizer for the small random demo models built in code: one token per
// printable ASCII character (id = the byte), plus <pad> 0, <bos> 1, <eos> 2. Ids that
// are not characters (in a large random model's vocabulary) read as "#id".
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace dsgui {

class CharTokenizer : public ds::Tokenizer {
 public:
  static constexpr int kPad = 0, kBos = 1, kEos = 2;
  explicit CharTokenizer(int vocab = 128) : vocab_(vocab) {}
  int vocab_size() const override { return vocab_; }
  std::vector<int> encode(std::string_view text, bool bos) const override;
  std::string piece(int id) const override;
  std::string decode(int prev, int id) const override;

 private:
  int vocab_;
};

}  // namespace dsgui
