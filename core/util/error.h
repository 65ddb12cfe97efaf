#pragma once
// Errors raised by the core library. Every failure that a user can cause (a bad
// file, a bad option, a bad prompt) is reported as a ds::Error whose message says
// what was wrong and where; nothing in core asserts on user input.
#include <stdexcept>
#include <string>

namespace ds {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace ds
