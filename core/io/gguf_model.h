#pragma once
// Llama-family models from GGUF files (io/gguf.h): the architectures llama (Llama 2 and
// 3.x, TinyLlama, SmolLM, Mistral), qwen2 (Qwen2, Qwen2.5), qwen3 and gemma3, with
// their hyper-parameters from the file's metadata and every matrix used where the file
// has it: float32 as rows, F16/BF16 as 16-bit values, Q8_0/Q4_0/Q4_K/Q5_K/Q6_K as the
// file's blocks (perf/quant.h), so that a quantized model takes about its file's size in
// memory. Norm gains, biases and rotary factors are copied as float32.
//
// Layout facts the engine follows (Config's comment has the math):
//  * llama: rotary pairs (2i, 2i+1), because llama.cpp's converter reorders the q and k
//    rows of Hugging Face checkpoints for that; rope_freqs.weight (Llama 3.1/3.2) holds
//    per-frequency divisors.
//  * qwen2: biases on q, k and v; rotate-half rotary. qwen3: RMSNorm over each head's q
//    and k before rotary. gemma3: embeddings times sqrt(d_model); RMSNorm before and
//    after both sub-layers; GELU-tanh gated FFN; q/k norms; sliding-window attention on
//    five of every six layers (the rest global) with base rope.freq_base_swa (10,000);
//    GGUF's Gemma norm gains already include Hugging Face's "1 +".
#include <string>

#include "io/gguf.h"
#include "model/config.h"
#include "model/weights.h"
#include "text/vocab_data.h"

namespace ds {

struct GgufModel {
  Config cfg;
  Weights w;
  VocabData vocab;
  std::string arch;                      // general.architecture
  std::string name;                      // general.name, or ""
  std::string storage;                   // what the matrices are stored as, e.g. "Q4_K 85% + Q6_K 15%"
  Precision main_type = Precision::F32;  // the type holding most of the matrices' bytes
};

// The longest context a GGUF model is opened with: its own context length, at most this
// (a teaching session runs a few thousand tokens; Llama 3.2's 131,072 would reserve a
// KV cache of gigabytes).
constexpr int kGgufMaxContext = 8192;

// Reads the architecture's hyper-parameters and places every tensor. precision: F32
// keeps every matrix as the file stores it; BF16 or F16 also narrow the file's float32
// matrices to that type (copied), the others stay as stored. Throws ds::Error naming the
// key or tensor and the problem; an unknown architecture lists those supported.
GgufModel load_gguf_model(const GgufFile& f, Precision precision = Precision::F32);

// Architectures read (general.architecture values).
const char* gguf_architectures();

}  // namespace ds
