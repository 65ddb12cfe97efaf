#include "text/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>

#include "text/unicode.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace ds {

namespace {

constexpr size_t kMaxVocab = size_t{1} << 24;
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A name from the file in a message: 'name', control bytes escaped, kept short.
std::string in_quotes(std::string_view s) { return "'" + excerpt(s) + "'"; }

// The byte of a SentencePiece byte token "<0xXX>", or -1.
int byte_token_value(std::string_view t) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>' || hex(t[3]) < 0 || hex(t[4]) < 0) return -1;
  return hex(t[3]) * 16 + hex(t[4]);
}

std::string byte_token_name(unsigned char b) {
  constexpr const char* kHex = "0123456789ABCDEF";
  return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
}

// Whether a token of this type prints as its plain text rather than decoded bytes.
bool is_special_type(TokenType t) {
  return t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused;
}

// The supported values of tokenizer.ggml.pre for byte-level BPE.
struct PreName {
  const char* name;
  PreTokenizer kind;
};
constexpr PreName kPreNames[] = {{"llama-bpe", PreTokenizer::Llama3},
                                 {"qwen2", PreTokenizer::Qwen2},
                                 {"gpt-2", PreTokenizer::Gpt2},
                                 {"smollm", PreTokenizer::Smollm},
                                 {"default", PreTokenizer::Default}};

// A candidate merge of the symbol at left with the one after it.
struct Candidate {
  float priority;                // SentencePiece: the score (higher first); byte-level: -rank
  int left;                      // symbol index, the leftmost of equal priorities first
  uint32_t left_len, right_len;  // the two symbols' lengths when the candidate was made
  int merged;                    // the resulting token id
  bool operator<(const Candidate& o) const { return priority != o.priority ? priority < o.priority : left > o.left; }
};

// A symbol of the text being merged: bytes [start, start + len) of it, in a linked list.
struct Symbol {
  uint32_t start, len;
  int prev, next;
};

}  // namespace

// ---------------------------------------------------------------- construction

VocabTokenizer::VocabTokenizer(const VocabData& v) {
  if (v.model == "llama") {
    kind_ = Kind::SentencePiece;
  } else if (v.model == "gpt2") {
    kind_ = Kind::ByteLevel;
  } else {
    throw Error("tokenizer.ggml.model " + in_quotes(v.model) +
                " is not supported; supported: llama (SentencePiece), gpt2 (byte-level BPE)");
  }
  const size_t n = v.tokens.size();
  if (n == 0) throw Error("tokenizer.ggml.tokens is empty");
  if (n > kMaxVocab)
    throw Error("tokenizer.ggml.tokens has " + std::to_string(n) + " tokens, more than " + std::to_string(kMaxVocab));
  if (!v.scores.empty() && v.scores.size() != n)
    throw Error("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) + " entries for " + std::to_string(n) +
                " tokens");
  if (!v.types.empty() && v.types.size() != n)
    throw Error("tokenizer.ggml.token_type has " + std::to_string(v.types.size()) + " entries for " +
                std::to_string(n) + " tokens");
  tokens_ = v.tokens;
  types_.assign(n, TokenType::Normal);
  for (size_t i = 0; i < v.types.size(); ++i) {
    if (v.types[i] < 0 || v.types[i] > static_cast<int32_t>(TokenType::Byte))
      throw Error("tokenizer.ggml.token_type[" + std::to_string(i) + "] (token " + in_quotes(v.tokens[i]) + ") is " +
                  std::to_string(v.types[i]) + ", outside 0..6");
    types_[i] = static_cast<TokenType>(v.types[i]);
  }
  index_.reserve(n);
  for (size_t i = 0; i < n; ++i) index_.emplace(tokens_[i], static_cast<int>(i));  // the first of duplicates
  init_special(v);
  if (kind_ == Kind::SentencePiece)
    init_sentencepiece(v);
  else
    init_byte_level(v);
  if (add_bos_ && bos_id_ < 0)
    throw Error("the tokenizer adds a BOS token (tokenizer.ggml.add_bos_token" +
                std::string(v.add_bos < 0 ? " defaults to true for this model" : " is true") +
                ") but tokenizer.ggml.bos_token_id is missing");
  if (add_eos_ && eos_id_ < 0)
    throw Error("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing");
  init_matched(v);
}

