// GPT-2 byte-level BPE: reference ids made with real GPT-2 tokenizers (shared
// fixture), tokenizer.json loading, the pre-tokenizer by hand, malformed files and
// invalid UTF-8.
#include <gtest/gtest.h>

#include "helpers.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/gpt2_tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;
using ds::GPT2Tokenizer;

namespace {

fs::path gpt2_fixture() { return fs::path(DS_SHARED_DIR) / "fixtures" / "gpt2-tokenizer"; }

#define NEED_GPT2_FIXTURE()                                                                                \
  if (!fs::exists(gpt2_fixture() / "reference_pairs.jsonl") || !fs::exists(gpt2_fixture() / "vocab.json")) \
  GTEST_SKIP() << "../shared/fixtures/gpt2-tokenizer is absent: skipping the comparison with real GPT-2 "  \
                  "tokenizer outputs"

struct RefPair {
  std::string text;
  std::vector<int> ids;
};

std::vector<RefPair> reference_pairs() {
  std::vector<RefPair> out;
  std::ifstream f(gpt2_fixture() / "reference_pairs.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int>>()});
  }
  return out;
}

const GPT2Tokenizer& fixture_tokenizer() {
  static const GPT2Tokenizer t =
      GPT2Tokenizer::from_files((gpt2_fixture() / "vocab.json").string(), (gpt2_fixture() / "merges.txt").string());
  return t;
}

std::string decode_all(const ds::Tokenizer& t, const std::vector<int>& ids) {
  std::string s;
  int prev = -1;
  for (int id : ids) {
    s += t.decode(prev, id);
    prev = id;
  }
  return s;
}

using ds::test::TempDir;

// A small byte-level vocabulary: the 256 byte symbols (id = byte), then the results
// of `merges` in order, then <|endoftext|>.
struct Synth {
  std::vector<std::pair<std::string, int>> vocab;
  std::vector<std::string> merges;

  Synth() {
    for (int b = 0; b < 256; ++b) vocab.push_back({GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b)), b});
    for (const char* m : {"a b", "a a", "ab c", "Ġ ab", "h e", "he l", "hel l", "hell o"}) add_merge(m);
    vocab.push_back({"<|endoftext|>", static_cast<int>(vocab.size())});
  }
  void add_merge(const std::string& m) {
    merges.push_back(m);
    const size_t sp = m.find(' ');
    vocab.push_back({m.substr(0, sp) + m.substr(sp + 1), static_cast<int>(vocab.size())});
  }
  int id(const std::string& s) const {
    for (auto& [k, v] : vocab)
      if (k == s) return v;
    return -1;
  }
  // One entry a line: entry k is on line k + 2.
  std::string vocab_json() const {
    std::string s = "{\n";
    for (size_t i = 0; i < vocab.size(); ++i)
      s += "  " + nlohmann::json(vocab[i].first).dump() + ": " + std::to_string(vocab[i].second) +
           (i + 1 < vocab.size() ? ",\n" : "\n");
    return s + "}\n";
  }
  // "#version" then merge k on line k + 2.
  std::string merges_txt() const {
    std::string s = "#version: 0.2\n";
    for (auto& m : merges) s += m + "\n";
    return s;
  }
};

