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
  // The parser's own tag ("[json.exception.parse_error.101] ") and its phrasing
  // ("parse error at line 1, column 2: syntax error while parsing value - ") go.
  if (what.substr(0, 1) == "[")
    if (const size_t t = what.find("] "); t != std::string_view::npos) what.remove_prefix(t + 2);
  std::string where;
  if (const size_t l = what.find("line "); l != std::string_view::npos && what.substr(0, 11) == "parse error") {
    const size_t colon = what.find(": ", l);
    where = std::string(what.substr(l, colon == std::string_view::npos ? std::string_view::npos : colon - l)) + ": ";
    what.remove_prefix(colon == std::string_view::npos ? what.size() : colon + 2);
  }
  if (const size_t d = what.find(" - "); d != std::string_view::npos && what.substr(0, 12) == "syntax error")
    what.remove_prefix(d + 3);
  constexpr std::string_view kLastRead = "; last read: '";
  const size_t p = what.find(kLastRead);
  if (p == std::string_view::npos) return where + excerpt(what, 4 * kExcerptBytes);
  const size_t start = p + kLastRead.size();
  const size_t end = what.size() > start && what.back() == '\'' ? what.size() - 1 : what.size();
  return where + excerpt(what.substr(0, p), 4 * kExcerptBytes) + " near '" + excerpt(what.substr(start, end - start)) +
         "'";
}

}  // namespace ds
