#include "text/hf_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "text/gguf_tokenizer.h"
#include "text/pretokenize.h"
#include "text/vocab_data.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace ds {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
constexpr size_t kMaxTokenBytes = size_t{1} << 16;  // real tokens are at most a few hundred bytes
constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 30;
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

// The Split patterns of the byte-level files (as the JSON strings decode) and the
// hand-written pre-tokenizer (text/pretokenize.h) that cuts text the same way.
struct KnownPattern {
  const char* regex;
  const char* pre;  // VocabData::pre
};
constexpr KnownPattern kPatterns[] = {
    {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
     "llama-bpe"},
    {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
     "qwen2"},
    {R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re", "gpt-2"},
};

// ---------------------------------------------------------------- JSON access

const char* describe(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    default:
      return "a number with a fraction";
  }
}

// Messages name the file and the key: "FILE: model.merges[3]: ...".
class Doc {
 public:
  explicit Doc(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(file_ + ": " + where + (where.empty() ? "" : " ") + what);
  }
  // obj[key] when present and not null, else nullptr; obj must be an object.
  static const json* get(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const json& obj, const char* key, const std::string& where) const {
    const json* j = get(obj, key);
    if (!j) fail(where + "." + key, "is missing");
    return *j;
  }
  const json& object(const json& j, const std::string& where) const {
    if (!j.is_object()) fail(where, std::string("must be an object, got ") + describe(j));
    return j;
  }
  const json& array(const json& j, const std::string& where) const {
    if (!j.is_array()) fail(where, std::string("must be an array, got ") + describe(j));
    return j;
  }
  const std::string& str(const json& j, const std::string& where) const {
    if (!j.is_string()) fail(where, std::string("must be a string, got ") + describe(j));
    return j.get_ref<const std::string&>();
  }
  bool flag(const json& obj, const char* key, const std::string& where, bool absent) const {
    const json* j = get(obj, key);
    if (!j) return absent;
    if (!j->is_boolean())
      fail(where.empty() ? key : where + "." + key, std::string("must be true or false, got ") + describe(*j));
    return j->get<bool>();
  }
  int64_t id(const json& j, const std::string& where) const {
    if (!j.is_number_integer()) fail(where, std::string("must be an integer id, got ") + describe(j));
    if (j.is_number_unsigned() ? j.get<uint64_t>() > static_cast<uint64_t>(kMaxId)
                               : j.get<int64_t>() < 0 || j.get<int64_t>() > kMaxId)
      fail(where, "is " + j.dump() + ", outside 0.." + std::to_string(kMaxId));
    return j.get<int64_t>();
  }
  // The "type" of a component object (pre_tokenizer, normalizer, ...).
  const std::string& type(const json& j, const std::string& where) const {
    return str(need(object(j, where), "type", where), where + ".type");
  }

 private:
  std::string file_;
};

std::string read_text(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(path + ": is a folder, not a file");
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxFileBytes)
    throw Error(path + ": " + std::to_string(size) + " bytes, more than a tokenizer file can be (1 GiB)");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw Error(path + ": read error");
  return std::move(s).str();
}

json parse_json(const std::string& path) {
  const std::string text = read_text(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + shorten_json_error(e.what()));
  }
}

// ---------------------------------------------------------------- the vocabulary

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<VocabData::AddedToken> added;
  std::vector<int> special_ids;
  std::unordered_map<std::string_view, int> model_index;  // model.vocab's strings -> id
  std::unordered_map<std::string_view, int> index;        // every token's text -> id
};

void check_token(const Doc& d, const std::string& where, const std::string& t) {
  if (t.empty()) d.fail(where, "is an empty token");
  if (t.size() > kMaxTokenBytes)
    d.fail(where, "is a token of " + std::to_string(t.size()) + " bytes, more than " + std::to_string(kMaxTokenBytes));
}