// A Hugging Face tokenizer.json holding vocab (object) and merges ("a b" lines).
std::string tokenizer_json(const nlohmann::json& vocab, const std::vector<std::string>& merges, bool pair_merges,
                           int eot_id) {
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array();
  if (eot_id >= 0)
    j["added_tokens"].push_back({{"id", eot_id},
                                 {"content", "<|endoftext|>"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", true},
                                 {"special", true}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["vocab"] = "@VOCAB@";  // spliced in below (ordered_json inserts are linear)
  model["merges"] = nlohmann::ordered_json::array();
  for (auto& m : merges) {
    if (pair_merges) {
      const size_t sp = m.find(' ');
      model["merges"].push_back({m.substr(0, sp), m.substr(sp + 1)});
    } else {
      model["merges"].push_back(m);
    }
  }
  j["model"] = model;
  std::string text = j.dump(2);
  const std::string mark = "\"@VOCAB@\"";
  text.replace(text.find(mark), mark.size(), vocab.dump(2));
  return text;
}

std::vector<std::string> merges_of(const fs::path& merges_txt) {
  std::ifstream f(merges_txt);
  std::vector<std::string> out;
  std::string line;
  bool first = true;
  while (std::getline(f, line)) {
    if (first && line.rfind("#version", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Expects f() to throw a ds::Error whose message contains every one of parts.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no ds::Error thrown";
  } catch (const ds::Error& e) {
    for (auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ds::Error: " << e.what();
  }
}

using Pieces = std::vector<std::string>;

}  // namespace

// ---------------------------------------------------------------- reference pairs

TEST(Gpt2Tokenizer, EncodesEveryReferencePair) {
  NEED_GPT2_FIXTURE();
  const auto& t = fixture_tokenizer();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.eot_id(), 50256);
  EXPECT_EQ(t.num_merges(), 50000);
  auto pairs = reference_pairs();
  ASSERT_GE(pairs.size(), 300u);
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(t.encode(pairs[i].text, false), pairs[i].ids) << "line " << i + 1 << ": " << pairs[i].text;
    // Twice: the second time from the pre-token cache.
    EXPECT_EQ(t.encode(pairs[i].text, false), pairs[i].ids) << "line " << i + 1 << " (cached)";
  }
}

TEST(Gpt2Tokenizer, DecodesEveryReferencePairToItsText) {
  NEED_GPT2_FIXTURE();
  const auto& t = fixture_tokenizer();
  for (const auto& p : reference_pairs()) EXPECT_EQ(decode_all(t, p.ids), p.text);
}

TEST(Gpt2Tokenizer, BosIsEndOfTextAndSpecialTokensDecodeToText) {
  NEED_GPT2_FIXTURE();
  const auto& t = fixture_tokenizer();
  EXPECT_EQ(t.encode("Hello world", true), (std::vector<int>{50256, 15496, 995}));
  EXPECT_EQ(t.encode("", true), (std::vector<int>{50256}));
  EXPECT_EQ(t.piece(50256), "<|endoftext|>");
  EXPECT_EQ(t.decode(15496, 50256), "<|endoftext|>");
  EXPECT_EQ(t.piece(220), " ");
  EXPECT_EQ(t.piece(198), "\n");
  EXPECT_EQ(t.piece(995), " world");
  EXPECT_EQ(t.find("Ġworld"), 995);
  // "😀" is split inside its UTF-8 bytes: each piece is a part of the character.
  EXPECT_EQ(t.encode("😀", false), (std::vector<int>{47249, 222}));
  EXPECT_EQ(t.piece(47249), "\xF0\x9F\x98");
  EXPECT_EQ(t.piece(222), "\x80");
  EXPECT_THROW(t.piece(50257), ds::Error);
  EXPECT_THROW(t.piece(-1), ds::Error);
  // Special tokens in the text are plain text (like GPT-2's own encoder).
  auto ids = t.encode("<|endoftext|>", false);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(decode_all(t, ids), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, TokenizerJsonGivesTheSameIds) {
  NEED_GPT2_FIXTURE();
  std::ifstream vf(gpt2_fixture() / "vocab.json");
  const nlohmann::json vocab = nlohmann::json::parse(vf);
  const auto merges = merges_of(gpt2_fixture() / "merges.txt");
  ASSERT_EQ(merges.size(), 50000u);
  TempDir d;
  for (bool pairs : {false, true}) {
    // GPT-2's tokenizer.json lists <|endoftext|> both in the vocabulary and as an added token.
    const std::string path =
        d.write(pairs ? "pairs.json" : "strings.json", tokenizer_json(vocab, merges, pairs, 50256));
    const GPT2Tokenizer t = GPT2Tokenizer::from_tokenizer_json(path);
    EXPECT_EQ(t.vocab_size(), 50257);
    EXPECT_EQ(t.eot_id(), 50256);
    for (const auto& p : reference_pairs()) {
      EXPECT_EQ(t.encode(p.text, false), p.ids) << p.text;
      EXPECT_EQ(decode_all(t, p.ids), p.text);
    }
  }
}

TEST(Gpt2Tokenizer, LoadsAFolder) {
  NEED_GPT2_FIXTURE();
  auto t = ds::load_gpt2_tokenizer_dir(gpt2_fixture().string());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("Hello world", false), (std::vector<int>{15496, 995}));

  // Only a tokenizer.json.
  TempDir d;
  std::ifstream vf(gpt2_fixture() / "vocab.json");
  d.write("tokenizer.json",
          tokenizer_json(nlohmann::json::parse(vf), merges_of(gpt2_fixture() / "merges.txt"), false, 50256));
  auto t2 = ds::load_gpt2_tokenizer_dir(d.dir().string());
  EXPECT_EQ(t2->encode("Hello world", true), (std::vector<int>{50256, 15496, 995}));
}

TEST(Gpt2Tokenizer, FolderWithoutFilesNamesWhatItLookedFor) {
  TempDir d;
  expect_error([&] { ds::load_gpt2_tokenizer_dir(d.dir().string()); },
               {d.dir().string(), "vocab.json", "merges.txt", "tokenizer.json"});
  d.write("vocab.json", "{}");
  expect_error([&] { ds::load_gpt2_tokenizer_dir(d.dir().string()); }, {"vocab.json is there but merges.txt is not"});
  expect_error([&] { ds::load_gpt2_tokenizer_dir((d.dir() / "nope").string()); }, {"nope", "tokenizer.json"});
}

// ---------------------------------------------------------------- byte alphabet

TEST(Gpt2Tokenizer, ByteToUnicodeTable) {
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode('!'), "!");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode('~'), "~");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0xA1), "\u00A1");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0xAC), "\u00AC");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0xAE), "\u00AE");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0xFF), "\u00FF");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0x00), "\u0100");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode('\n'), "\u010A");  // Ċ
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(' '), "\u0120");   // Ġ
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0x7F), "\u0121");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0xA0), "\u0142");
  EXPECT_EQ(GPT2Tokenizer::byte_to_unicode(0xAD), "\u0143");  // the 68th and last
  std::vector<std::string> all;
  for (int b = 0; b < 256; ++b) all.push_back(GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b)));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
}

