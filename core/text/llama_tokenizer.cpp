#include "text/llama_tokenizer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace ds {

namespace {

constexpr int kBos = 1;
constexpr int kMaxVocab = 1 << 24;

uint32_t le32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// isprint / isspace of the C locale, independent of the process locale.
bool c_isprint(unsigned char b) { return b >= 0x20 && b <= 0x7E; }
bool c_isspace(unsigned char b) { return b == ' ' || (b >= '\t' && b <= '\r'); }

}  // namespace

LlamaTokenizer::LlamaTokenizer(std::vector<std::string> pieces, std::vector<float> scores)
    : pieces_(std::move(pieces)), scores_(std::move(scores)) {
  if (pieces_.size() != scores_.size())
    throw Error("llama tokenizer: " + std::to_string(pieces_.size()) + " pieces but " + std::to_string(scores_.size()) +
                " scores");
  if (pieces_.size() < 3 || pieces_.size() > static_cast<size_t>(kMaxVocab))
    throw Error("llama tokenizer: vocabulary size " + std::to_string(pieces_.size()) + " is outside 3.." +
                std::to_string(kMaxVocab));
  index_.reserve(pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (std::isnan(scores_[i])) throw Error("llama tokenizer: token " + std::to_string(i) + " has a NaN score");
    max_token_length_ = std::max(max_token_length_, static_cast<int>(pieces_[i].size()));
    index_.emplace(pieces_[i], static_cast<int>(i));  // keeps the lowest id of duplicates
  }
}

LlamaTokenizer LlamaTokenizer::load(const std::string& path, int vocab_size) {
  if (vocab_size < 3 || vocab_size > kMaxVocab)
    throw Error(path + ": tokenizer vocabulary size " + std::to_string(vocab_size) + " is outside 3.." +
                std::to_string(kMaxVocab));
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw Error(path + ": not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open tokenizer (" + std::strerror(errno) + ")");
  f.seekg(0, std::ios::end);
  const std::streamoff end = f.tellg();
  if (!f || end < 0) throw Error(path + ": cannot determine the file size");
  f.seekg(0, std::ios::beg);
  const int64_t size = static_cast<int64_t>(end);
  int64_t pos = 0;

  auto read = [&](void* dst, int64_t n, const std::string& what) {
    if (size - pos < n) {
      throw Error(path + ": tokenizer file is truncated: " + std::to_string(size) + " bytes, ends inside " + what +
                  " (needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos) + ")");
    }
    f.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (f.gcount() != static_cast<std::streamsize>(n))
      throw Error(path + ": read failed in " + what + " at offset " + std::to_string(pos));
    pos += n;
  };
  auto read_i32 = [&](const std::string& what) {
    unsigned char b[4];
    read(b, 4, what);
    return static_cast<int32_t>(le32(b));
  };

  const int32_t max_len = read_i32("max_token_length");
  if (max_len <= 0 || max_len > size)
    throw Error(path + ": max_token_length " + std::to_string(max_len) + " is impossible for a " +
                std::to_string(size) + "-byte tokenizer file (not a llama2.c tokenizer.bin?)");

  std::vector<std::string> pieces;
  std::vector<float> scores;
  pieces.reserve(static_cast<size_t>(std::min<int64_t>(vocab_size, size / 8 + 1)));
  scores.reserve(pieces.capacity());
  for (int i = 0; i < vocab_size; ++i) {
    const std::string what = "token " + std::to_string(i);
    const uint32_t score_bits = static_cast<uint32_t>(read_i32(what + " (score)"));
    const float score = std::bit_cast<float>(score_bits);
    if (std::isnan(score)) throw Error(path + ": " + what + " has a NaN score");
    const int32_t len = read_i32(what + " (length)");
    if (len < 0) throw Error(path + ": " + what + " has a negative length " + std::to_string(len));
    if (len > max_len)
      throw Error(path + ": " + what + " has length " + std::to_string(len) + ", more than max_token_length " +
                  std::to_string(max_len));
    std::string piece(static_cast<size_t>(len), '\0');  // len <= max_len <= file size
    read(piece.data(), len, what + " (bytes)");
    pieces.push_back(std::move(piece));
    scores.push_back(score);
  }
  if (pos != size)
    throw Error(path + ": tokenizer file has " + std::to_string(size - pos) + " bytes after its " +
                std::to_string(vocab_size) + " tokens (made for a different vocabulary size?)");
  LlamaTokenizer t(std::move(pieces), std::move(scores));
  t.max_token_length_ = max_len;
  return t;
}

void LlamaTokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(vocab_size() - 1) + ")");
}

std::string LlamaTokenizer::piece(int id) const {
  check_id(id);
  return pieces_[id];
}

float LlamaTokenizer::score(int id) const {
  check_id(id);
  return scores_[id];
}

int LlamaTokenizer::find(std::string_view piece) const {
  auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> LlamaTokenizer::encode(std::string_view text, bool bos) const {
  // run.c works on a C string: the text ends at the first NUL.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) text = text.substr(0, nul);
  std::vector<int> ids;
  ids.reserve(text.size() + 2);
  if (bos) ids.push_back(kBos);
  if (!text.empty()) {
    if (int sp = find(" "); sp >= 0) ids.push_back(sp);  // dummy prefix
  }

  // One token per UTF-8 character (at most 4 bytes), else one per byte.
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) buf.clear();
    buf.push_back(static_cast<char>(c));
    const bool next_continues = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
    if (next_continues && buf.size() < 4) continue;
    if (int id = find(buf); id >= 0) {
      ids.push_back(id);
    } else {
      for (char b : buf) {
        const int id_b = static_cast<unsigned char>(b) + 3;
        if (id_b >= vocab_size())
          throw Error("cannot encode byte " + std::to_string(static_cast<unsigned char>(b)) +
                      ": its byte-fallback id " + std::to_string(id_b) + " is outside the vocabulary");
        ids.push_back(id_b);
      }
    }
    buf.clear();
  }

  // Merge the adjacent pair whose concatenation is the best-scoring piece, until none.
  // merge[i] is the piece id of ids[i] + ids[i+1], or -1.
  std::string cat;
  auto merged = [&](size_t i) {
    cat.assign(pieces_[ids[i]]);
    cat.append(pieces_[ids[i + 1]]);
    return find(cat);
  };
  std::vector<int> merge(ids.size() > 1 ? ids.size() - 1 : 0);
  for (size_t i = 0; i < merge.size(); ++i) merge[i] = merged(i);
  for (;;) {
    float best_score = -1e10f;  // run.c's starting value
    size_t best = merge.size();
    for (size_t i = 0; i < merge.size(); ++i) {
      if (merge[i] >= 0 && scores_[merge[i]] > best_score) {
        best_score = scores_[merge[i]];
        best = i;
      }
    }
    if (best == merge.size()) break;
    ids[best] = merge[best];
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    merge.erase(merge.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) merge[best - 1] = merged(best - 1);
    if (best < merge.size()) merge[best] = merged(best);
  }
  return ids;
}

std::string LlamaTokenizer::decode(int prev, int id) const {
  check_id(id);
  std::string_view p = pieces_[id];
  if (prev == kBos && !p.empty() && p[0] == ' ') p.remove_prefix(1);
  std::string out;
  if (p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>' && hex_digit(p[3]) >= 0 && hex_digit(p[4]) >= 0) {
    out.assign(1, static_cast<char>(hex_digit(p[3]) * 16 + hex_digit(p[4])));
  } else {
    out.assign(p);
  }
  if (out.size() == 1) {
    const auto b = static_cast<unsigned char>(out[0]);
    if (!c_isprint(b) && !c_isspace(b)) return "";
  }
  return out;
}

}  // namespace ds
