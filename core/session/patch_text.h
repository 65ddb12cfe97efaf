#pragma once
// Activation patching (probe/patching.h) from text, as the command line and the window
// take it: two prompts (an encoder-decoder model's two sources), an answer and a wrong
// token, each of which must be one token of the model's tokenizer.
#include <string>
#include <vector>

#include "model/config.h"
#include "probe/patching.h"
#include "text/tokenizer.h"

namespace ds {

// The one token `text` is for this model; throws ds::Error naming `what` ("the answer")
// and the pieces when it is several tokens or none. A text of digits only after '#'
// ("#123") is that token id.
int one_token(const Config& c, const Tokenizer* tok, const std::string& text, const std::string& what);

// The input of an experiment: decoder-only models encode clean and corrupt as prompts
// (with BOS when bos_prompt, as io/loader.h's encode_prompt does); encoder-decoder models
// encode them as sources and run the decoder on BOS followed by `prefix`. Throws
// ds::Error (also for prompts of different lengths, saying both counts).
PatchInput patch_input(const Config& c, const Tokenizer* tok, bool bos_prompt, const std::string& clean,
                       const std::string& corrupt, const std::string& answer, const std::string& wrong,
                       const std::string& prefix = "");

// The text of each token, as the grids label the columns ("#id" without a tokenizer).
std::vector<std::string> token_texts(const Tokenizer* tok, const std::vector<int>& ids);

}  // namespace ds
