// Hugging Face tokenizer.json folders (core/text/hf_tokenizer.h): the ids of llama.cpp's
// 47 tokenizer test strings against the tokenizers library's (shared fixtures
// hf-tokenizers/{llama3,qwen3,llama2}), decode round trips, added tokens in text, BOS and
// EOS as tokenizer_config.json and the post_processor say, small made-up tokenizers for
// the options the fixtures do not use, the checks of bad files, and
// decoderscope-cli tokenize --tokenizer DIR.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "text/gguf_tokenizer.h"
#include "text/gpt2_tokenizer.h"
#include "text/hf_tokenizer.h"
#include "text/unicode.h"

namespace fs = std::filesystem;

namespace {

using ds::test::contains;
using ds::test::error_of;
using json = nlohmann::ordered_json;

const std::string kMark = "\xE2\x96\x81";  // "▁"
const char* const kLlama3Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

fs::path hf_fixture(const std::string& name) { return ds::test::fixture("hf-tokenizers") / name; }

// Each fixture folder loaded once for all the tests (llama3's and qwen3's files are 9-11 MB).
const ds::HfTokenizerInfo& loaded(const std::string& name) {
  static std::map<std::string, ds::HfTokenizerInfo> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, ds::load_hf_tokenizer(hf_fixture(name).string())).first;
  return it->second;
}

struct Reference {
  std::string text;
  std::vector<int> ids;
};

std::vector<Reference> read_reference(const fs::path& p) {
  std::istringstream in(ds::test::read_file(p));
  std::vector<Reference> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int>>()});
  }
  return out;
}

// The id of a token as the fixture's tokenizer.json says (model.vocab or added_tokens).
int json_id(const fs::path& dir, const std::string& token) {
  const auto j = nlohmann::json::parse(ds::test::read_file(dir / "tokenizer.json"));
  for (const auto& a : j.at("added_tokens"))
    if (a.at("content") == token) return a.at("id").get<int>();
  const auto& v = j.at("model").at("vocab");
  return v.contains(token) ? v.at(token).get<int>() : -1;
}

// What a generation loop prints: decode of each id after the one before it.
std::string decode_all(const ds::Tokenizer& t, int prev, const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) {
    s += t.decode(prev, id);
    prev = id;
  }
  return s;
}

