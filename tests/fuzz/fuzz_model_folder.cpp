// libFuzzer target: decoderscope's model folders and Hugging Face GPT-2 folders
// (core/io/model_folder.cpp) with the chars and words tokenizers they carry
// (core/text/char_tokenizer.cpp, word_tokenizer.cpp). Input: one selector byte (value
// mod 3: the precision F32, BF16, F16; bit 2: load in tiles), then config.json,
// kSplit, model.safetensors, kSplit, a text. A folder that loads is run, and its
// tokenizer (chars or words) encodes the text and decodes the result.
#include "fuzz_common.h"
#include "io/model_folder.h"
#include "text/char_tokenizer.h"
#include "text/word_tokenizer.h"

namespace {

ds::Config tiny_config() {
  ds::Config c;
  c.d_model = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_head = 2;
  c.d_ff = 8;
  c.max_seq = 8;
  c.bos_id = 1;
  c.eos_id = 2;
  return c;
}

// Seeds: tiny folders of both tokenizer kinds, written by the saver the loader pairs with.
void write_seeds() {
  const std::string dir = fuzz::tmp_dir() + "/seed";
  const std::vector<std::string> words = {"<pad>", "<s>", "</s>", "<unk>", "Once", "upon", "a", "time",
                                          ",",     ".",   "“",    "”",     "'",    "s",    "!", "Lily"};
  const std::vector<std::string> chars = {"<pad>", "<s>", "</s>", "a", "b", " ", "é", "€", "😀", "\n"};
  struct One {
    const char* name;
    const char* kind;
    const std::vector<std::string>* vocab;
    const char* dtype;
    const char* text;
  };
  for (const One& o : {One{"words", "words", &words, "F32", "Once upon a time, Lily's “time”!"},
                       One{"chars", "chars", &chars, "BF16", "ab é€😀\n\xff"}}) {
    ds::Config c = tiny_config();
    c.vocab_size = static_cast<int>(o.vocab->size());
    ds::save_model_folder(dir, c, ds::Weights::random(c, 3), {{"kind", o.kind}, {"vocab", *o.vocab}}, {}, o.dtype);
    fuzz::seed(o.name,
               fuzz::join('\0', {fuzz::slurp(dir + "/config.json"), fuzz::slurp(dir + "/model.safetensors"), o.text}));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const ds::Precision kPrecision[3] = {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16};
  const ds::Precision p = kPrecision[data[0] % 3];
  const bool tiles = data[0] & 4;
  const std::vector<std::string_view> parts = fuzz::split(fuzz::as_view(data + 1, size - 1), 3);
  const std::string dir = fuzz::tmp_dir() + "/folder";
  std::filesystem::create_directories(dir);
  fuzz::put(dir + "/config.json", parts[0]);
  fuzz::put(dir + "/model.safetensors", parts[1]);
  try {
    ds::FolderModel m = ds::load_model_folder(dir, p, tiles);
    if (m.tokenizer_kind == "chars") fuzz::exercise_tokenizer(ds::CharTokenizer(m.chars_vocab, m.cfg.bos_id), parts[2]);
    if (m.tokenizer_kind == "words") fuzz::exercise_tokenizer(ds::WordTokenizer(m.words_vocab, m.cfg.bos_id), parts[2]);
    fuzz::run_model(std::move(m.cfg), std::move(m.w));
  } catch (const ds::Error&) {
  }
  return 0;
}
