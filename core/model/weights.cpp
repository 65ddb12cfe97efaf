#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "perf/memory.h"
#include "util/error.h"

namespace ds {

bool weights_in_range(const float* v, int64_t n) {
  constexpr uint32_t kMax = std::bit_cast<uint32_t>(kMaxWeightMagnitude);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= (std::bit_cast<uint32_t>(v[i]) & 0x7FFFFFFFu) > kMax ? 1u : 0u;
  return bad == 0;
}

bool weights_in_range(const uint16_t* v, int64_t n, Precision p) {
  constexpr uint32_t kMax = std::bit_cast<uint32_t>(kMaxWeightMagnitude);
  uint32_t bad = 0;
  if (p == Precision::BF16) {
    for (int64_t i = 0; i < n; ++i) bad |= (uint32_t{v[i]} << 16 & 0x7FFFFFFFu) > kMax ? 1u : 0u;
  } else {
    for (int64_t i = 0; i < n; ++i) bad |= (~v[i] & 0x7C00) == 0 ? 1u : 0u;
  }
  return bad == 0;
}

namespace {

// Every large matrix of w (stored in W/float32 or in its 16-bit twin), in the order
// a token reads them: each decoder block (attention, cross-attention, gate, up,
// down), the head, the token embedding, then the encoder's.
template <class F>
void each_matrix(Weights& w, F&& f) {
  auto block = [&](Block& b) {
    for (Linear* l : {&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o, &b.cross.q, &b.cross.k, &b.cross.v, &b.cross.o,
                      &b.ffn.gate, &b.ffn.up, &b.ffn.down})
      f(l->W, l->W16);
  };
  for (Block& b : w.blocks) block(b);
  f(w.lm_head, w.lm_head16);
  f(w.tok_embed, w.tok_embed16);
  for (Block& b : w.enc_blocks) block(b);
  f(w.enc_tok_embed, w.enc_tok_embed16);
}

// Places large matrices in one block: matrix() records each one (its shape is m's),
// finish() allocates the block (perf/memory.h) and points every matrix at its part,
// in the order recorded, each starting on a 64-byte boundary. At float32 the part
// becomes m's storage; at a 16-bit precision it becomes h's and m is left as it is.
class BigAlloc {
 public:
  explicit BigAlloc(Precision p) : p_(p) {}
  void matrix(WMat& m, Mat16& h) {
    const int64_t n = m.rows() * m.cols();
    if (n == 0) return;
    const size_t bytes = size_t(n) * (p_ == Precision::F32 ? sizeof(float) : sizeof(uint16_t));
    parts_.push_back({&m, &h, m.rows(), m.cols(), total_});
    total_ += (bytes + 63) / 64 * 64;
  }
  // Returns the block (null when there are no large matrices).
  Keep finish(bool check_memory = false) {
    if (parts_.empty()) return nullptr;
    if (check_memory)
      if (std::string why = weights_memory_shortfall(total_, available_memory_bytes(), p_); !why.empty())
        throw Error(why);
    Keep block;
    try {
      block = allocate_weight_block(total_);
    } catch (const Error& e) {
      // Refused by the system (a limit on this process, say): the same advice.
      throw Error(std::string(e.what()) + " for the weights" +
                  (p_ == Precision::F32 ? "; open the model in bfloat16 (--precision bf16), which needs half" : ""));
    }
    char* base = static_cast<char*>(block.get());
    for (const Part& q : parts_) {
      if (p_ == Precision::F32) {
        q.m->place(reinterpret_cast<float*>(base + q.offset), q.rows, q.cols, block);
      } else {
        q.h->type = p_;
        q.h->rows = q.rows;
        q.h->cols = q.cols;
        q.h->data.place(reinterpret_cast<uint16_t*>(base + q.offset), size_t(q.rows * q.cols), block);
      }
    }
    return block;
  }