void VocabTokenizer::init_matched(const VocabData& v) {
  const size_t n = tokens_.size();
  match_flags_.assign(n, 0);
  auto add = [&](size_t id) {
    if (!tokens_[id].empty()) user_defined_[static_cast<unsigned char>(tokens_[id][0])].push_back(static_cast<int>(id));
  };
  if (v.hf.added.empty()) {
    for (size_t i = 0; i < n; ++i)
      if (types_[i] == TokenType::UserDefined) add(i);
  }
  for (const VocabData::AddedToken& a : v.hf.added) {
    check_id(a.id);
    const auto id = static_cast<size_t>(a.id);
    if (match_flags_[id] & 128) continue;  // listed twice
    match_flags_[id] = static_cast<uint8_t>(128 | (a.lstrip ? kLstrip : 0) | (a.rstrip ? kRstrip : 0) |
                                            (a.single_word ? kSingleWord : 0));
    add(id);
  }
  for (std::vector<int>& ids : user_defined_)
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return tokens_[a].size() > tokens_[b].size(); });
}

void VocabTokenizer::init_special(const VocabData& v) {
  const int n = vocab_size();
  auto check = [&](int id, const char* key) {
    if (id < -1 || id >= n)
      throw Error(std::string("tokenizer.ggml.") + key + " " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(n - 1) + ")");
    return id;
  };
  bos_id_ = check(v.bos_id, "bos_token_id");
  eos_id_ = check(v.eos_id, "eos_token_id");
  unk_id_ = check(v.unk_id, "unknown_token_id");
  check(v.pad_id, "padding_token_id");
  check(v.eot_id, "eot_token_id");
  add_eos_ = v.add_eos == 1;
}

void VocabTokenizer::init_sentencepiece(const VocabData& v) {
  const size_t n = tokens_.size();
  by_rank_ = !v.hf.merge_ids.empty();
  if (by_rank_) {
    init_merges(v);
  } else {
    if (v.scores.empty())
      throw Error("tokenizer.ggml.scores is missing: the SentencePiece model 'llama' merges by score");
    for (size_t i = 0; i < n; ++i)
      if (std::isnan(v.scores[i]))
        throw Error("tokenizer.ggml.scores[" + std::to_string(i) + "] (token " + in_quotes(tokens_[i]) + ") is NaN");
    scores_ = v.scores;
  }
  add_bos_ = v.add_bos != 0;  // SentencePiece models start with BOS unless told otherwise
  add_space_prefix_ = v.add_space_prefix != 0;
  metaspace_ = v.hf.metaspace;
  first_only_ = v.hf.first_only;
  split_ = v.hf.split;
  int missing = -1;
  for (unsigned b = 0; b < 256; ++b) {
    byte_id_[b] = v.hf.byte_fallback ? find(byte_token_name(static_cast<unsigned char>(b))) : -1;
    if (byte_id_[b] < 0 && missing < 0) missing = static_cast<int>(b);
  }
  if (missing >= 0 && unk_id_ < 0)
    throw Error("the SentencePiece vocabulary has neither the byte token " +
                byte_token_name(static_cast<unsigned char>(missing)) + " (byte fallback) nor " +
                (by_rank_ ? "model.unk_token" : "tokenizer.ggml.unknown_token_id") + " for text that is no token");
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = tokens_[i];
    const int byte = types_[i] == TokenType::Byte ? byte_token_value(t) : -1;
    if (byte >= 0) {
      bytes_[i].assign(1, static_cast<char>(byte));
    } else if (is_special_type(types_[i])) {
      bytes_[i] = t;
    } else {
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, kSpaceMark.size(), kSpaceMark) == 0) {
          bytes_[i].push_back(' ');
          k += kSpaceMark.size();
        } else {
          bytes_[i].push_back(t[k++]);
        }
      }
    }
  }
}

void VocabTokenizer::init_byte_level(const VocabData& v) {
  const std::string pre = v.pre.empty() ? "default" : v.pre;  // llama.cpp's fallback
  const PreName* found = nullptr;
  for (const PreName& p : kPreNames)
    if (pre == p.name) found = &p;
  if (!found) {
    std::string names;
    for (const PreName& p : kPreNames) names += (names.empty() ? "" : ", ") + std::string(p.name);
    throw Error("tokenizer.ggml.pre " + in_quotes(pre) + " is not supported; supported: " + names);
  }
  pre_ = found->kind;
  ignore_merges_ = v.hf.ignore_merges < 0 ? pre_ == PreTokenizer::Llama3 : v.hf.ignore_merges != 0;
  add_bos_ = v.add_bos < 0 ? pre_ == PreTokenizer::Llama3 : v.add_bos != 0;  // llama.cpp's defaults
  add_space_prefix_ = false;
  std::string sym;
  for (unsigned b = 0; b < 256; ++b) {
    sym.clear();
    unicode::append_utf8(sym, unicode::byte_to_codepoint(static_cast<unsigned char>(b)));
    byte_id_[b] = find(sym);
    if (byte_id_[b] < 0)
      throw Error("tokenizer.ggml.tokens lacks " + in_quotes(sym) + ", the symbol of byte " +
                  byte_token_name(static_cast<unsigned char>(b)).substr(1, 4) + " (not a byte-level BPE vocabulary?)");
  }
  init_merges(v);
  bytes_.resize(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const bool plain = is_special_type(types_[i]) || types_[i] == TokenType::UserDefined;
    if (plain || !unicode::alphabet_to_bytes(tokens_[i], bytes_[i])) bytes_[i] = tokens_[i];
  }
}