// model.vocab and added_tokens into ids 0..n-1, each id once, none missing.
void read_tokens(const Doc& d, const json& model, const json* added, Vocab& v) {
  const json& vocab = d.object(d.need(model, "vocab", "model"), "model.vocab");
  if (vocab.empty()) d.fail("model.vocab", "is empty");
  std::vector<std::pair<int64_t, const std::string*>> entries;
  entries.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string where = "model.vocab[" + quoted_excerpt(it.key()) + "]";
    check_token(d, where, it.key());
    entries.emplace_back(d.id(it.value(), where), &it.key());
  }
  const size_t n_added = added ? d.array(*added, "added_tokens").size() : 0;
  int64_t max_id = 0;
  for (const auto& e : entries) max_id = std::max(max_id, e.first);
  for (size_t i = 0; i < n_added; ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    max_id = std::max(max_id, d.id(d.need(d.object((*added)[i], where), "id", where), where + ".id"));
  }
  if (static_cast<size_t>(max_id) >= entries.size() + n_added)
    d.fail("", "has ids up to " + std::to_string(max_id) + " for " + std::to_string(entries.size() + n_added) +
                   " tokens: the ids must run from 0 without gaps");
  v.tokens.resize(static_cast<size_t>(max_id) + 1);
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  std::vector<char> have(v.tokens.size(), 0);
  for (const auto& [id, text] : entries) {
    const auto i = static_cast<size_t>(id);
    if (have[i])
      d.fail("model.vocab", "gives id " + std::to_string(id) + " to both " + quoted_excerpt(v.tokens[i]) + " and " +
                                quoted_excerpt(*text));
    have[i] = 1;
    v.tokens[i] = *text;
  }
  for (const auto& [id, text] : entries) v.model_index.emplace(*text, static_cast<int>(id));  // views into model
  for (size_t i = 0; i < n_added; ++i) {
    const json& a = (*added)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const auto id = static_cast<size_t>(a["id"].get<int64_t>());
    const std::string& content = d.str(d.need(a, "content", where), where + ".content");
    check_token(d, where + ".content", content);
    if (have[id] == 1 && v.tokens[id] != content)
      d.fail(where, "has id " + std::to_string(id) + ", which model.vocab gives to " + quoted_excerpt(v.tokens[id]));
    if (have[id] == 2) d.fail(where, "has id " + std::to_string(id) + ", as an added token before it");
    if (have[id] == 0) v.tokens[id] = content;
    have[id] = 2;
    const bool special = d.flag(a, "special", where, false);
    v.types[id] = static_cast<int32_t>(special ? TokenType::Control : TokenType::UserDefined);
    if (special) v.special_ids.push_back(static_cast<int>(id));
    v.added.push_back({static_cast<int32_t>(id), d.flag(a, "lstrip", where, false), d.flag(a, "rstrip", where, false),
                       d.flag(a, "single_word", where, false)});
  }
  for (size_t i = 0; i < have.size(); ++i)
    if (!have[i]) d.fail("", "has no token with id " + std::to_string(i) + ": the ids must run from 0 without gaps");
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    auto [it, fresh] = v.index.emplace(v.tokens[i], static_cast<int>(i));
    if (!fresh)
      d.fail("", "has the token " + quoted_excerpt(v.tokens[i]) + " twice, ids " + std::to_string(it->second) +
                     " and " + std::to_string(i));
  }
  std::sort(v.special_ids.begin(), v.special_ids.end());
}

// model.merges: "a b" or ["a", "b"], each of two model.vocab tokens whose concatenation is one.
std::vector<std::pair<int32_t, int32_t>> read_merges(const Doc& d, const json& model, const Vocab& v) {
  const json* merges = Doc::get(model, "merges");
  std::vector<std::pair<int32_t, int32_t>> out;
  if (!merges) return out;
  out.reserve(d.array(*merges, "model.merges").size());
  std::string a, b;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        d.fail(where, quoted_excerpt(s) + " is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = d.str(m[0], where + "[0]");
      b = d.str(m[1], where + "[1]");
    } else {
      d.fail(where, std::string("must be a string \"a b\" or a pair [\"a\", \"b\"], got ") + describe(m));
    }
    auto ia = v.model_index.find(a), ib = v.model_index.find(b);
    if (ia == v.model_index.end())
      d.fail(where, "names " + quoted_excerpt(a) + ", which is not a token of model.vocab");
    if (ib == v.model_index.end())
      d.fail(where, "names " + quoted_excerpt(b) + ", which is not a token of model.vocab");
    if (!v.model_index.count(a + b))
      d.fail(where, "makes " + quoted_excerpt(a + b) + ", which is not a token of model.vocab");
    out.emplace_back(ia->second, ib->second);
  }
  return out;
}

