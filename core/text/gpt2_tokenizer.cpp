#include "text/gpt2_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "text/pretokenize.h"
#include "text/unicode.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace ds {

namespace {

constexpr int kMaxId = (1 << 24) - 1;
constexpr const char* kEndOfText = "<|endoftext|>";

// Character classes, UTF-8 and GPT-2's byte alphabet (text/unicode.h); the
// pre-tokenizer split is text/pretokenize.h's PreTokenizer::Gpt2.
using unicode::append_utf8;
using unicode::valid_utf8;

// ---------------------------------------------------------------- files and JSON

std::string read_file(const std::string& path, const char* what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw Error(path + ": not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open " + what + " (" + std::strerror(errno) + ")");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw Error(path + ": read error");
  return std::move(s).str();
}

struct Where {
  const std::string* file;
  size_t line;  // 1-based; 0 = no line
  std::string str() const { return *file + (line ? ":" + std::to_string(line) : std::string()) + ": "; }
};

// An input iterator over a buffer that counts the newlines nlohmann's lexer has
// consumed, so that SAX events know their line.
struct LineCounter {
  size_t newlines = 0;
  char last = 0;
};

class LineIter {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  LineIter() = default;
  LineIter(const char* p, LineCounter* c) : p_(p), c_(c) {}
  reference operator*() const { return *p_; }
  LineIter& operator++() {
    c_->last = *p_;
    if (*p_ == '\n') ++c_->newlines;
    ++p_;
    return *this;
  }
  LineIter operator++(int) {
    LineIter t = *this;
    ++*this;
    return t;
  }
  bool operator==(const LineIter& o) const { return p_ == o.p_; }

 private:
  const char* p_ = nullptr;
  LineCounter* c_ = nullptr;
};

// A JSON value as seen by JsonWalker's callbacks.
struct JsonScalar {
  enum Kind { kNull, kBool, kInt, kFloat, kString } kind = kNull;
  int64_t i = 0;
  bool out_of_range = false;  // an integer that does not fit int64
  std::string s;
  const char* describe() const {
    switch (kind) {
      case kNull:
        return "null";
      case kBool:
        return "a boolean";
      case kInt:
        return "an integer";
      case kFloat:
        return "a number with a fraction";
      case kString:
        return "a string";
    }
    return "?";
  }
};

// nlohmann SAX handler keeping the path of the current value (object keys, array
// indices as decimal strings) and its line; subclasses see the events they need.
class JsonWalker {
 public:
  using json = nlohmann::json;
  explicit JsonWalker(const std::string& file) : file_(file) {}
  virtual ~JsonWalker() = default;

  void run(const std::string& text) {
    counter_ = LineCounter{};
    LineIter first(text.data(), &counter_), last(text.data() + text.size(), &counter_);
    json::sax_parse(first, last, this);
  }

