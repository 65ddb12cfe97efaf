#pragma once
// Unicode helpers shared by the tokenizers: lenient UTF-8 decoding, the character
// classes the pre-tokenizer patterns use (\p{L}, \p{N}, \s, \p{P}) and GPT-2's
// byte-to-unicode alphabet of byte-level BPE.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds::unicode {

// \p{L} (general category L*), \p{N} (N*), \s (the White_Space property) or none of them.
enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// The class of a code point (Unicode 15 tables, unicode_tables.inc); kInvalid is kOther.
CharClass classify(uint32_t cp);
// Whether a code point is of general category P* (unicode_punct.inc).
bool is_punctuation(uint32_t cp);

// What decode_utf8 returns for a byte that does not start a well-formed sequence.
constexpr uint32_t kInvalid = 0xFFFFFFFFu;

// One code point of s at i (i < s.size()), decoded leniently: a byte that does not
// start a well-formed UTF-8 sequence (overlong, surrogate, truncated, > U+10FFFF) is a
// character of its own, kInvalid, of length 1. len receives the sequence's length.
uint32_t decode_utf8(std::string_view s, size_t i, size_t& len);
// Whether s is well-formed UTF-8; if not and bad_at is given, the first bad byte's index.
bool valid_utf8(std::string_view s, size_t* bad_at = nullptr);
// Appends the UTF-8 encoding of cp (<= U+10FFFF).
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's byte alphabet: the printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) keep
// their code point, the other 68 map to U+0100.. in byte order, so that every byte is a
// visible character of a vocabulary string.
uint32_t byte_to_codepoint(unsigned char b);
// The byte of an alphabet code point, or -1.
int codepoint_to_byte(uint32_t cp);
// The bytes of a string of alphabet characters (a byte-level vocabulary entry) into out,
// or false if it has a character outside the alphabet (a plain-text token, e.g. a
// special one such as "[PAD 1]": the space is outside the alphabet).
bool alphabet_to_bytes(std::string_view s, std::string& out);

}  // namespace ds::unicode
