// The tokenizers of GGUF files (core/text/gguf_tokenizer.h): the ids of llama.cpp's
// tokenizer test strings against the Hugging Face tokenizers' (shared fixtures
// gguf/vocab/), round trips on random text, the pre-tokenizers' splits, the checks of a
// bad vocabulary, and decoderscope-cli tokenize --tokenizer FILE.gguf.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/gguf.h"
#include "text/gguf_tokenizer.h"
#include "text/pretokenize.h"
#include "text/unicode.h"

namespace fs = std::filesystem;

namespace {

using ds::PreTokenizer;
using ds::TokenType;
using ds::VocabData;
using ds::test::contains;
using ds::test::error_of;

fs::path vocab_file(const std::string& name) {
  return ds::test::fixture("gguf") / "vocab" / ("ggml-vocab-" + name + ".gguf");
}

// llama.cpp's test-tokenizer-0 rule: the .inp text is cut at every "\n__ggml_vocab_test__\n";
// the strings are the spans between (the first from the start; the file ends with a
// separator, after which nothing follows).
std::vector<std::string> read_inputs(const fs::path& p) {
  const std::string raw = ds::test::read_file(p);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

// One line of ids per string (an empty line for no ids).
std::vector<std::vector<int>> read_outputs(const fs::path& p) {
  std::istringstream in(ds::test::read_file(p));
  std::vector<std::vector<int>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int> ids;
    for (int id; ls >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

std::string ids_string(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// What a generation loop prints: decode of each id after the one before it (BOS first).
std::string decode_all(const ds::Tokenizer& t, int bos, const std::vector<int>& ids) {
  std::string s;
  int prev = bos;
  for (int id : ids) {
    s += t.decode(prev, id);
    prev = id;
  }
  return s;
}

// Random text: well-formed UTF-8 of 1- to 4-byte characters (spaces, newlines, digits,
// letters, punctuation, apostrophes weighted up), or, when bytes, arbitrary bytes.
std::string random_text(std::mt19937& rng, size_t n, bool bytes) {
  std::string s;
  const std::string ascii = " \n\t\r'sltdvmre0123456789aAzZ.,!?<|>$+^~-_()";
  while (s.size() < n) {
    const unsigned kind = rng() % 8;
    if (bytes) {
      s.push_back(static_cast<char>(rng() % 256));
    } else if (kind < 4) {
      s.push_back(ascii[rng() % ascii.size()]);
    } else {
      static const uint32_t ranges[][2] = {{0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
      const auto* r = ranges[rng() % 4];
      ds::unicode::append_utf8(s, r[0] + rng() % (r[1] - r[0] + 1));
    }
  }
  return s;
}

// A small byte-level vocabulary: the 256 byte symbols, a few merges, a control token.
VocabData tiny_byte_level(const std::string& pre) {
  VocabData v;
  v.model = "gpt2";
  v.pre = pre;
  for (unsigned b = 0; b < 256; ++b) {
    std::string sym;
    ds::unicode::append_utf8(sym, ds::unicode::byte_to_codepoint(static_cast<unsigned char>(b)));
    v.tokens.push_back(sym);
  }
  for (const char* m : {"Ġ t", "h e", "Ġt he", "Ġ a", "1 2", "\xC4\x8A \xC4\x8A"}) {
    const std::string s = m;
    v.merges.push_back(s);
    v.tokens.push_back(s.substr(0, s.find(' ')) + s.substr(s.find(' ') + 1));
  }
  v.tokens.push_back("<|endoftext|>");
  v.types.assign(v.tokens.size(), 1);
  v.types.back() = 3;
  v.eos_id = v.bos_id = static_cast<int>(v.tokens.size()) - 1;
  return v;
}

// A small SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then pieces.
VocabData tiny_sentencepiece() {
  VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {2, 3, 3};
  for (unsigned b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    v.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    v.types.push_back(6);
  }
  for (const char* p : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "\xE2\x96\x81h", "hell", "hello",
                        "\xE2\x96\x81hello", "\xC3\xA9"}) {
    v.tokens.push_back(p);
    v.types.push_back(1);
  }
  v.scores.resize(v.tokens.size());
  for (size_t i = 0; i < v.scores.size(); ++i) v.scores[i] = -static_cast<float>(i);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

std::vector<std::string> split(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> views;
  ds::pretokenize(kind, text, views);
  return {views.begin(), views.end()};
}

class GgufTokFixture : public ::testing::TestWithParam<std::string> {};

}  // namespace

// Every string of llama.cpp's tokenizer tests gives the Hugging Face tokenizers' ids.
TEST_P(GgufTokFixture, EveryTestStringGivesTheReferenceIds) {
  const fs::path gguf = vocab_file(GetParam());
  DS_NEED_FIXTURE(gguf, "the ids of llama.cpp's tokenizer test strings");
  const auto inputs = read_inputs(gguf.string() + ".inp");
  const auto expected = read_outputs(gguf.string() + ".out");
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GT(inputs.size(), 40u);
  const auto tok = ds::make_vocab_tokenizer(ds::read_gguf_vocab(gguf.string()));
  int equal = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int> ids = tok->encode(inputs[i], false);
    if (ids == expected[i])
      ++equal;
    else
      ADD_FAILURE() << "string " << i << " \"" << ds::escaped(inputs[i]) << "\": got [" << ids_string(ids)
                    << "], expected [" << ids_string(expected[i]) << "]";
  }
  EXPECT_EQ(equal, static_cast<int>(inputs.size()));
}

// Decoding the ids gives the text back (the SentencePiece prefix space dropped after BOS).
TEST_P(GgufTokFixture, DecodeGivesTheTestStringsBack) {
  const fs::path gguf = vocab_file(GetParam());
  DS_NEED_FIXTURE(gguf, "decoding llama.cpp's tokenizer test strings");
  const auto tok = ds::make_vocab_tokenizer(ds::read_gguf_vocab(gguf.string()));
  const int bos = dynamic_cast<const ds::VocabTokenizer&>(*tok).bos_id();
  for (const std::string& text : read_inputs(gguf.string() + ".inp"))
    EXPECT_EQ(decode_all(*tok, bos, tok->encode(text, false)), text) << ds::escaped(text);
}

INSTANTIATE_TEST_SUITE_P(GgufTok, GgufTokFixture,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3"), [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// BOS per model as llama.cpp adds it; control-token text is plain text.
TEST(GgufTokSpecial, BosByModelAndControlTextIsPlain) {
  struct Case {
    const char* name;
    int bos;  // -1: no BOS is added
  };
  for (const Case& c : {Case{"llama-spm", 1}, Case{"llama-bpe", 128000}, Case{"qwen2", -1}, Case{"gpt-2", -1}}) {
    const fs::path gguf = vocab_file(c.name);
    DS_NEED_FIXTURE(gguf, "BOS and control tokens of real vocabularies");
    const auto tok = ds::make_vocab_tokenizer(ds::read_gguf_vocab(gguf.string()));
    const auto& vt = dynamic_cast<const ds::VocabTokenizer&>(*tok);
    const std::vector<int> alone = tok->encode("Hello world", false), with = tok->encode("Hello world", true);
    std::vector<int> expected = alone;
    if (c.bos >= 0) expected.insert(expected.begin(), c.bos);
    EXPECT_EQ(with, expected) << c.name;
    for (int id = 0; id < tok->vocab_size(); ++id) {
      if (vt.type(id) != TokenType::Control || tok->piece(id).empty()) continue;
      const std::vector<int> ids = tok->encode(tok->piece(id), false);
      EXPECT_TRUE(ids.size() > 1 || ids.at(0) != id) << c.name << ": " << tok->piece(id);
      EXPECT_EQ(decode_all(*tok, vt.bos_id(), ids), tok->piece(id)) << c.name;
    }
  }
}

// decode(encode(text)) == text for byte-level BPE on random UTF-8 and on random bytes,
// with every pre-tokenizer; and with the real Llama 3 vocabulary when present.
TEST(GgufTokRoundTrip, ByteLevelOnRandomTextAndBytes) {
  std::mt19937 rng(7);
  for (const char* pre : {"llama-bpe", "qwen2", "gpt-2", "smollm", "default"}) {
    const auto tok = ds::make_vocab_tokenizer(tiny_byte_level(pre));
    for (int i = 0; i < 300; ++i) {
      const std::string text = random_text(rng, rng() % 64, i % 2);
      const std::vector<int> ids = tok->encode(text, false);
      ASSERT_EQ(decode_all(*tok, -1, ids), text) << pre << ": " << ds::escaped(text);
    }
  }
  const auto tok = ds::make_vocab_tokenizer(tiny_byte_level("gpt-2"));
  EXPECT_EQ(tok->encode(" the", false), std::vector<int>{258});  // Ġ t -> Ġt, h e -> he, Ġt he -> Ġthe
  const fs::path gguf = vocab_file("llama-bpe");
  DS_NEED_FIXTURE(gguf, "the round trip with Llama 3's vocabulary");
  const auto real = ds::make_vocab_tokenizer(ds::read_gguf_vocab(gguf.string()));
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(rng, rng() % 200, i % 2);
    ASSERT_EQ(decode_all(*real, -1, real->encode(text, false)), text) << ds::escaped(text);
  }
}

// SentencePiece: merges by score, byte fallback, the prefix space; decode gives the text
// back (text without U+2581, which decodes to a space).
TEST(GgufTokRoundTrip, SentencePieceOnRandomText) {
  const auto tok = ds::make_vocab_tokenizer(tiny_sentencepiece());
  const auto& vt = dynamic_cast<const ds::VocabTokenizer&>(*tok);
  const int hello = vt.find("\xE2\x96\x81hello"), e_acute = vt.find("\xC3\xA9");
  EXPECT_EQ(tok->encode("hello", true), (std::vector<int>{1, hello}));
  EXPECT_EQ(tok->encode("", true), std::vector<int>{1});
  EXPECT_TRUE(tok->encode("", false).empty());
  // "x" is no piece: its byte token <0x78> (id 3 + 0x78); "é" is a piece.
  EXPECT_EQ(tok->encode("x\xC3\xA9", false), (std::vector<int>{vt.find("\xE2\x96\x81"), 3 + 'x', e_acute}));
  EXPECT_EQ(tok->decode(1, hello), "hello");  // the prefix space dropped after BOS
  EXPECT_EQ(tok->decode(hello, hello), " hello");
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    std::string text = random_text(rng, rng() % 48, false);
    if (contains(text, "\xE2\x96\x81")) continue;
    ASSERT_EQ(decode_all(*tok, 1, tok->encode(text, false)), text) << ds::escaped(text);
  }
}

// The pre-tokenizers' pieces on examples whose split each pattern decides.
TEST(GgufTokPretokenize, SplitsLikeThePatterns) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split(PreTokenizer::Gpt2, "Hello, y'all!  How's 1234\n\n x"),
            (V{"Hello", ",", " y", "'", "all", "!", " ", " How", "'s", " 1234", "\n\n", " x"}));
  EXPECT_EQ(split(PreTokenizer::Llama3, "Hello, Y'ALL!  (ok)\n\n x 12345 \t\n"),
            (V{"Hello", ",", " Y", "'ALL", "!", " ", " (", "ok", ")\n\n", " x", " ", "123", "45", " \t\n"}));
  EXPECT_EQ(split(PreTokenizer::Qwen2, "x123 "), (V{"x", "1", "2", "3", " "}));
  EXPECT_EQ(split(PreTokenizer::Smollm, "a 123b"), (V{"a", " ", "1", "2", "3", "b"}));
  EXPECT_EQ(split(PreTokenizer::Default, "a+=b 12345!?"), (V{"a", "+=", "b", " ", "123", "45", "!?"}));
  // Pieces cover random text exactly, none empty.
  std::mt19937 rng(3);
  for (PreTokenizer k :
       {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::Smollm, PreTokenizer::Default}) {
    for (int i = 0; i < 200; ++i) {
      const std::string text = random_text(rng, rng() % 80, i % 2);
      std::string joined;
      for (const std::string& p : split(k, text)) {
        ASSERT_FALSE(p.empty());
        joined += p;
      }
      ASSERT_EQ(joined, text);
    }
  }
}

// A bad vocabulary is rejected with a message naming the key and the problem.
TEST(GgufTokErrors, BadVocabularyIsRejectedWithAMessage) {
  auto error = [](VocabData v) { return error_of([&] { ds::make_vocab_tokenizer(v); }); };
  auto expect = [&](const VocabData& v, std::initializer_list<const char*> parts) {
    const std::string e = error(v);
    ASSERT_FALSE(e.empty());
    for (const char* p : parts) EXPECT_TRUE(contains(e, p)) << e << "\n  lacks: " << p;
  };
  EXPECT_EQ(error(tiny_byte_level("gpt-2")), "");
  EXPECT_EQ(error(tiny_sentencepiece()), "");
  VocabData v = tiny_byte_level("foo");
  expect(v, {"tokenizer.ggml.pre 'foo' is not supported; supported: llama-bpe, qwen2, gpt-2, smollm, default"});
  v = tiny_byte_level("gpt-2");
  v.model = "bert";
  expect(v, {"tokenizer.ggml.model 'bert' is not supported", "llama", "gpt2"});
  v = tiny_byte_level("gpt-2");
  v.tokens.clear();
  v.types.clear();
  expect(v, {"tokenizer.ggml.tokens is empty"});
  v = tiny_sentencepiece();
  v.scores.pop_back();
  expect(v, {"tokenizer.ggml.scores has", "entries for"});
  v = tiny_sentencepiece();
  v.scores.clear();
  expect(v, {"tokenizer.ggml.scores is missing"});
  v = tiny_sentencepiece();
  v.scores[5] = std::nanf("");
  expect(v, {"tokenizer.ggml.scores[5]", "NaN"});
  v = tiny_byte_level("gpt-2");
  v.types.push_back(1);
  expect(v, {"tokenizer.ggml.token_type has"});
  v = tiny_byte_level("gpt-2");
  v.types[3] = 9;
  expect(v, {"tokenizer.ggml.token_type[3]", "outside 0..6"});
  v = tiny_byte_level("gpt-2");
  v.bos_id = 100000;
  expect(v, {"tokenizer.ggml.bos_token_id 100000 is outside the vocabulary"});
  v = tiny_byte_level("gpt-2");
  v.merges.push_back("Ġ zz");
  expect(v, {"tokenizer.ggml.merges[6]", "'zz' is not a token"});
  v = tiny_byte_level("gpt-2");
  v.merges.push_back("a b");
  expect(v, {"tokenizer.ggml.merges[6]", "the result 'ab' is not a token"});
  v = tiny_byte_level("gpt-2");
  v.merges.push_back("ab");
  expect(v, {"tokenizer.ggml.merges[6]", "not two tokens"});
  v = tiny_byte_level("gpt-2");
  v.tokens[0x21] = "!!";
  expect(v, {"lacks '!'", "0x21", "not a byte-level BPE vocabulary"});
  v = tiny_byte_level("llama-bpe");
  v.bos_id = -1;
  expect(v, {"add_bos_token defaults to true", "bos_token_id is missing"});
  v = tiny_sentencepiece();
  v.tokens[3] = "<0x00 >";
  v.unk_id = -1;
  expect(v, {"<0x00>", "unknown_token_id"});
}

// decoderscope-cli tokenize --tokenizer FILE.gguf: TEXT and --jsonl give the text's ids.
TEST(GgufTokCli, TokenizeWithAGgufFile) {
  const fs::path gguf = vocab_file("qwen2");
  DS_NEED_FIXTURE(gguf, "decoderscope-cli tokenize with a GGUF file");
  const auto inputs = read_inputs(gguf.string() + ".inp");
  const auto expected = read_outputs(gguf.string() + ".out");
  const size_t k = 11;  // "Hello world"
  ASSERT_EQ(inputs.at(k), "Hello world");
  auto r = ds::test::run_cli("tokenize --tokenizer " + ds::test::quoted(gguf) + " 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ids_string(expected[k]) + "\n");
  std::string in;
  for (const std::string& s : inputs) in += nlohmann::json{{"text", s}}.dump() + "\n";
  r = ds::test::run_cli("tokenize --jsonl --tokenizer " + ds::test::quoted(gguf), in);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  size_t i = 0;
  for (std::string line; std::getline(lines, line) && i < inputs.size(); ++i) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("text"), inputs[i]);
    EXPECT_EQ(j.at("ids").get<std::vector<int>>(), expected[i]) << ds::escaped(inputs[i]);
  }
  EXPECT_EQ(i, inputs.size());
  r = ds::test::run_cli("tokenize --tokenizer " + ds::test::quoted(ds::test::fixture("gguf") / "README.md") + " x");
  EXPECT_NE(r.code, 0);
}
