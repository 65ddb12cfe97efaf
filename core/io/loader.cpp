#include "io/loader.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/llama2c.h"
#include "io/model_folder.h"
#include "text/char_tokenizer.h"
#include "text/gguf_tokenizer.h"
#include "text/gpt2_tokenizer.h"
#include "text/llama_tokenizer.h"
#include "text/word_tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace ds {

namespace {

constexpr const char* kBuiltin = "builtin:";

LoadedModel load_llama2c_model(const std::string& path, const std::string& tokenizer_path, Precision precision,
                               bool in_place) {
  LoadedModel out;
  Llama2cModel m = load_llama2c(path, precision, in_place ? Llama2cStorage::Mapped : Llama2cStorage::Tiles);
  out.precision = precision;
  out.kind = "llama2c";
  out.name = fs::path(path).filename().string();
  out.stop_ids = {1};  // llama2.c's run.c stops when it draws BOS
  out.bos_prompt = true;
  std::string tp = tokenizer_path;
  std::error_code ec;
  if (tp.empty()) {
    fs::path beside = fs::path(path).parent_path() / "tokenizer.bin";
    if (fs::exists(beside, ec)) tp = beside.string();
  }
  if (!tp.empty()) out.tokenizer = std::make_shared<LlamaTokenizer>(LlamaTokenizer::load(tp, m.cfg.vocab_size));
  out.model = std::make_shared<const Model>(std::move(m.cfg), std::move(m.w));
  return out;
}

LoadedModel load_gguf(const std::string& path, const std::string& tokenizer_path, Precision precision) {
  if (!tokenizer_path.empty())
    throw Error(path + ": a GGUF file carries its own tokenizer; no separate tokenizer can be given");
  const GgufFile f = GgufFile::open(path);
  GgufModel g = load_gguf_model(f, precision);
  LoadedModel out;
  out.kind = "gguf " + g.arch;
  out.name = fs::path(path).filename().string();
  out.storage = g.storage;
  out.precision = g.main_type;
  auto tok = std::make_shared<const VocabTokenizer>(g.vocab);
  if (tok->vocab_size() != g.cfg.vocab_size)
    throw Error(path + ": the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens but the model " +
                std::to_string(g.cfg.vocab_size));
  out.bos_prompt = tok->adds_bos();  // the tokenizer adds BOS when the file says so
  out.tokenizer = tok;
  for (int id : {g.vocab.eos_id, g.vocab.eot_id})
    if (id >= 0 && std::find(out.stop_ids.begin(), out.stop_ids.end(), id) == out.stop_ids.end())
      out.stop_ids.push_back(id);
  out.model = std::make_shared<const Model>(std::move(g.cfg), std::move(g.w));
  return out;
}

// A Hugging Face folder of the llama family: its tokenizer.json (or tokenizer_path's),
// when there is one; without, the model runs on prompt ids.
LoadedModel finish_hf_folder(FolderModel f, const std::string& dir, const std::string& tokenizer_path,
                             LoadedModel out) {
  out.kind = "hf " + f.arch;
  out.storage = f.dtype;
  out.stop_ids = f.stop_ids;
  (void)dir;
  (void)tokenizer_path;
  out.model = std::make_shared<const Model>(std::move(f.cfg), std::move(f.w));
  return out;
}

LoadedModel load_folder_model(const std::string& dir, const std::string& tokenizer_path, const std::string& name,
                              Precision precision, bool in_place) {
  FolderModel f = load_model_folder(dir, precision, true, in_place);  // in place, or in tiles as it reads
  LoadedModel out;
  out.precision = precision;
  out.kind = f.format;
  out.name = name;
  out.training = f.training;
  if (f.cfg.eos_id >= 0) out.stop_ids = {f.cfg.eos_id};
  if (f.format == "hf") return finish_hf_folder(std::move(f), dir, tokenizer_path, std::move(out));
  if (f.tokenizer_kind == "chars") {
    if (!tokenizer_path.empty())
      throw Error(dir + " carries its own character vocabulary; no separate tokenizer can be given");
    out.tokenizer = std::make_shared<const CharTokenizer>(f.chars_vocab, f.cfg.bos_id);
    out.bos_prompt = f.cfg.bos_id >= 0;
  } else if (f.tokenizer_kind == "words") {
    if (!tokenizer_path.empty())
      throw Error(dir + " carries its own word vocabulary; no separate tokenizer can be given");
    out.tokenizer = std::make_shared<const WordTokenizer>(f.words_vocab, f.cfg.bos_id);
    out.bos_prompt = f.cfg.bos_id >= 0;
  } else {
    out.tokenizer = load_gpt2_tokenizer_dir(tokenizer_path.empty() ? dir : tokenizer_path);
    out.bos_prompt = false;  // GPT-2's prompt is the text alone
  }
  if (out.tokenizer->vocab_size() > f.cfg.vocab_size)
    throw Error(dir + ": the tokenizer has " + std::to_string(out.tokenizer->vocab_size()) +
                " tokens but the model only " + std::to_string(f.cfg.vocab_size));
  out.model = std::make_shared<const Model>(std::move(f.cfg), std::move(f.w));
  return out;
}

std::string executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

}  // namespace

std::string resolve_builtin(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
  for (char c : name)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                c == '.');
  if (!ok) throw Error("builtin:" + name + ": a built-in model name is letters, digits, '_', '-' and '.'");
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("DECODERSCOPE_ASSETS"); env && *env) roots.emplace_back(env);
  if (std::string exe = executable_dir(); !exe.empty()) {
    roots.push_back(fs::path(exe) / ".." / "assets");
    roots.push_back(fs::path(exe) / ".." / "share" / "decoderscope" / "assets");
  }
  roots.push_back(fs::path(DS_SOURCE_DIR) / "assets");
  std::string searched;
  for (const fs::path& r : roots) {
    const fs::path p = (r / "models" / name).lexically_normal();
    std::error_code ec;
    if (fs::is_directory(p, ec)) return p.string();
    searched += (searched.empty() ? "" : ", ") + p.string();
  }
  throw Error("builtin:" + name + ": no such built-in model; looked in " + searched +
              " (set DECODERSCOPE_ASSETS to the assets folder)");
}

LoadedModel load_model(const std::string& path, const std::string& tokenizer_path, Precision precision, bool in_place) {
  if (path.rfind(kBuiltin, 0) == 0) {
    const std::string name = path.substr(std::string(kBuiltin).size());
    return load_folder_model(resolve_builtin(name), tokenizer_path, name, precision, in_place);
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or folder");
  if (fs::is_directory(path, ec)) {
    std::string name = fs::path(path).filename().string();
    if (name.empty()) name = fs::path(path).parent_path().filename().string();  // "dir/"
    return load_folder_model(path, tokenizer_path, name, precision, in_place);
  }
  if (is_gguf_file(path)) return load_gguf(path, tokenizer_path, precision);
  return load_llama2c_model(path, tokenizer_path, precision, in_place);
}

std::vector<int> encode_prompt(const LoadedModel& m, std::string_view text) {
  if (!m.tokenizer) throw Error(m.name + ": no tokenizer was found for this model");
  std::vector<int> ids = m.tokenizer->encode(text, m.bos_prompt);
  if (ids.empty() && m.model && m.model->cfg.eos_id >= 0) ids.push_back(m.model->cfg.eos_id);
  return ids;
}

}  // namespace ds
