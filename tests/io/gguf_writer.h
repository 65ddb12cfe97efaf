#pragma once
// A small GGUF writer for the tests: metadata of every value type, float32 tensors (or
// raw bytes of any ggml type), and whole llama-family models from a Config and Weights
// with llama.cpp's tensor names, so the reader and the loader can be tested on files
// whose every byte the test knows (and can damage).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ds::test {

class GgufWriter {
 public:
  uint32_t version = 3;
  uint32_t alignment = 32;

  void u32(const std::string& key, uint32_t v) { kv(key, 4, pod(v)); }
  void i32(const std::string& key, int32_t v) { kv(key, 5, pod(v)); }
  void f32(const std::string& key, float v) { kv(key, 6, pod(v)); }
  void boolean(const std::string& key, bool v) { kv(key, 7, std::string(1, v ? '\1' : '\0')); }
  void str(const std::string& key, const std::string& v) { kv(key, 8, string(v)); }
  void u64(const std::string& key, uint64_t v) { kv(key, 10, pod(v)); }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    std::string b = pod(uint32_t(8)) + pod(uint64_t(v.size()));
    for (const std::string& s : v) b += string(s);
    kv(key, 9, b);
  }
  void floats(const std::string& key, const std::vector<float>& v) {
    std::string b = pod(uint32_t(6)) + pod(uint64_t(v.size()));
    for (float x : v) b += pod(x);
    kv(key, 9, b);
  }
  void ints(const std::string& key, const std::vector<int32_t>& v) {
    std::string b = pod(uint32_t(5)) + pod(uint64_t(v.size()));
    for (int32_t x : v) b += pod(x);
    kv(key, 9, b);
  }
  void bools(const std::string& key, const std::vector<bool>& v) {
    std::string b = pod(uint32_t(7)) + pod(uint64_t(v.size()));
    for (bool x : v) b += std::string(1, x ? '\1' : '\0');
    kv(key, 9, b);
  }
  // A tensor of ggml type `type` (0 = F32) with GGUF dimensions dims (dims[0] varies
  // fastest) and its bytes as given.
  void tensor(const std::string& name, std::vector<int64_t> dims, uint32_t type, std::string data) {
    tensors_.push_back({name, std::move(dims), type, std::move(data)});
  }
  void tensor_f32(const std::string& name, std::vector<int64_t> dims, const float* v, int64_t n) {
    tensor(name, std::move(dims), 0, std::string(reinterpret_cast<const char*>(v), size_t(n) * 4));
  }

  std::string bytes() const {
    std::string out = "GGUF" + pod(version) + pod(uint64_t(tensors_.size())) + pod(n_kv_) + meta_;
    uint64_t off = 0;
    std::vector<uint64_t> offsets;
    for (const T& t : tensors_) {
      offsets.push_back(off);
      out += string(t.name) + pod(uint32_t(t.dims.size()));
      for (int64_t d : t.dims) out += pod(uint64_t(d));
      out += pod(t.type) + pod(off);
      off = (off + t.data.size() + alignment - 1) / alignment * alignment;
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    const size_t start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(start + offsets[i], '\0');
      out += tensors_[i].data;
    }
    return out;
  }

  template <class V>
  static std::string pod(V v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static std::string string(const std::string& s) { return pod(uint64_t(s.size())) + s; }

 private:
  void kv(const std::string& key, uint32_t type, const std::string& value) {
    meta_ += string(key) + pod(type) + value;
    ++n_kv_;
  }
  struct T {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    std::string data;
  };
  std::string meta_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

// A SentencePiece vocabulary of n >= 8 tokens: <unk>, <s>, </s>, then "\u2581" and
// letters, as a GGUF tokenizer.
inline void write_spm_vocab(GgufWriter& g, int n) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81"};
  std::vector<float> scores = {0, 0, 0, -1};
  std::vector<int32_t> types = {2, 3, 3, 1};
  for (int i = 4; i < n; ++i) {
    const int k = i - 4;
    tokens.push_back(k < 26 ? std::string(1, char('a' + k))
                            : "\xe2\x96\x81" + std::string(1, char('a' + k % 26)) + std::to_string(k));
    scores.push_back(-float(i));
    types.push_back(1);
  }
  g.str("tokenizer.ggml.model", "llama");
  g.strings("tokenizer.ggml.tokens", tokens);
  g.floats("tokenizer.ggml.scores", scores);
  g.ints("tokenizer.ggml.token_type", types);
  g.u32("tokenizer.ggml.unknown_token_id", 0);
  g.u32("tokenizer.ggml.bos_token_id", 1);
  g.u32("tokenizer.ggml.eos_token_id", 2);
}