void VocabTokenizer::init_merges(const VocabData& v) {
  // Ranks are compared as floats (Candidate::priority): exact below 2^24.
  if (v.hf.merge_ids.size() > kMaxVocab)
    throw Error("the tokenizer has " + std::to_string(v.hf.merge_ids.size()) + " merges, more than " +
                std::to_string(kMaxVocab));
  merges_.reserve(v.hf.merge_ids.empty() ? v.merges.size() : v.hf.merge_ids.size());
  for (size_t i = 0; i < v.hf.merge_ids.size(); ++i) {
    const auto [ia, ib] = v.hf.merge_ids[i];
    check_id(ia);
    check_id(ib);
    const std::string ab = tokens_[static_cast<size_t>(ia)] + tokens_[static_cast<size_t>(ib)];
    const int iab = find(ab);
    if (iab < 0) throw Error("merge " + std::to_string(i) + ": the result " + in_quotes(ab) + " is not a token");
    const uint64_t key = static_cast<uint64_t>(ia) << 32 | static_cast<uint32_t>(ib);
    merges_.emplace(key, std::make_pair(static_cast<int>(i), iab));  // the first of duplicates
  }
  if (!v.hf.merge_ids.empty()) return;
  if (v.merges.size() > kMaxVocab)
    throw Error("tokenizer.ggml.merges has " + std::to_string(v.merges.size()) + " entries, more than " +
                std::to_string(kMaxVocab));
  merges_.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const std::string where = "tokenizer.ggml.merges[" + std::to_string(i) + "] " + in_quotes(m);
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 == m.size()) throw Error(where + " is not two tokens separated by a space");
    const std::string_view a = std::string_view(m).substr(0, sp), b = std::string_view(m).substr(sp + 1);
    const int ia = find(a), ib = find(b);
    if (ia < 0) throw Error(where + ": " + in_quotes(a) + " is not a token");
    if (ib < 0) throw Error(where + ": " + in_quotes(b) + " is not a token");
    const int iab = find(std::string(a) + std::string(b));
    if (iab < 0) throw Error(where + ": the result " + in_quotes(std::string(a) + std::string(b)) + " is not a token");
    const uint64_t key = static_cast<uint64_t>(ia) << 32 | static_cast<uint32_t>(ib);
    merges_.emplace(key, std::make_pair(static_cast<int>(i), iab));  // the first of duplicates
  }
}

// ---------------------------------------------------------------- lookups

void VocabTokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(vocab_size() - 1) + ")");
}

int VocabTokenizer::find(std::string_view token) const {
  auto it = index_.find(token);
  return it == index_.end() ? -1 : it->second;
}

TokenType VocabTokenizer::type(int id) const {
  check_id(id);
  return types_[static_cast<size_t>(id)];
}

bool VocabTokenizer::mergeable(int id) const {
  const TokenType t = types_[static_cast<size_t>(id)];
  return t == TokenType::Normal || t == TokenType::Undefined || t == TokenType::UserDefined;
}

std::string VocabTokenizer::piece(int id) const {
  check_id(id);
  return tokens_[static_cast<size_t>(id)];
}

std::string VocabTokenizer::decode(int prev, int id) const {
  check_id(id);
  const std::string& b = bytes_[static_cast<size_t>(id)];
  // SentencePiece's decoder removes the space that add_space_prefix put in front.
  if (kind_ == Kind::SentencePiece && add_space_prefix_ && (prev < 0 || prev == bos_id_) && !b.empty() && b[0] == ' ' &&
      mergeable(id))
    return b.substr(1);
  return b;
}

// ---------------------------------------------------------------- encoding

