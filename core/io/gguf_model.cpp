#include "io/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "perf/gemv.h"
#include "util/error.h"

namespace ds {

namespace {

constexpr const char* kArchs[] = {"llama", "qwen2", "qwen3", "gemma3"};

// Reads the hyper-parameters of `arch` from the "<arch>.*" keys.
class Keys {
 public:
  Keys(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(const std::string& k) const { return arch_ + "." + k; }
  int64_t need_int(const std::string& k, int64_t lo, int64_t hi) const {
    auto v = f_.get_int(key(k));
    if (!v) throw Error(f_.path() + ": metadata " + key(k) + " is missing");
    return check(k, *v, lo, hi);
  }
  int64_t opt_int(const std::string& k, int64_t dflt, int64_t lo, int64_t hi) const {
    auto v = f_.get_int(key(k));
    return v ? check(k, *v, lo, hi) : dflt;
  }
  double opt_float(const std::string& k, double dflt) const {
    auto v = f_.get_float(key(k));
    if (v && !std::isfinite(*v)) throw Error(f_.path() + ": metadata " + key(k) + " is not a finite number");
    return v.value_or(dflt);
  }

 private:
  int64_t check(const std::string& k, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi)
      throw Error(f_.path() + ": metadata " + key(k) + " is " + std::to_string(v) + ", outside " + std::to_string(lo) +
                  ".." + std::to_string(hi));
    return v;
  }
  const GgufFile& f_;
  std::string arch_;
};

// Rotary scaling: none or linear (a factor on the positions); others are refused.
void read_rope_scaling(const GgufFile& f, const Keys& k, Config& c) {
  const std::string type = f.get_string(k.key("rope.scaling.type")).value_or("none");
  const double factor = k.opt_float("rope.scaling.factor", 0.0);
  if (type == "linear" || (type == "none" && factor != 0.0)) {
    if (factor < 0.0) throw Error(f.path() + ": " + k.key("rope.scaling.factor") + " is negative");
    c.rope_scale = factor == 0.0 ? 1.0f : float(1.0 / factor);
  } else if (type != "none") {
    throw Error(f.path() + ": rotary scaling '" + type + "' (" + k.key("rope.scaling.type") +
                ") is not supported; decoderscope reads 'none' and 'linear' (and Llama 3's rope_freqs.weight)");
  }
}

// The sliding-window layers of a gemma3 file: the pattern key (a period n: layer l is
// global when l % n == n - 1; or one bool per layer), by default 6.
void read_sliding(const GgufFile& f, const Keys& k, Config& c) {
  c.sliding_window = int(k.opt_int("attention.sliding_window", 0, 0, 1 << 24));
  if (c.sliding_window == 0) return;
  c.sliding_layers.assign(size_t(c.n_layers), 0);
  const std::string pk = k.key("attention.sliding_window_pattern");
  auto it = f.metadata().find(pk);
  if (it != f.metadata().end() && it->second.type == GgufFile::VType::Array) {
    if (it->second.elem != GgufFile::VType::Bool || it->second.count != uint64_t(c.n_layers))
      throw Error(f.path() + ": " + pk + " must hold one bool per layer");
    for (int l = 0; l < c.n_layers; ++l)
      c.sliding_layers[size_t(l)] =
          uint8_t(reinterpret_cast<const uint8_t*>(f.mapped()->data())[it->second.offset + uint64_t(l)] != 0);
  } else {
    const int n = int(k.opt_int("attention.sliding_window_pattern", 6, 0, 1 << 20));
    for (int l = 0; l < c.n_layers; ++l) c.sliding_layers[size_t(l)] = uint8_t(n == 0 || l % n < n - 1);
  }
  c.rope_theta_local = float(k.opt_float("rope.freq_base_swa", 10000.0));
}

Config read_config(const GgufFile& f, const std::string& arch, const VocabData& vocab) {
  const Keys k(f, arch);
  Config c;
  c.d_model = int(k.need_int("embedding_length", 1, 1 << 20));
  c.n_layers = int(k.need_int("block_count", 1, 4096));
  c.n_heads = int(k.need_int("attention.head_count", 1, 4096));
  c.n_kv_heads = int(k.opt_int("attention.head_count_kv", c.n_heads, 1, 4096));
  c.d_head = int(k.opt_int("attention.key_length", c.d_model / c.n_heads, 1, 1 << 16));
  if (k.opt_int("attention.value_length", c.d_head, 1, 1 << 16) != c.d_head)
    throw Error(f.path() + ": value heads of another size than key heads are not supported");
  if (k.opt_int("rope.dimension_count", c.d_head, 0, 1 << 16) != c.d_head)
    throw Error(f.path() + ": rotary positions on part of each head (" + k.key("rope.dimension_count") +
                ") are not supported");
  c.d_ff = int(k.need_int("feed_forward_length", 1, 1 << 24));
  c.max_seq = int(std::min<int64_t>(k.opt_int("context_length", 2048, 1, int64_t(1) << 40), kGgufMaxContext));
  c.vocab_size = int(vocab.tokens.size());
  c.norm = NormKind::RMSNorm;
  c.norm_place = NormPlace::Pre;
  c.pos = PosKind::Rotary;
  c.ffn = arch == "gemma3" ? FFNKind::GeGLU : FFNKind::SwiGLU;
  c.rope_style = arch == "llama" ? RopeStyle::Interleaved : RopeStyle::Half;
  c.attn_bias = arch == "qwen2";
  c.ffn_bias = c.norm_bias = false;
  c.final_norm = true;
  c.norm_eps = float(k.opt_float("attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = float(k.opt_float("rope.freq_base", 10000.0));
  read_rope_scaling(f, k, c);
  c.qk_norm = arch == "qwen3" || arch == "gemma3";
  if (arch == "gemma3") {
    c.scale_embed = c.sandwich_norm = true;
    read_sliding(f, k, c);
    // Gemma 3 27B (62 layers) scales queries by 1/sqrt(d_model / heads), the others by
    // 1/sqrt(d_head) (llama.cpp's gemma3 rule).
    if (c.n_layers == 62) c.attn_scale = float(1.0 / std::sqrt(double(c.d_model / c.n_heads)));
    c.logit_softcap = float(k.opt_float("final_logit_softcapping", 0.0));
  }
  c.bos_id = vocab.bos_id;
  c.eos_id = vocab.eos_id;
  c.pad_id = -1;
  c.tied_head = f.find("output.weight") == nullptr;
  c.validate();
  return c;
}

// Whether every block's scales (the only values of a quantized block that can be NaN or
// infinite) are finite: float16 values at fixed offsets of each block.
bool quant_scales_finite(Precision p, const uint8_t* d, uint64_t bytes) {
  const int bb = block_bytes(p);
  const int at0 = p == Precision::Q6_K ? 208 : 0;
  const bool two = p == Precision::Q4_K || p == Precision::Q5_K;  // d and dmin
  for (uint64_t o = 0; o + uint64_t(bb) <= bytes; o += uint64_t(bb)) {
    uint16_t h[2] = {0, 0};
    std::memcpy(h, d + o + at0, two ? 4 : 2);
    if ((h[0] & 0x7C00) == 0x7C00 || (h[1] & 0x7C00) == 0x7C00) return false;
  }
  return true;
}

class Placer {
 public:
  Placer(const GgufFile& f, Precision narrow_to)
      : f_(f), narrow_(narrow_to), keep_(f.mapped(), const_cast<char*>(f.mapped()->data())) {}

  const GgufFile::Tensor& tensor(const std::string& name, int64_t rows, int64_t cols, bool matrix) {
    const GgufFile::Tensor* t = f_.find(name);
    if (!t) throw Error(f_.path() + ": tensor " + name + " is missing");
    used_.push_back(name);
    const bool shape_ok = matrix ? t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows
                                 : t->dims.size() == 1 && t->dims[0] == cols;
    if (!shape_ok)
      throw Error(
          f_.path() + ": tensor " + name + " has shape " + t->shape() + ", expected " +
          (matrix ? "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]" : "[" + std::to_string(cols) + "]") +
          " for this architecture's hyper-parameters");
    check_values(*t);
    return *t;
  }

  // A large matrix, used where the file has it (or narrowed, for float32 and a 16-bit
  // precision).
  void matrix(const std::string& name, int64_t rows, int64_t cols, WMat& m, Mat16& h) {
    const GgufFile::Tensor& t = tensor(name, rows, cols, true);
    const uint8_t* p = f_.data(t);
    const bool narrowed = t.type == Precision::F32 && narrow_ != Precision::F32;
    bytes_[narrowed ? narrow_ : t.type] += narrowed ? t.bytes / 2 : t.bytes;  // as kept in memory
    if (t.type == Precision::F32 && narrow_ == Precision::F32) {
      m.place(reinterpret_cast<float*>(const_cast<uint8_t*>(p)), rows, cols, keep_);
      return;
    }
    if (t.type == Precision::F32) {  // narrowed into storage of its own
      Weights::allocate_matrix(narrow_, m, h, rows, cols);
      ds::narrow(reinterpret_cast<const float*>(p), rows * cols, narrow_, h.data.data());
      return;
    }
    h.type = t.type;
    h.rows = rows;
    h.cols = cols;
    h.tiles = false;
    h.data.place(reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(p)), size_t(t.bytes / 2), keep_);
  }
  // A small tensor (norm gains, biases, rotary factors) as float32.
  Vec vec(const std::string& name, int64_t n) {
    const GgufFile::Tensor& t = tensor(name, 1, n, false);
    Vec v(n);
    rows_f32(f_.data(t), t.type, n, 0, 0, 1, v.data());
    return v;
  }
  bool has(const std::string& name) const { return f_.find(name) != nullptr; }
  const std::vector<std::string>& used() const { return used_; }
  const std::map<Precision, uint64_t>& bytes() const { return bytes_; }
  const Keep& keep() const { return keep_; }

 private:
  void check_values(const GgufFile::Tensor& t) const {
    const uint8_t* p = f_.data(t);
    bool ok = true;
    if (t.type == Precision::F32) {
      std::vector<float> buf(4096);  // the file's bytes may be unaligned for float32
      for (int64_t i = 0; i < t.numel() && ok; i += 4096) {
        const int64_t n = std::min<int64_t>(4096, t.numel() - i);
        std::memcpy(buf.data(), p + i * 4, size_t(n) * 4);
        ok = weights_in_range(buf.data(), n);
      }
    } else if (t.type == Precision::F16 || t.type == Precision::BF16) {
      ok = weights_in_range(reinterpret_cast<const uint16_t*>(p), t.numel(), t.type);
    } else {
      ok = quant_scales_finite(t.type, p, t.bytes);
    }
    if (!ok)
      throw Error(f_.path() + ": tensor " + t.name + " holds NaN, infinite or absurdly large values " +
                  "(beyond 1e10 in magnitude): the file is damaged");
  }
  const GgufFile& f_;
  Precision narrow_;
  Keep keep_;
  std::vector<std::string> used_;
  std::map<Precision, uint64_t> bytes_;
};

Block read_block(Placer& pl, const Config& c, int l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  Block b;
  b.ln1.g = pl.vec(p + "attn_norm.weight", c.d_model);
  b.ln3.g = pl.vec(p + "ffn_norm.weight", c.d_model);
  Attention& a = b.attn;
  pl.matrix(p + "attn_q.weight", c.q_dim(), c.d_model, a.q.W, a.q.W16);
  pl.matrix(p + "attn_k.weight", c.kv_dim(), c.d_model, a.k.W, a.k.W16);
  pl.matrix(p + "attn_v.weight", c.kv_dim(), c.d_model, a.v.W, a.v.W16);
  pl.matrix(p + "attn_output.weight", c.d_model, c.q_dim(), a.o.W, a.o.W16);
  // Biases wherever the file has them (qwen2: q, k and v).
  if (pl.has(p + "attn_q.bias")) a.q.b = pl.vec(p + "attn_q.bias", c.q_dim());
  if (pl.has(p + "attn_k.bias")) a.k.b = pl.vec(p + "attn_k.bias", c.kv_dim());
  if (pl.has(p + "attn_v.bias")) a.v.b = pl.vec(p + "attn_v.bias", c.kv_dim());
  if (pl.has(p + "attn_output.bias")) a.o.b = pl.vec(p + "attn_output.bias", c.d_model);
  if (c.qk_norm) {
    a.q_norm.g = pl.vec(p + "attn_q_norm.weight", c.d_head);
    a.k_norm.g = pl.vec(p + "attn_k_norm.weight", c.d_head);
  }
  if (c.sandwich_norm) {
    b.post_attn.g = pl.vec(p + "post_attention_norm.weight", c.d_model);
    b.post_ffn.g = pl.vec(p + "post_ffw_norm.weight", c.d_model);
  }
  FeedForward& ff = b.ffn;
  pl.matrix(p + "ffn_gate.weight", c.d_ff, c.d_model, ff.gate.W, ff.gate.W16);
  pl.matrix(p + "ffn_up.weight", c.d_ff, c.d_model, ff.up.W, ff.up.W16);
  pl.matrix(p + "ffn_down.weight", c.d_model, c.d_ff, ff.down.W, ff.down.W16);
  return b;
}

std::string storage_summary(const std::map<Precision, uint64_t>& bytes, Precision& main) {
  uint64_t total = 0;
  std::vector<std::pair<uint64_t, Precision>> order;  // largest share first
  for (auto [p, n] : bytes) order.push_back({n, p}), total += n;
  std::sort(order.rbegin(), order.rend());
  if (!order.empty()) main = order.front().second;
  std::string s;
  for (auto [n, p] : order) {
    if (!s.empty()) s += " + ";
    s += precision_name(p);
    if (order.size() > 1)
      s += " " + std::to_string(int(std::lround(100.0 * double(n) / double(total ? total : 1)))) + "%";
  }
  return s;
}

}  // namespace

const char* gguf_architectures() { return "llama (Llama 2 and 3.x, TinyLlama, SmolLM, Mistral), qwen2, qwen3, gemma3"; }

GgufModel load_gguf_model(const GgufFile& f, Precision precision) {
  GgufModel out;
  out.arch = f.get_string("general.architecture").value_or("");
  if (out.arch.empty()) throw Error(f.path() + ": general.architecture is missing");
  if (std::find(std::begin(kArchs), std::end(kArchs), out.arch) == std::end(kArchs))
    throw Error(f.path() + ": architecture '" + out.arch + "' is not supported; decoderscope opens " +
                gguf_architectures());
  out.name = f.get_string("general.name").value_or("");
  out.vocab = gguf_vocab(f);
  if (f.tensors().empty()) throw Error(f.path() + ": this GGUF file holds a vocabulary only, no weights");
  Config c = read_config(f, out.arch, out.vocab);
  Placer pl(f, precision);
  Weights& w = out.w;
  pl.matrix("token_embd.weight", c.vocab_size, c.d_model, w.tok_embed, w.tok_embed16);
  w.blocks.reserve(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) w.blocks.push_back(read_block(pl, c, l));
  w.ln_final.g = pl.vec("output_norm.weight", c.d_model);
  if (!c.tied_head) pl.matrix("output.weight", c.vocab_size, c.d_model, w.lm_head, w.lm_head16);
  if (pl.has("rope_freqs.weight")) {
    const Vec fr = pl.vec("rope_freqs.weight", c.d_head / 2);
    c.rope_freq_factors.assign(fr.data(), fr.data() + fr.size());
    c.validate();
  }
  for (const GgufFile::Tensor& t : f.tensors())
    if (std::find(pl.used().begin(), pl.used().end(), t.name) == pl.used().end())
      throw Error(f.path() + ": tensor " + t.name + " is not part of the " + out.arch +
                  " architecture as decoderscope reads it (a variant it does not know)");
  w.large_block = pl.keep();
  w.mapped = f.mapped();
  out.storage = storage_summary(pl.bytes(), out.main_type);
  out.cfg = std::move(c);
  return out;
}

}  // namespace ds