// ---------------------------------------------------------------- the pipeline

enum class Family { Unknown, ByteLevel, SentencePiece };

struct Setup {
  Family family = Family::Unknown;
  std::string pre;                              // byte-level: VocabData::pre
  bool replace_space = false, prepend = false;  // normalizer Replace(" ", "▁"), Prepend("▁")
  bool metaspace = false, first_only = false, split = false;
  int post_bos = -1, post_eos = -1;  // the tokens the post_processor puts around the text
};

void read_normalizer(const Doc& d, const json& n, const std::string& where, Setup& s) {
  const std::string& type = d.type(n, where);
  if (type == "Sequence") {
    const json& list = d.array(d.need(n, "normalizers", where), where + ".normalizers");
    for (size_t i = 0; i < list.size(); ++i)
      read_normalizer(d, list[i], where + ".normalizers[" + std::to_string(i) + "]", s);
  } else if (type == "Prepend") {
    if (d.str(d.need(n, "prepend", where), where + ".prepend") != kSpaceMark)
      d.fail(where + ".prepend", "is not \"\xE2\x96\x81\": only SentencePiece's space mark is supported");
    s.prepend = true;
  } else if (type == "Replace") {
    const json& pattern = d.object(d.need(n, "pattern", where), where + ".pattern");
    const json* from = Doc::get(pattern, "String");
    if (!from || !from->is_string() || from->get_ref<const std::string&>() != " " ||
        d.str(d.need(n, "content", where), where + ".content") != kSpaceMark)
      d.fail(where, "is not Replace(\" \", \"\xE2\x96\x81\"): only SentencePiece's space replacement is supported");
    s.replace_space = true;
  } else if (type != "NFC") {  // NFC: not applied (hf_tokenizer.h)
    d.fail(where + ".type", quoted_excerpt(type) +
                                " is not supported; supported: Sequence, Prepend(\"\xE2\x96\x81\"), "
                                "Replace(\" \", \"\xE2\x96\x81\"), NFC");
  }
}

void read_byte_level(const Doc& d, const json& p, const std::string& where, bool regex) {
  if (d.flag(p, "add_prefix_space", where, false))
    d.fail(where + ".add_prefix_space", "is true: a space put in front of the text is not supported");
  if (d.flag(p, "use_regex", where, true) != regex)
    d.fail(where + ".use_regex", regex ? "is false: a lone ByteLevel pre-tokenizer must split with GPT-2's pattern"
                                       : "is true: GPT-2's pattern after another split is not supported");
}

std::string read_split(const Doc& d, const json& p, const std::string& where) {
  const json& pattern = d.object(d.need(p, "pattern", where), where + ".pattern");
  const json* regex = Doc::get(pattern, "Regex");
  if (!regex) d.fail(where + ".pattern", "is not {\"Regex\": ...}: only the known regular expressions are supported");
  const std::string& r = d.str(*regex, where + ".pattern.Regex");
  if (d.str(d.need(p, "behavior", where), where + ".behavior") != "Isolated" || d.flag(p, "invert", where, false))
    d.fail(where, "is not behavior \"Isolated\" with invert false: only those are supported");
  for (const KnownPattern& k : kPatterns)
    if (r == k.regex) return k.pre;
  d.fail(where + ".pattern.Regex", quoted_excerpt(r, 200) +
                                       " is not a known pattern; supported: Llama 3's, Qwen2's and GPT-2's "
                                       "(text/pretokenize.h has them written by hand)");
}