namespace {

// The code point before text[end] (its first byte into start), or kInvalid at lo.
uint32_t char_before(std::string_view text, size_t lo, size_t end, size_t& start) {
  if (end <= lo) return unicode::kInvalid;
  start = end - 1;
  while (start > lo && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t len;
  const uint32_t cp = unicode::decode_utf8(text, start, len);
  if (start + len == end) return cp;
  start = end - 1;
  return unicode::kInvalid;
}

// A letter, digit or '_' (the tokenizers library's word characters for single_word).
bool is_word_char(uint32_t cp) {
  return cp != unicode::kInvalid &&
         (cp == '_' || unicode::classify(cp) == unicode::kLetter || unicode::classify(cp) == unicode::kNumber);
}

bool is_space(uint32_t cp) { return cp != unicode::kInvalid && unicode::classify(cp) == unicode::kSpace; }

}  // namespace

int VocabTokenizer::match_at(std::string_view text, size_t gap, size_t i, size_t& begin, size_t& end) const {
  for (int id : user_defined_[static_cast<unsigned char>(text[i])]) {
    const std::string& t = tokens_[static_cast<size_t>(id)];
    if (text.compare(i, t.size(), t) != 0) continue;
    const uint8_t flags = match_flags_[static_cast<size_t>(id)];
    begin = i;
    end = i + t.size();
    size_t len = 0, before = 0;
    if (flags & kSingleWord) {
      const bool word_after = end < text.size() && is_word_char(unicode::decode_utf8(text, end, len));
      if (is_word_char(char_before(text, 0, i, before)) || word_after) return -1;  // as the library: no shorter try
    }
    if (flags & kLstrip)
      while (is_space(char_before(text, gap, begin, before))) begin = before;
    if (flags & kRstrip)
      while (end < text.size() && is_space(unicode::decode_utf8(text, end, len))) end += len;
    return id;
  }
  return -1;
}

std::vector<std::pair<int, std::string_view>> VocabTokenizer::partition(std::string_view text) const {
  std::vector<std::pair<int, std::string_view>> parts;
  size_t gap = 0;  // start of the text fragment before i
  for (size_t i = 0; i < text.size();) {
    size_t begin = i, end = i;
    const int hit =
        user_defined_[static_cast<unsigned char>(text[i])].empty() ? -1 : match_at(text, gap, i, begin, end);
    if (hit < 0) {
      ++i;
      continue;
    }
    if (begin > gap) parts.emplace_back(-1, text.substr(gap, begin - gap));
    parts.emplace_back(hit, std::string_view());
    i = gap = end;
  }
  if (text.size() > gap) parts.emplace_back(-1, text.substr(gap));
  return parts;
}

std::vector<int> VocabTokenizer::encode(std::string_view text, bool bos) const {
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 2);
  if (bos && add_bos_) ids.push_back(bos_id_);
  for (const auto& [id, fragment] : partition(text)) {
    if (id >= 0) {
      ids.push_back(id);
    } else if (kind_ == Kind::SentencePiece) {
      // Every fragment (each starts the text or follows a token) gets the prefix, but for
      // Metaspace's "first" only the text's first one, and not one starting with a space.
      bool prefix = add_space_prefix_ && (!first_only_ || fragment.data() == text.data());
      if (metaspace_ && fragment[0] == ' ') prefix = false;
      encode_spm(fragment, prefix, ids);
    } else {
      encode_bpe(fragment, ids);
    }
  }
  if (bos && add_eos_) ids.push_back(eos_id_);
  return ids;
}

void VocabTokenizer::encode_spm(std::string_view fragment, bool prefix, std::vector<int>& out) const {
  std::string s;
  s.reserve(fragment.size() + 3);
  if (prefix) s += kSpaceMark;
  for (char c : fragment) c == ' ' ? s += kSpaceMark : s += c;
  if (!split_) {
    spm_merge(s, out);
    return;
  }
  // Metaspace's split: each "▁" starts a piece (merged with what follows it).
  const std::string_view all(s);
  size_t start = 0;
  for (size_t at = all.find(kSpaceMark, 1); at != std::string_view::npos; at = all.find(kSpaceMark, at + 1)) {
    spm_merge(all.substr(start, at - start), out);
    start = at;
  }
  spm_merge(all.substr(start), out);
}

