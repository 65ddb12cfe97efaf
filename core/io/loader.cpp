#include "io/loader.h"

#include <algorithm>
#include <filesystem>

#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/llama2c.h"
#include "io/model_folder.h"
#include "text/char_tokenizer.h"
#include "text/chat_template.h"
#include "text/gguf_tokenizer.h"
#include "text/gpt2_tokenizer.h"
#include "text/hf_tokenizer.h"
#include "text/llama_tokenizer.h"
#include "text/word_tokenizer.h"
#include "util/data_dir.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace ds {

namespace {

constexpr const char* kBuiltin = "builtin:";

// Adds id to the stop ids when it is not there yet.
void add_stop(std::vector<int>& stops, int id) {
  if (id >= 0 && std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
}

// The tokens instruct models end a turn with, when the vocabulary has them as control or
// special tokens: generation stops there as the models' generation_config.json files say.
void add_turn_ends(const VocabTokenizer& tok, std::vector<int>& stops) {
  for (const char* end : {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>"}) {
    const int id = tok.find(end);
    if (id >= 0 && tok.type(id) == TokenType::Control) add_stop(stops, id);
  }
}

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

// The tokenizer of a GGUF vocabulary with its chat template and special tokens.
void use_vocab(LoadedModel& m, const VocabData& v, std::shared_ptr<const VocabTokenizer> tok) {
  auto text = [&](int id) { return id >= 0 && size_t(id) < v.tokens.size() ? v.tokens[size_t(id)] : ""; };
  m.chat = {v.chat_template, text(v.bos_id), text(v.eos_id), false};
  for (int id = 0; id < tok->vocab_size(); ++id)
    if (tok->type(id) == TokenType::Control || tok->type(id) == TokenType::UserDefined) m.special_ids.push_back(id);
  m.bos_prompt = tok->adds_bos();  // the tokenizer adds BOS when the file says so
  m.tokenizer = std::move(tok);
}

// The tokenizer of Hugging Face tokenizer files with its chat template and special tokens.
void use_hf_tokenizer(LoadedModel& m, const HfTokenizerInfo& info) {
  m.tokenizer = info.tokenizer;
  m.bos_prompt = info.add_bos;
  m.chat = {info.chat_template, info.bos_token, info.eos_token, true};
  m.special_ids = info.special_ids;
}

LoadedModel load_gguf(const std::string& path, const std::string& tokenizer_path, Precision precision, bool in_place) {
  if (!tokenizer_path.empty())
    throw Error(path + ": a GGUF file carries its own tokenizer; no separate tokenizer can be given");
  const GgufFile f = GgufFile::open(path, in_place);
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
  use_vocab(out, g.vocab, tok);
  for (int id : {g.vocab.eos_id, g.vocab.eot_id}) add_stop(out.stop_ids, id);
  out.model = std::make_shared<const Model>(std::move(g.cfg), std::move(g.w));
  return out;
}

// A Hugging Face folder of the llama family: its tokenizer.json (or tokenizer_path's),
// when there is one; without, the model runs on prompt ids.
LoadedModel finish_hf_folder(FolderModel f, const std::string& dir, const std::string& tokenizer_path,
                             LoadedModel out) {
  out.kind = "hf " + f.arch;
  out.file_dtypes = f.dtype;
  out.stop_ids = f.stop_ids;
  const std::string tp = tokenizer_path.empty() ? dir : tokenizer_path;
  std::error_code ec;
  if (!tokenizer_path.empty() || fs::exists(fs::path(dir) / "tokenizer.json", ec)) {
    HfTokenizerInfo info = load_hf_tokenizer(tp);
    if (info.tokenizer->vocab_size() > f.cfg.vocab_size)
      throw Error(tp + ": the tokenizer has " + std::to_string(info.tokenizer->vocab_size()) +
                  " tokens but the model only " + std::to_string(f.cfg.vocab_size));
    use_hf_tokenizer(out, info);
    add_stop(out.stop_ids, info.eos_id);
    if (const auto* vt = dynamic_cast<const VocabTokenizer*>(info.tokenizer.get())) add_turn_ends(*vt, out.stop_ids);
  }
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

}  // namespace

std::string resolve_builtin(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
  for (char c : name)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                c == '.');
  if (!ok) throw Error("builtin:" + name + ": a built-in model name is letters, digits, '_', '-' and '.'");
  return require_data("models/" + name, "builtin:" + name + " (a built-in model)");
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
  if (is_gguf_file(path)) return load_gguf(path, tokenizer_path, precision, in_place);
  return load_llama2c_model(path, tokenizer_path, precision, in_place);
}

std::vector<int> encode_prompt(const LoadedModel& m, std::string_view text) {
  if (!m.tokenizer) throw Error(m.name + ": no tokenizer was found for this model");
  std::vector<int> ids = m.tokenizer->encode(text, m.bos_prompt);
  if (ids.empty() && m.model && m.model->cfg.eos_id >= 0) ids.push_back(m.model->cfg.eos_id);
  return ids;
}

LoadedModel load_tokenizer(const std::string& path) {
  LoadedModel m;
  m.name = path;
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && is_gguf_file(path)) {
    const VocabData v = read_gguf_vocab(path);
    use_vocab(m, v, std::make_shared<const VocabTokenizer>(v));
  } else {
    use_hf_tokenizer(m, load_hf_tokenizer(path));
  }
  return m;
}

std::string render_chat(const LoadedModel::Chat& chat, const nlohmann::ordered_json& messages,
                        const std::string& name) {
  if (chat.template_text.empty())
    throw Error(name +
                ": the tokenizer carries no chat template (tokenizer_config.json's chat_template or GGUF's "
                "tokenizer.chat_template); use --prompt for plain text");
  ChatTemplateInput in;
  in.messages = messages;
  in.bos_token = chat.bos_token;
  in.eos_token = chat.eos_token;
  in.add_generation_prompt = true;
  return render_chat_template(chat.template_text, in);
}

std::vector<int> encode_chat(const Tokenizer& tok, const LoadedModel::Chat& chat, const std::vector<int>& special_ids,
                             std::string_view text) {
  if (chat.tokenizer_matches_specials) return tok.encode(text, false);
  std::vector<std::pair<std::string, int>> specials;  // longest text first
  for (int id : special_ids)
    if (std::string p = tok.piece(id); !p.empty()) specials.emplace_back(std::move(p), id);
  std::stable_sort(specials.begin(), specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::vector<int> out;
  size_t from = 0;
  auto flush = [&](size_t to) {
    if (to > from) {
      const std::vector<int> ids = tok.encode(text.substr(from, to - from), false);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  };
  for (size_t i = 0; i < text.size();) {
    const auto hit = std::find_if(specials.begin(), specials.end(),
                                  [&](const auto& s) { return text.compare(i, s.first.size(), s.first) == 0; });
    if (hit == specials.end()) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(hit->second);
    i += hit->first.size();
    from = i;
  }
  flush(text.size());
  return out;
}

}  // namespace ds