void read_metaspace(const Doc& d, const json& p, const std::string& where, Setup& s) {
  const json* rep = Doc::get(p, "replacement");
  if (rep && d.str(*rep, where + ".replacement") != kSpaceMark)
    d.fail(where + ".replacement", "is not \"\xE2\x96\x81\": only SentencePiece's space mark is supported");
  std::string scheme = d.flag(p, "add_prefix_space", where, true) ? "always" : "never";  // older files
  if (const json* ps = Doc::get(p, "prepend_scheme")) scheme = d.str(*ps, where + ".prepend_scheme");
  if (scheme != "always" && scheme != "first" && scheme != "never")
    d.fail(where + ".prepend_scheme", quoted_excerpt(scheme) + " is not one of first, always, never");
  s.metaspace = true;
  s.prepend = scheme != "never";
  s.first_only = scheme == "first";
  s.split = d.flag(p, "split", where, true);
}

void read_pre_tokenizer(const Doc& d, const json& p, Setup& s) {
  const std::string where = "pre_tokenizer";
  const std::string& type = d.type(p, where);
  if (type == "Metaspace") {
    read_metaspace(d, p, where, s);
    s.family = Family::SentencePiece;
    return;
  }
  s.family = Family::ByteLevel;
  if (type == "ByteLevel") {
    read_byte_level(d, p, where, true);
    s.pre = "gpt-2";
    return;
  }
  const json* list =
      type == "Sequence" ? &d.array(d.need(p, "pretokenizers", where), where + ".pretokenizers") : nullptr;
  if (!list)
    d.fail(where + ".type", quoted_excerpt(type) +
                                " is not supported; supported: Sequence[Split, ByteLevel], "
                                "Sequence[Digits, ByteLevel], ByteLevel, Metaspace");
  const std::string w0 = where + ".pretokenizers[0]", w1 = where + ".pretokenizers[1]";
  const std::string t0 = list->size() == 2 ? d.type((*list)[0], w0) : "",
                    t1 = list->size() == 2 ? d.type((*list)[1], w1) : "";
  if (t0 == "Split" && t1 == "ByteLevel") {
    s.pre = read_split(d, (*list)[0], w0);
    read_byte_level(d, (*list)[1], w1, false);
  } else if (t0 == "Digits" && t1 == "ByteLevel" && d.flag((*list)[0], "individual_digits", w0, false)) {
    s.pre = "smollm";
    read_byte_level(d, (*list)[1], w1, true);
  } else {
    d.fail(where + ".pretokenizers",
           "is not [Split, ByteLevel] or [Digits(individual_digits), ByteLevel]: "
           "only these sequences are supported");
  }
}

// The id a TemplateProcessing item {"SpecialToken": {"id": NAME}} puts in.
int template_token(const Doc& d, const json& post, const json& item, const std::string& where, const Vocab& v) {
  const std::string& name = d.str(d.need(d.object(item, where), "id", where), where + ".id");
  const json* specials = Doc::get(post, "special_tokens");
  const json* entry = specials && specials->is_object() ? Doc::get(*specials, name.c_str()) : nullptr;
  const json* ids = entry && entry->is_object() ? Doc::get(*entry, "ids") : nullptr;
  if (ids && ids->is_array() && ids->size() == 1) {
    const int64_t id = d.id((*ids)[0], "post_processor.special_tokens[" + quoted_excerpt(name) + "].ids[0]");
    if (id >= static_cast<int64_t>(v.tokens.size()))
      d.fail("post_processor.special_tokens[" + quoted_excerpt(name) + "]", "has an id outside the vocabulary");
    return static_cast<int>(id);
  }
  auto it = v.index.find(name);
  if (it == v.index.end()) d.fail(where + ".id", quoted_excerpt(name) + " is not a token");
  return it->second;
}