// A whole model of architecture arch ("llama", "qwen2", "qwen3", "gemma3") from float32
// weights w of cfg (row-major), with llama.cpp's names and keys.
inline std::string gguf_model_bytes(const std::string& arch, const Config& c, Weights& w) {
  GgufWriter g;
  g.str("general.architecture", arch);
  g.str("general.name", "test " + arch);
  const std::string a = arch + ".";
  g.u32(a + "context_length", uint32_t(c.max_seq));
  g.u32(a + "embedding_length", uint32_t(c.d_model));
  g.u32(a + "block_count", uint32_t(c.n_layers));
  g.u32(a + "feed_forward_length", uint32_t(c.d_ff));
  g.u32(a + "attention.head_count", uint32_t(c.n_heads));
  g.u32(a + "attention.head_count_kv", uint32_t(c.n_kv_heads));
  g.u32(a + "attention.key_length", uint32_t(c.d_head));
  g.u32(a + "attention.value_length", uint32_t(c.d_head));
  g.f32(a + "rope.freq_base", c.rope_theta);
  g.f32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  if (c.rope_scale != 1.0f) {
    g.str(a + "rope.scaling.type", "linear");
    g.f32(a + "rope.scaling.factor", 1.0f / c.rope_scale);
  }
  if (c.sliding_window > 0) {
    g.u32(a + "attention.sliding_window", uint32_t(c.sliding_window));
    g.bools(a + "attention.sliding_window_pattern",
            std::vector<bool>(c.sliding_layers.begin(), c.sliding_layers.end()));
    g.f32(a + "rope.freq_base_swa", c.rope_theta_local);
  }
  if (c.logit_softcap > 0) g.f32(a + "final_logit_softcapping", c.logit_softcap);
  write_spm_vocab(g, c.vocab_size);
  auto mat = [&](const std::string& name, const WMat& m) {
    g.tensor_f32(name, {m.cols(), m.rows()}, m.data(), m.size());
  };
  auto vec = [&](const std::string& name, const Vec& v) {
    if (v.size()) g.tensor_f32(name, {v.size()}, v.data(), v.size());
  };
  mat("token_embd.weight", w.tok_embed);
  vec("output_norm.weight", w.ln_final.g);
  if (!c.tied_head) mat("output.weight", w.lm_head);
  if (!c.rope_freq_factors.empty())
    g.tensor_f32("rope_freqs.weight", {int64_t(c.rope_freq_factors.size())}, c.rope_freq_factors.data(),
                 int64_t(c.rope_freq_factors.size()));
  for (int l = 0; l < c.n_layers; ++l) {
    const Block& b = w.blocks[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", b.ln1.g);
    vec(p + "ffn_norm.weight", b.ln3.g);
    mat(p + "attn_q.weight", b.attn.q.W);
    mat(p + "attn_k.weight", b.attn.k.W);
    mat(p + "attn_v.weight", b.attn.v.W);
    mat(p + "attn_output.weight", b.attn.o.W);
    vec(p + "attn_q.bias", b.attn.q.b);
    vec(p + "attn_k.bias", b.attn.k.b);
    vec(p + "attn_v.bias", b.attn.v.b);
    vec(p + "attn_output.bias", b.attn.o.b);
    vec(p + "attn_q_norm.weight", b.attn.q_norm.g);
    vec(p + "attn_k_norm.weight", b.attn.k_norm.g);
    vec(p + "post_attention_norm.weight", b.post_attn.g);
    vec(p + "post_ffw_norm.weight", b.post_ffn.g);
    mat(p + "ffn_gate.weight", b.ffn.gate.W);
    mat(p + "ffn_up.weight", b.ffn.up.W);
    mat(p + "ffn_down.weight", b.ffn.down.W);
  }
  return g.bytes();
}

}  // namespace ds::test
