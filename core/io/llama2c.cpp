#include "io/llama2c.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"

namespace ds {

namespace {

constexpr int64_t kHeaderBytes = 7 * 4;

// Multiplication and addition that report int64 overflow instead of wrapping.
struct Checked {
  int64_t v = 0;
  bool ok = true;
};
Checked operator*(Checked a, Checked b) {
  Checked r;
  r.ok = a.ok && b.ok && !__builtin_mul_overflow(a.v, b.v, &r.v);
  return r;
}
Checked operator+(Checked a, Checked b) {
  Checked r;
  r.ok = a.ok && b.ok && !__builtin_add_overflow(a.v, b.v, &r.v);
  return r;
}
Checked C(int64_t v) { return Checked{v, true}; }

// The file format is little-endian; swap 4-byte words on a big-endian host.
void to_host(void* data, int64_t words) {
  if constexpr (std::endian::native == std::endian::big) {
    auto* p = static_cast<unsigned char*>(data);
    for (int64_t i = 0; i < words; ++i, p += 4) {
      std::swap(p[0], p[3]);
      std::swap(p[1], p[2]);
    }
  } else {
    (void)data;
    (void)words;
  }
}

struct Header {
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq_len;
};

std::string describe(const Header& h) {
  std::ostringstream o;
  o << "dim " << h.dim << ", hidden " << h.hidden << ", " << h.layers << " layers, " << h.heads << " heads, "
    << h.kv_heads << " kv heads, vocab " << h.vocab << ", seq_len " << h.seq_len;
  return o.str();
}

// Sequential reader over an opened checkpoint whose size has already been checked.
class Reader {
 public:
  Reader(std::ifstream& f, const std::string& path) : f_(f), path_(path) {}

  void read(void* dst, int64_t bytes, const std::string& what) {
    char* p = static_cast<char*>(dst);
    while (bytes > 0) {
      const int64_t chunk = bytes < (int64_t{1} << 28) ? bytes : (int64_t{1} << 28);
      f_.read(p, static_cast<std::streamsize>(chunk));
      if (f_.gcount() != static_cast<std::streamsize>(chunk)) {
        throw Error(path_ + ": read failed in " + what + " at byte " + std::to_string(pos_ + f_.gcount()) +
                    " (did the file change while loading?)");
      }
      p += chunk;
      pos_ += chunk;
      bytes -= chunk;
    }
  }
  void skip(int64_t bytes) {
    f_.seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
    if (!f_) throw Error(path_ + ": seek failed at byte " + std::to_string(pos_));
    pos_ += bytes;
  }

 private:
  std::ifstream& f_;
  const std::string& path_;
  int64_t pos_ = 0;
};

std::string tensor_label(const std::string& llama_name, int layer) {
  return llama_name + (layer >= 0 ? " (layer " + std::to_string(layer) + ")" : std::string());
}

// Rejects NaN, infinity or magnitudes beyond kMaxWeightMagnitude among the count values at v, which are values first ..
// first+count-1 of the tensor, naming it.
void check_finite(const std::string& path, const float* v, int64_t count, int64_t first, const std::string& what,
                  const std::string& our_name) {
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(v[i])) {
      throw Error(path + ": tensor " + what + " [" + our_name + "] holds " +
                  (std::isnan(v[i]) ? "a NaN" : "an infinite value") + " at index " + std::to_string(first + i));
    }
    if (std::fabs(v[i]) > kMaxWeightMagnitude) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v[i]));
      throw Error(path + ": tensor " + what + " [" + our_name + "] holds " + buf + " at index " +
                  std::to_string(first + i) +
                  ", beyond the 1e10 in magnitude that any trained model stays far below (a corrupted file?)");
    }
  }
}

// Reads count floats into dst and rejects NaN or infinity, naming the tensor.
void read_tensor(Reader& r, const std::string& path, float* dst, int64_t count, const std::string& llama_name,
                 int layer, const std::string& our_name) {
  const std::string what = tensor_label(llama_name, layer);
  r.read(dst, count * 4, what);
  to_host(dst, count);
  check_finite(path, dst, count, 0, what, our_name);
}