std::vector<int> cat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Well-formed UTF-8 of 1- to 4-byte characters, ASCII weighted up, without "▁" (which a
// SentencePiece decode gives back as a space) and without '<' (no added token by chance).
std::string random_text(std::mt19937& rng, size_t n) {
  std::string s;
  const std::string ascii = " \n\t\r'sltdvmre0123456789aAzZ.,!?|>$+^~-_()";
  while (s.size() < n) {
    if (rng() % 2) {
      s.push_back(ascii[rng() % ascii.size()]);
      continue;
    }
    static const uint32_t ranges[][2] = {
        {0x80, 0x7FF}, {0x800, 0x2580}, {0x2582, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    const auto* r = ranges[rng() % 5];
    ds::unicode::append_utf8(s, r[0] + rng() % (r[1] - r[0] + 1));
  }
  return s;
}

// ---------------------------------------------------------------- the fixtures

class HfTokenizerFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfTokenizerFixture, AllReferenceStringsGiveTheLibrarysIds) {
  const fs::path dir = hf_fixture(GetParam());
  DS_NEED_FIXTURE(dir / "reference.jsonl", std::string("the reference ids of ") + GetParam());
  const ds::HfTokenizerInfo& info = loaded(GetParam());
  const std::vector<Reference> refs = read_reference(dir / "reference.jsonl");
  ASSERT_EQ(refs.size(), 47u);
  int same = 0;
  for (const Reference& r : refs) {
    const std::vector<int> ids = info.tokenizer->encode(r.text, false);
    EXPECT_EQ(ids, r.ids) << GetParam() << ": " << ds::escaped(r.text);
    same += ids == r.ids;
  }
  EXPECT_EQ(same, 47) << GetParam();
}

TEST_P(HfTokenizerFixture, DecodeGivesTheTextBack) {
  const fs::path dir = hf_fixture(GetParam());
  DS_NEED_FIXTURE(dir / "reference.jsonl", std::string("the round trips of ") + GetParam());
  const ds::HfTokenizerInfo& info = loaded(GetParam());
  const ds::Tokenizer& t = *info.tokenizer;
  for (const Reference& r : read_reference(dir / "reference.jsonl")) {
    if (!ds::unicode::valid_utf8(r.text)) continue;
    EXPECT_EQ(decode_all(t, -1, t.encode(r.text, false)), r.text) << ds::escaped(r.text);
    // After BOS, as a generation loop prints a prompt.
    if (info.bos_id >= 0) {
      EXPECT_EQ(decode_all(t, info.bos_id, t.encode(r.text, false)), r.text);
    }
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_text(rng, rng() % 80);
    ASSERT_EQ(decode_all(t, -1, t.encode(text, false)), text) << ds::escaped(text);
  }
}

// Every added token in text is its id, with the text around it tokenized on its own.
TEST_P(HfTokenizerFixture, AddedTokensInTextAreThemselves) {
  const fs::path dir = hf_fixture(GetParam());
  DS_NEED_FIXTURE(dir / "tokenizer.json", std::string("the added tokens of ") + GetParam());
  const ds::HfTokenizerInfo& info = loaded(GetParam());
  const ds::Tokenizer& t = *info.tokenizer;
  const auto j = nlohmann::json::parse(ds::test::read_file(dir / "tokenizer.json"));
  size_t special = 0;
  for (const auto& a : j.at("added_tokens")) {
    const std::string content = a.at("content");
    const int id = a.at("id");
    special += a.at("special").get<bool>();
    EXPECT_EQ(t.encode(content, false), std::vector<int>{id}) << content;
    EXPECT_EQ(t.encode("Hi" + content + "user\n x", false),
              cat({t.encode("Hi", false), {id}, t.encode("user\n x", false)}))
        << content;
    EXPECT_EQ(t.decode(-1, id), content);
  }
  EXPECT_EQ(info.special_ids.size(), special);
  EXPECT_TRUE(std::is_sorted(info.special_ids.begin(), info.special_ids.end()));
}

// The chat templates' rendered prompts: each special token's text is that token.
TEST_P(HfTokenizerFixture, ChatPromptsKeepTheirSpecialTokens) {
  const fs::path dir = hf_fixture(GetParam());
  DS_NEED_FIXTURE(dir / "chat_reference.jsonl", std::string("the chat prompts of ") + GetParam());
  const ds::HfTokenizerInfo& info = loaded(GetParam());
  EXPECT_FALSE(info.chat_template.empty());
  std::istringstream in(ds::test::read_file(dir / "chat_reference.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const std::string prompt = nlohmann::json::parse(line).at("prompt");
    const std::vector<int> ids = info.tokenizer->encode(prompt, false);
    std::string back;
    for (int id : ids) {
      const bool sp = std::binary_search(info.special_ids.begin(), info.special_ids.end(), id);
      // A special token's text appears only as that token: never split into pieces.
      if (!sp) {
        EXPECT_FALSE(contains(info.tokenizer->decode(-1, id), "<|")) << id;
      }
      back += info.tokenizer->decode(-1, id);
    }
    EXPECT_EQ(back, prompt);
    if (!info.bos_token.empty() && prompt.rfind(info.bos_token, 0) == 0) {
      EXPECT_EQ(ids.at(0), info.bos_id);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HfTokenizer, HfTokenizerFixture, ::testing::Values("llama3", "qwen3", "llama2"));

// BOS and EOS as each folder's files say.
TEST(HfTokenizerBos, AsTheConfigAndPostProcessorSay) {
  const fs::path l2 = hf_fixture("llama2"), l3 = hf_fixture("llama3"), q3 = hf_fixture("qwen3");
  DS_NEED_FIXTURE(l2 / "tokenizer.json", "BOS of the fixtures");
  // Llama 2: add_bos_token true, bos_token "<s>", eos_token "</s>".
  const ds::HfTokenizerInfo& a = loaded("llama2");
  EXPECT_TRUE(a.add_bos);
  EXPECT_EQ(a.bos_token, "<s>");
  EXPECT_EQ(a.bos_id, json_id(l2, "<s>"));
  EXPECT_EQ(a.eos_id, json_id(l2, "</s>"));
  EXPECT_EQ(a.kind, "SentencePiece BPE");
  EXPECT_EQ(a.tokenizer->encode("Hello", true), cat({{a.bos_id}, a.tokenizer->encode("Hello", false)}));
  // This Llama 3 copy: no add_bos_token and a ByteLevel post_processor (no
  // TemplateProcessing): no BOS added; its chat template writes bos_token itself.
  const ds::HfTokenizerInfo& b = loaded("llama3");
  EXPECT_FALSE(b.add_bos);
  EXPECT_EQ(b.bos_id, json_id(l3, "<|begin_of_text|>"));
  EXPECT_EQ(b.eos_id, json_id(l3, "<|end_of_text|>"));
  EXPECT_TRUE(contains(b.chat_template, "bos_token"));
  EXPECT_EQ(b.tokenizer->encode("Hello", true), b.tokenizer->encode("Hello", false));
  EXPECT_EQ(b.kind, "byte-level BPE");
  // Qwen3: bos_token null, eos_token "<|im_end|>".
  const ds::HfTokenizerInfo c = ds::load_hf_tokenizer((q3 / "tokenizer.json").string());  // the file, not the folder
  EXPECT_FALSE(c.add_bos);
  EXPECT_EQ(c.bos_id, -1);
  EXPECT_EQ(c.bos_token, "");
  EXPECT_EQ(c.eos_token, "<|im_end|>");
  EXPECT_EQ(c.eos_id, json_id(q3, "<|im_end|>"));
  EXPECT_TRUE(contains(c.chat_template, "<|im_start|>"));
}

// ---------------------------------------------------------------- made-up tokenizers

// A byte-level tokenizer.json: the 256 byte symbols (id = byte), three merges, Llama 3's
// split pattern, added tokens with each option.
json tiny_byte_level() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[ds::GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  for (const auto& [l, r] : {std::pair{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}}) {
    const size_t id = vocab.size();
    vocab[std::string(l) + r] = id;
    merges.push_back(json::array({l, r}));
  }
  const int n = static_cast<int>(vocab.size());
  auto added = [](int id, const char* text, bool special, bool l = false, bool r = false, bool w = false) {
    return json{{"id", id},    {"content", text},     {"single_word", w},  {"lstrip", l},
                {"rstrip", r}, {"normalized", false}, {"special", special}};
  };
  return json{
      {"version", "1.0"},
      {"added_tokens",
       json::array({added(n, "<|bos|>", true), added(n + 1, "<|im_start|>", true), added(n + 2, "<think>", false),
                    added(n + 3, "<|l|>", true, true), added(n + 4, "<|r|>", true, false, true),
                    added(n + 5, "[W]", false, false, false, true), added(n + 6, "<|im_start|>x", true)})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Regex}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}}}};
}

// A SentencePiece-style tokenizer.json: <unk> <s> </s>, the 256 byte tokens, then
// "▁", a, b, c, ▁a, ab, ▁ab, bc; merges (▁ a), (a b), (▁a b) — none makes "bc".
json tiny_sentencepiece() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  for (const std::string& t : {kMark, std::string("a"), std::string("b"), std::string("c"), kMark + "a",
                               std::string("ab"), kMark + "ab", std::string("bc")}) {
    const size_t id = vocab.size();
    vocab[t] = id;
  }
  json merges = json::array({kMark + " a", "a b", kMark + "a b"});
  auto special = [](int id, const char* text) {
    return json{{"id", id},        {"content", text},     {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kMark}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMark}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab}, {"merges", merges}}}};
}

