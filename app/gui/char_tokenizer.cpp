#include "char_tokenizer.h"

namespace dsgui {

std::vector<int> CharTokenizer::encode(std::string_view text, bool bos) const {
  std::vector<int> ids;
  if (bos) ids.push_back(kBos);
  for (unsigned char c : text) {
    if (c == '\n' || c == '\t') c = ' ';
    if (c >= 32 && c < 127 && int(c) < vocab_) ids.push_back(int(c));
    // Other bytes have no token in this tokenizer and are dropped.
  }
  return ids;
}

std::string CharTokenizer::piece(int id) const {
  if (id == kPad) return "<pad>";
  if (id == kBos) return "<bos>";
  if (id == kEos) return "<eos>";
  if (id >= 32 && id < 127) return std::string(1, char(id));
  return "#" + std::to_string(id);
}

std::string CharTokenizer::decode(int /*prev*/, int id) const {
  if (id >= 32 && id < 127) return std::string(1, char(id));
  return "";
}

}  // namespace dsgui