// Reads a float32 matrix of count values into m, or, when h holds a 16-bit matrix,
// into h a piece at a time through buf (rounded to nearest even): only the 16-bit
// copy of the whole matrix is ever held.
void read_matrix(Reader& r, const std::string& path, WMat& m, Mat16& h, int64_t count, const std::string& llama_name,
                 int layer, const std::string& our_name, std::vector<float>& buf) {
  if (h.empty()) return read_tensor(r, path, m.data(), count, llama_name, layer, our_name);
  const std::string what = tensor_label(llama_name, layer);
  constexpr int64_t kChunk = int64_t{1} << 18;
  buf.resize(static_cast<size_t>(std::min(count, kChunk)));
  for (int64_t i0 = 0; i0 < count; i0 += kChunk) {
    const int64_t n = std::min(kChunk, count - i0);
    r.read(buf.data(), n * 4, what);
    to_host(buf.data(), n);
    check_finite(path, buf.data(), n, i0, what, our_name);
    uint16_t* out = h.data.data() + i0;
    narrow(buf.data(), n, h.type, out);
    const uint16_t exp = h.type == Precision::BF16 ? 0x7F80 : 0x7C00;
    for (int64_t i = 0; i < n; ++i) {
      if ((out[i] & exp) == exp) {  // finite in the file, too large once narrowed
        char v[32];
        std::snprintf(v, sizeof v, "%.9g", static_cast<double>(buf[static_cast<size_t>(i)]));
        throw Error(path + ": tensor " + what + " [" + our_name + "] holds " + v + " at index " +
                    std::to_string(i0 + i) + ", beyond the range of " + precision_name(h.type) + " (load it as " +
                    (h.type == Precision::F16 ? "bfloat16 or float32)" : "float32)"));
      }
    }
  }
}

std::string layer_name(int l, const char* rest) { return "blocks." + std::to_string(l) + "." + rest; }

}  // namespace

Config llama2c_config(int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads, int vocab_size, int seq_len,
                      bool shared_classifier) {
  Config c;
  c.d_model = dim;
  c.n_layers = n_layers;
  c.n_enc_layers = 0;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.d_head = n_heads > 0 ? dim / n_heads : 0;
  c.d_ff = hidden_dim;
  c.vocab_size = vocab_size;
  c.max_seq = seq_len;
  c.norm = NormKind::RMSNorm;
  c.norm_place = NormPlace::Pre;
  c.pos = PosKind::Rotary;
  c.ffn = FFNKind::SwiGLU;
  c.encoder_decoder = false;
  c.tied_head = shared_classifier;
  c.attn_bias = false;
  c.ffn_bias = false;
  c.norm_bias = false;
  c.final_norm = true;
  c.enc_final_norm = false;
  c.scale_embed = false;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.bos_id = 1;
  c.eos_id = 2;
  c.pad_id = -1;
  return c;
}