// Writes tokenizer.json (and tokenizer_config.json unless null) into a sub-folder of tmp.
std::string write_folder(const ds::test::TempDir& tmp, const std::string& name, const json& tj,
                         const json& config = nullptr) {
  const std::string dir = tmp.sub(name);
  std::ofstream(fs::path(dir) / "tokenizer.json") << tj.dump();
  if (!config.is_null()) std::ofstream(fs::path(dir) / "tokenizer_config.json") << config.dump();
  return dir;
}

TEST(HfTokenizerAdded, StripAndSingleWordAndLongestFirst) {
  ds::test::TempDir tmp;
  const ds::HfTokenizerInfo info = ds::load_hf_tokenizer(write_folder(tmp, "t", tiny_byte_level()));
  const ds::Tokenizer& t = *info.tokenizer;
  const int n = 259, start = n + 1, think = n + 2, l = n + 3, r = n + 4, w = n + 5, longer = n + 6;
  auto enc = [&](const std::string& s) { return t.encode(s, false); };
  EXPECT_EQ(info.special_ids, (std::vector<int>{n, start, l, r, longer}));  // <think>, [W]: not special
  EXPECT_EQ(enc(" the"), std::vector<int>{258});                            // Ġ t, h e, Ġt he
  EXPECT_EQ(enc("a<think>b"), cat({enc("a"), {think}, enc("b")}));
  // lstrip takes the whitespace before, rstrip the whitespace after.
  EXPECT_EQ(enc("x \t <|l|> y"), cat({enc("x"), {l}, enc(" y")}));
  EXPECT_EQ(enc("x <|r|> \n y"), cat({enc("x "), {r}, enc("y")}));
  // single_word: not inside a word.
  EXPECT_EQ(enc("a [W] b"), cat({enc("a "), {w}, enc(" b")}));
  const std::vector<int> inside = enc("a[W]b");
  EXPECT_EQ(std::count(inside.begin(), inside.end(), w), 0);
  EXPECT_EQ(decode_all(t, -1, inside), "a[W]b");
  // At one place the longest added token wins.
  EXPECT_EQ(enc("<|im_start|>x<|im_start|>y"), cat({{longer, start}, enc("y")}));
}

