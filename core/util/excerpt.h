#pragma once
// File content quoted in an error message, kept short: a 1 MB line in a bad file must
// give a one-line message, not a 1 MB one.
#include <cstddef>
#include <string>
#include <string_view>

namespace ds {

// The longest piece of file content a message quotes, in bytes.
constexpr size_t kExcerptBytes = 60;

// s with control bytes written as \xNN; when s is longer than max bytes, its first max
// bytes (cut at a UTF-8 character boundary) followed by "... (N bytes)".
std::string excerpt(std::string_view s, size_t max = kExcerptBytes);
// The same in double quotes: "abc" or "abc..." (N bytes).
std::string quoted_excerpt(std::string_view s, size_t max = kExcerptBytes);
// A JSON parser's message in plain words: nlohmann's "[json.exception.parse_error.101]
// parse error at line 1, column 2: syntax error while parsing value - invalid literal;
// last read: '<token>'" becomes "line 1, column 2: invalid literal near '<token>'", the
// token cut to an excerpt with control bytes escaped (it may be a whole line).
std::string shorten_json_error(std::string_view what);

}  // namespace ds