namespace {

// Checks the header's fields one by one, and the file's size against the size they
// imply (in checked 64-bit arithmetic), before anything is allocated.
void check_header(const std::string& path, const Header& h, int64_t file_size) {
  auto bad = [&](const std::string& why) { throw Error(path + ": bad llama2.c header (" + describe(h) + "): " + why); };
  if (h.dim <= 0) bad("dim must be positive");
  if (h.hidden <= 0) bad("hidden_dim must be positive");
  if (h.layers <= 0) bad("n_layers must be positive");
  if (h.heads <= 0) bad("n_heads must be positive");
  if (h.kv_heads <= 0) bad("n_kv_heads must be positive");
  if (h.vocab == 0 || h.vocab == INT32_MIN) bad("vocab_size must be nonzero and above -2^31");
  if (h.seq_len <= 0) bad("seq_len must be positive");
  if (h.dim % h.heads != 0) bad("n_heads does not divide dim");
  if (h.kv_heads > h.heads || h.heads % h.kv_heads != 0) bad("n_kv_heads does not divide n_heads");
  const bool shared = h.vocab > 0;
  const int64_t vocab = shared ? h.vocab : -int64_t{h.vocab};
  const int64_t head_size = h.dim / h.heads;
  if (head_size % 2 != 0) bad("head size " + std::to_string(head_size) + " is odd (rotary needs pairs)");
  const int64_t kv_dim = head_size * h.kv_heads;

  // The exact file size the header implies, in checked int64 arithmetic.
  const Checked D = C(h.dim), L = C(h.layers), H = C(h.hidden), V = C(vocab), KV = C(kv_dim);
  Checked floats = V * D                           // token_embedding_table
                   + L * D                         // rms_att_weight
                   + L * D * D                     // wq
                   + C(2) * L * KV * D             // wk, wv
                   + L * D * D                     // wo
                   + L * D                         // rms_ffn_weight
                   + C(3) * L * H * D              // w1, w2, w3
                   + D                             // rms_final_weight
                   + C(h.seq_len) * C(head_size);  // freq_cis_real + freq_cis_imag
  if (!shared) floats = floats + V * D;            // wcls
  const Checked need = C(kHeaderBytes) + C(4) * floats;
  if (!need.ok) bad("the sizes it implies overflow a 64-bit byte count");
  if (file_size < need.v) {
    throw Error(path + ": file is " + std::to_string(file_size) + " bytes but the header (" + describe(h) + ") needs " +
                std::to_string(need.v) + " (truncated, or not a llama2.c checkpoint)");
  }
  if (file_size > need.v) {
    throw Error(path + ": file is " + std::to_string(file_size) + " bytes but the header (" + describe(h) +
                ") needs only " + std::to_string(need.v) + " (" + std::to_string(file_size - need.v) +
                " trailing bytes; not a v0 llama2.c checkpoint?)");
  }
}

// Reads the weights in the file's order into w (allocated for the header's shapes).
void read_weights(Reader& r, const std::string& path, const Header& h, Weights& w) {
  const bool shared = h.vocab > 0;
  const int64_t vocab = shared ? h.vocab : -int64_t{h.vocab};
  const int64_t head_size = h.dim / h.heads, kv_dim = head_size * h.kv_heads;
  const int nl = h.layers;
  const int64_t d = h.dim, hd = h.hidden;
  std::vector<float> buf;
  auto matrix = [&](WMat& mat, Mat16& h16, int64_t count, const char* llama_name, int layer, const std::string& ours) {
    read_matrix(r, path, mat, h16, count, llama_name, layer, ours, buf);
  };
  auto linear = [&](Linear& lin, int64_t count, const char* llama_name, int layer, const char* ours) {
    matrix(lin.W, lin.W16, count, llama_name, layer, layer_name(layer, ours));
  };

  matrix(w.tok_embed, w.tok_embed16, vocab * d, "token_embedding_table", -1, "tok_embed");
  for (int l = 0; l < nl; ++l)
    read_tensor(r, path, w.blocks[l].ln1.g.data(), d, "rms_att_weight", l, layer_name(l, "ln1.g"));
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.q, d * d, "wq", l, "attn.q.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.k, kv_dim * d, "wk", l, "attn.k.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.v, kv_dim * d, "wv", l, "attn.v.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.o, d * d, "wo", l, "attn.o.W");
  for (int l = 0; l < nl; ++l)
    read_tensor(r, path, w.blocks[l].ln3.g.data(), d, "rms_ffn_weight", l, layer_name(l, "ln3.g"));
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].ffn.gate, hd * d, "w1", l, "mlp.gate.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].ffn.down, d * hd, "w2", l, "mlp.down.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].ffn.up, hd * d, "w3", l, "mlp.up.W");
  read_tensor(r, path, w.ln_final.g.data(), d, "rms_final_weight", -1, "ln_final.g");
  r.skip(4 * int64_t{h.seq_len} * head_size);  // freq_cis_real, freq_cis_imag: unused
  if (!shared) matrix(w.lm_head, w.lm_head16, vocab * d, "wcls", -1, "lm_head");
}

}  // namespace

