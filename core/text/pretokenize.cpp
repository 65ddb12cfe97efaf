#include "text/pretokenize.h"

#include "text/unicode.h"

namespace ds {

namespace {

using unicode::CharClass;
using unicode::classify;
using unicode::decode_utf8;
using unicode::kLetter;
using unicode::kNumber;
using unicode::kOther;
using unicode::kSpace;
using Views = std::vector<std::string_view>;

// The class of the character of s at pos (pos < s.size()) and its length.
CharClass class_at(std::string_view s, size_t pos, size_t& len) { return classify(decode_utf8(s, pos, len)); }

// The end of the run of characters of class c starting at pos.
size_t run_end(std::string_view s, size_t pos, CharClass c) {
  while (pos < s.size()) {
    size_t len;
    if (class_at(s, pos, len) != c) break;
    pos += len;
  }
  return pos;
}

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The length of a contraction 's 't 're 've 'm 'll 'd at i (0 if none); letters compared
// in lower case when any_case.
size_t contraction(std::string_view s, size_t i, bool any_case) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  auto at = [&](size_t k) { return any_case ? ascii_lower(s[k]) : s[k]; };
  const char c1 = at(i + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const char c2 = at(i + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// The end of \s+(?!\S)|\s+ at i, a whitespace character: the whole run when it ends
// the text, else the run but its last character (which a following pattern takes with
// the non-space after it), or the single character when the run is one long.
size_t whitespace_end(std::string_view s, size_t i) {
  size_t last = i, end = i;
  while (end < s.size()) {
    size_t len;
    if (class_at(s, end, len) != kSpace) break;
    last = end;
    end += len;
  }
  if (end < s.size() && last > i) return last;
  return end;
}

// GPT-2's pattern, one match at i.
size_t gpt2_end(std::string_view s, size_t i) {
  if (size_t c = contraction(s, i, false)) return i + c;
  size_t len0;
  CharClass k = class_at(s, i, len0);
  size_t body = i;  // where the letter/number/other run begins
  if (s[i] == ' ' && i + 1 < s.size()) {
    size_t len1;
    const CharClass k1 = class_at(s, i + 1, len1);
    if (k1 != kSpace) k = k1, body = i + 1;
  }
  if (k != kSpace) return run_end(s, body, k);
  return whitespace_end(s, i);
}

// Llama 3's pattern (max_digits 3) or Qwen2's (1), one match at i.
size_t llama3_end(std::string_view s, size_t i, int max_digits) {
  const size_t n = s.size();
  if (size_t c = contraction(s, i, true)) return i + c;
  size_t len0;
  const uint32_t cp0 = decode_utf8(s, i, len0);
  const CharClass k0 = classify(cp0);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (k0 == kLetter) return run_end(s, i, kLetter);
  size_t len1;
  if (k0 != kNumber && cp0 != '\r' && cp0 != '\n' && i + len0 < n && class_at(s, i + len0, len1) == kLetter)
    return run_end(s, i + len0, kLetter);
  // \p{N}{1,max_digits}
  if (k0 == kNumber) {
    size_t end = i + len0;
    for (int d = 1; d < max_digits && end < n && class_at(s, end, len1) == kNumber; ++d) end += len1;
    return end;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t body = i;
  if (cp0 == ' ' && i + 1 < n && class_at(s, i + 1, len1) == kOther) body = i + 1;
  if (class_at(s, body, len1) == kOther) {
    size_t end = run_end(s, body, kOther);
    while (end < n && (s[end] == '\r' || s[end] == '\n')) ++end;
    return end;
  }
  // \s*[\r\n]+: the whitespace run up to and including its last \r or \n.
  size_t end = i, after_newline = 0;
  while (end < n) {
    size_t len;
    if (class_at(s, end, len) != kSpace) break;
    if (s[end] == '\r' || s[end] == '\n') after_newline = end + 1;
    end += len;
  }
  if (after_newline) return after_newline;
  return whitespace_end(s, i);
}

// Cuts s into consecutive matches of a pattern whose every position matches, where
// match(s, i) is the end of the match at i.
template <class Match>
void split_all(std::string_view s, Views& out, Match match) {
  for (size_t i = 0; i < s.size();) {
    const size_t end = match(s, i);
    out.push_back(s.substr(i, end - i));
    i = end;
  }
}

// Splits every piece of in like a regex split that keeps both the matches and the
// spans between them: match(s, i) is the end of the match at i, or i for none.
template <class Match>
Views isolate(const Views& in, Match match) {
  Views out;
  out.reserve(in.size());
  for (std::string_view s : in) {
    size_t gap = 0;  // start of the unmatched span before i
    for (size_t i = 0; i < s.size();) {
      const size_t end = match(s, i);
      if (end == i) {
        size_t len;
        decode_utf8(s, i, len);
        i += len;
        continue;
      }
      if (i > gap) out.push_back(s.substr(gap, i - gap));
      out.push_back(s.substr(i, end - i));
      i = gap = end;
    }
    if (s.size() > gap) out.push_back(s.substr(gap));
  }
  return out;
}

// The end of a run of characters at i that pred accepts (i when none).
template <class Pred>
size_t run_of(std::string_view s, size_t i, Pred pred) {
  while (i < s.size()) {
    size_t len;
    if (!pred(decode_utf8(s, i, len))) break;
    i += len;
  }
  return i;
}

void split_default(std::string_view text, Views& out) {
  // [\p{P}\$\+<=>\^~\|]+
  Views a = isolate(Views{text}, [](std::string_view s, size_t i) {
    return run_of(s, i, [](uint32_t cp) {
      return unicode::is_punctuation(cp) ||
             (cp < 128 && std::string_view("$+<=>^~|").find(static_cast<char>(cp)) != std::string_view::npos);
    });
  });
  Views b;
  for (std::string_view s : a) split_all(s, b, gpt2_end);
  // \p{N}+
  Views c = isolate(b, [](std::string_view s, size_t i) {
    return run_of(s, i, [](uint32_t cp) { return classify(cp) == kNumber; });
  });
  // [0-9][0-9][0-9]
  Views d = isolate(c, [](std::string_view s, size_t i) {
    auto digit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
    return digit(i) && digit(i + 1) && digit(i + 2) ? i + 3 : i;
  });
  out.insert(out.end(), d.begin(), d.end());
}

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& out) {
  switch (kind) {
    case PreTokenizer::Gpt2:
      split_all(text, out, gpt2_end);
      return;
    case PreTokenizer::Llama3:
      split_all(text, out, [](std::string_view s, size_t i) { return llama3_end(s, i, 3); });
      return;
    case PreTokenizer::Qwen2:
      split_all(text, out, [](std::string_view s, size_t i) { return llama3_end(s, i, 1); });
      return;
    case PreTokenizer::Smollm: {
      // \p{N}, each digit isolated, then GPT-2's pattern within the rest.
      const Views digits = isolate(Views{text}, [](std::string_view s, size_t i) {
        size_t len;
        return classify(decode_utf8(s, i, len)) == kNumber ? i + len : i;
      });
      for (std::string_view s : digits) split_all(s, out, gpt2_end);
      return;
    }
    case PreTokenizer::Default:
      split_default(text, out);
      return;
  }
}

}  // namespace ds
