#include "util/excerpt.h"

#include <cstdio>

namespace ds {

namespace {

// The first max bytes of s or fewer, not ending inside a UTF-8 character.
std::string_view head(std::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  // Back up over continuation bytes (10xxxxxx) to the start of the cut character.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80 && max - n < 4) --n;
  return s.substr(0, n);
}

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string length_note(size_t n) { return " (" + std::to_string(n) + " bytes)"; }

}  // namespace

std::string excerpt(std::string_view s, size_t max) {
  if (s.size() <= max) return escape(s);
  return escape(head(s, max)) + "..." + length_note(s.size());
}

std::string quoted_excerpt(std::string_view s, size_t max) {
  if (s.size() <= max) return "\"" + escape(s) + "\"";
  return "\"" + escape(head(s, max)) + "...\"" + length_note(s.size());
}

std::string shorten_json_error(std::string_view what) {
  constexpr std::string_view kLastRead = "last read: '";
  const size_t p = what.find(kLastRead);
  if (p == std::string_view::npos) return excerpt(what, 4 * kExcerptBytes);
  const size_t start = p + kLastRead.size();
  const size_t end = what.size() > start && what.back() == '\'' ? what.size() - 1 : what.size();
  return excerpt(what.substr(0, start), 4 * kExcerptBytes) + excerpt(what.substr(start, end - start)) +
         std::string(what.substr(end));
}

}  // namespace ds