  // SAX interface.
  bool null() { return scalar(JsonScalar{}); }
  bool boolean(bool b) {
    JsonScalar v;
    v.kind = JsonScalar::kBool;
    v.i = b;
    return scalar(std::move(v));
  }
  bool number_integer(json::number_integer_t x) {
    JsonScalar v;
    v.kind = JsonScalar::kInt;
    v.i = x;
    return scalar(std::move(v), true);
  }
  bool number_unsigned(json::number_unsigned_t x) {
    JsonScalar v;
    v.kind = JsonScalar::kInt;
    v.out_of_range = x > static_cast<uint64_t>(INT64_MAX);
    v.i = v.out_of_range ? INT64_MAX : static_cast<int64_t>(x);
    return scalar(std::move(v), true);
  }
  bool number_float(json::number_float_t, const std::string&) {
    JsonScalar v;
    v.kind = JsonScalar::kFloat;
    return scalar(std::move(v), true);
  }
  bool string(std::string& s) {
    JsonScalar v;
    v.kind = JsonScalar::kString;
    v.s = std::move(s);
    return scalar(std::move(v));
  }
  bool binary(json::binary_t&) { return scalar(JsonScalar{}); }
  bool start_object(size_t) {
    on_container(true);
    path_.emplace_back();
    is_array_.push_back(false);
    return true;
  }
  bool key(std::string& k) {
    path_.back() = std::move(k);
    key_line_ = line();
    return true;
  }
  bool end_object() {
    path_.pop_back();
    is_array_.pop_back();
    on_end(false);
    advance();
    return true;
  }
  bool start_array(size_t) {
    on_container(false);
    path_.emplace_back("0");
    is_array_.push_back(true);
    index_.push_back(0);
    return true;
  }
  bool end_array() {
    path_.pop_back();
    is_array_.pop_back();
    index_.pop_back();
    on_end(true);
    advance();
    return true;
  }
  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& ex) {
    // ex.what() is "[json.exception.parse_error.101] parse error at line L, column C: ...".
    std::string msg = ex.what();
    if (auto c = msg.find("column "); c != std::string::npos) {
      if (auto p = msg.find(": ", c); p != std::string::npos) msg = msg.substr(p + 2);
    } else if (auto p = msg.find("] "); p != std::string::npos) {
      msg = msg.substr(p + 2);
    }
    (void)last_token;
    throw Error(file_ + ":" + std::to_string(line()) + ": invalid JSON at byte " + std::to_string(position) + ": " +
                shorten_json_error(msg));
  }

 protected:
  // The current line (1-based); for numbers, the lexer has read one character past.
  size_t line(bool number = false) const {
    size_t l = counter_.newlines + 1;
    if (number && counter_.last == '\n' && l > 1) --l;
    return l;
  }
  Where at(size_t line) const { return Where{&file_, line}; }
  const std::vector<std::string>& path() const { return path_; }
  size_t key_line() const { return key_line_; }
  bool path_is(std::initializer_list<const char*> p) const {
    if (p.size() != path_.size()) return false;
    size_t i = 0;
    for (const char* s : p)
      if (path_[i++] != s) return false;
    return true;
  }
  std::string path_string() const {
    std::string s;
    for (size_t i = 0; i < path_.size(); ++i) {
      if (is_array_[i])
        s += "[" + path_[i] + "]";
      else
        s += (i ? "." : "") + path_[i];
    }
    return s.empty() ? "the top level" : s;
  }

  // A scalar at path(); a container (object or array) starting at path(); the end of
  // a container (path() is the container's own path again).
  virtual void on_scalar(const JsonScalar& v, size_t line) = 0;
  virtual void on_start(bool object, size_t line) = 0;
  virtual void on_end(bool array) { (void)array; }

  const std::string& file_;

 private:
  bool scalar(JsonScalar v, bool number = false) {
    on_scalar(v, line(number));
    advance();
    return true;
  }
  void on_container(bool object) { on_start(object, line()); }
  // The next element of the enclosing array.
  void advance() {
    if (!is_array_.empty() && is_array_.back()) path_.back() = std::to_string(++index_.back());
  }
  LineCounter counter_;
  std::vector<std::string> path_;
  std::vector<bool> is_array_;
  std::vector<size_t> index_;
  size_t key_line_ = 0;
};

struct VocabEntry {
  std::string str;
  int64_t id;
  size_t line;
};
struct MergeEntry {
  std::string a, b;
  size_t line;
};
struct AddedEntry {
  std::string content;
  int64_t id;
  size_t line;
};

// vocab.json: one object {"string": id, ...}.
class VocabJsonReader : public JsonWalker {
 public:
  using JsonWalker::JsonWalker;
  std::vector<VocabEntry> entries;

 protected:
  void on_scalar(const JsonScalar& v, size_t line) override {
    if (path().empty()) throw Error(at(line).str() + "vocab.json must hold a JSON object, got " + v.describe());
    if (path().size() != 1) return;
    if (v.kind != JsonScalar::kInt)
      throw Error(at(key_line()).str() + "the id of token " + quoted_excerpt(path()[0]) + " must be an integer, got " +
                  v.describe());
    entries.push_back({path()[0], v.i, key_line()});
  }
  void on_start(bool object, size_t line) override {
    if (path().empty() && !object) throw Error(at(line).str() + "vocab.json must hold a JSON object, got an array");
    if (path().size() == 1)
      throw Error(at(key_line()).str() + "the id of token " + quoted_excerpt(path()[0]) + " must be an integer, got " +
                  (object ? "an object" : "an array"));
  }
};

