#pragma once
// Hugging Face tokenizer folders of the llama family: tokenizer.json (+ tokenizer_config.json),
// read into a VocabData (text/vocab_data.h) and tokenized by VocabTokenizer
// (text/gguf_tokenizer.h), the same code that tokenizes GGUF files.
//
// What is read (anything else ends in a ds::Error naming the key and the value):
// - model: "BPE" with vocab, merges ("a b" strings or ["a", "b"] pairs, rank = order),
//   byte_fallback, unk_token, ignore_merges.
// - byte-level BPE (Llama 3, Qwen2/2.5/3, SmolLM, GPT-2): pre_tokenizer Sequence[Split
//   {Regex} Isolated, ByteLevel use_regex false] whose regex is one of the known patterns
//   (Llama 3's, Qwen2's, GPT-2's; text/pretokenize.h has them written by hand, checked
//   against llama.cpp), Sequence[Digits individual, ByteLevel use_regex true] (SmolLM), or
//   ByteLevel use_regex true alone (GPT-2). An unknown pattern is an error naming it.
// - SentencePiece-style BPE (Llama 2, Mistral, TinyLlama): byte_fallback, merges by rank,
//   normalizer Sequence[Prepend "▁", Replace " " -> "▁"] (older files: every fragment
//   between added tokens gets the "▁") or pre_tokenizer Metaspace (replacement "▁",
//   prepend_scheme first/always/never, split).
// - normalizer NFC (Qwen): accepted and not applied: text already in NFC (nearly all text,
//   and all text typed on a keyboard) tokenizes as the library does; decomposed text
//   (e.g. "e" + U+0301) may not.
// - added_tokens: taken as themselves in text first, special or not, the longest at the
//   leftmost place; lstrip/rstrip take the whitespace beside them, single_word needs no
//   letter, digit or '_' beside them; all are matched in the text as given (as
//   "normalized": false says; the files of this family have no normalized added tokens).
// - post_processor TemplateProcessing (Sequence, ByteLevel): a special token before $A
//   is the BOS that encode(text, true) adds, one after it the EOS.
// - tokenizer_config.json: bos_token, eos_token (a string or {"content": ...}),
//   add_bos_token / add_eos_token (these win over the post_processor), chat_template
//   (a string, or [{"name", "template"}] of which "default"); else chat_template.jinja.
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace ds {

struct HfTokenizerInfo {
  std::shared_ptr<const Tokenizer> tokenizer;  // encode(text, bos=true) adds BOS when the files say so
  int bos_id = -1, eos_id = -1;                // from tokenizer_config.json (else the post_processor), or -1
  bool add_bos = false;
  std::string bos_token, eos_token;  // their text, for chat templates ("" when none)
  std::string chat_template;         // "" when none
  std::vector<int> special_ids;      // ids of added tokens marked special (the window colours them), ascending
  std::string kind;                  // "byte-level BPE" or "SentencePiece BPE", for `inspect`
};

// path: a folder holding tokenizer.json (and optionally tokenizer_config.json), or a
// tokenizer.json file (a tokenizer_config.json beside a file named tokenizer.json is read
// too). Throws ds::Error naming the file and the key on any problem.
HfTokenizerInfo load_hf_tokenizer(const std::string& path);

// True when path (a folder with tokenizer.json, or a .json file) is a tokenizer.json that
// this reader handles rather than GPT-2's reader (GPT2Tokenizer::from_tokenizer_json takes
// the ones with a lone ByteLevel pre-tokenizer and no normalizer). False when there is no
// such file; true for a file that is not valid JSON (load_hf_tokenizer then says why).
bool is_hf_tokenizer(const std::string& path);

}  // namespace ds
