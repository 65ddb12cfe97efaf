#include "io/loader.h"

#include <filesystem>

#include "io/llama2c.h"
#include "text/llama_tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace ds {

LoadedModel load_model(const std::string& path, const std::string& tokenizer_path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or folder");
  if (fs::is_directory(path, ec))
    throw Error(path + ": is a folder; this version opens llama2.c checkpoints (.bin files)");
  LoadedModel out;
  Llama2cModel m = load_llama2c(path);
  out.kind = "llama2c";
  out.name = fs::path(path).filename().string();
  out.stop_ids = {1};  // llama2.c's run.c stops when it draws BOS
  out.bos_prompt = true;
  std::string tp = tokenizer_path;
  if (tp.empty()) {
    fs::path beside = fs::path(path).parent_path() / "tokenizer.bin";
    if (fs::exists(beside, ec)) tp = beside.string();
  }
  if (!tp.empty())
    out.tokenizer = std::make_shared<LlamaTokenizer>(LlamaTokenizer::load(tp, m.cfg.vocab_size));
  out.model = std::make_shared<const Model>(std::move(m.cfg), std::move(m.w));
  return out;
}

}  // namespace ds
