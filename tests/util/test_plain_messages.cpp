// Messages a user reads in the window: the real code point of a character beyond the
// Basic Multilingual Plane (an emoji), and JSON errors in plain words, never the JSON
// library's tagged text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/model_folder.h"
#include "text/char_tokenizer.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace {

std::string encode_error(const ds::CharTokenizer& t, const std::string& text) {
  try {
    t.encode(text, false);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "";
}

// U+1F600 (grinning face) is F0 9F 98 80 in UTF-8: 0x1F600 = 000 011111 011000 000000.
TEST(PlainMessages, EmojiIsNamedByItsRealCodePoint) {
  const ds::CharTokenizer t({"a", "b", "3"}, -1);
  const std::string m = encode_error(t, "ab\xF0\x9F\x98\x80");
  EXPECT_NE(m.find("U+1F600"), std::string::npos) << m;
  EXPECT_EQ(m.find("FFFD"), std::string::npos) << m;
  // A two-byte and a three-byte character too: U+00E4 (C3 A4) and U+20AC (E2 82 AC).
  EXPECT_NE(encode_error(t, "3\xC3\xA4").find("U+00E4"), std::string::npos);
  EXPECT_NE(encode_error(t, "\xE2\x82\xAC").find("U+20AC"), std::string::npos);
}

TEST(PlainMessages, EmojiInTheVocabularyIsOneToken) {
  const ds::CharTokenizer t({"a", "\xF0\x9F\x98\x80"}, -1);
  EXPECT_EQ(t.encode("a\xF0\x9F\x98\x80", false), (std::vector<int>{0, 1}));
}

std::string parse_message(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    return j.dump();
  } catch (const nlohmann::json::exception& e) {
    return ds::shorten_json_error(e.what());
  }
  return "";
}

TEST(PlainMessages, JsonErrorsLoseTheLibrarysTag) {
  const std::string m = parse_message("{\"a\": x}");
  EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
  EXPECT_EQ(m.find("syntax error while parsing"), std::string::npos) << m;
  EXPECT_NE(m.find("line 1, column 7"), std::string::npos) << m;  // 'x' is the 7th character
  EXPECT_NE(m.find("near '"), std::string::npos) << m;            // what the parser read last
  const std::string cut = parse_message("{\"a\": ");
  EXPECT_EQ(cut.find("json.exception"), std::string::npos) << cut;
  EXPECT_NE(cut.find("line 1"), std::string::npos) << cut;
}

TEST(PlainMessages, BrokenConfigJsonSaysWhereInPlainWords) {
  const auto dir = std::filesystem::temp_directory_path() / "ds_plain_messages_cfg";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << "{\"n_layer\": 2,,}";
  std::string m;
  try {
    ds::load_model_folder(dir.string());
  } catch (const ds::Error& e) {
    m = e.what();
  }
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
  EXPECT_EQ(m.find('['), std::string::npos) << m;
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
}

}  // namespace
