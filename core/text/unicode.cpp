#include "text/unicode.h"

#include <algorithm>
#include <iterator>

namespace ds::unicode {

namespace {

struct ClassRange {
  uint32_t first, last;
  CharClass cls;
};

constexpr ClassRange kClassRanges[] = {
#include "text/unicode_tables.inc"
};

struct Range {
  uint32_t first, last;
};

constexpr Range kPunctRanges[] = {
#include "text/unicode_punct.inc"
};

// The class of every ASCII code point, computed once at compile time: most text is ASCII.
struct AsciiClasses {
  CharClass cls[128];
  bool punct[128];
  constexpr AsciiClasses() : cls{}, punct{} {
    for (const ClassRange& r : kClassRanges)
      for (uint32_t c = r.first; c <= r.last && c < 128; ++c) cls[c] = r.cls;
    for (const Range& r : kPunctRanges)
      for (uint32_t c = r.first; c <= r.last && c < 128; ++c) punct[c] = true;
  }
};
constexpr AsciiClasses kAscii;

// The last range of [first, end) whose first <= cp, or end.
template <class R>
const R* find_range(const R* first, const R* end, uint32_t cp) {
  const R* it = std::upper_bound(first, end, cp, [](uint32_t c, const R& r) { return c < r.first; });
  if (it == first) return end;
  --it;
  return cp <= it->last ? it : end;
}

// Bytes that GPT-2 keeps as the same code point.
constexpr bool byte_is_kept(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  uint32_t to_cp[256];
  int16_t to_byte[0x144];  // code point -> byte, or -1 (the alphabet ends at U+0143)
  constexpr ByteAlphabet() : to_cp{}, to_byte{} {
    for (int16_t& b : to_byte) b = -1;
    uint32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      to_cp[b] = byte_is_kept(b) ? b : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
constexpr ByteAlphabet kAlphabet;

}  // namespace

CharClass classify(uint32_t cp) {
  if (cp < 128) return kAscii.cls[cp];
  const ClassRange* end = std::end(kClassRanges);
  const ClassRange* r = find_range(std::begin(kClassRanges), end, cp);
  return r == end ? kOther : r->cls;
}

bool is_punctuation(uint32_t cp) {
  if (cp < 128) return kAscii.punct[cp];
  const Range* end = std::end(kPunctRanges);
  return find_range(std::begin(kPunctRanges), end, cp) != end;
}

uint32_t decode_utf8(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  len = 1;
  if (b0 < 0x80) return b0;
  size_t n;
  uint32_t cp;
  uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, cp = b0 & 0x1Fu, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, cp = b0 & 0x0Fu, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return kInvalid;
  }
  if (i + n > s.size()) return kInvalid;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return kInvalid;
    cp = cp << 6 | (b & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalid;
  len = n;
  return cp;
}

bool valid_utf8(std::string_view s, size_t* bad_at) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    if (decode_utf8(s, i, len) == kInvalid) {
      if (bad_at) *bad_at = i;
      return false;
    }
    i += len;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | cp >> 6));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | cp >> 12));
    out.push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | cp >> 18));
    out.push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t byte_to_codepoint(unsigned char b) { return kAlphabet.to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < 0x144 ? kAlphabet.to_byte[cp] : -1; }

bool alphabet_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const int b = codepoint_to_byte(decode_utf8(s, i, len));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

}  // namespace ds::unicode
