#pragma once
// The pre-tokenizers of byte-level BPE: the regular expressions that cut text into
// pieces before BPE merges within each piece, written by hand (no regex engine) with
// the same leftmost-first alternation and backtracking results as the Hugging Face
// tokenizers' (Oniguruma) matching of each pattern.
#include <string_view>
#include <vector>

namespace ds {

enum class PreTokenizer {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // Qwen2: Llama 3's pattern with \p{N} (one digit per piece) instead of \p{N}{1,3}.
  Qwen2,
  // SmolLM: every \p{N} its own piece, then GPT-2's pattern within the rest.
  Smollm,
  // llama.cpp's fallback for a byte-level BPE without a known pre-tokenizer: runs of
  // [\p{P}$+<=>^~|], then GPT-2's pattern, then runs of \p{N}, then [0-9]{3}, each
  // applied within the pieces of the previous step (unmatched spans stay pieces).
  Default,
};

// Appends the pre-tokens of text to out: views into text that cover it exactly, in
// order, none empty. The ASCII letters of the contractions match in either case for
// Llama3 and Qwen2 (as llama.cpp's adaptation of (?i:...) does), only lower case for
// GPT-2. A byte that is not part of well-formed UTF-8 is a character of its own, of
// none of the classes \p{L}, \p{N}, \s.
void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& out);

}  // namespace ds
