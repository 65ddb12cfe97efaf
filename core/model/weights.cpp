#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "perf/memory.h"
#include "util/error.h"

namespace ds {

namespace {

// Allocates the large matrices of a Weights without touching them, then asks for
// huge pages over each one and, when the allocations sit next to each other (large
// allocations are separate mappings that the kernel places side by side), over the
// whole span, which also covers the 2 MB pages that straddle two matrices. Only then
// are the zeros written (if wanted), so the first touch faults in huge pages.
class BigAlloc {
 public:
  explicit BigAlloc(Precision p) : p_(p) {}
  // The buffers keep their addresses when the matrices are moved into place.
  void matrix(MatRM& m, Mat16& h, int64_t rows, int64_t cols) {
    if (p_ == Precision::F32) {
      m.resize(rows, cols);  // uninitialised
      add(m.data(), size_t(m.size()) * sizeof(float));
    } else {
      h.type = p_;
      h.rows = rows;
      h.cols = cols;
      h.data.resize(size_t(rows * cols));  // default-initialised: not touched
      add(h.data.data(), size_t(rows * cols) * sizeof(uint16_t));
    }
  }
  void finish(bool zero) {
    size_t sum = 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (auto [q, n] : spans_) {
      advise_huge_pages(q, n);
      sum += n;
      lo = std::min(lo, reinterpret_cast<uintptr_t>(q));
      hi = std::max(hi, reinterpret_cast<uintptr_t>(q) + n);
    }
    if (hi > lo && double(hi - lo) <= 1.02 * double(sum)) advise_huge_pages(reinterpret_cast<void*>(lo), hi - lo);
    if (zero)
      for (auto [q, n] : spans_) std::memset(q, 0, n);
  }