 private:
  struct Part {
    WMat* m;
    Mat16* h;
    int64_t rows, cols;
    size_t offset;
  };
  Precision p_;
  std::vector<Part> parts_;
  size_t total_ = 0;
};

// Only the shape: storage comes from BigAlloc once the whole structure is built.
void shape(WMat& m, int64_t rows, int64_t cols) { m.place(nullptr, rows, cols, {}); }

Linear make_linear(int out, int in, bool bias) {
  Linear l;
  shape(l.W, out, in);
  if (bias) l.b = Vec::Zero(out);
  return l;
}

Norm make_norm(const Config& c) {
  Norm n;
  n.g = Vec::Ones(c.d_model);
  if (c.norm == NormKind::LayerNorm && c.norm_bias) n.b = Vec::Zero(c.d_model);
  return n;
}

Block make_block(const Config& c, bool cross) {
  Block b;
  b.ln1 = make_norm(c);
  if (cross) b.ln2 = make_norm(c);
  b.ln3 = make_norm(c);
  if (c.sandwich_norm) b.post_attn = make_norm(c), b.post_ffn = make_norm(c);
  auto attn = [&](Attention& a) {
    if (c.qk_norm) a.q_norm.g = a.k_norm.g = Vec::Ones(c.d_head);
    a.q = make_linear(c.q_dim(), c.d_model, c.attn_bias);
    a.k = make_linear(c.kv_dim(), c.d_model, c.attn_bias);
    a.v = make_linear(c.kv_dim(), c.d_model, c.attn_bias);
    a.o = make_linear(c.d_model, c.q_dim(), c.attn_bias);
  };
  attn(b.attn);
  if (cross) attn(b.cross);
  b.ffn.up = make_linear(c.d_ff, c.d_model, c.ffn_bias);
  if (c.gated()) b.ffn.gate = make_linear(c.d_ff, c.d_model, c.ffn_bias);
  b.ffn.down = make_linear(c.d_model, c.d_ff, c.ffn_bias);
  return b;
}

void add(std::vector<Weights::TensorRef>& out, const std::string& name, MatRM& m) {
  if (m.size()) out.push_back({name, m.data(), m.rows(), m.cols()});
}
void add(std::vector<Weights::TensorRef>& out, const std::string& name, WMat& m, Mat16& h) {
  if (!h.empty())
    out.push_back({name, nullptr, h.rows, h.cols, h.data.data(), h.type, true});
  else if (m.size())
    out.push_back({name, m.data(), m.rows(), m.cols(), nullptr, Precision::F32, true});
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
  add_norm(out, p + ".post_attn", b.post_attn);
  add_norm(out, p + ".post_ffn", b.post_ffn);
  for (auto [name, a] : {std::pair<const char*, Attention*>{"attn", &b.attn}, {"cross_attn", &b.cross}}) {
    add_norm(out, p + "." + name + ".q_norm", a->q_norm);
    add_norm(out, p + "." + name + ".k_norm", a->k_norm);
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

void WMat::resize(Index r, Index c) {
  if (r * c == size()) {
    place(data(), r, c, std::move(keep_));
    return;
  }
  if (r * c == 0) {
    place(nullptr, r, c, {});
    return;
  }
  Keep own = allocate_aligned(size_t(r * c) * sizeof(float));
  float* p = static_cast<float*>(own.get());  // before own is moved from
  place(p, r, c, std::move(own));
}

void WMat::place(float* p, Index r, Index c, Keep keep) {
  keep_ = std::move(keep);
  tiles_ = false;
  new (static_cast<Base*>(this)) Base(p, r, c);  // rebinds the map (the documented Eigen idiom)
}

Buf16::Buf16(const Buf16& o) { *this = o; }

Buf16& Buf16::operator=(const Buf16& o) {
  if (this == &o) return *this;
  if (o.n_ == 0) {
    place(nullptr, 0, {});
    return *this;
  }
  Keep own = allocate_aligned(o.n_ * sizeof(uint16_t));
  uint16_t* p = static_cast<uint16_t*>(own.get());
  std::copy_n(o.p_, o.n_, p);
  place(p, o.n_, std::move(own));
  return *this;
}

void Mat16::row(int64_t r, float* out) const {
  ds::rows_f32(data.data(), type, cols, tiles ? tile_rows(rows) : 0, r, r + 1, out);
}

namespace {
// Every large matrix's storage as raw memory: f(data, element bytes, rows, cols,
// in_tiles), where f may change in_tiles (the matrix's flag).
template <class F>
void each_storage(Weights& w, F&& f) {
  each_matrix(w, [&](WMat& m, Mat16& h) {
    if (!h.empty() && is_quantized(h.type)) return;  // blocks of a GGUF file: never in tiles
    if (!h.empty()) {
      f(static_cast<void*>(h.data.data()), int(sizeof(uint16_t)), h.rows, h.cols, h.tiles);
    } else if (m.size()) {
      bool on = m.tiles();
      f(static_cast<void*>(m.data()), int(sizeof(float)), int64_t(m.rows()), int64_t(m.cols()), on);
      m.set_tiles(on);
    }
  });
}
}  // namespace

void Weights::use_mapped_file(const std::shared_ptr<const MappedFile>& file,
                              const std::map<const float*, float*>& where) {
  const Keep keep(file, const_cast<char*>(file->data()));
  each_matrix(*this, [&](WMat& m, Mat16&) {
    if (m.size() == 0) return;
    auto it = where.find(m.data());
    if (it != where.end()) m.place(it->second, m.rows(), m.cols(), keep);
  });
  large_block = keep;
  mapped = file;
}

void Weights::to_tiles() {
  each_storage(*this, [](void* p, int esz, int64_t rows, int64_t cols, bool& on) {
    if (on || !tiles_fit(rows, cols)) return;
    rows_to_tiles(p, esz, rows, cols);
    on = true;
  });
}

void Weights::mark_tiles() {
  each_storage(*this, [](void*, int, int64_t rows, int64_t cols, bool& on) { on = on || tiles_fit(rows, cols); });
}

void Weights::to_rows() {
  each_storage(*this, [](void* p, int esz, int64_t rows, int64_t cols, bool& on) {
    if (on) tiles_to_rows(p, esz, rows, cols);
    on = false;
  });
}

bool Weights::in_tiles() {
  bool any = false;
  each_storage(*this, [&](void*, int, int64_t, int64_t, bool& on) { any = any || on; });
  return any;
}

void Weights::narrow(Precision p) {
  const Precision cur = precision();
  if (p == cur) return;
  if (cur != Precision::F32)
    throw Error(std::string("the weights are already ") + precision_name(cur) + "; cannot convert them to " +
                precision_name(p));
  if (p == Precision::F32) return;
  BigAlloc big(p);
  each_matrix(*this, [&](WMat& m, Mat16& h) { big.matrix(m, h); });
  large_block = big.finish();
  each_matrix(*this, [&](WMat& m, Mat16& h) {
    if (m.size()) ds::narrow(m.data(), m.size(), p, h.data.data());
    h.tiles = m.tiles();  // element by element: the storage order carries over
    m = WMat();
  });
}

int64_t Weights::bytes() const {
  int64_t n = 0;
  for (auto& t : const_cast<Weights*>(this)->tensors()) n += t.rows * row_bytes(t.type, t.cols);
  return n;
}

void Weights::allocate_matrix(Precision p, WMat& m, Mat16& h, int64_t rows, int64_t cols) {
  shape(m, rows, cols);
  BigAlloc big(p);
  big.matrix(m, h);
  big.finish();
  if (p != Precision::F32) m = WMat();
}

std::string weights_memory_shortfall(size_t need, size_t available, Precision p) {
  if (available == 0 || need <= available) return "";
  auto gb = [](double b) {
    char t[32];
    std::snprintf(t, sizeof t, "%.1f GB", b / 1e9);
    return std::string(t);
  };
  std::string s = "not enough memory for this model: its weights need " + gb(double(need)) + " in " +
                  precision_name(p) + " and " + gb(double(available)) + " is available";
  if (p == Precision::F32)
    return s + "; open it in bfloat16 (--precision bf16, or the precision box beside the model), which needs " +
           gb(double(need) / 2);
  return s + " (close other programs, or choose a smaller model)";
}

Weights Weights::zeros(const Config& c, Precision p, bool check_memory) {
  c.validate();
  Weights w;
  w.blocks.reserve(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) w.blocks.push_back(make_block(c, c.encoder_decoder));
  shape(w.tok_embed, c.vocab_size, c.d_model);
  if (!c.tied_head) shape(w.lm_head, c.vocab_size, c.d_model);
  if (c.pos == PosKind::Learned) w.pos_embed = MatRM::Zero(c.max_seq, c.d_model);
  if (c.final_norm) w.ln_final = make_norm(c);
  if (c.encoder_decoder) {
    if (c.pos == PosKind::Learned) w.enc_pos_embed = MatRM::Zero(c.max_src, c.d_model);
    w.enc_blocks.reserve(size_t(c.n_enc_layers));
    for (int l = 0; l < c.n_enc_layers; ++l) w.enc_blocks.push_back(make_block(c, false));
    if (c.enc_final_norm) w.enc_ln_final = make_norm(c);
  }
  // The structure is complete, so the matrices have their final addresses.
  BigAlloc big(p);
  each_matrix(w, [&](WMat& m, Mat16& h) { big.matrix(m, h); });
  w.large_block = big.finish(check_memory);
  if (p != Precision::F32) each_matrix(w, [](WMat& m, Mat16&) { m = WMat(); });
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
  for (size_t l = 0; l < enc_blocks.size(); ++l) add_block(out, "encoder.blocks." + std::to_string(l), enc_blocks[l]);
  add_norm(out, "encoder.ln_final", enc_ln_final);
  return out;
}

int64_t Weights::parameter_count() const {
  int64_t n = 0;
  for (auto& t : const_cast<Weights*>(this)->tensors()) n += t.rows * t.cols;
  return n;
}

void Weights::check_finite() const {
  std::vector<float> row;
  for (auto& t : const_cast<Weights*>(this)->tensors()) {
    for (int64_t i = 0; i < t.rows * t.cols; ++i) {
      if (is_quantized(t.type) && i % t.cols == 0) {  // blocks: decoded a row at a time
        row.resize(size_t(t.cols));
        rows_f32(t.data16, t.type, t.cols, 0, i / t.cols, i / t.cols + 1, row.data());
      }
      const float v = t.data ? t.data[i] : is_quantized(t.type) ? row[size_t(i % t.cols)] : widen(t.data16[i], t.type);
      if (!std::isfinite(v)) {
        throw Error("weight tensor " + t.name + " holds a " + (std::isnan(v) ? "NaN" : "infinite") +
                    " value at flat index " + std::to_string(i));
      }
      if (std::fabs(v) > kMaxWeightMagnitude) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
        throw Error("weight tensor " + t.name + " holds " + buf + " at flat index " + std::to_string(i) +
                    ", beyond the 1e10 in magnitude that any trained model stays far below (corrupted weights?)");
      }
    }
  }
}

}  // namespace ds
