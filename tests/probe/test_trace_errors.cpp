// A trace file that is not one ends in a one-line message of our own: where the JSON
// broke, or what is wrong with it, never the JSON library's tagged text or the bytes it
// read (which need not be text at all).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// Trace::load on a file that is neither format says it is not a trace (not where JSON
// parsing broke), and a JSON file still gets the JSON messages.
TEST(TraceErrors, AFileThatIsNoTraceSaysSo) {
  const std::string dir = ::testing::TempDir();
  auto load_message = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      ds::Trace::load(path);
    } catch (const ds::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"picture.dstrace", std::string("\x89PNG\r\n\x1a\n\xff\x00", 10)},
           {"notes.dstrace", "these are my lesson notes"},
           {"short.dstrace", "DSTR"},
           {"list.json", "  [1, 2, 3]"}}) {
    const std::string m = load_message(name, bytes);
    EXPECT_NE(m.find("not a decoderscope trace"), std::string::npos) << name << ": " << m;
    EXPECT_EQ(m.find("JSON ("), std::string::npos) << name << ": " << m;
  }
  const std::string m = load_message("cut.json", " {\"format\": ");
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
}