Llama2cModel load_llama2c(const std::string& path, Precision precision) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw Error(path + ": not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open llama2.c checkpoint (" + std::strerror(errno) + ")");
  f.seekg(0, std::ios::end);
  const std::streamoff end = f.tellg();
  if (!f || end < 0) throw Error(path + ": cannot determine the file size (not a regular file?)");
  f.seekg(0, std::ios::beg);
  const int64_t file_size = static_cast<int64_t>(end);

  if (file_size < kHeaderBytes) {
    throw Error(path + ": file is " + std::to_string(file_size) + " bytes, shorter than the " +
                std::to_string(kHeaderBytes) + "-byte llama2.c header");
  }
  Reader r(f, path);
  int32_t raw[7];
  r.read(raw, kHeaderBytes, "the header");
  to_host(raw, 7);
  Header h{raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6]};

  check_header(path, h, file_size);
  const bool shared = h.vocab > 0;
  const int64_t vocab = shared ? h.vocab : -int64_t{h.vocab};
  Llama2cModel m;
  m.shared_classifier = shared;
  m.cfg = llama2c_config(h.dim, h.hidden, h.layers, h.heads, h.kv_heads, static_cast<int>(vocab), h.seq_len, shared);
  try {
    m.cfg.validate();
  } catch (const Error& e) {
    throw Error(path + ": header (" + describe(h) + ") is outside the supported range: " + e.what());
  }
  // Every allocation below is bounded by the file size checked above. The matrices
  // are allocated in their final precision; norms stay float32.
  m.w = Weights::zeros(m.cfg, precision, true);
  read_weights(r, path, h, m.w);
  return m;
}

std::string llama2c_incompatibility(const Config& c) {
  if (c.encoder_decoder) return "an encoder-decoder model";
  if (c.norm != NormKind::RMSNorm) return "norm is not RMSNorm";
  if (c.norm_place != NormPlace::Pre) return "norm placement is not pre-norm";
  if (c.pos != PosKind::Rotary) return "positions are not rotary";
  if (c.ffn != FFNKind::SwiGLU) return "feed-forward is not SwiGLU";
  if (c.attn_bias || c.ffn_bias) return "the model has biases";
  if (!c.final_norm) return "the model has no final norm";
  if (c.scale_embed) return "token embeddings are scaled";
  if (c.n_heads <= 0 || c.d_head * c.n_heads != c.d_model) return "d_head * n_heads differs from d_model";
  if (c.rope_theta != 10000.0f) return "rope_theta is not 10000";
  if (c.norm_eps != 1e-5f) return "norm_eps is not 1e-5";
  return "";
}

