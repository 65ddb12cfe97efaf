#include "model/weights.h"

#include <cmath>
#include <random>

#include "io/safetensors.h"
#include "perf/memory.h"
#include "util/error.h"

namespace ds {

namespace {

// A zero matrix whose pages are advised huge before the zeros are written.
MatRM zero_matrix(int64_t rows, int64_t cols) {
  MatRM m(rows, cols);
  advise_huge_pages(m.data(), size_t(m.size()) * sizeof(float));
  m.setZero();
  return m;
}

// The matrices are allocated at precision p: float32 in W, else 16-bit in W16.
Linear make_linear(int out, int in, bool bias, Precision p) {
  Linear l;
  if (p == Precision::F32)
    l.W = zero_matrix(out, in);
  else
    l.W16.resize(p, out, in);
  if (bias) l.b = Vec::Zero(out);
  return l;
}

Norm make_norm(const Config& c) {
  Norm n;
  n.g = Vec::Ones(c.d_model);
  if (c.norm == NormKind::LayerNorm && c.norm_bias) n.b = Vec::Zero(c.d_model);
  return n;
}

Block make_block(const Config& c, bool cross, Precision p) {
  Block b;
  b.ln1 = make_norm(c);
  if (cross) b.ln2 = make_norm(c);
  b.ln3 = make_norm(c);
  auto attn = [&](Attention& a) {
    a.q = make_linear(c.q_dim(), c.d_model, c.attn_bias, p);
    a.k = make_linear(c.kv_dim(), c.d_model, c.attn_bias, p);
    a.v = make_linear(c.kv_dim(), c.d_model, c.attn_bias, p);
    a.o = make_linear(c.d_model, c.q_dim(), c.attn_bias, p);
  };
  attn(b.attn);
  if (cross) attn(b.cross);
  b.ffn.up = make_linear(c.d_ff, c.d_model, c.ffn_bias, p);
  if (c.ffn == FFNKind::SwiGLU) b.ffn.gate = make_linear(c.d_ff, c.d_model, c.ffn_bias, p);
  b.ffn.down = make_linear(c.d_model, c.d_ff, c.ffn_bias, p);
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
  data.reserve(size_t(r * c));
  advise_huge_pages(data.data(), size_t(r * c) * sizeof(uint16_t));
  data.assign(size_t(r * c), 0);
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

Weights Weights::zeros(const Config& c, Precision p) {
  c.validate();
  Weights w;
  auto big = [&](MatRM& m, Mat16& h, int64_t r, int64_t cols) {
    if (p == Precision::F32)
      m = zero_matrix(r, cols);
    else
      h.resize(p, r, cols);
  };
  big(w.tok_embed, w.tok_embed16, c.vocab_size, c.d_model);
  if (c.pos == PosKind::Learned) w.pos_embed = MatRM::Zero(c.max_seq, c.d_model);
  for (int l = 0; l < c.n_layers; ++l) w.blocks.push_back(make_block(c, c.encoder_decoder, p));
  if (c.final_norm) w.ln_final = make_norm(c);
  if (!c.tied_head) big(w.lm_head, w.lm_head16, c.vocab_size, c.d_model);
  if (c.encoder_decoder) {
    if (c.pos == PosKind::Learned) w.enc_pos_embed = MatRM::Zero(c.max_src, c.d_model);
    for (int l = 0; l < c.n_enc_layers; ++l) w.enc_blocks.push_back(make_block(c, false, p));
    if (c.enc_final_norm) w.enc_ln_final = make_norm(c);
  }
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
      const float v = t.data ? t.data[i]
                             : (t.type == Precision::BF16 ? bf16_to_f32(t.data16[i]) : f16_to_f32(t.data16[i]));
      if (!std::isfinite(v)) {
        throw Error("weight tensor " + t.name + " holds a " + (std::isnan(v) ? "NaN" : "infinite") +
                    " value at flat index " + std::to_string(i));
      }
    }
  }
}

}  // namespace ds
