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
// A JSON parser's message (nlohmann's "...; last read: '<token>'") with the token it
// quotes cut to an excerpt and control bytes escaped: the token may be a whole line.
std::string shorten_json_error(std::string_view what);

}  // namespace ds
