// libFuzzer target: GPT-2's byte-level BPE tokenizer files (core/text/gpt2_tokenizer.cpp).
// Input: a selector byte (value mod 3), then
//   0: vocab.json, kSplit, merges.txt, kSplit, a text;
//   1: a Hugging Face tokenizer.json, kSplit, a text;
//   2: a text only, for GPT-2's real tokenizer (../shared/fixtures/gpt2-tokenizer when
//      present, else a small one made here).
// A tokenizer that loads encodes the text (any bytes, invalid UTF-8 included) and
// decodes the result (fuzz::exercise_tokenizer).
#include <memory>
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "text/gpt2_tokenizer.h"

namespace {

// A small vocabulary: the 256 byte symbols, a few merges, <|endoftext|>.
struct Small {
  std::string vocab_json, merges_txt, tokenizer_json;
};

Small make_small() {
  const char* merges[][2] = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"Ã", "©"}, {"Ġ", "Ġ"}};
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[ds::GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b))] = b;
  std::string mtxt = "#version: 0.2\n";
  nlohmann::json mlist = nlohmann::json::array();
  for (const auto& m : merges) {
    vocab[std::string(m[0]) + m[1]] = static_cast<int>(vocab.size());
    mtxt += std::string(m[0]) + " " + m[1] + "\n";
    mlist.push_back(std::string(m[0]) + " " + m[1]);
  }
  Small s;
  nlohmann::ordered_json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", mlist}};
  vocab["<|endoftext|>"] = static_cast<int>(vocab.size());
  s.vocab_json = vocab.dump();
  s.merges_txt = mtxt;
  nlohmann::ordered_json tj = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", vocab.size() - 1}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}}},
      {"model", model}};
  s.tokenizer_json = tj.dump(1);
  return s;
}

// The tokenizer of mode 2.
const ds::GPT2Tokenizer& fixed() {
  static const std::unique_ptr<ds::GPT2Tokenizer> t = [] {
    const std::string dir = std::string(DS_SHARED_DIR) + "/fixtures/gpt2-tokenizer";
    std::error_code ec;
    if (std::filesystem::exists(dir + "/vocab.json", ec))
      return std::make_unique<ds::GPT2Tokenizer>(
          ds::GPT2Tokenizer::from_files(dir + "/vocab.json", dir + "/merges.txt"));
    const Small s = make_small();
    fuzz::put(fuzz::tmp_dir() + "/v.json", s.vocab_json);
    fuzz::put(fuzz::tmp_dir() + "/m.txt", s.merges_txt);
    return std::make_unique<ds::GPT2Tokenizer>(
        ds::GPT2Tokenizer::from_files(fuzz::tmp_dir() + "/v.json", fuzz::tmp_dir() + "/m.txt"));
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const Small s = make_small();
  const std::string text = "the cat's 123 théâtre  \t\n\xe2\x82 <|endoftext|> 😀";
  fuzz::seed("files", fuzz::join('\0', {s.vocab_json, s.merges_txt, text}));
  fuzz::seed("tokenizer_json", fuzz::join('\1', {s.tokenizer_json, text}));
  fuzz::seed("text", fuzz::join('\2', {text}));
  (void)fixed();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  const std::string_view in = fuzz::as_view(data + 1, size - 1);
  const std::string& dir = fuzz::tmp_dir();
  try {
    if (mode == 0) {
      const std::vector<std::string_view> p = fuzz::split(in, 3);
      fuzz::put(dir + "/vocab.json", p[0]);
      fuzz::put(dir + "/merges.txt", p[1]);
      fuzz::exercise_tokenizer(ds::GPT2Tokenizer::from_files(dir + "/vocab.json", dir + "/merges.txt"), p[2]);
    } else if (mode == 1) {
      const std::vector<std::string_view> p = fuzz::split(in, 2);
      fuzz::put(dir + "/tokenizer.json", p[0]);
      fuzz::exercise_tokenizer(ds::GPT2Tokenizer::from_tokenizer_json(dir + "/tokenizer.json"), p[1]);
    } else {
      fuzz::exercise_tokenizer(fixed(), in);
    }
  } catch (const ds::Error&) {
  }
  return 0;
}
