#pragma once
// llama2.c checkpoints (the "v0" legacy .bin of Karpathy's llama2.c).
//
// Layout: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means a separate classifier), then float32
// arrays: token_embedding_table [vocab, dim], rms_att_weight [L, dim], wq [L, dim, dim],
// wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn_weight [L, dim],
// w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final_weight [dim],
// freq_cis_real and freq_cis_imag [seq_len, head_size/2] (ignored), and wcls
// [vocab, dim] only when the classifier is not shared. Matrices are [out, in]
// row-major, which is Linear::W's layout.
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace ds {

struct Llama2cModel {
  Config cfg;
  Weights w;
  bool shared_classifier = true;  // lm_head tied to the token embedding (w.lm_head empty)
};

// The Config of a llama2.c model with these header values: RMSNorm pre-norm, rotary
// positions (theta 10000), SwiGLU, no biases, final norm, eps 1e-5, BOS 1, EOS 2.
// Does not validate.
Config llama2c_config(int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads, int vocab_size, int seq_len,
                      bool shared_classifier);

// Loads a checkpoint. Every header value and the exact file size are checked before
// anything is allocated; any problem (missing, truncated or oversized file, absurd or
// inconsistent sizes, NaN, infinite or absurdly large weights (model/weights.h), weights too large for float16 when
// loading as F16) throws ds::Error with a one-line message starting with the path.
// precision: the storage of the linear layers, token embedding and classifier. With
// BF16 or F16 each of them is read in float32 a piece at a time and rounded to
// nearest even as it is read, so no float32 copy of the weights is ever held.
// storage: where the matrices go.
//   Rows:  storage of their own, row-major (what the format holds).
//   Tiles: storage of their own in tiles (perf/gemv.h, Weights::mark_tiles's rule),
//          written so as they are read.
//   Mapped: at float32, in place in the mapped file (perf/mapped_file.h): nothing is
//          copied, so the model opens in the time it takes to check its values, and
//          the file must stay as it is while the model is used (the engine ends a
//          forward pass with an error when it changes). Decoding reads row-major
//          float32 from page-cache pages as fast as from tiles in fresh memory (README,
//          "Start"). At 16 bits, as Tiles. Loaders of whole models use this.
// The file is read (or checked) by up to four threads at once, a piece each, in file
// order; an error names the first bad value in the file, as one reader would.
enum class Llama2cStorage { Rows, Tiles, Mapped };
Llama2cModel load_llama2c(const std::string& path, Precision precision = Precision::F32,
                          Llama2cStorage storage = Llama2cStorage::Rows);

// Why cfg cannot be written as a llama2.c checkpoint, or "" when it can.
std::string llama2c_incompatibility(const Config& cfg);

// Writes cfg and w in the same format (float32; weights kept as 16-bit floats are
// widened, which is exact); the classifier is shared iff w has no lm_head. Throws ds::Error if the config is not a
// llama2.c architecture (see llama2c_incompatibility), a tensor has the wrong shape, or writing fails.
// The file is replaced atomically (util/atomic_file.h): a failed save leaves the previous file.
void save_llama2c(const std::string& path, const Config& cfg, const Weights& w);

}  // namespace ds
