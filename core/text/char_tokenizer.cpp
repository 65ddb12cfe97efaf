#include "text/char_tokenizer.h"

#include <cstdio>

#include "util/error.h"
#include "util/excerpt.h"

namespace ds {

int utf8_next(std::string_view s, size_t i, char32_t& cp) {
  if (i >= s.size()) return 0;
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  int len;
  char32_t v;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    v = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    v = c & 0x07;
  } else {
    return 0;  // continuation byte, overlong lead C0/C1, or F5..FF
  }
  if (s.size() - i < static_cast<size_t>(len)) return 0;
  for (int k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return len;
}

namespace {

std::string hex_code(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

// The character as it may appear in a one-line message.
std::string shown_char(std::string_view ch, char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) {
    switch (cp) {
      case '\n':
        return "\\n";
      case '\t':
        return "\\t";
      case '\r':
        return "\\r";
      default:
        return "\\x" + hex_code(cp).substr(4);
    }
  }
  if (cp >= 0x80 && cp < 0xA0) return "?";  // C1 controls
  return std::string(ch);
}

}  // namespace

// An entry for a message: control bytes escaped, cut short if long (tokenizer.h).
std::string escaped(std::string_view s) { return excerpt(s); }

CharTokenizer::CharTokenizer(std::vector<std::string> vocab, int bos_id) : vocab_(std::move(vocab)), bos_id_(bos_id) {
  if (vocab_.empty()) throw Error("character vocabulary is empty");
  if (bos_id_ < -1 || bos_id_ >= static_cast<int>(vocab_.size()))
    throw Error("character vocabulary: bos id " + std::to_string(bos_id_) + " is outside the " +
                std::to_string(vocab_.size()) + " entries");
  std::unordered_map<std::string, int> seen;
  for (size_t id = 0; id < vocab_.size(); ++id) {
    const std::string& e = vocab_[id];
    const std::string where = "character vocabulary entry " + std::to_string(id);
    if (e.empty()) throw Error(where + " is empty");
    size_t i = 0, chars = 0;
    char32_t cp = 0;
    while (i < e.size()) {
      const int n = utf8_next(e, i, cp);
      if (n == 0) throw Error(where + " is not valid UTF-8 (at byte " + std::to_string(i) + ")");
      i += static_cast<size_t>(n);
      ++chars;
    }
    auto [it, fresh] = seen.emplace(e, static_cast<int>(id));
    if (!fresh) throw Error(where + " (\"" + escaped(e) + "\") repeats entry " + std::to_string(it->second));
    if (chars == 1) ids_[cp] = static_cast<int>(id);
  }
}

std::vector<int> CharTokenizer::encode(std::string_view text, bool bos) const {
  std::vector<int> out;
  if (bos && bos_id_ >= 0) out.push_back(bos_id_);
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    const int n = utf8_next(text, i, cp);
    if (n == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[i])));
      throw Error("text is not valid UTF-8 at byte " + std::to_string(i) + " (" + buf + ")");
    }
    auto it = ids_.find(cp);
    if (it == ids_.end())
      throw Error("character '" + shown_char(text.substr(i, static_cast<size_t>(n)), cp) + "' (" + hex_code(cp) +
                  ") is not in this model's vocabulary");
    out.push_back(it->second);
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string CharTokenizer::piece(int id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(vocab_size()) +
                " entries)");
  return vocab_[static_cast<size_t>(id)];
}

std::string CharTokenizer::decode(int /*prev*/, int id) const { return piece(id); }

}  // namespace ds
