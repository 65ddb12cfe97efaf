// A trace file that is not one ends in a one-line message of our own: where the JSON
// broke, or what is wrong with it, never the JSON library's tagged text or the bytes it
// read (which need not be text at all).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "probe/trace.h"
#include "util/error.h"

namespace {

std::string message_of(const std::string& text) {
  std::istringstream in(text);
  try {
    ds::Trace::read_json(in);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TraceErrors, BinaryBytesSayWhereTheJsonBroke) {
  const std::string m = message_of(std::string("\x89PNG\r\n\x1a\n\xff", 9));
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("byte 1"), std::string::npos) << m;
  EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
  for (unsigned char c : m) EXPECT_LT(c, 0x80) << m;  // none of the file's bytes quoted
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(TraceErrors, CutShortFileSaysWhereTheJsonBroke) {
  const std::string text = "{\"steps\": [1, 2";
  const std::string m = message_of(text);
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("ends early"), std::string::npos) << m;
}

TEST(TraceErrors, WrongTypeIsMalformedWithoutTheLibraryTag) {
  const std::string m =
      message_of(R"({"format": "decoderscope-trace", "version": 1, "model": "not an object", "steps": []})");
  EXPECT_NE(m.find("model"), std::string::npos) << m;  // names the field
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
}

}  // namespace
