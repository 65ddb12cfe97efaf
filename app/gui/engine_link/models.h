#pragma once
// The models the window offers: the built-in ones, the shared llama2.c fixture, small
// random models built in code (decoder-only and encoder-decoder, with a character
// tokenizer), the small GGUF models of the shared fixtures, and anything load_model opens
// (GGUF files, llama2.c .bin files, GPT-2 folders).
#include <string>
#include <vector>

#include "io/loader.h"

namespace dsgui {

// The small random demo models built in code read characters: one token per printable
// ASCII character (id = the byte), plus <pad> 0, <bos> 1, <eos> 2; other ids read "#id".
inline constexpr int kDemoPad = 0, kDemoBos = 1;
std::shared_ptr<const ds::Tokenizer> demo_tokenizer(int vocab);

struct ModelChoice {
  std::string label;  // shown in the picker
  std::string spec;   // what open_model takes
  std::string help;   // one sentence for the tooltip
};

// Specs understood besides paths: "random:decoder", "random:encdec", "random:gpt2-small".
std::vector<ModelChoice> model_choices();
// One sentence about a built-in model, for the picker's tooltip.
std::string builtin_help(const std::string& name);
// The fixture aidreams260K if present, else "random:decoder".
std::string default_model_spec();
// Opens a spec or a path (throws ds::Error). tokenizer: a tokenizer file or "".
// precision: how the large weight matrices are kept (ds::load_model); the random
// models built here are narrowed to it before the model is made.
ds::LoadedModel open_model(const std::string& spec, const std::string& tokenizer,
                           ds::Precision precision = ds::Precision::F32);
// "float32 (4 bytes a weight)", ... for the model box; and the short option names
// f32, bf16, f16 (returns false for an unknown name).
const char* precision_label(ds::Precision p);
bool parse_precision(const std::string& name, ds::Precision& out);
// A prompt and a source that suit the model, for the text boxes.
std::string default_prompt(const ds::LoadedModel& m);
std::string default_source(const ds::LoadedModel& m);

}  // namespace dsgui