void read_post_processor(const Doc& d, const json& p, const std::string& where, const Vocab& v, Setup& s) {
  const std::string& type = d.type(p, where);
  if (type == "Sequence") {
    const json& list = d.array(d.need(p, "processors", where), where + ".processors");
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(d, list[i], where + ".processors[" + std::to_string(i) + "]", v, s);
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type != "TemplateProcessing")
    d.fail(where + ".type", quoted_excerpt(type) +
                                " is not supported; supported: TemplateProcessing, ByteLevel, "
                                "Sequence");
  const json& single = d.array(d.need(p, "single", where), where + ".single");
  bool after = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string w = where + ".single[" + std::to_string(i) + "]";
    const json& item = d.object(single[i], w);
    if (Doc::get(item, "Sequence")) {
      after = true;
      continue;
    }
    const int id = template_token(d, p, d.need(item, "SpecialToken", w), w + ".SpecialToken", v);
    int& slot = after ? s.post_eos : s.post_bos;
    if (slot >= 0)
      d.fail(w, std::string("is a second token ") + (after ? "after" : "before") + " the text: not supported");
    slot = id;
  }
}

void check_decoder(const Doc& d, const json& p, const std::string& where) {
  const std::string& type = d.type(p, where);
  if (type == "Sequence") {
    const json& list = d.array(d.need(p, "decoders", where), where + ".decoders");
    for (size_t i = 0; i < list.size(); ++i) check_decoder(d, list[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  for (const char* known : {"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"})
    if (type == known) return;
  d.fail(where + ".type", quoted_excerpt(type) +
                              " is not supported; supported: ByteLevel, Metaspace, Sequence of "
                              "Replace, ByteFallback, Fuse, Strip");
}

// ---------------------------------------------------------------- tokenizer_config.json

struct Config {
  std::optional<bool> add_bos, add_eos;
  std::optional<std::string> bos, eos;  // set when the key is there; "" for null
  std::string chat_template;
};

std::optional<std::string> config_token(const Doc& d, const json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end()) return std::nullopt;
  if (it->is_null()) return std::string();
  if (it->is_object()) return d.str(d.need(*it, "content", key), std::string(key) + ".content");
  return d.str(*it, key);
}

Config read_config(const std::string& path) {
  Config cfg;
  const Doc d(path);
  const json c = parse_json(path);
  d.object(c, "the file");
  for (const auto& [key, slot] : {std::pair{"add_bos_token", &cfg.add_bos}, std::pair{"add_eos_token", &cfg.add_eos}})
    if (Doc::get(c, key)) *slot = d.flag(c, key, "", false);
  cfg.bos = config_token(d, c, "bos_token");
  cfg.eos = config_token(d, c, "eos_token");
  const json* t = Doc::get(c, "chat_template");
  if (t && t->is_array()) {
    for (size_t i = 0; i < t->size(); ++i) {
      const std::string w = "chat_template[" + std::to_string(i) + "]";
      const json& e = d.object((*t)[i], w);
      if (d.str(d.need(e, "name", w), w + ".name") == "default")
        cfg.chat_template = d.str(d.need(e, "template", w), w + ".template");
    }
  } else if (t) {
    cfg.chat_template = d.str(*t, "chat_template");
  }
  return cfg;
}

// ---------------------------------------------------------------- putting it together

int token_id(const Doc& d, const Vocab& v, const std::string& text, const char* key) {
  auto it = v.index.find(text);
  if (it == v.index.end()) d.fail(key, quoted_excerpt(text) + " is not a token of tokenizer.json");
  return it->second;
}

Setup read_pipeline(const Doc& d, const json& root, const Vocab& v) {
  Setup s;
  if (const json* p = Doc::get(root, "pre_tokenizer")) read_pre_tokenizer(d, *p, s);
  if (const json* n = Doc::get(root, "normalizer")) read_normalizer(d, *n, "normalizer", s);
  if (const json* p = Doc::get(root, "post_processor")) read_post_processor(d, *p, "post_processor", v, s);
  if (const json* p = Doc::get(root, "decoder")) check_decoder(d, *p, "decoder");
  if (s.family == Family::Unknown && s.replace_space) s.family = Family::SentencePiece;
  if (s.family == Family::ByteLevel && (s.prepend || s.replace_space))
    d.fail("normalizer", "puts SentencePiece's \"\xE2\x96\x81\" into text that a byte-level pre-tokenizer splits");
  if (s.metaspace && s.replace_space)
    d.fail("normalizer", "replaces spaces as the Metaspace pre-tokenizer does too: not supported");
  if (s.family == Family::Unknown)
    d.fail("",
           "is neither byte-level BPE (a ByteLevel pre-tokenizer) nor SentencePiece-style BPE (a Metaspace "
           "pre-tokenizer, or a normalizer replacing \" \" by \"\xE2\x96\x81\")");
  return s;
}

void read_model(const Doc& d, const json& model, Setup& s, VocabData& out) {
  const std::string& type = d.type(model, "model");
  if (type != "BPE") d.fail("model.type", quoted_excerpt(type) + " is not supported; supported: BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* j = Doc::get(model, key);
    if (j && !d.str(*j, std::string("model.") + key).empty())
      d.fail(std::string("model.") + key, "is not empty: not supported");
  }
  if (const json* j = Doc::get(model, "dropout"); j && (!j->is_number() || j->get<double>() != 0.0))
    d.fail("model.dropout", "is " + j->dump() + ": BPE dropout (random merges) is not supported");
  out.hf.ignore_merges = d.flag(model, "ignore_merges", "model", false) ? 1 : 0;
  out.hf.byte_fallback = d.flag(model, "byte_fallback", "model", false);
  if (s.family == Family::ByteLevel && out.hf.byte_fallback)
    d.fail("model.byte_fallback", "is true in a byte-level BPE: not supported");
}

VocabData make_vocab_data(const Doc& d, const json& root, Vocab& v, Setup& s, const Config* cfg) {
  VocabData out;
  const json& model = d.object(d.need(root, "model", "the file"), "model");
  read_model(d, model, s, out);
  out.model = s.family == Family::ByteLevel ? "gpt2" : "llama";
  out.pre = s.pre;
  out.hf.merge_ids = read_merges(d, model, v);
  if (out.hf.merge_ids.empty()) d.fail("model.merges", "is missing or empty");
  if (const json* unk = Doc::get(model, "unk_token")) {
    out.unk_id = token_id(d, v, d.str(*unk, "model.unk_token"), "model.unk_token");
    v.types[static_cast<size_t>(out.unk_id)] = static_cast<int32_t>(TokenType::Unknown);
  }
  if (s.family == Family::SentencePiece && out.hf.byte_fallback)
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const std::string& t = v.tokens[i];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && isxdigit(static_cast<unsigned char>(t[3])) &&
          isxdigit(static_cast<unsigned char>(t[4])))
        v.types[i] = static_cast<int32_t>(TokenType::Byte);
    }
  out.add_space_prefix = s.prepend ? 1 : 0;
  out.hf.metaspace = s.metaspace;
  out.hf.first_only = s.first_only;
  out.hf.split = s.split;
  out.add_bos = cfg && cfg->add_bos ? *cfg->add_bos : s.post_bos >= 0;
  out.add_eos = cfg && cfg->add_eos ? *cfg->add_eos : s.post_eos >= 0;
  out.hf.added = v.added;
  return out;
}

