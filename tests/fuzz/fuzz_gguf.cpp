// libFuzzer target: a GGUF file (core/io/gguf.cpp, core/io/gguf_model.cpp). The first
// byte picks the precision float32 matrices are loaded in (0 F32, 1 BF16, 2 F16, by its
// value mod 3); the rest is the file. Whatever opens has its metadata read in every
// typed way, its tokenizer built and run on a short text, and, when it holds a model,
// the model run (fuzz::run_model).
#include "fuzz_common.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "text/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const ds::Precision kPrecision[3] = {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16};
  const ds::Precision p = kPrecision[data[0] % 3];
  const std::string path = fuzz::tmp_dir() + "/model.gguf";
  fuzz::put(path, fuzz::as_view(data + 1, size - 1));
  try {
    const ds::GgufFile f = ds::GgufFile::open(path);
    for (const auto& [key, v] : f.metadata()) {
      (void)v;
      (void)f.describe(key);
    }
    try {
      const ds::VocabTokenizer tok(ds::gguf_vocab(f));
      for (int id : tok.encode("Hello world 123", true)) (void)tok.decode(-1, id);
    } catch (const ds::Error&) {
    }
    ds::GgufModel m = ds::load_gguf_model(f, p);
    fuzz::run_model(std::move(m.cfg), std::move(m.w));
  } catch (const ds::Error&) {
  }
  return 0;
}