// ---------------------------------------------------------------- pre-tokenizer

TEST(Gpt2PreTokenizer, Contractions) {
  EXPECT_EQ(GPT2Tokenizer::pretokenize("I'm here, you're there; they'll"),
            (Pieces{"I", "'m", " here", ",", " you", "'re", " there", ";", " they", "'ll"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("don't she'd we've it's"),
            (Pieces{"don", "'t", " she", "'d", " we", "'ve", " it", "'s"}));
  // Case-sensitive, ASCII apostrophe only, taken even before more letters.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("IT'S"), (Pieces{"IT", "'", "S"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("it\u2019s"), (Pieces{"it", "\u2019", "s"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("'sup"), (Pieces{"'s", "up"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("'l 'lls"), (Pieces{"'", "l", " '", "lls"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("?'s"), (Pieces{"?'", "s"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("'"), (Pieces{"'"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("x'"), (Pieces{"x", "'"}));
}

TEST(Gpt2PreTokenizer, Spaces) {
  EXPECT_EQ(GPT2Tokenizer::pretokenize(""), Pieces{});
  EXPECT_EQ(GPT2Tokenizer::pretokenize(" "), (Pieces{" "}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("Hello world"), (Pieces{"Hello", " world"}));
  // Several spaces before a word: the last one goes with the word.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("   leading"), (Pieces{"  ", " leading"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("trailing   "), (Pieces{"trailing", "   "}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a  !"), (Pieces{"a", " ", " !"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a  1"), (Pieces{"a", " ", " 1"}));
}

TEST(Gpt2PreTokenizer, Newlines) {
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\nb"), (Pieces{"a", "\n", "b"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\n\n"), (Pieces{"a", "\n\n"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("x  \n  y"), (Pieces{"x", "  \n ", " y"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("line\r\nnext"), (Pieces{"line", "\r", "\n", "next"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("\t\tword"), (Pieces{"\t", "\t", "word"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a \n b"), (Pieces{"a", " \n", " b"}));
}

TEST(Gpt2PreTokenizer, Digits) {
  EXPECT_EQ(GPT2Tokenizer::pretokenize("123456789"), (Pieces{"123456789"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("in 2026, 3.14"), (Pieces{"in", " 2026", ",", " 3", ".", "14"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("abc123def"), (Pieces{"abc", "123", "def"}));
  // Other number categories: superscripts, Roman numerals, Arabic-Indic digits.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("x\u00B2 \u2163 \u0661\u0662"),
            (Pieces{"x", "\u00B2", " \u2163", " \u0661\u0662"}));
}

TEST(Gpt2PreTokenizer, NonAsciiLettersAndEmoji) {
  EXPECT_EQ(GPT2Tokenizer::pretokenize("Zürich naïve Привет 日本語 한국어 Ωμέγα"),
            (Pieces{"Zürich", " naïve", " Привет", " 日本語", " 한국어", " Ωμέγα"}));
  // Emoji and symbols are neither letters nor numbers.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("hi 😀😀! ok"), (Pieces{"hi", " 😀😀!", " ok"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("👩\u200d💻 x"), (Pieces{"👩\u200d💻", " x"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("√2→∑"), (Pieces{"√", "2", "→∑"}));
  // A combining mark (category M) is not a letter.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("e\u0301x"), (Pieces{"e", "\u0301", "x"}));
  // Letters beyond the BMP (U+1D400 MATHEMATICAL BOLD CAPITAL A) and CJK Extension B.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("\U0001D400\U00020000 a"), (Pieces{"\U0001D400\U00020000", " a"}));
  // Unicode whitespace other than U+0020: \s, but not the optional space of " ?\p{L}+".
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\u00A0b"), (Pieces{"a", "\u00A0", "b"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000", "b"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a \u2003b"), (Pieces{"a", " ", "\u2003", "b"}));
  // U+001F is not White_Space, U+0085 is.
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\x1f\xc2\x85"), (Pieces{"a", "\x1f", "\xc2\x85"}));
}

TEST(Gpt2PreTokenizer, InvalidUtf8BytesAreOtherCharacters) {
  EXPECT_EQ(GPT2Tokenizer::pretokenize("a\xff\xfe b"), (Pieces{"a", "\xff\xfe", " b"}));
  EXPECT_EQ(GPT2Tokenizer::pretokenize(" \xc3"), (Pieces{" \xc3"}));                      // truncated é
  EXPECT_EQ(GPT2Tokenizer::pretokenize("\xc3(x"), (Pieces{"\xc3(", "x"}));                // bad continuation
  EXPECT_EQ(GPT2Tokenizer::pretokenize("\xed\xa0\x80z"), (Pieces{"\xed\xa0\x80", "z"}));  // surrogate
  EXPECT_EQ(GPT2Tokenizer::pretokenize("\xc0\xafz"), (Pieces{"\xc0\xaf", "z"}));          // overlong
  EXPECT_EQ(GPT2Tokenizer::pretokenize(std::string("a\0b", 3)), (Pieces{"a", std::string("\0", 1), "b"}));
}

TEST(Gpt2PreTokenizer, PiecesCoverTheInputForRandomBytes) {
  std::mt19937 rng(7);
  const char alphabet[] = {' ',    ' ',    'a',    'Z',    '1',    '\'',   's',    '\n',   '\t',  '!',
                           '\xc3', '\xa9', '\xe6', '\x97', '\xa5', '\xff', '\x80', '\xf0', '\x9f'};
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s.push_back(alphabet[rng() % sizeof alphabet]);
    std::string joined;
    for (auto& p : GPT2Tokenizer::pretokenize(s)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, s);
  }
}

// ---------------------------------------------------------------- BPE on a small vocabulary

class Gpt2Synth : public ::testing::Test {
 protected:
  Synth s;
  TempDir d;
  GPT2Tokenizer load() const {
    return GPT2Tokenizer::from_files(d.write("vocab.json", s.vocab_json()), d.write("merges.txt", s.merges_txt()));
  }
  std::string vocab_path() const { return (d.dir() / "vocab.json").string(); }
  std::string merges_path() const { return (d.dir() / "merges.txt").string(); }
};

TEST_F(Gpt2Synth, MergesByRank) {
  const GPT2Tokenizer t = load();
  EXPECT_EQ(t.vocab_size(), static_cast<int>(s.vocab.size()));
  EXPECT_EQ(t.encode("abc", false), (std::vector<int>{s.id("abc")}));
  // Same pair twice: left to right.
  EXPECT_EQ(t.encode("aaa", false), (std::vector<int>{s.id("aa"), 'a'}));
  EXPECT_EQ(t.encode("aaaa", false), (std::vector<int>{s.id("aa"), s.id("aa")}));
  // "a b" (rank 0) first, then "ab c" (rank 2) before "Ġ ab" (rank 3).
  EXPECT_EQ(t.encode(" abc", false), (std::vector<int>{' ', s.id("abc")}));
  EXPECT_EQ(t.encode(" ab", false), (std::vector<int>{s.id("Ġab")}));
  EXPECT_EQ(t.encode("hello", false), (std::vector<int>{s.id("hello")}));
  EXPECT_EQ(t.encode("hello", true), (std::vector<int>{s.id("<|endoftext|>"), s.id("hello")}));
  EXPECT_EQ(t.piece(s.id("Ġab")), " ab");
  EXPECT_EQ(t.piece(' '), " ");
  EXPECT_EQ(t.piece(0), std::string("\0", 1));
  EXPECT_EQ(t.piece(s.id("<|endoftext|>")), "<|endoftext|>");
}

TEST_F(Gpt2Synth, WithoutEndOfTextBosIsAnError) {
  s.vocab.pop_back();
  const GPT2Tokenizer t = load();
  EXPECT_EQ(t.eot_id(), -1);
  EXPECT_EQ(t.encode("ab", false), (std::vector<int>{s.id("ab")}));
  expect_error([&] { t.encode("ab", true); }, {"<|endoftext|>"});
}

TEST_F(Gpt2Synth, InvalidUtf8RoundTripsBytes) {
  const GPT2Tokenizer t = load();
  std::mt19937 rng(11);
  for (int round = 0; round < 500; ++round) {
    std::string text;
    const int len = static_cast<int>(rng() % 64);
    for (int i = 0; i < len; ++i) text.push_back(static_cast<char>(rng() & 0xFF));
    auto ids = t.encode(text, false);
    EXPECT_EQ(decode_all(t, ids), text);
  }
  const std::string bad = "ab\xff\xfe c\xc3 \xed\xa0\x80 hello\x80";
  EXPECT_EQ(decode_all(t, t.encode(bad, false)), bad);
}

TEST(Gpt2Tokenizer, FixtureRoundTripsRandomBytes) {
  NEED_GPT2_FIXTURE();
  const auto& t = fixture_tokenizer();
  std::mt19937 rng(5);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int len = static_cast<int>(rng() % 200);
    for (int i = 0; i < len; ++i) text.push_back(static_cast<char>(rng() & 0xFF));
    EXPECT_EQ(decode_all(t, t.encode(text, false)), text);
  }
  // A long pre-token (not cached) and a long run of spaces.
  const std::string long_word(100000, 'x'), spaces(5000, ' ');
  EXPECT_EQ(decode_all(t, t.encode(long_word, false)), long_word);
  EXPECT_EQ(decode_all(t, t.encode(spaces + "a" + spaces, false)), spaces + "a" + spaces);
}

TEST(Gpt2Tokenizer, ConcurrentEncodesAgree) {
  NEED_GPT2_FIXTURE();
  const GPT2Tokenizer t =
      GPT2Tokenizer::from_files((gpt2_fixture() / "vocab.json").string(), (gpt2_fixture() / "merges.txt").string());
  const auto pairs = reference_pairs();
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 3; ++rep)
        for (const auto& p : pairs) failures[static_cast<size_t>(k)] += t.encode(p.text, false) != p.ids;
    });
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

// ---------------------------------------------------------------- malformed files

TEST_F(Gpt2Synth, MissingFiles) {
  expect_error([&] { GPT2Tokenizer::from_files((d.dir() / "none.json").string(), merges_path()); },
               {"none.json", "cannot open"});
  d.write("vocab.json", s.vocab_json());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), (d.dir() / "none.txt").string()); },
               {"none.txt", "cannot open"});
  expect_error([&] { GPT2Tokenizer::from_tokenizer_json(d.dir().string()); }, {"not a regular file"});
}

TEST_F(Gpt2Synth, TruncatedVocabJson) {
  std::string v = s.vocab_json();
  v.resize(v.size() / 2);
  const size_t lines = static_cast<size_t>(std::count(v.begin(), v.end(), '\n'));
  d.write("vocab.json", v);
  d.write("merges.txt", s.merges_txt());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {vocab_path() + ":" + std::to_string(lines + 1) + ":", "invalid JSON"});
  d.write("vocab.json", "");
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {vocab_path() + ":1:", "invalid JSON"});
}

TEST_F(Gpt2Synth, WrongTypesInVocabJson) {
  d.write("merges.txt", s.merges_txt());
  s.vocab[10].second = -1;
  std::string v = s.vocab_json();
  // Entry 10 (line 12) as a string id.
  const std::string want = ": -1,";
  v.replace(v.find(want), want.size(), ": \"10\",");
  d.write("vocab.json", v);
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {vocab_path() + ":12:", "must be an integer", "a string"});
  d.write("vocab.json", "[1, 2]");
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {vocab_path() + ":1:", "object"});
  d.write("vocab.json", "{\"a\":\n1.5}");
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {vocab_path() + ":1:", "fraction"});
  d.write("vocab.json", "{\n\"a\": -3\n}");
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {vocab_path() + ":2:", "outside"});
  d.write("vocab.json", "{}");
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {vocab_path(), "empty"});
}

