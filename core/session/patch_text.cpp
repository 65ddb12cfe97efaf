#include "session/patch_text.h"

#include <cctype>

#include "util/error.h"

namespace ds {

int one_token(const Config& c, const Tokenizer* tok, const std::string& text, const std::string& what) {
  const int V = c.vocab_size;
  if (text.size() > 1 && text[0] == '#' && text.find_first_not_of("0123456789", 1) == std::string::npos &&
      text.size() < 11) {
    const long id = std::stol(text.substr(1));
    if (id >= V) throw Error(what + " " + text + " is outside the vocabulary of " + std::to_string(V));
    return int(id);
  }
  if (!tok) throw Error("this model has no tokenizer: give " + what + " as a token id, e.g. #42");
  if (text.empty()) throw Error(what + " is empty: give one token");
  const std::vector<int> ids = tok->encode(text, false);
  if (ids.size() == 1) {
    const std::string piece = tok->piece(ids[0]);
    if (piece == "<unk>" && text != piece)
      throw Error(what + " '" + text + "' is not in the model's vocabulary (it reads as <unk>)");
    return ids[0];
  }
  if (ids.empty()) throw Error(what + " '" + text + "' encodes to no token");
  std::string pieces;
  for (int id : ids) pieces += (pieces.empty() ? "'" : " + '") + tok->piece(id) + "'";
  std::string hint;
  if (text[0] != ' ' && tok->encode(" " + text, false).size() == 1)
    hint = " ('" + std::string(" ") + text + "' with a leading space is one)";
  throw Error(what + " '" + text + "' is " + std::to_string(ids.size()) + " tokens (" + pieces +
              "): it must be one token" + hint);
}

PatchInput patch_input(const Config& c, const Tokenizer* tok, bool bos_prompt, const std::string& clean,
                       const std::string& corrupt, const std::string& answer, const std::string& wrong,
                       const std::string& prefix) {
  if (!tok) throw Error("this model has no tokenizer, so text cannot be turned into tokens");
  PatchInput in;
  if (c.encoder_decoder) {
    in.clean = tok->encode(clean, false);
    in.corrupt = tok->encode(corrupt, false);
    if (c.bos_id >= 0) in.prefix.push_back(c.bos_id);
    for (int id : tok->encode(prefix, false)) in.prefix.push_back(id);
  } else {
    for (auto [text, ids] : {std::pair{&clean, &in.clean}, std::pair{&corrupt, &in.corrupt}}) {
      *ids = tok->encode(*text, bos_prompt);
      if (ids->empty() && c.eos_id >= 0) ids->push_back(c.eos_id);  // GPT-2 starts from <|endoftext|>
    }
  }
  in.answer = one_token(c, tok, answer, "the answer");
  in.wrong = one_token(c, tok, wrong, "the wrong token");
  check_patch_input(c, in);
  return in;
}

std::vector<std::string> token_texts(const Tokenizer* tok, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(tok ? tok->piece(id) : "#" + std::to_string(id));
  return out;
}

}  // namespace ds