// tokenizer.json (Hugging Face): model {type, vocab, merges}, added_tokens, pre_tokenizer.
class TokenizerJsonReader : public JsonWalker {
 public:
  using JsonWalker::JsonWalker;
  std::vector<VocabEntry> vocab;
  std::vector<MergeEntry> merges;
  std::vector<AddedEntry> added;
  bool have_model = false, have_vocab = false, have_merges = false;

 protected:
  void on_scalar(const JsonScalar& v, size_t line) override {
    const auto& p = path();
    const size_t d = p.size();
    if (d == 0) throw Error(at(line).str() + "tokenizer.json must hold a JSON object, got " + v.describe());
    if (d == 1 && p[0] == "model") throw Error(at(line).str() + "\"model\" must be an object, got " + v.describe());
    if (d == 2 && p[0] == "model") {
      if (p[1] == "type") {
        if (v.kind != JsonScalar::kString || v.s != "BPE")
          throw Error(at(line).str() + "model.type is " +
                      (v.kind == JsonScalar::kString ? quoted_excerpt(v.s) : v.describe()) +
                      ": only a \"BPE\" model is supported");
      } else if (p[1] == "vocab" || p[1] == "merges") {
        throw Error(at(line).str() + "model." + p[1] + " must be " + (p[1] == "vocab" ? "an object" : "an array") +
                    ", got " + v.describe());
      }
      return;
    }
    if (d == 3 && p[0] == "model" && p[1] == "vocab") {
      if (v.kind != JsonScalar::kInt)
        throw Error(at(key_line()).str() + "the id of token " + quoted_excerpt(p[2]) + " must be an integer, got " +
                    v.describe());
      vocab.push_back({p[2], v.i, key_line()});
      return;
    }
    if (d == 3 && p[0] == "model" && p[1] == "merges") {
      if (v.kind != JsonScalar::kString)
        throw Error(at(line).str() + path_string() + " must be a string \"a b\" or a pair [\"a\", \"b\"], got " +
                    v.describe());
      const size_t sp = v.s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == v.s.size() || v.s.find(' ', sp + 1) != std::string::npos)
        throw Error(at(line).str() + path_string() + " " + quoted_excerpt(v.s) +
                    " is not two symbols separated by one space");
      merges.push_back({v.s.substr(0, sp), v.s.substr(sp + 1), line});
      return;
    }
    if (d == 4 && p[0] == "model" && p[1] == "merges") {
      if (v.kind != JsonScalar::kString || v.s.empty())
        throw Error(at(line).str() + path_string() + " must be a non-empty string, got " +
                    (v.kind == JsonScalar::kString ? "\"\"" : v.describe()));
      pair_.push_back(v.s);
      pair_line_ = line;
      return;
    }
    if (d == 1 && p[0] == "added_tokens" && v.kind != JsonScalar::kNull)
      throw Error(at(line).str() + "added_tokens must be an array, got " + v.describe());
    if (d == 2 && p[0] == "added_tokens")
      throw Error(at(line).str() + path_string() + " must be an object, got " + v.describe());
    if (d == 3 && p[0] == "added_tokens") {
      if (p[2] == "id") {
        if (v.kind != JsonScalar::kInt)
          throw Error(at(line).str() + path_string() + " must be an integer, got " + v.describe());
        cur_.id = v.i;
        has_id_ = true;
      } else if (p[2] == "content") {
        if (v.kind != JsonScalar::kString)
          throw Error(at(line).str() + path_string() + " must be a string, got " + v.describe());
        cur_.content = v.s;
        has_content_ = true;
      }
      return;
    }
    if (d == 1 && p[0] == "pre_tokenizer" && v.kind != JsonScalar::kNull)
      throw Error(at(line).str() + "pre_tokenizer must be an object or null, got " + v.describe());
    if (d == 2 && p[0] == "pre_tokenizer" && p[1] == "type") {
      if (v.kind != JsonScalar::kString || v.s != "ByteLevel")
        throw Error(at(line).str() + "pre_tokenizer.type is " +
                    (v.kind == JsonScalar::kString ? quoted_excerpt(v.s) : v.describe()) +
                    ": only GPT-2's \"ByteLevel\" pre-tokenizer is supported");
    }
  }

  void on_start(bool object, size_t line) override {
    const auto& p = path();
    const size_t d = p.size();
    if (d == 0 && !object) throw Error(at(line).str() + "tokenizer.json must hold a JSON object, got an array");
    if (d == 1 && p[0] == "model") {
      if (!object) throw Error(at(line).str() + "\"model\" must be an object, got an array");
      have_model = true;
    }
    if (d == 2 && p[0] == "model" && p[1] == "vocab") {
      if (!object) throw Error(at(line).str() + "model.vocab must be an object, got an array");
      have_vocab = true;
    }
    if (d == 2 && p[0] == "model" && p[1] == "merges") {
      if (object) throw Error(at(line).str() + "model.merges must be an array, got an object");
      have_merges = true;
    }
    if (d == 2 && p[0] == "model" && p[1] == "type") throw Error(at(line).str() + "model.type must be a string");
    if (d == 3 && p[0] == "model" && p[1] == "vocab")
      throw Error(at(key_line()).str() + "the id of token " + quoted_excerpt(p[2]) + " must be an integer, got " +
                  (object ? "an object" : "an array"));
    if (d == 3 && p[0] == "model" && p[1] == "merges") {
      if (object)
        throw Error(at(line).str() + path_string() +
                    " must be a string \"a b\" or a pair [\"a\", \"b\"], got an object");
      pair_.clear();
      pair_line_ = line;
    }
    if (d == 4 && p[0] == "model" && p[1] == "merges")
      throw Error(at(line).str() + path_string() + " must be a string, got " + (object ? "an object" : "an array"));
    if (d == 1 && p[0] == "added_tokens" && object)
      throw Error(at(line).str() + "added_tokens must be an array, got an object");
    if (d == 2 && p[0] == "added_tokens") {
      if (!object) throw Error(at(line).str() + path_string() + " must be an object, got an array");
      cur_ = AddedEntry{{}, -1, line};
      has_id_ = has_content_ = false;
    }
    if (d == 3 && p[0] == "added_tokens" && (p[2] == "id" || p[2] == "content"))
      throw Error(at(line).str() + path_string() + " must be " + (p[2] == "id" ? "an integer" : "a string"));
    if (d == 1 && p[0] == "pre_tokenizer" && !object)
      throw Error(at(line).str() + "pre_tokenizer must be an object or null, got an array");
    if (d == 2 && p[0] == "pre_tokenizer" && p[1] == "type")
      throw Error(at(line).str() + "pre_tokenizer.type must be a string");
  }

  void on_end(bool array) override {
    const auto& p = path();
    const size_t d = p.size();
    if (array && d == 3 && p[0] == "model" && p[1] == "merges") {
      if (pair_.size() != 2)
        throw Error(at(pair_line_).str() + path_string() + " must be a pair [\"a\", \"b\"], got " +
                    std::to_string(pair_.size()) + " elements");
      merges.push_back({pair_[0], pair_[1], pair_line_});
    }
    if (!array && d == 2 && p[0] == "added_tokens") {
      if (!has_id_ || !has_content_)
        throw Error(at(cur_.line).str() + path_string() + " needs an \"id\" and a \"content\"");
      added.push_back(cur_);
    }
  }

 private:
  std::vector<std::string> pair_;
  size_t pair_line_ = 0;
  AddedEntry cur_;
  bool has_id_ = false, has_content_ = false;
};