TEST_F(Gpt2Synth, DuplicateIdsAndTokens) {
  d.write("merges.txt", s.merges_txt());
  auto saved = s.vocab;
  s.vocab[20].second = 5;  // line 22 repeats the id of line 7
  d.write("vocab.json", s.vocab_json());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {vocab_path() + ":22:", "duplicate id 5", "line 7"});
  s.vocab = saved;
  s.vocab.push_back({"ab", 999});
  d.write("vocab.json", s.vocab_json());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {vocab_path() + ":" + std::to_string(s.vocab.size() + 1) + ":", "duplicate token \"ab\""});
}

TEST_F(Gpt2Synth, MissingByteSymbol) {
  d.write("merges.txt", s.merges_txt());
  s.vocab.erase(s.vocab.begin() + 'q');
  d.write("vocab.json", s.vocab_json());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {vocab_path(), "byte 0x71"});
}

TEST_F(Gpt2Synth, BadMerges) {
  d.write("vocab.json", s.vocab_json());
  s.merges.insert(s.merges.begin() + 3, "x yz");  // line 5
  d.write("merges.txt", s.merges_txt());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {merges_path() + ":5:", "\"yz\" is not in the vocabulary"});
  s.merges[3] = "x y";  // known symbols, unknown result
  d.write("merges.txt", s.merges_txt());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {merges_path() + ":5:", "result \"xy\""});
  s.merges[3] = "xyz";
  d.write("merges.txt", s.merges_txt());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {merges_path() + ":5:", "two symbols"});
  s.merges[3] = "a  b";
  d.write("merges.txt", s.merges_txt());
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {merges_path() + ":5:"});
  // CRLF line ends and no "#version" line are fine.
  d.write("merges.txt", "a b\r\na a\r\n");
  EXPECT_EQ(GPT2Tokenizer::from_files(vocab_path(), merges_path()).num_merges(), 2);
}

