// libFuzzer target: llama2.c's tokenizer.bin (core/text/llama_tokenizer.cpp). Input: a
// selector byte (even or odd), then
//   even: the vocabulary size as 2 little-endian bytes, the tokenizer.bin, kSplit, a text;
//   odd:  a text only, for the real tok512.bin of ../shared/fixtures/aidreams260K when
//         present, else a small tokenizer made here.
// A tokenizer that loads encodes the text (any bytes, invalid UTF-8 included) and
// decodes the result (fuzz::exercise_tokenizer).
#include <cstring>
#include <memory>

#include "fuzz_common.h"
#include "text/llama_tokenizer.h"

namespace {

// <unk>, <s>, </s>, the 256 byte tokens <0xHH>, then a few pieces.
std::string small_tokenizer_bin(int& vocab_size) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  char hex[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    pieces.push_back(hex);
  }
  for (const char* p : {" ", "a", "b", "ab", " a", " ab", "é", "😀", "\xe2\x82"}) pieces.push_back(p);
  std::string out;
  auto i32 = [&](int32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  };
  i32(8);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const float score = i < 259 ? 0.0f : -static_cast<float>(i);
    int32_t bits;
    std::memcpy(&bits, &score, 4);
    i32(bits);
    i32(static_cast<int32_t>(pieces[i].size()));
    out += pieces[i];
  }
  vocab_size = static_cast<int>(pieces.size());
  return out;
}

const ds::LlamaTokenizer& fixed() {
  static const std::unique_ptr<ds::LlamaTokenizer> t = [] {
    const std::string tok = std::string(DS_SHARED_DIR) + "/fixtures/aidreams260K/tok512.bin";
    std::error_code ec;
    if (std::filesystem::exists(tok, ec))
      return std::make_unique<ds::LlamaTokenizer>(ds::LlamaTokenizer::load(tok, 512));
    int v = 0;
    const std::string path = fuzz::tmp_dir() + "/small.bin";
    fuzz::put(path, small_tokenizer_bin(v));
    return std::make_unique<ds::LlamaTokenizer>(ds::LlamaTokenizer::load(path, v));
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  int v = 0;
  const std::string bin = small_tokenizer_bin(v);
  const std::string text = "ab a é😀 \xe2\x82 \xff Once upon a time";
  const char size_le[2] = {static_cast<char>(v & 0xFF), static_cast<char>(v >> 8)};
  fuzz::seed("small", fuzz::join('\0', {std::string(size_le, 2) + bin, text}));
  fuzz::seed("text", fuzz::join('\1', {text}));
  (void)fixed();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view in = fuzz::as_view(data + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      if (in.size() < 2) return 0;
      const int v = static_cast<unsigned char>(in[0]) | static_cast<unsigned char>(in[1]) << 8;
      const std::vector<std::string_view> p = fuzz::split(in.substr(2), 2);
      const std::string path = fuzz::tmp_dir() + "/tokenizer.bin";
      fuzz::put(path, p[0]);
      fuzz::exercise_tokenizer(ds::LlamaTokenizer::load(path, v), p[1]);
    } else {
      fuzz::exercise_tokenizer(fixed(), in);
    }
  } catch (const ds::Error&) {
  }
  return 0;
}
