#pragma once
// Opens any model the engine knows from a path, with its tokenizer.
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "text/tokenizer.h"

namespace ds {

struct LoadedModel {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when none was found
  std::string kind;                            // "llama2c"
  std::string name;                            // file or folder name, for titles
  std::vector<int> stop_ids;                   // tokens that end generation
  bool bos_prompt = false;                     // the tokenizer's encode starts with BOS
};

// path: a llama2.c .bin checkpoint. tokenizer_path: a tokenizer file; when empty,
// a tokenizer.bin beside the model is used if present. Throws ds::Error.
LoadedModel load_model(const std::string& path, const std::string& tokenizer_path = "");

}  // namespace ds
