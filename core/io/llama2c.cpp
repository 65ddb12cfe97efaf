#include "io/llama2c.h"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <atomic>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "io/file_read.h"
#include "perf/gemv.h"
#include "perf/mapped_file.h"
#include "perf/memory.h"
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

// An opened checkpoint, read with pread so that several threads can read it at once.
// Its size is taken when it is opened; a read that comes up short means the file
// changed since (the loader then throws, naming the tensor being read).
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    uint64_t size = 0;
    fd_ = open_regular_file(path, size);
    size_ = static_cast<int64_t>(size);
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { ::close(fd_); }
  int64_t size() const { return size_; }
  int fd() const { return fd_; }

  // Reads bytes at offset into dst, or throws naming `what`.
  void read(void* dst, int64_t bytes, int64_t offset, const std::string& what) const {
    if (std::string why = pread_exact(fd_, dst, uint64_t(bytes), uint64_t(offset)); !why.empty())
      throw Error(path_ + ": read failed in " + what + ": " + why);
  }

 private:
  const std::string& path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

std::string tensor_label(const std::string& llama_name, int layer) {
  return llama_name + (layer >= 0 ? " (layer " + std::to_string(layer) + ")" : std::string());
}

// Rejects NaN, infinity or magnitudes beyond kMaxWeightMagnitude among the count values at v, which are values first ..
// first+count-1 of the tensor, naming it.
void check_finite(const std::string& path, const float* v, int64_t count, int64_t first, const std::string& what,
                  const std::string& our_name) {
  if (weights_in_range(v, count)) return;
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

// Rejects the first of n values narrowed to p (from the float32 values `wide`) that
// became infinite: finite in the file but beyond the range of p.
void check_narrowed(const std::string& path, const float* wide, const uint16_t* out, int64_t n, Precision p,
                    int64_t first, const std::string& what, const std::string& our_name) {
  if (weights_in_range(out, n, p)) return;
  for (int64_t i = 0; i < n; ++i) {
    if (weight_in_range(out[i], p)) continue;
    char v[32];
    std::snprintf(v, sizeof v, "%.9g", static_cast<double>(wide[i]));
    throw Error(path + ": tensor " + what + " [" + our_name + "] holds " + v + " at index " +
                std::to_string(first + i) + ", beyond the range of " + precision_name(p) + " (load it as " +
                (p == Precision::F16 ? "bfloat16 or float32)" : "float32)"));
  }
}

// Where one tensor of the file goes.
struct Target {
  std::string what, ours;  // its llama2.c name (with the layer) and decoderscope's
  float* f32 = nullptr;    // float32 storage, or
  uint16_t* h = nullptr;   // 16-bit storage of type `type`
  Precision type = Precision::F32;
  int64_t rows = 0, cols = 0;
  int64_t pr = 0;         // its first pr rows are written in tiles (perf/gemv.h); 0: row-major
  bool in_place = false;  // a float32 matrix left where the mapped file holds it (f32: its storage until then)
  int64_t offset = 0;     // where the tensor starts in the file
};

// Values [first, first + count) of a target, which start at file byte `offset`.
struct Piece {
  size_t target = 0;
  int64_t offset = 0, first = 0, count = 0;
};

// The pieces of a file in file order: about kPieceBytes each, so that a piece read
// into a buffer is still in cache when it is checked, narrowed and written in tiles,
// and whole groups of 8 rows, so that each piece's tiles are its own.
struct Plan {
  static constexpr int64_t kPieceBytes = int64_t{256} << 10;
  std::vector<Target> targets;
  std::vector<Piece> pieces;
  int64_t offset = kHeaderBytes;  // where the next tensor starts in the file

  void add(Target t) {
    t.offset = offset;
    const int64_t count = t.rows * t.cols;
    const int64_t rows_each = std::max<int64_t>(8, kPieceBytes / 4 / std::max<int64_t>(t.cols, 1) / 8 * 8);
    const int64_t step = std::max<int64_t>(1, std::min(count, rows_each * t.cols));
    for (int64_t first = 0; first < count; first += step)
      pieces.push_back({targets.size(), offset + 4 * first, first, std::min(step, count - first)});
    offset += 4 * count;
    targets.push_back(std::move(t));
  }
  void skip(int64_t bytes) { offset += bytes; }
  int64_t bytes() const { return offset; }
};

// Buffers of one reading thread.
struct Scratch {
  std::vector<float> f32;
  std::vector<uint16_t> h;
  bool populate = true;  // fault in each piece's destination in one call before writing it
};

// Checks one piece of a mapped file in place; a target that keeps storage of its own (a
// norm's gains: small, and kept as an Eigen vector) gets a copy.
void check_mapped_piece(const MappedFile& file, const std::string& path, const Target& t, const Piece& p) {
  const float* in = reinterpret_cast<const float*>(file.data() + p.offset);
  check_finite(path, in, p.count, p.first, t.what, t.ours);
  if (!t.in_place) std::copy(in, in + p.count, t.f32 + p.first);
}

// Reads, checks and stores one piece: float32 row-major straight into place, anything
// else through a buffer (narrowed to 16 bits, and written in tiles).
void read_piece(const File& f, const std::string& path, const Target& t, const Piece& p, Scratch& s) {
  const bool direct = t.f32 && t.pr == 0;
  if (s.populate && p.count >= 4096) {
    if (t.f32)
      s.populate = populate_for_write(t.f32 + p.first, size_t(p.count) * sizeof(float));
    else
      s.populate = populate_for_write(t.h + p.first, size_t(p.count) * sizeof(uint16_t));
  }
  if (!direct) s.f32.resize(static_cast<size_t>(p.count));
  float* in = direct ? t.f32 + p.first : s.f32.data();
  f.read(in, p.count * 4, p.offset, t.what);
  to_host(in, p.count);
  check_finite(path, in, p.count, p.first, t.what, t.ours);
  if (direct) return;
  const int64_t r0 = p.first / t.cols, tiled_rows = std::max<int64_t>(0, std::min(r0 + p.count / t.cols, t.pr) - r0);
  const int64_t tiled = tiled_rows * t.cols;  // values of this piece that go in tiles; the rest stay row-major
  if (t.f32) {
    rows_into_tiles(in, t.f32 + p.first, 4, tiled_rows, t.cols);
    std::copy(in + tiled, in + p.count, t.f32 + p.first + tiled);
    return;
  }
  if (tiled) s.h.resize(static_cast<size_t>(p.count));
  uint16_t* out = tiled ? s.h.data() : t.h + p.first;
  narrow(in, p.count, t.type, out);
  check_narrowed(path, in, out, p.count, t.type, p.first, t.what, t.ours);
  if (!tiled) return;
  rows_into_tiles(out, t.h + p.first, 2, tiled_rows, t.cols);
  std::copy(out + tiled, out + p.count, t.h + p.first + tiled);
}

// How many threads read a plan of this many bytes: one for small files, else up to
// four. A reading thread spends most of its time copying from the page cache and
// faulting in fresh pages, both of which scale with cores.
int reading_threads(int64_t bytes) {
  if (bytes < (int64_t{16} << 20)) return 1;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

// Runs every piece of the plan on reading_threads() threads (the caller is one of
// them). Pieces are taken in file order, so the file streams front to back; the error
// reported is the one of the earliest piece that failed, as a single reader would
// report it: every piece before it has been taken, and each is finished.
// run(piece, scratch) does one piece.
template <class Run>
void run_plan(const Plan& plan, Run&& run) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t error_piece = SIZE_MAX;
  std::exception_ptr error;
  auto work = [&] {
    Scratch s;
    while (!failed.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= plan.pieces.size()) return;
      try {
        run(plan.pieces[i], s);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu);
        if (i < error_piece) {
          error_piece = i;
          error = std::current_exception();
        }
        failed.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> helpers;
  for (int k = 1; k < reading_threads(plan.bytes()); ++k) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones started do the work
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
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

// Where each tensor of the file goes in w (allocated for the header's shapes), in the
// file's order; matrices in tiles when `tiles` and their shape allows, or, when
// `in_place`, left where the mapped file holds them (float32 only).
Plan plan_weights(const Header& h, Weights& w, bool tiles, bool in_place) {
  const bool shared = h.vocab > 0;
  const int64_t vocab = shared ? h.vocab : -int64_t{h.vocab};
  const int64_t head_size = h.dim / h.heads, kv_dim = head_size * h.kv_heads;
  const int nl = h.layers;
  const int64_t d = h.dim, hd = h.hidden;
  Plan plan;
  auto matrix = [&](WMat& m, Mat16& h16, int64_t rows, int64_t cols, const char* llama_name, int layer,
                    const std::string& ours) {
    Target t{tensor_label(llama_name, layer), ours};
    if (h16.empty())
      t.f32 = m.data();
    else
      t.h = h16.data.data(), t.type = h16.type;
    t.in_place = in_place;
    t.rows = rows;
    t.cols = cols;
    t.pr = tiles && tiles_fit(rows, cols) ? tile_rows(rows) : 0;
    plan.add(std::move(t));
  };
  auto vector = [&](Vec& v, const char* llama_name, int layer, const std::string& ours) {
    Target t{tensor_label(llama_name, layer), ours, v.data()};
    t.rows = 1;
    t.cols = v.size();
    plan.add(std::move(t));
  };
  auto linear = [&](Linear& lin, int64_t rows, int64_t cols, const char* llama_name, int layer, const char* ours) {
    matrix(lin.W, lin.W16, rows, cols, llama_name, layer, layer_name(layer, ours));
  };

  matrix(w.tok_embed, w.tok_embed16, vocab, d, "token_embedding_table", -1, "tok_embed");
  for (int l = 0; l < nl; ++l) vector(w.blocks[l].ln1.g, "rms_att_weight", l, layer_name(l, "ln1.g"));
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.q, d, d, "wq", l, "attn.q.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.k, kv_dim, d, "wk", l, "attn.k.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.v, kv_dim, d, "wv", l, "attn.v.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].attn.o, d, d, "wo", l, "attn.o.W");
  for (int l = 0; l < nl; ++l) vector(w.blocks[l].ln3.g, "rms_ffn_weight", l, layer_name(l, "ln3.g"));
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].ffn.gate, hd, d, "w1", l, "mlp.gate.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].ffn.down, d, hd, "w2", l, "mlp.down.W");
  for (int l = 0; l < nl; ++l) linear(w.blocks[l].ffn.up, hd, d, "w3", l, "mlp.up.W");
  vector(w.ln_final.g, "rms_final_weight", -1, "ln_final.g");
  plan.skip(4 * int64_t{h.seq_len} * head_size);  // freq_cis_real, freq_cis_imag: unused
  if (!shared) matrix(w.lm_head, w.lm_head16, vocab, d, "wcls", -1, "lm_head");
  return plan;
}

// Leaves the matrices of a plan where the mapped file holds them, once their values are
// checked (a piece at a time, on several threads).
void use_in_place(const std::shared_ptr<const MappedFile>& file, const std::string& path, const Plan& plan,
                  Weights& w) {
  run_plan(plan, [&](const Piece& p, Scratch&) { check_mapped_piece(*file, path, plan.targets[p.target], p); });
  if (!file->intact()) throw Error(file->why_changed());
  char* base = const_cast<char*>(file->data());
  std::map<const float*, float*> where;
  for (const Target& t : plan.targets)
    if (t.in_place) where[t.f32] = reinterpret_cast<float*>(base + t.offset);
  w.use_mapped_file(file, where);  // the block Weights::zeros mapped for them, never touched, is given back
}

}  // namespace

Llama2cModel load_llama2c(const std::string& path, Precision precision, Llama2cStorage storage) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);  // before opening: opening a FIFO would wait for a writer
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw Error(path + ": not a regular file");
  const File f(path);
  const int64_t file_size = f.size();
  if (file_size < kHeaderBytes) {
    throw Error(path + ": file is " + std::to_string(file_size) + " bytes, shorter than the " +
                std::to_string(kHeaderBytes) + "-byte llama2.c header");
  }
  int32_t raw[7];
  f.read(raw, kHeaderBytes, 0, "the header");
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
  // (In place, the block for the matrices is address space only, never touched.)
  // A file that cannot be mapped (some network or special file systems) is read.
  std::shared_ptr<const MappedFile> file;
  if (storage == Llama2cStorage::Mapped && precision == Precision::F32 && std::endian::native == std::endian::little) {
    try {
      file = MappedFile::map(f.fd(), static_cast<size_t>(file_size), path);
    } catch (const Error&) {
      file = nullptr;
    }
  }
  const bool tiles = storage == Llama2cStorage::Tiles || (storage == Llama2cStorage::Mapped && !file);
  m.w = Weights::zeros(m.cfg, precision, true);
  const Plan plan = plan_weights(h, m.w, tiles, file != nullptr);
  if (plan.bytes() != file_size)
    throw Error(path + ": internal error: the tensors cover " + std::to_string(plan.bytes()) + " of " +
                std::to_string(file_size) + " bytes");
  if (file) {
    use_in_place(file, path, plan, m.w);
  } else {
    run_plan(plan, [&](const Piece& p, Scratch& s) { read_piece(f, path, plan.targets[p.target], p, s); });
    if (tiles) m.w.mark_tiles();
  }
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