struct Paths {
  std::string json, config, jinja;  // config and jinja: "" when absent
};

Paths find_files(const std::string& path) {
  std::error_code ec;
  Paths p;
  fs::path dir;
  if (fs::is_directory(path, ec)) {
    dir = path;
    p.json = (dir / "tokenizer.json").string();
    if (!fs::is_regular_file(p.json, ec)) throw Error(path + ": no tokenizer.json in this folder");
  } else if (fs::exists(path, ec)) {
    p.json = path;
    if (fs::path(path).filename() == "tokenizer.json") dir = fs::path(path).parent_path();
  } else {
    throw Error(path + ": no such file or folder");
  }
  if (!dir.empty() && fs::is_regular_file(dir / "tokenizer_config.json", ec))
    p.config = (dir / "tokenizer_config.json").string();
  if (!dir.empty() && fs::is_regular_file(dir / "chat_template.jinja", ec))
    p.jinja = (dir / "chat_template.jinja").string();
  return p;
}

// The bos or eos of info: the config's token when it names one, else the post_processor's.
void pick_special(const Doc& cd, const Vocab& v, const std::optional<std::string>& named, int post, const char* key,
                  std::string& text, int& id) {
  if (named && !named->empty()) {
    text = *named;
    id = token_id(cd, v, text, key);
  } else if (!named && post >= 0) {
    id = post;
    text = v.tokens[static_cast<size_t>(post)];
  }
}

}  // namespace