TEST_F(Gpt2Synth, NonUtf8Files) {
  d.write("vocab.json", s.vocab_json());
  d.write("merges.txt", "#version: 0.2\na b\n\xff\xfe c\n");
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); }, {merges_path() + ":3:", "UTF-8"});
  d.write("merges.txt", s.merges_txt());
  std::string v = s.vocab_json();
  v.insert(v.find("\"a\""), "\"\xc3\x28\": 9999,\n");
  d.write("vocab.json", v);
  expect_error([&] { GPT2Tokenizer::from_files(vocab_path(), merges_path()); },
               {vocab_path() + ":" + std::to_string('a' + 2) + ":", "UTF-8"});
}

TEST_F(Gpt2Synth, TokenizerJsonSmall) {
  nlohmann::json vocab = nlohmann::json::object();
  for (auto& [k, v] : s.vocab) vocab[k] = v;
  const int eot = s.id("<|endoftext|>");
  vocab.erase("<|endoftext|>");  // only as an added token
  const std::string path = d.write("tokenizer.json", tokenizer_json(vocab, s.merges, true, eot));
  const GPT2Tokenizer t = GPT2Tokenizer::from_tokenizer_json(path);
  EXPECT_EQ(t.vocab_size(), static_cast<int>(s.vocab.size()));
  EXPECT_EQ(t.encode("hello abc", true), (std::vector<int>{eot, s.id("hello"), ' ', s.id("abc")}));
  EXPECT_EQ(t.piece(eot), "<|endoftext|>");
}