std::vector<MergeEntry> read_merges_txt(const std::string& path, const std::string& text) {
  std::vector<MergeEntry> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const Where w{&path, line_no};
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t bad;
    if (!valid_utf8(line, &bad)) throw Error(w.str() + "not UTF-8 (byte " + std::to_string(bad + 1) + " of the line)");
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      throw Error(w.str() + "expected two symbols separated by one space, got " + quoted_excerpt(line));
    merges.push_back({std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)), line_no});
  }
  return merges;
}

}  // namespace

// ---------------------------------------------------------------- GPT2Tokenizer

struct GPT2Tokenizer::Cache {
  std::mutex mutex;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<int>, Hash, std::equal_to<>> map;
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxKeyBytes = 256;  // longer pre-tokens are not cached
};

GPT2Tokenizer::GPT2Tokenizer() : cache_(std::make_unique<Cache>()) {}
GPT2Tokenizer::GPT2Tokenizer(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer& GPT2Tokenizer::operator=(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer::~GPT2Tokenizer() = default;

std::string GPT2Tokenizer::byte_to_unicode(unsigned char b) {
  std::string s;
  append_utf8(s, unicode::byte_to_codepoint(b));
  return s;
}

// Shared by both loaders: checks and indexes the vocabulary, added tokens and merges.
// vocab_file names the file of the vocab entries (and added tokens), merges_file that
// of the merges.
static void build_tokenizer(const std::string& vocab_file, std::vector<VocabEntry> vocab,
                            const std::string& merges_file, const std::vector<MergeEntry>& merges,
                            const std::vector<AddedEntry>& added, std::vector<std::string>& pieces,
                            std::vector<std::string>& strings, std::unordered_map<std::string, int>& index,
                            std::unordered_map<uint64_t, std::pair<int, int>>& merge_rank, int* byte_id, int& eot_id) {
  if (vocab.empty()) throw Error(vocab_file + ": the vocabulary is empty");
  int64_t max_id = -1;
  for (const VocabEntry& e : vocab) {
    if (e.id < 0 || e.id > kMaxId)
      throw Error(Where{&vocab_file, e.line}.str() + "token " + quoted_excerpt(e.str) + " has id " +
                  std::to_string(e.id) + ", outside 0.." + std::to_string(kMaxId));
    max_id = std::max(max_id, e.id);
  }
  for (const AddedEntry& a : added) {
    if (a.id < 0 || a.id > kMaxId)
      throw Error(Where{&vocab_file, a.line}.str() + "added token " + quoted_excerpt(a.content) + " has id " +
                  std::to_string(a.id) + ", outside 0.." + std::to_string(kMaxId));
    max_id = std::max(max_id, a.id);
  }
  const size_t n = static_cast<size_t>(max_id) + 1;
  pieces.assign(n, std::string());
  strings.assign(n, std::string());
  std::vector<size_t> line_of(n, 0);
  index.clear();
  index.reserve(vocab.size() + added.size());
  std::string bytes;
  for (VocabEntry& e : vocab) {
    const auto id = static_cast<size_t>(e.id);
    const Where w{&vocab_file, e.line};
    if (line_of[id])
      throw Error(w.str() + "duplicate id " + std::to_string(id) + ": " + quoted_excerpt(e.str) + " and " +
                  quoted_excerpt(strings[id]) + " (line " + std::to_string(line_of[id]) + ")");
    if (auto [it, fresh] = index.emplace(e.str, static_cast<int>(id)); !fresh)
      throw Error(w.str() + "duplicate token " + quoted_excerpt(e.str) + " (ids " + std::to_string(it->second) +
                  " and " + std::to_string(id) + ")");
    line_of[id] = e.line;
    pieces[id] = unicode::alphabet_to_bytes(e.str, bytes) ? bytes : e.str;
    strings[id] = std::move(e.str);
  }
  for (const AddedEntry& a : added) {
    const auto id = static_cast<size_t>(a.id);
    const Where w{&vocab_file, a.line};
    if (line_of[id]) {
      if (strings[id] != a.content)
        throw Error(w.str() + "added token " + quoted_excerpt(a.content) + " has id " + std::to_string(id) +
                    ", which is the vocabulary's " + quoted_excerpt(strings[id]));
      continue;
    }
    if (auto [it, fresh] = index.emplace(a.content, static_cast<int>(id)); !fresh)
      throw Error(w.str() + "added token " + quoted_excerpt(a.content) + " has id " + std::to_string(id) +
                  " but is already id " + std::to_string(it->second));
    line_of[id] = a.line;
    pieces[id] = a.content;  // added tokens are plain text
    strings[id] = a.content;
  }
  for (unsigned b = 0; b < 256; ++b) {
    auto it = index.find(GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b)));
    if (it == index.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error(vocab_file + ": the vocabulary lacks the symbol \"" +
                  GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b)) + "\" of byte " + hex +
                  " (not a GPT-2 byte-level BPE vocabulary?)");
    }
    byte_id[b] = it->second;
  }
  merge_rank.clear();
  merge_rank.reserve(merges.size());
  std::string cat;
  int rank = 0;
  for (const MergeEntry& m : merges) {
    const Where w{&merges_file, m.line};
    auto a = index.find(m.a);
    if (a == index.end())
      throw Error(w.str() + "merge " + quoted_excerpt(m.a + " " + m.b) + ": " + quoted_excerpt(m.a) +
                  " is not in the vocabulary");
    auto b = index.find(m.b);
    if (b == index.end())
      throw Error(w.str() + "merge " + quoted_excerpt(m.a + " " + m.b) + ": " + quoted_excerpt(m.b) +
                  " is not in the vocabulary");
    cat = m.a + m.b;
    auto ab = index.find(cat);
    if (ab == index.end())
      throw Error(w.str() + "merge " + quoted_excerpt(m.a + " " + m.b) + ": the result " + quoted_excerpt(cat) +
                  " is not in the vocabulary");
    const uint64_t key = static_cast<uint64_t>(a->second) << 32 | static_cast<uint32_t>(b->second);
    merge_rank.emplace(key, std::make_pair(rank++, ab->second));  // the first of duplicates wins
  }
  auto eot = index.find(kEndOfText);
  eot_id = eot == index.end() ? -1 : eot->second;
}

