#pragma once
// Tokenizers turn text into ids and ids back into text pieces.
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int vocab_size() const = 0;
  // Text to ids; with bos, the model's begin-of-sequence id comes first.
  virtual std::vector<int> encode(std::string_view text, bool bos) const = 0;
  // The raw vocabulary entry of id (for labels), e.g. " dream" or "<0x0A>".
  virtual std::string piece(int id) const = 0;
  // The bytes printed when id follows prev in generated text (may be part of a
  // UTF-8 character, or empty).
  virtual std::string decode(int prev, int id) const = 0;
};

// The text of ids that follow the token prev, as generated text is printed: each id
// decoded after the one before it (decode(prev, ids[0]) + decode(ids[0], ids[1]) + ...).
// decoderscope-cli prints generated text so and the window shows it so.
inline std::string decode_text(const Tokenizer& t, int prev, std::span<const int> ids) {
  std::string out;
  for (int id : ids) {
    out += t.decode(prev, id);
    prev = id;
  }
  return out;
}

// A vocabulary entry for an error message: control bytes written as \xNN, at most
// kExcerptBytes of it (util/excerpt.h) followed by "... (N bytes)".
std::string escaped(std::string_view s);

}  // namespace ds
