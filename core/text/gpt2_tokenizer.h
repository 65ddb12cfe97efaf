#pragma once
// GPT-2's byte-level BPE tokenizer (vocab.json + merges.txt, or a Hugging Face
// tokenizer.json with a BPE model).
//
// Encoding: the text is split into pre-tokens like GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (hand-written, Unicode-aware; invalid UTF-8 bytes are "other" characters of their
// own), each pre-token's bytes are mapped to GPT-2's printable byte-to-unicode
// alphabet, and adjacent symbols are merged by merge rank, lowest first.
// Decoding maps a vocabulary string back to its raw bytes.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"

namespace ds {

class GPT2Tokenizer : public Tokenizer {
 public:
  // From GPT-2's vocab.json ({"token": id, ...}) and merges.txt ("#version" line
  // optional, then "a b" per line). Throws ds::Error naming the file and line on any
  // problem (missing file, bad JSON, non-UTF-8, duplicate or negative ids, merges of
  // unknown symbols or whose result is not in the vocabulary).
  static GPT2Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // From a Hugging Face tokenizer.json: model.type "BPE", model.vocab object,
  // model.merges as "a b" strings or ["a", "b"] pairs, and added_tokens (e.g.
  // <|endoftext|>) as extra ids. Same checks as from_files.
  static GPT2Tokenizer from_tokenizer_json(const std::string& path);

  GPT2Tokenizer(GPT2Tokenizer&&) noexcept;
  GPT2Tokenizer& operator=(GPT2Tokenizer&&) noexcept;
  ~GPT2Tokenizer() override;

  // One more than the largest id (vocabulary or added token).
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  // BPE ids of text; with bos, <|endoftext|> comes first (throws ds::Error if the
  // vocabulary has no such token). Added/special tokens in text are NOT recognised
  // as such (like GPT-2's encoder): "<|endoftext|>" in text is encoded as plain text.
  std::vector<int> encode(std::string_view text, bool bos) const override;
  // The token's bytes (vocabulary string mapped back to bytes; added tokens as
  // their text). May be part of a UTF-8 character. Empty for an id inside the range
  // that has no token; throws ds::Error for an id outside 0..vocab_size()-1.
  std::string piece(int id) const override;
  // Same as piece(id): byte-level BPE does not depend on prev.
  std::string decode(int prev, int id) const override;

  // The id of a vocabulary string (in the byte-to-unicode alphabet) or added token
  // text, or -1.
  int find(std::string_view vocab_string) const;
  // The id of <|endoftext|>, or -1.
  int eot_id() const { return eot_id_; }
  int num_merges() const { return static_cast<int>(merge_rank_.size()); }

  // Exposed for tests: GPT-2's pre-tokenizer split of text (byte strings).
  static std::vector<std::string> pretokenize(std::string_view text);
  // Exposed for tests: GPT-2's byte-to-unicode mapping of a byte (UTF-8 encoded).
  static std::string byte_to_unicode(unsigned char b);

 private:
  GPT2Tokenizer();
  struct Cache;
  void check_id(int id) const;
  void bpe(std::string_view pretoken, std::vector<int>& out) const;
  void bpe_uncached(std::string_view pretoken, std::vector<int>& out) const;

  std::vector<std::string> pieces_;             // id -> bytes
  std::vector<std::string> vocab_strings_;      // id -> vocabulary string (mapped alphabet)
  std::unordered_map<std::string, int> index_;  // vocabulary string -> id
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int, int>> merge_rank_;
  int byte_id_[256] = {};  // id of each single byte symbol
  int eot_id_ = -1;

  // Bounded per-pre-token cache (thread-safe; cleared when full).
  std::unique_ptr<Cache> cache_;
};

// Loads GPT-2 tokenizer files from dir: vocab.json + merges.txt if both exist, else
// tokenizer.json; otherwise throws ds::Error naming the files looked for.
std::shared_ptr<const Tokenizer> load_gpt2_tokenizer_dir(const std::string& dir);

}  // namespace ds