void VocabTokenizer::spm_merge(std::string_view s, std::vector<int>& out) const {
  // One symbol per UTF-8 character (a malformed byte is one of its own).
  std::vector<Symbol> sym;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    unicode::decode_utf8(s, i, len);
    const int k = static_cast<int>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), k - 1, -1});
    if (k > 0) sym[static_cast<size_t>(k - 1)].next = k;
    i += len;
  }
  std::vector<Candidate> heap;
  auto text_of = [&](const Symbol& a, uint32_t len) { return std::string_view(s).substr(a.start, len); };
  auto push = [&](int l) {
    if (l < 0 || sym[static_cast<size_t>(l)].next < 0) return;
    const Symbol &a = sym[static_cast<size_t>(l)], &b = sym[static_cast<size_t>(a.next)];
    if (by_rank_) {  // the pair must be a merge of the file; its rank orders it
      const int ia = find(text_of(a, a.len)), ib = ia < 0 ? -1 : find(text_of(b, b.len));
      auto it = ib < 0 ? merges_.end() : merges_.find(static_cast<uint64_t>(ia) << 32 | static_cast<uint32_t>(ib));
      if (it == merges_.end()) return;
      heap.push_back({-static_cast<float>(it->second.first), l, a.len, b.len, it->second.second});
      std::push_heap(heap.begin(), heap.end());
      return;
    }
    const int id = find(text_of(a, a.len + b.len));
    if (id < 0 || !mergeable(id)) return;
    heap.push_back({scores_[static_cast<size_t>(id)], l, a.len, b.len, id});
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) push(static_cast<int>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& a = sym[static_cast<size_t>(c.left)];
    if (a.len != c.left_len || a.next < 0 || sym[static_cast<size_t>(a.next)].len != c.right_len) continue;  // stale
    Symbol& b = sym[static_cast<size_t>(a.next)];
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (a.next >= 0) sym[static_cast<size_t>(a.next)].prev = c.left;
    push(a.prev);
    push(c.left);
  }
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Symbol& a = sym[static_cast<size_t>(i)];
    const std::string_view t = text_of(a, a.len);
    const int id = find(t);
    if (id >= 0 && mergeable(id)) {
      out.push_back(id);
      continue;
    }
    // Byte fallback; without byte tokens the character is one unknown token.
    bool all = true;
    for (char ch : t) all = all && byte_id_[static_cast<unsigned char>(ch)] >= 0;
    if (!all) {
      out.push_back(unk_id_);
      continue;
    }
    for (char ch : t) out.push_back(byte_id_[static_cast<unsigned char>(ch)]);
  }
}

void VocabTokenizer::encode_bpe(std::string_view fragment, std::vector<int>& out) const {
  std::vector<std::string_view> pieces;
  pretokenize(pre_, fragment, pieces);
  for (std::string_view p : pieces) bpe(p, out);
}

void VocabTokenizer::bpe(std::string_view piece, std::vector<int>& out) const {
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    std::string mapped;
    for (char c : piece) unicode::append_utf8(mapped, unicode::byte_to_codepoint(static_cast<unsigned char>(c)));
    const int id = find(mapped);
    if (id >= 0 && mergeable(id)) {
      out.push_back(id);
      return;
    }
  }
  // Symbols start as bytes; their ids are kept in start (reused as the token id).
  std::vector<Symbol> sym(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {static_cast<uint32_t>(byte_id_[static_cast<unsigned char>(piece[i])]), 1, static_cast<int>(i) - 1,
              i + 1 < n ? static_cast<int>(i + 1) : -1};
  std::vector<Candidate> heap;
  auto push = [&](int l) {
    if (l < 0 || sym[static_cast<size_t>(l)].next < 0) return;
    const Symbol &a = sym[static_cast<size_t>(l)], &b = sym[static_cast<size_t>(a.next)];
    auto it = merges_.find(static_cast<uint64_t>(a.start) << 32 | b.start);
    if (it == merges_.end()) return;
    heap.push_back({-static_cast<float>(it->second.first), l, a.len, b.len, it->second.second});
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& a = sym[static_cast<size_t>(c.left)];
    if (a.len != c.left_len || a.next < 0 || sym[static_cast<size_t>(a.next)].len != c.right_len) continue;  // stale
    Symbol& b = sym[static_cast<size_t>(a.next)];
    a.start = static_cast<uint32_t>(c.merged);
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (a.next >= 0) sym[static_cast<size_t>(a.next)].prev = c.left;
    push(a.prev);
    push(c.left);
  }
  for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next)
    out.push_back(static_cast<int>(sym[static_cast<size_t>(i)].start));
}

std::shared_ptr<const Tokenizer> make_vocab_tokenizer(const VocabData& v) {
  return std::make_shared<VocabTokenizer>(v);
}

}  // namespace ds