GPT2Tokenizer GPT2Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  const std::string vtext = read_file(vocab_json, "vocab.json");
  VocabJsonReader vr(vocab_json);
  vr.run(vtext);
  const std::string mtext = read_file(merges_txt, "merges.txt");
  std::vector<MergeEntry> merges = read_merges_txt(merges_txt, mtext);
  GPT2Tokenizer t;
  build_tokenizer(vocab_json, std::move(vr.entries), merges_txt, merges, {}, t.pieces_, t.vocab_strings_, t.index_,
                  t.merge_rank_, t.byte_id_, t.eot_id_);
  return t;
}

GPT2Tokenizer GPT2Tokenizer::from_tokenizer_json(const std::string& path) {
  const std::string text = read_file(path, "tokenizer.json");
  TokenizerJsonReader r(path);
  r.run(text);
  if (!r.have_model) throw Error(path + ": no \"model\" object (not a Hugging Face tokenizer.json?)");
  if (!r.have_vocab) throw Error(path + ": model.vocab is missing");
  if (!r.have_merges) throw Error(path + ": model.merges is missing");
  GPT2Tokenizer t;
  build_tokenizer(path, std::move(r.vocab), path, r.merges, r.added, t.pieces_, t.vocab_strings_, t.index_,
                  t.merge_rank_, t.byte_id_, t.eot_id_);
  return t;
}