 private:
  void add(void* q, size_t n) {
    if (n) spans_.push_back({q, n});
  }
  Precision p_;
  std::vector<std::pair<void*, size_t>> spans_;
};

// The matrices are allocated at precision p: float32 in W, else 16-bit in W16.
Linear make_linear(int out, int in, bool bias, BigAlloc& big) {
  Linear l;
  big.matrix(l.W, l.W16, out, in);
  if (bias) l.b = Vec::Zero(out);
  return l;
}

Norm make_norm(const Config& c) {
  Norm n;
  n.g = Vec::Ones(c.d_model);
  if (c.norm == NormKind::LayerNorm && c.norm_bias) n.b = Vec::Zero(c.d_model);
  return n;
}

Block make_block(const Config& c, bool cross, BigAlloc& big) {
  Block b;
  b.ln1 = make_norm(c);
  if (cross) b.ln2 = make_norm(c);
  b.ln3 = make_norm(c);
  auto attn = [&](Attention& a) {
    a.q = make_linear(c.q_dim(), c.d_model, c.attn_bias, big);
    a.k = make_linear(c.kv_dim(), c.d_model, c.attn_bias, big);
    a.v = make_linear(c.kv_dim(), c.d_model, c.attn_bias, big);
    a.o = make_linear(c.d_model, c.q_dim(), c.attn_bias, big);
  };
  attn(b.attn);
  if (cross) attn(b.cross);
  b.ffn.up = make_linear(c.d_ff, c.d_model, c.ffn_bias, big);
  if (c.ffn == FFNKind::SwiGLU) b.ffn.gate = make_linear(c.d_ff, c.d_model, c.ffn_bias, big);
  b.ffn.down = make_linear(c.d_model, c.d_ff, c.ffn_bias, big);
  return b;
}

void add(std::vector<Weights::TensorRef>& out, const std::string& name, MatRM& m) {
  if (m.size()) out.push_back({name, m.data(), m.rows(), m.cols()});
}
void add(std::vector<Weights::TensorRef>& out, const std::string& name, MatRM& m, Mat16& h) {
  if (!h.empty())
    out.push_back({name, nullptr, h.rows, h.cols, h.data.data(), h.type});
  else
    add(out, name, m);
}
void add(std::vector<Weights::TensorRef>& out, const std::string& name, Vec& v) {
  if (v.size()) out.push_back({name, v.data(), v.size(), 1});
}
void add_norm(std::vector<Weights::TensorRef>& out, const std::string& name, Norm& n) {
  add(out, name + ".g", n.g);
  add(out, name + ".b", n.b);
}
void add_linear(std::vector<Weights::TensorRef>& out, const std::string& name, Linear& l) {
  add(out, name + ".W", l.W, l.W16);
  add(out, name + ".b", l.b);
}
void add_block(std::vector<Weights::TensorRef>& out, const std::string& p, Block& b) {
  add_norm(out, p + ".ln1", b.ln1);
  add_norm(out, p + ".ln2", b.ln2);
  add_norm(out, p + ".ln3", b.ln3);
  for (auto [name, a] : {std::pair<const char*, Attention*>{"attn", &b.attn}, {"cross_attn", &b.cross}}) {
    add_linear(out, p + "." + name + ".q", a->q);
    add_linear(out, p + "." + name + ".k", a->k);
    add_linear(out, p + "." + name + ".v", a->v);
    add_linear(out, p + "." + name + ".o", a->o);
  }
  add_linear(out, p + ".mlp.up", b.ffn.up);
  add_linear(out, p + ".mlp.gate", b.ffn.gate);
  add_linear(out, p + ".mlp.down", b.ffn.down);
}

}  // namespace

void Mat16::resize(Precision p, int64_t r, int64_t c) {
  if (p == Precision::F32) throw Error("Mat16 holds bfloat16 or float16 values");
  type = p;
  rows = r;
  cols = c;
  data.clear();
  data.shrink_to_fit();
  data.resize(size_t(r * c));  // default-initialised: not yet touched
  advise_huge_pages(data.data(), size_t(r * c) * sizeof(uint16_t));
  std::fill(data.begin(), data.end(), uint16_t(0));
}

void Mat16::row(int64_t r, float* out) const { widen_rows(data.data(), type, cols, r, r + 1, out); }

void MatView::row(int64_t r, float* out) const {
  if (type == Precision::F32)
    std::copy_n(static_cast<const float*>(data) + r * cols, cols, out);
  else
    widen_rows(static_cast<const uint16_t*>(data), type, cols, r, r + 1, out);
}

namespace {
void narrow_one(MatRM& m, Mat16& h, Precision p) {
  if (!m.size()) return;
  h.resize(p, m.rows(), m.cols());
  ds::narrow(m.data(), m.size(), p, h.data.data());
  m = MatRM();
}
void narrow_block(Block& b, Precision p) {
  for (Linear* l : {&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o, &b.cross.q, &b.cross.k, &b.cross.v, &b.cross.o,
                    &b.ffn.up, &b.ffn.gate, &b.ffn.down})
    narrow_one(l->W, l->W16, p);
}
}  // namespace

void Weights::narrow(Precision p) {
  const Precision cur = precision();
  if (p == cur) return;
  if (cur != Precision::F32)
    throw Error(std::string("the weights are already ") + precision_name(cur) + "; cannot convert them to " +
                precision_name(p));
  if (p == Precision::F32) return;
  narrow_one(tok_embed, tok_embed16, p);
  narrow_one(lm_head, lm_head16, p);
  narrow_one(enc_tok_embed, enc_tok_embed16, p);
  for (auto& b : blocks) narrow_block(b, p);
  for (auto& b : enc_blocks) narrow_block(b, p);
}

int64_t Weights::bytes() const {
  int64_t n = 0;
  for (auto& t : const_cast<Weights*>(this)->tensors()) n += t.rows * t.cols * precision_bytes(t.type);
  return n;
}

void Weights::allocate_matrix(Precision p, MatRM& m, Mat16& h, int64_t rows, int64_t cols) {
  BigAlloc big(p);
  big.matrix(m, h, rows, cols);
  big.finish(false);
}

Weights Weights::zeros(const Config& c, Precision p) { return build(c, p, true); }
Weights Weights::uninitialized(const Config& c, Precision p) { return build(c, p, false); }

Weights Weights::build(const Config& c, Precision p, bool zero) {
  c.validate();
  Weights w;
  BigAlloc big(p);
  // Blocks first, in the order a token reads them, then the head.
  w.blocks.reserve(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) w.blocks.push_back(make_block(c, c.encoder_decoder, big));
  big.matrix(w.tok_embed, w.tok_embed16, c.vocab_size, c.d_model);
  if (!c.tied_head) big.matrix(w.lm_head, w.lm_head16, c.vocab_size, c.d_model);
  if (c.pos == PosKind::Learned) w.pos_embed = MatRM::Zero(c.max_seq, c.d_model);
  if (c.final_norm) w.ln_final = make_norm(c);
  if (c.encoder_decoder) {
    if (c.pos == PosKind::Learned) w.enc_pos_embed = MatRM::Zero(c.max_src, c.d_model);
    w.enc_blocks.reserve(size_t(c.n_enc_layers));
    for (int l = 0; l < c.n_enc_layers; ++l) w.enc_blocks.push_back(make_block(c, false, big));
    if (c.enc_final_norm) w.enc_ln_final = make_norm(c);
  }
  big.finish(zero);
  return w;
}

Weights Weights::random(const Config& c, uint64_t seed, float scale) {
  Weights w = zeros(c);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& t : w.tensors()) {
    if (!t.data) continue;
    bool is_norm_gain = t.name.size() > 2 && t.name.compare(t.name.size() - 2, 2, ".g") == 0;
    for (int64_t i = 0; i < t.rows * t.cols; ++i) {
      float r = nd(gen);
      t.data[i] = is_norm_gain ? 1.0f + 0.1f * r : scale * r;
    }
  }
  return w;
}

std::vector<Weights::TensorRef> Weights::tensors() {
  std::vector<TensorRef> out;
  add(out, "tok_embed", tok_embed, tok_embed16);
  add(out, "pos_embed", pos_embed);
  for (size_t l = 0; l < blocks.size(); ++l) add_block(out, "blocks." + std::to_string(l), blocks[l]);
  add_norm(out, "ln_final", ln_final);
  add(out, "lm_head", lm_head, lm_head16);
  add(out, "encoder.tok_embed", enc_tok_embed, enc_tok_embed16);
  add(out, "encoder.pos_embed", enc_pos_embed);
  for (size_t l = 0; l < enc_blocks.size(); ++l)
    add_block(out, "encoder.blocks." + std::to_string(l), enc_blocks[l]);
  add_norm(out, "encoder.ln_final", enc_ln_final);
  return out;
}

int64_t Weights::parameter_count() const {
  int64_t n = 0;
  for (auto& t : const_cast<Weights*>(this)->tensors()) n += t.rows * t.cols;
  return n;
}

void Weights::check_finite() const {
  for (auto& t : const_cast<Weights*>(this)->tensors()) {
    for (int64_t i = 0; i < t.rows * t.cols; ++i) {
      const float v = t.data ? t.data[i] : widen(t.data16[i], t.type);
      if (!std::isfinite(v)) {
        throw Error("weight tensor " + t.name + " holds a " + (std::isnan(v) ? "NaN" : "infinite") +
                    " value at flat index " + std::to_string(i));
      }
    }
  }
}

}  // namespace ds