void save_llama2c(const std::string& path, const Config& c, const Weights& w) {
  c.validate();
  if (std::string why = llama2c_incompatibility(c); !why.empty())
    throw Error(path + ": cannot save as a llama2.c checkpoint: " + why);
  const bool shared = w.lm_head.size() == 0 && w.lm_head16.empty();
  const int64_t d = c.d_model, hd = c.d_ff, v = c.vocab_size, kv = c.kv_dim();

  auto shape = [&](const std::string& name, int64_t rows, int64_t cols, int64_t want_rows, int64_t want_cols) {
    if (rows != want_rows || cols != want_cols) {
      throw Error(path + ": cannot save: " + name + " is " + std::to_string(rows) + "x" + std::to_string(cols) +
                  ", expected " + std::to_string(want_rows) + "x" + std::to_string(want_cols));
    }
  };
  // Matrices in whichever storage they have (float32 or 16-bit).
  auto matrix = [&](const std::string& name, const MatView& m, int64_t want_rows, int64_t want_cols) {
    shape(name, m.rows, m.cols, want_rows, want_cols);
  };
  matrix("tok_embed", w.embed_view(), v, d);
  if (static_cast<int>(w.blocks.size()) != c.n_layers)
    throw Error(path + ": cannot save: " + std::to_string(w.blocks.size()) + " blocks but n_layers " +
                std::to_string(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const Block& b = w.blocks[l];
    shape(layer_name(l, "ln1.g"), b.ln1.g.size(), 1, d, 1);
    shape(layer_name(l, "ln3.g"), b.ln3.g.size(), 1, d, 1);
    matrix(layer_name(l, "attn.q.W"), b.attn.q.view(), d, d);
    matrix(layer_name(l, "attn.k.W"), b.attn.k.view(), kv, d);
    matrix(layer_name(l, "attn.v.W"), b.attn.v.view(), kv, d);
    matrix(layer_name(l, "attn.o.W"), b.attn.o.view(), d, d);
    matrix(layer_name(l, "mlp.gate.W"), b.ffn.gate.view(), hd, d);
    matrix(layer_name(l, "mlp.down.W"), b.ffn.down.view(), d, hd);
    matrix(layer_name(l, "mlp.up.W"), b.ffn.up.view(), hd, d);
  }
  shape("ln_final.g", w.ln_final.g.size(), 1, d, 1);
  if (!shared) matrix("lm_head", w.head_view(), v, d);

  save_file(path, [&](SaveFile& f) {
    auto put = [&](const float* p, int64_t n) {
      if constexpr (std::endian::native == std::endian::big) {
        std::vector<float> tmp(p, p + n);
        to_host(tmp.data(), n);
        f.write(tmp.data(), static_cast<size_t>(n) * 4);
      } else {
        f.write(p, static_cast<size_t>(n) * 4);
      }
    };
    std::vector<float> wide;
    auto put_matrix = [&](const MatView& m) {
      if (m.type == Precision::F32 && m.tile_rows == 0) return put(static_cast<const float*>(m.data), m.rows * m.cols);
      const int64_t step = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(m.cols, 1));
      for (int64_t r0 = 0; r0 < m.rows; r0 += step) {
        const int64_t r1 = std::min(m.rows, r0 + step);
        wide.resize(static_cast<size_t>((r1 - r0) * m.cols));
        m.rows_f32(r0, r1, wide.data());
        put(wide.data(), (r1 - r0) * m.cols);
      }
    };
    int32_t header[7] = {c.d_model, c.d_ff, c.n_layers, c.n_heads, c.n_kv_heads, shared ? c.vocab_size : -c.vocab_size,
                         c.max_seq};
    to_host(header, 7);
    f.write(header, sizeof header);

    put_matrix(w.embed_view());
    for (const Block& b : w.blocks) put(b.ln1.g.data(), d);
    for (const Block& b : w.blocks) put_matrix(b.attn.q.view());
    for (const Block& b : w.blocks) put_matrix(b.attn.k.view());
    for (const Block& b : w.blocks) put_matrix(b.attn.v.view());
    for (const Block& b : w.blocks) put_matrix(b.attn.o.view());
    for (const Block& b : w.blocks) put(b.ln3.g.data(), d);
    for (const Block& b : w.blocks) put_matrix(b.ffn.gate.view());
    for (const Block& b : w.blocks) put_matrix(b.ffn.down.view());
    for (const Block& b : w.blocks) put_matrix(b.ffn.up.view());
    put(w.ln_final.g.data(), d);
    // freq_cis_real then freq_cis_imag, [seq_len, head_size/2] each, as the legacy
    // exporter wrote them (llama2.c's run.c ignores them).
    const int half = c.d_head / 2;
    std::vector<float> re(static_cast<size_t>(c.max_seq) * half), im(re.size());
    for (int p = 0; p < c.max_seq; ++p) {
      for (int i = 0; i < half; ++i) {
        const double freq = 1.0 / std::pow(10000.0, (2.0 * i) / c.d_head);
        re[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(p * freq));
        im[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(p * freq));
      }
    }
    put(re.data(), static_cast<int64_t>(re.size()));
    put(im.data(), static_cast<int64_t>(im.size()));
    if (!shared) put_matrix(w.head_view());
  });
}

}  // namespace ds