void GPT2Tokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(vocab_size() - 1) + ")");
}

std::string GPT2Tokenizer::piece(int id) const {
  check_id(id);
  return pieces_[static_cast<size_t>(id)];
}

std::string GPT2Tokenizer::decode(int prev, int id) const {
  (void)prev;
  return piece(id);
}

int GPT2Tokenizer::find(std::string_view vocab_string) const {
  auto it = index_.find(std::string(vocab_string));
  return it == index_.end() ? -1 : it->second;
}

std::vector<std::string> GPT2Tokenizer::pretokenize(std::string_view text) {
  std::vector<std::string> out;
  std::vector<std::string_view> pieces;
  ds::pretokenize(PreTokenizer::Gpt2, text, pieces);
  out.assign(pieces.begin(), pieces.end());
  return out;
}

void GPT2Tokenizer::bpe_uncached(std::string_view pretoken, std::vector<int>& out) const {
  const size_t n = pretoken.size();
  if (n == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(pretoken[0])]);
    return;
  }
  // Symbols as a linked list; a heap of candidate merges ordered by (rank, position),
  // i.e. the lowest rank first and of equal ranks (the same pair) the leftmost.
  std::vector<int> id(n), next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<unsigned char>(pretoken[i])];
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
    prev[i] = static_cast<int>(i) - 1;
  }
  struct Cand {
    int rank, pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap;
  heap.reserve(n);
  auto push = [&](int pos) {
    if (pos < 0) return;
    const int nx = next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    const int l = id[static_cast<size_t>(pos)], r = id[static_cast<size_t>(nx)];
    auto it = merge_rank_.find(static_cast<uint64_t>(l) << 32 | static_cast<uint32_t>(r));
    if (it == merge_rank_.end()) return;
    heap.push_back({it->second.first, pos, l, r, it->second.second});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Cand c = heap.back();
    heap.pop_back();
    const auto pos = static_cast<size_t>(c.pos);
    const int nx = next[pos];
    if (id[pos] != c.left || nx < 0 || id[static_cast<size_t>(nx)] != c.right) continue;  // stale
    id[pos] = c.merged;
    id[static_cast<size_t>(nx)] = -1;  // removed
    next[pos] = next[static_cast<size_t>(nx)];
    if (next[pos] >= 0) prev[static_cast<size_t>(next[pos])] = c.pos;
    if (prev[pos] >= 0) push(prev[pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)]) out.push_back(id[static_cast<size_t>(i)]);
}