TEST(HfTokenizerBos, PostProcessorAndConfig) {
  ds::test::TempDir tmp;
  json tj = tiny_sentencepiece();
  // No tokenizer_config.json: the post_processor's <s> is BOS.
  ds::HfTokenizerInfo a = ds::load_hf_tokenizer(write_folder(tmp, "a", tj));
  EXPECT_TRUE(a.add_bos);
  EXPECT_EQ(a.bos_id, 1);
  EXPECT_EQ(a.bos_token, "<s>");
  EXPECT_EQ(a.eos_id, -1);
  EXPECT_EQ(a.tokenizer->encode("a", true), (std::vector<int>{1, 263}));  // <s> ▁a
  // The config wins: no BOS, EOS added; tokens as {"content": ...}; the "default" template.
  const json cfg = {{"add_bos_token", false},
                    {"add_eos_token", true},
                    {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                    {"eos_token", {{"content", "</s>"}}},
                    {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                   {{"name", "default"}, {"template", "D"}}})}};
  ds::HfTokenizerInfo b = ds::load_hf_tokenizer(write_folder(tmp, "b", tj, cfg));
  EXPECT_FALSE(b.add_bos);
  EXPECT_EQ(b.bos_id, 1);
  EXPECT_EQ(b.eos_id, 2);
  EXPECT_EQ(b.eos_token, "</s>");
  EXPECT_EQ(b.chat_template, "D");
  EXPECT_EQ(b.tokenizer->encode("a", true), (std::vector<int>{263, 2}));
  // A byte-level file with Llama 3's TemplateProcessing in a Sequence adds its BOS.
  json bl = tiny_byte_level();
  bl["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({{{"type", "ByteLevel"}},
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                     {"special_tokens", json::object()}}})}};
  ds::HfTokenizerInfo c = ds::load_hf_tokenizer(write_folder(tmp, "c", bl));
  EXPECT_TRUE(c.add_bos);
  EXPECT_EQ(c.bos_id, 259);
  EXPECT_EQ(c.tokenizer->encode("he", true), (std::vector<int>{259, 257}));
  EXPECT_EQ(c.tokenizer->encode("he", false), (std::vector<int>{257}));
}

// BPE with byte fallback merges only the pairs that merges lists, by rank.
TEST(HfTokenizerSentencePiece, MergesByRankAndByteFallback) {
  ds::test::TempDir tmp;
  const ds::HfTokenizerInfo info = ds::load_hf_tokenizer(write_folder(tmp, "t", tiny_sentencepiece()));
  const ds::Tokenizer& t = *info.tokenizer;
  const int mark = 259, a = 260, b = 261, c = 262, ab_ = 264, mark_ab = 265;
  EXPECT_EQ(t.encode("ab", false), std::vector<int>{mark_ab});         // ▁ a -> ▁a, then ▁a b
  EXPECT_EQ(t.encode("bc", false), (std::vector<int>{mark, b, c}));    // "bc" is a token but no merge makes it
  EXPECT_EQ(t.encode("x", false), (std::vector<int>{mark, 3 + 'x'}));  // no "x": byte fallback
  EXPECT_EQ(t.encode("b ab", false), (std::vector<int>{mark, b, mark_ab}));
  EXPECT_EQ(t.encode("cab", false), (std::vector<int>{mark, c, ab_}));
  // The legacy normalizer puts "▁" in front of every fragment, after added tokens too.
  EXPECT_EQ(t.encode("a<s>a", false), (std::vector<int>{263, 1, 263}));
  EXPECT_EQ(t.encode(" a", false), (std::vector<int>{mark, 263}));
  EXPECT_EQ(decode_all(t, -1, t.encode(" a b\xC3\xA9", false)), " a b\xC3\xA9");
  (void)a;
}

