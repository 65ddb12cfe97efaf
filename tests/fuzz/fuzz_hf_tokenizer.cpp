// libFuzzer target: Hugging Face tokenizer.json folders (core/text/hf_tokenizer.cpp).
// Input: a selector byte (value mod 2), then
//   0: a tokenizer.json, kSplit, a tokenizer_config.json (none when empty), kSplit, a text;
//   1: a text only, for small made-up tokenizers (one byte-level, one SentencePiece-style)
//      and, when present, the Llama 2 folder of ../shared/fixtures/hf-tokenizers.
// A tokenizer that loads encodes the text (any bytes, invalid UTF-8 included) and decodes
// the result (fuzz::exercise_tokenizer); is_hf_tokenizer must answer for any folder.
#include <memory>
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "text/gpt2_tokenizer.h"
#include "text/hf_tokenizer.h"

namespace {

using json = nlohmann::ordered_json;
const std::string kMark = "\xE2\x96\x81";

json added(int id, const char* text, bool special, bool lstrip, bool rstrip, bool single_word) {
  return json{{"id", id},         {"content", text},     {"single_word", single_word}, {"lstrip", lstrip},
              {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
}

// Byte-level: the 256 byte symbols, a few merges, Llama 3's pattern, added tokens.
std::string byte_level_json() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[ds::GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  for (const auto& [l, r] : {std::pair{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ġ", "Ġ"}}) {
    const size_t id = vocab.size();
    vocab[std::string(l) + r] = id;
    merges.push_back(json::array({l, r}));
  }
  const int n = static_cast<int>(vocab.size());
  const char* regex =
      R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
  return json{
      {"added_tokens",
       json::array({added(n, "<|bos|>", true, false, false, false), added(n + 1, "<think>", false, true, true, false),
                    added(n + 2, "[W]", false, false, false, true)})},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                      {{"type", "ByteLevel"}, {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}}}}, {{"Sequence", {{"id", "A"}}}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}}
      .dump();
}

// SentencePiece-style: <unk> <s> </s>, the byte tokens, a few pieces; Metaspace.
std::string sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  for (const std::string& t : {kMark, std::string("a"), std::string("b"), kMark + "a", kMark + "ab"}) {
    const size_t id = vocab.size();
    vocab[t] = id;
  }
  return json{{"added_tokens",
               json::array({added(0, "<unk>", true, false, false, false), added(1, "<s>", true, false, false, false),
                            added(2, "</s>", true, false, false, false)})},
              {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", kMark}, {"prepend_scheme", "first"}}},
              {"decoder", {{"type", "Metaspace"}}},
              {"model",
               {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"vocab", vocab},
                {"merges", json::array({kMark + " a", kMark + "a b"})}}}}
      .dump();
}

std::string folder(const std::string& name, const std::string& tokenizer_json, std::string_view config) {
  const std::string dir = fuzz::tmp_dir() + "/" + name;
  std::filesystem::create_directories(dir);
  fuzz::put(dir + "/tokenizer.json", tokenizer_json);
  std::error_code ec;
  std::filesystem::remove(dir + "/tokenizer_config.json", ec);
  if (!config.empty()) fuzz::put(dir + "/tokenizer_config.json", config);
  return dir;
}

// The tokenizers of mode 1.
const std::vector<std::shared_ptr<const ds::Tokenizer>>& fixed() {
  static const auto* t = [] {
    auto* v = new std::vector<std::shared_ptr<const ds::Tokenizer>>;
    v->push_back(ds::load_hf_tokenizer(folder("bl", byte_level_json(), "")).tokenizer);
    v->push_back(ds::load_hf_tokenizer(folder("sp", sentencepiece_json(), "{\"add_bos_token\": true}")).tokenizer);
    const std::string llama2 = std::string(DS_SHARED_DIR) + "/fixtures/hf-tokenizers/llama2";
    std::error_code ec;
    if (std::filesystem::exists(llama2 + "/tokenizer.json", ec)) v->push_back(ds::load_hf_tokenizer(llama2).tokenizer);
    return v;
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string text = "the cat's 123 théâtre  \t\n\xe2\x82 <|bos|> a<think> b [W] ab ▁ 😀";
  fuzz::seed("byte_level", fuzz::join('\0', {byte_level_json(), "{\"bos_token\": \"<|bos|>\"}", text}));
  fuzz::seed("sentencepiece", fuzz::join('\0', {sentencepiece_json(), "", text}));
  fuzz::seed("text", fuzz::join('\1', {text}));
  (void)fixed();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view in = fuzz::as_view(data + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      const std::vector<std::string_view> p = fuzz::split(in, 3);
      const std::string dir = folder("in", std::string(p[0]), p[1]);
      (void)ds::is_hf_tokenizer(dir);
      fuzz::exercise_tokenizer(*ds::load_hf_tokenizer(dir).tokenizer, p[2]);
    } else {
      for (const auto& t : fixed()) fuzz::exercise_tokenizer(*t, in);
    }
  } catch (const ds::Error&) {
  }
  return 0;
}