HfTokenizerInfo load_hf_tokenizer(const std::string& path) {
  const Paths files = find_files(path);
  const Doc d(files.json);
  const json root = parse_json(files.json);
  d.object(root, "the file");
  Vocab v;
  read_tokens(d, d.object(d.need(root, "model", "the file"), "model"), Doc::get(root, "added_tokens"), v);
  Setup s = read_pipeline(d, root, v);
  std::optional<Config> cfg;
  if (!files.config.empty()) cfg = read_config(files.config);
  VocabData data = make_vocab_data(d, root, v, s, cfg ? &*cfg : nullptr);
  HfTokenizerInfo info;
  const Doc cd(files.config.empty() ? files.json : files.config);
  pick_special(cd, v, cfg ? cfg->bos : std::nullopt, s.post_bos, "bos_token", info.bos_token, info.bos_id);
  pick_special(cd, v, cfg ? cfg->eos : std::nullopt, s.post_eos, "eos_token", info.eos_token, info.eos_id);
  info.add_bos = data.add_bos == 1;
  // The ids added around the text: the config's tokens when it says to add them, else the post_processor's.
  data.bos_id = cfg && cfg->add_bos ? info.bos_id : (s.post_bos >= 0 ? s.post_bos : info.bos_id);
  data.eos_id = cfg && cfg->add_eos ? info.eos_id : (s.post_eos >= 0 ? s.post_eos : info.eos_id);
  if (data.add_bos == 1 && data.bos_id < 0) cd.fail("add_bos_token", "is true but there is no bos_token");
  if (data.add_eos == 1 && data.eos_id < 0) cd.fail("add_eos_token", "is true but there is no eos_token");
  data.tokens = std::move(v.tokens);
  data.types = std::move(v.types);
  try {
    info.tokenizer = make_vocab_tokenizer(data);
  } catch (const Error& e) {
    throw Error(files.json + ": " + e.what());
  }
  info.special_ids = std::move(v.special_ids);
  info.kind = s.family == Family::ByteLevel ? "byte-level BPE" : "SentencePiece BPE";
  if (cfg) info.chat_template = cfg->chat_template;
  if (info.chat_template.empty() && !files.jinja.empty()) info.chat_template = read_text(files.jinja);
  return info;
}

bool is_hf_tokenizer(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
  if (!fs::is_regular_file(file, ec) || fs::path(file).extension() != ".json") return false;
  json root;
  try {
    // The big parts are skipped: only the pipeline's keys matter here.
    root = json::parse(read_text(file), [](int depth, json::parse_event_t event, json& parsed) {
      return !(depth == 1 && event == json::parse_event_t::key && (parsed == "model" || parsed == "added_tokens"));
    });
  } catch (const std::exception&) {
    return true;
  }
  if (!root.is_object()) return true;
  const json* pre = Doc::get(root, "pre_tokenizer");
  const json* type = pre && pre->is_object() ? Doc::get(*pre, "type") : nullptr;
  const bool gpt2 = type && *type == "ByteLevel" && !Doc::get(root, "normalizer");
  return !gpt2;
}

}  // namespace ds