TEST(HfTokenizerSentencePiece, MetaspacePrependSchemes) {
  ds::test::TempDir tmp;
  json tj = tiny_sentencepiece();
  tj["normalizer"] = nullptr;
  const int mark = 259, a = 260, b = 261, mark_a = 263, mark_ab = 265;
  auto load = [&](const std::string& scheme, bool split) {
    tj["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMark}, {"prepend_scheme", scheme}, {"split", split}};
    return ds::load_hf_tokenizer(write_folder(tmp, scheme + (split ? "1" : "0"), tj)).tokenizer;
  };
  const auto first = load("first", false), always = load("always", false), never = load("never", false);
  EXPECT_EQ(first->encode("a<s>a", false), (std::vector<int>{mark_a, 1, a}));
  EXPECT_EQ(always->encode("a<s>a", false), (std::vector<int>{mark_a, 1, mark_a}));
  EXPECT_EQ(never->encode("a<s>a", false), (std::vector<int>{a, 1, a}));
  // A text that starts with a space gets no second "▁".
  EXPECT_EQ(first->encode(" a", false), std::vector<int>{mark_a});
  // split: BPE runs within each piece that a "▁" starts.
  const auto split = load("first", true);
  EXPECT_EQ(split->encode("ab ab", false), (std::vector<int>{mark_ab, mark_ab}));
  EXPECT_EQ(split->encode("a  b", false), (std::vector<int>{mark_a, mark, mark, b}));
  EXPECT_EQ(decode_all(*first, -1, first->encode("ab ab", false)), "ab ab");
}

TEST(HfTokenizerDetect, GptTwoFilesStayWithTheirReader) {
  ds::test::TempDir tmp;
  json bl = tiny_byte_level();
  EXPECT_TRUE(ds::is_hf_tokenizer(write_folder(tmp, "a", bl)));
  bl["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const std::string gpt2 = write_folder(tmp, "b", bl);
  EXPECT_FALSE(ds::is_hf_tokenizer(gpt2));
  EXPECT_FALSE(ds::is_hf_tokenizer(tmp.sub("empty")));
  // This reader takes GPT-2's files too, with the same ids as GPT-2's reader.
  const auto mine = ds::load_hf_tokenizer(gpt2).tokenizer;
  const auto theirs = ds::GPT2Tokenizer::from_tokenizer_json(gpt2 + "/tokenizer.json");
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_text(rng, rng() % 60);
    ASSERT_EQ(mine->encode(text, false), theirs.encode(text, false)) << ds::escaped(text);
  }
}

// ---------------------------------------------------------------- bad files

TEST(HfTokenizerErrors, BadFilesGiveAMessage) {
  ds::test::TempDir tmp;
  int k = 0;
  auto error = [&](const json& tj) {
    const std::string dir = write_folder(tmp, "e" + std::to_string(k++), tj);
    return error_of([&] { ds::load_hf_tokenizer(dir); });
  };
  auto with = [](json j, const std::function<void(json&)>& f) {
    f(j);
    return j;
  };
  const json bl = tiny_byte_level(), sp = tiny_sentencepiece();
  const std::string merge = error(with(bl, [](json& j) { j["model"]["merges"].push_back("Ġ zz"); }));
  EXPECT_TRUE(contains(merge, "model.merges[3]") && contains(merge, "\"zz\"")) << merge;
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"]["merges"].push_back("h h"); })), "\"hh\""));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"]["vocab"] = json::object(); })), "model.vocab is empty"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"]["vocab"]["h"] = "7"; })), "must be an integer"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"] = json::array(); })), "model must be an object"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"]["type"] = "Unigram"; })), "\"Unigram\""));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; })), "\"NFKC\""));
  EXPECT_TRUE(contains(error(with(bl,
                                  [](json& j) {
                                    j["pre_tokenizer"] = {{"type", "Whitespace"}};
                                  })),
                       "\"Whitespace\""));
  const std::string regex =
      error(with(bl, [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|[^\\w\\s]+"; }));
  EXPECT_TRUE(contains(regex, "\\w+|[^\\w\\s]+")) << regex;
  EXPECT_TRUE(contains(regex, "not a known pattern")) << regex;
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["added_tokens"][0]["id"] = 100000000; })), "outside"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["added_tokens"][0]["id"] = 5000; })), "without gaps"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["added_tokens"][0]["id"] = -1; })), "outside"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"]["vocab"]["h"] = 3; })), "gives id 3 to both"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["added_tokens"][1]["id"] = 5; })), "model.vocab gives"));
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["added_tokens"][0]["content"] = 5; })), "must be a string"));
  EXPECT_TRUE(contains(error(with(sp, [](json& j) { j["model"]["unk_token"] = "<nope>"; })), "model.unk_token"));
  EXPECT_TRUE(
      contains(error(with(sp, [](json& j) { j["post_processor"]["type"] = "BertProcessing"; })), "\"BertProcessing\""));
  EXPECT_TRUE(contains(error(with(sp, [](json& j) { j["decoder"]["type"] = "WordPiece"; })), "\"WordPiece\""));
  EXPECT_TRUE(contains(error(with(sp, [](json& j) { j["normalizer"] = nullptr; })), "neither byte-level"));
  // A 10 MB token.
  EXPECT_TRUE(contains(error(with(bl, [](json& j) { j["model"]["vocab"][std::string(10 << 20, 'x')] = 259; })),
                       "bytes, more than"));
  // Not JSON, not an object, an empty file, no file.
  for (const std::string& text : {std::string("{\"model\": "), std::string("[1, 2]"), std::string(""),
                                  std::string("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xff\": 0}}}")}) {
    const std::string dir = tmp.sub("raw" + std::to_string(k++));
    std::ofstream(fs::path(dir) / "tokenizer.json") << text;
    const std::string e = error_of([&] { ds::load_hf_tokenizer(dir); });
    EXPECT_TRUE(contains(e, "tokenizer.json")) << e;
  }
  EXPECT_TRUE(contains(error_of([&] { ds::load_hf_tokenizer(tmp.sub("none")); }), "no tokenizer.json"));
  // A bad tokenizer_config.json.
  const std::string dir = write_folder(tmp, "cfg", sp, json{{"bos_token", "<nope>"}});
  EXPECT_TRUE(contains(error_of([&] { ds::load_hf_tokenizer(dir); }), "bos_token"));
  const std::string dir2 = write_folder(tmp, "cfg2", sp, json{{"add_bos_token", "yes"}});
  EXPECT_TRUE(contains(error_of([&] { ds::load_hf_tokenizer(dir2); }), "add_bos_token"));
}