void GPT2Tokenizer::bpe(std::string_view pretoken, std::vector<int>& out) const {
  if (pretoken.size() == 1 || pretoken.size() > Cache::kMaxKeyBytes) {
    bpe_uncached(pretoken, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->map.find(pretoken);
    if (it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  bpe_uncached(pretoken, out);
  std::vector<int> ids(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->map.size() >= Cache::kMaxEntries) cache_->map.clear();
  cache_->map.emplace(std::string(pretoken), std::move(ids));
}

std::vector<int> GPT2Tokenizer::encode(std::string_view text, bool bos) const {
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 2);
  if (bos) {
    if (eot_id_ < 0) throw Error("cannot add a begin-of-sequence token: the vocabulary has no <|endoftext|>");
    ids.push_back(eot_id_);
  }
  std::vector<std::string_view> pieces;
  ds::pretokenize(PreTokenizer::Gpt2, text, pieces);
  for (std::string_view p : pieces) bpe(p, ids);
  return ids;
}

// ---------------------------------------------------------------- loading a folder

std::shared_ptr<const Tokenizer> load_gpt2_tokenizer_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::error_code ec;
  const fs::path vocab = d / "vocab.json", merges = d / "merges.txt", tj = d / "tokenizer.json";
  if (fs::is_regular_file(vocab, ec) && fs::is_regular_file(merges, ec))
    return std::make_shared<GPT2Tokenizer>(GPT2Tokenizer::from_files(vocab.string(), merges.string()));
  if (fs::is_regular_file(tj, ec))
    return std::make_shared<GPT2Tokenizer>(GPT2Tokenizer::from_tokenizer_json(tj.string()));
  std::string found;
  if (fs::exists(vocab, ec))
    found = " (vocab.json is there but merges.txt is not)";
  else if (fs::exists(merges, ec))
    found = " (merges.txt is there but vocab.json is not)";
  throw Error(dir + ": no GPT-2 tokenizer found: looked for vocab.json + merges.txt, then tokenizer.json" + found);
}

}  // namespace ds