TEST_F(Gpt2Synth, MalformedTokenizerJson) {
  nlohmann::json vocab = nlohmann::json::object();
  for (auto& [k, v] : s.vocab) vocab[k] = v;
  const std::string good = tokenizer_json(vocab, s.merges, true, s.id("<|endoftext|>"));
  auto line_of = [&](const std::string& text, size_t pos) {
    return std::to_string(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n') + 1);
  };
  auto expect_bad = [&](std::string text, std::initializer_list<std::string> parts) {
    const std::string path = d.write("tokenizer.json", text);
    expect_error([&] { GPT2Tokenizer::from_tokenizer_json(path); }, parts);
  };
  // Truncated.
  std::string t = good.substr(0, good.size() / 2);
  expect_bad(t, {"tokenizer.json:" + line_of(t, t.size()) + ":", "invalid JSON"});
  // Not a BPE model.
  t = good;
  size_t p = t.find("\"BPE\"");
  t.replace(p, 5, "\"WordPiece\"");
  expect_bad(t, {"tokenizer.json:" + line_of(t, p) + ":", "WordPiece", "BPE"});
  // Another pre-tokenizer.
  t = good;
  p = t.find("\"ByteLevel\"");
  t.replace(p, 11, "\"Metaspace\"");
  expect_bad(t, {"tokenizer.json:" + line_of(t, p) + ":", "Metaspace"});
  // A merge pair of three.
  t = good;
  p = t.find("\"he\",");
  t.insert(p, "\"x\",\n");
  expect_bad(t, {"tokenizer.json:", "pair", "3 elements"});
  // A merge of unknown symbols, as a string.
  t = good;
  p = t.find("\"merges\": [") + 11;
  t.insert(p, "\n\"q zz\",");
  expect_bad(t, {"tokenizer.json:" + line_of(t, p + 1) + ":", "\"zz\" is not in the vocabulary"});
  // A vocabulary id that is not an integer.
  t = good;
  p = t.find("\"hello\": ");
  t.replace(p, 9, "\"hello\": true,\n\"hello2\": ");
  expect_bad(t, {"tokenizer.json:" + line_of(t, p) + ":", "\"hello\"", "integer"});
  // vocab as an array, merges missing, model missing.
  expect_bad(R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", {"tokenizer.json:1:", "model.vocab"});
  expect_bad(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", {"model.merges is missing"});
  expect_bad(R"({"version": "1.0"})", {"no \"model\""});
  // An added token that contradicts the vocabulary.
  t = good;
  p = t.find("\"content\": \"<|endoftext|>\"");
  t.replace(p, 26, "\"content\": \"<|other|>\"");
  expect_bad(t, {"tokenizer.json:", "<|other|>", "<|endoftext|>"});
}

// ---------------------------------------------------------------- speed

TEST(Gpt2Tokenizer, EncodeThroughput) {
  NEED_GPT2_FIXTURE();
  std::string text;
  for (const auto& p : reference_pairs()) text += p.text + "\n";
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const GPT2Tokenizer t =
      GPT2Tokenizer::from_files((gpt2_fixture() / "vocab.json").string(), (gpt2_fixture() / "merges.txt").string());
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  t0 = clock::now();
  size_t tokens = t.encode(text, false).size();
  const double cold_s = std::chrono::duration<double>(clock::now() - t0).count();
  size_t bytes = 0;
  t0 = clock::now();
  double warm_s = 0;
  while (warm_s < 0.3) {
    tokens += t.encode(text, false).size();
    bytes += text.size();
    warm_s = std::chrono::duration<double>(clock::now() - t0).count();
  }
  std::printf("[ gpt2     ] load %.0f ms; encode of %zu bytes: first pass %.1f MB/s, cached %.1f MB/s (%zu tokens)\n",
              load_ms, text.size(), text.size() / cold_s / 1e6, bytes / warm_s / 1e6, tokens);
  RecordProperty("encode_MBps_cached", std::to_string(bytes / warm_s / 1e6));
  EXPECT_GT(tokens, 0u);
}