// Ids outside the vocabulary, for the decoding side.
TEST(HfTokenizerErrors, IdsOutsideTheVocabulary) {
  ds::test::TempDir tmp;
  const auto t = ds::load_hf_tokenizer(write_folder(tmp, "t", tiny_byte_level())).tokenizer;
  EXPECT_TRUE(contains(error_of([&] { t->decode(-1, t->vocab_size()); }), "outside the vocabulary"));
  EXPECT_TRUE(contains(error_of([&] { t->piece(-5); }), "outside the vocabulary"));
}

// ---------------------------------------------------------------- the CLI

TEST(HfTokenizerCli, TokenizeJsonlWithAFolder) {
  for (const char* name : {"qwen3", "llama2"}) {
    const fs::path dir = hf_fixture(name);
    DS_NEED_FIXTURE(dir / "reference.jsonl", "decoderscope-cli tokenize with a tokenizer.json folder");
    const std::vector<Reference> refs = read_reference(dir / "reference.jsonl");
    std::string in;
    for (const Reference& r : refs)
      in += nlohmann::json{{"text", r.text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    auto run = ds::test::run_cli("tokenize --jsonl --tokenizer " + ds::test::quoted(dir), in);
    ASSERT_EQ(run.code, 0) << run.err;
    std::istringstream lines(run.out);
    size_t i = 0;
    for (std::string line; std::getline(lines, line) && i < refs.size(); ++i) {
      if (!ds::unicode::valid_utf8(refs[i].text)) continue;  // written with U+FFFD above
      EXPECT_EQ(nlohmann::json::parse(line).at("ids").get<std::vector<int>>(), refs[i].ids) << name << " " << i;
    }
    EXPECT_EQ(i, refs.size());
  }
  const fs::path file = hf_fixture("qwen3") / "tokenizer.json";
  DS_NEED_FIXTURE(file, "decoderscope-cli tokenize with a tokenizer.json file");
  const auto run = ds::test::run_cli("tokenize --tokenizer " + ds::test::quoted(file) + " '<|im_start|>user'");
  ASSERT_EQ(run.code, 0) << run.err;
  const ds::HfTokenizerInfo& info = loaded("qwen3");
  std::string want = std::to_string(json_id(file.parent_path(), "<|im_start|>"));
  for (int id : info.tokenizer->encode("user", false)) want += " " + std::to_string(id);
  EXPECT_EQ(run.out, want + "\n");
}

}  // namespace
