#include "io/model_folder.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "io/hf_model.h"
#include "io/safetensors.h"
#include "io/tensor_fill.h"
#include "model/config_json.h"
#include "text/char_tokenizer.h"
#include "text/word_tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ds {

namespace {

// The KV cache the engine allocates for max_seq positions; a config asking for more
// is refused rather than exhausting memory later.
constexpr double kMaxKVCacheBytes = 16.0 * (1ull << 30);

// ------------------------------------------------------------------ GPT-2

Config gpt2_config_from(const json& j, const std::string& path) {
  Config c;
  try {
    if (j.contains("model_type")) {
      const std::string mt = json_string(j, "model_type");
      if (mt != "gpt2")
        throw Error("model_type " + excerpt(json(mt).dump(-1, ' ', true, json::error_handler_t::replace)) +
                    " is not supported (decoderscope reads GPT-2 folders, its own, and the architectures " +
                    hf_architectures() + ")");
    }
    const int d = json_int(j, "n_embd");
    const int n_layer = json_int(j, "n_layer");
    const int n_head = json_int(j, "n_head");
    const int n_pos =
        j.contains("n_positions") && !j["n_positions"].is_null() ? json_int(j, "n_positions") : json_int(j, "n_ctx");
    const int vocab = json_int(j, "vocab_size");
    if (d <= 0 || d > (1 << 20)) throw Error("field \"n_embd\" must be in 1..1048576, is " + std::to_string(d));
    if (n_head <= 0 || d % n_head != 0)
      throw Error("field \"n_head\" (" + std::to_string(n_head) + ") must divide n_embd (" + std::to_string(d) + ")");
    c = gpt2_config(d, n_layer, n_head, n_pos, vocab);
    c.d_ff = json_int(j, "n_inner", 4 * d);
    const std::string act = json_string(j, "activation_function", "gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
      c.ffn = FFNKind::GELUTanh;
    else if (act == "gelu")
      c.ffn = FFNKind::GELU;
    else if (act == "relu")
      c.ffn = FFNKind::ReLU;
    else
      throw Error("field \"activation_function\" " +
                  excerpt(json(act).dump(-1, ' ', true, json::error_handler_t::replace)) +
                  " is not supported (gelu_new, gelu, relu)");
    if (!json_bool(j, "scale_attn_weights", true))
      throw Error("field \"scale_attn_weights\" is false: unscaled attention is not supported");
    if (json_bool(j, "scale_attn_by_inverse_layer_idx", false))
      throw Error("field \"scale_attn_by_inverse_layer_idx\" is true: not supported");
    if (json_bool(j, "add_cross_attention", false))
      throw Error("field \"add_cross_attention\" is true: GPT-2 with cross-attention is not supported");
    c.norm_eps = json_float(j, "layer_norm_epsilon", 1e-5f);
    if (!(c.norm_eps > 0 && c.norm_eps < 1)) throw Error("field \"layer_norm_epsilon\" must be in (0, 1)");
    // <|endoftext|> (50256 in GPT-2's vocabulary) starts and ends texts; the config's
    // own ids win when they are valid.
    const int fallback = vocab > 0 ? vocab - 1 : -1;  // 50256 for GPT-2's 50257
    auto special = [&](const char* key) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number_integer()) return fallback;
      const int64_t id = it->get<int64_t>();
      return id >= 0 && id < vocab ? static_cast<int>(id) : fallback;
    };
    c.eos_id = special("eos_token_id");
    c.bos_id = special("bos_token_id");
    c.pad_id = -1;
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

// "h.<digits>.<rest>" after the prefix: the layer, or -1.
int layer_of(const std::string& name, const std::string& prefix, std::string& rest) {
  if (name.compare(0, prefix.size() + 2, prefix + "h.") != 0) return -1;
  size_t i = prefix.size() + 2, j = i;
  while (j < name.size() && j - i < 6 && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j >= name.size() || name[j] != '.') return -1;
  rest = name.substr(j + 1);
  return std::stoi(name.substr(i, j - i));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The name of a GPT-2 layer's tensor: prefix + "h.{l}." + rest.
std::string gpt2_layer_name(const std::string& prefix, int l, const char* rest) {
  return prefix + "h." + std::to_string(l) + "." + rest;
}

// Checks that the file holds every tensor a GPT-2 of config c has, with its shape, and
// no other weights, before anything is allocated. Returns lm_head.weight when present.
const SafeTensors::Entry* check_gpt2_tensors(const SafeTensors& st, const Config& c, const std::string& prefix,
                                             const std::string& st_path) {
  const int64_t d = c.d_model, ff = c.d_ff, V = c.vocab_size, P = c.max_seq;
  std::map<std::string, Shape> expect;
  expect[prefix + "wte.weight"] = {V, d};
  expect[prefix + "wpe.weight"] = {P, d};
  expect[prefix + "ln_f.weight"] = {d};
  expect[prefix + "ln_f.bias"] = {d};
  auto lname = [&](int l, const char* rest) { return gpt2_layer_name(prefix, l, rest); };
  for (int l = 0; l < c.n_layers; ++l) {
    expect[lname(l, "ln_1.weight")] = {d};
    expect[lname(l, "ln_1.bias")] = {d};
    expect[lname(l, "attn.c_attn.weight")] = {d, 3 * d};
    expect[lname(l, "attn.c_attn.bias")] = {3 * d};
    expect[lname(l, "attn.c_proj.weight")] = {d, d};
    expect[lname(l, "attn.c_proj.bias")] = {d};
    expect[lname(l, "ln_2.weight")] = {d};
    expect[lname(l, "ln_2.bias")] = {d};
    expect[lname(l, "mlp.c_fc.weight")] = {d, ff};
    expect[lname(l, "mlp.c_fc.bias")] = {ff};
    expect[lname(l, "mlp.c_proj.weight")] = {ff, d};
    expect[lname(l, "mlp.c_proj.bias")] = {d};
  }
  // Every expected tensor with its shape, before anything is allocated.
  for (auto& [name, shape] : expect) need_tensor(st, name, shape);
  const SafeTensors::Entry* lm_head = st.find("lm_head.weight");
  if (lm_head && lm_head->shape != Shape{V, d})
    throw Error(st_path + ": tensor lm_head.weight has shape " + shape_str(lm_head->shape) + ", expected " +
                shape_str({V, d}));
  std::vector<std::string> unknown;
  for (const auto& e : st.entries()) {
    if (expect.count(e.name) || e.name == "lm_head.weight") continue;
    std::string rest;
    if (layer_of(e.name, prefix, rest) >= 0 && (rest == "attn.bias" || rest == "attn.masked_bias")) continue;
    // Causal-mask buffers above; anything else that looks like a weight would be dropped.
    if (ends_with(e.name, ".weight") || ends_with(e.name, ".bias") || ends_with(e.name, "_weight") ||
        ends_with(e.name, "_bias"))
      unknown.push_back(e.name);
  }
  if (!unknown.empty())
    throw Error(st_path + ": holds weights a GPT-2 of this config does not have (n_layer " +
                std::to_string(c.n_layers) + "): " + list_names(unknown));

  return lm_head;
}

void load_gpt2(FolderModel& m, const json& j, const std::string& config_path, const std::string& st_path, Precision p,
               bool tiles) {
  m.format = "gpt2";
  m.tokenizer_kind = "gpt2-bpe";
  m.cfg = gpt2_config_from(j, config_path);
  Config& c = m.cfg;
  SafeTensors st = SafeTensors::open(st_path);

  std::string prefix;
  if (st.find("transformer.wte.weight"))
    prefix = "transformer.";
  else if (!st.find("wte.weight"))
    throw Error(st_path + ": has neither wte.weight nor transformer.wte.weight (not a GPT-2 checkpoint?)");

  const SafeTensors::Entry* lm_head = check_gpt2_tensors(st, c, prefix, st_path);
  const int64_t d = c.d_model, ff = c.d_ff, V = c.vocab_size;
  auto lname = [&](int l, const char* rest) { return gpt2_layer_name(prefix, l, rest); };
  m.w = Weights::zeros(c, p, true);
  Weights& w = m.w;
  Filler fill(st);
  std::vector<ReadJob> jobs;
  auto job = [&](const std::string& name, std::function<void(const SafeTensors::Entry&)> run,
                 std::vector<std::pair<void*, size_t>> fresh = {}) {
    jobs.push_back({st.find(name), std::move(run), std::move(fresh)});  // present: checked above
  };
  auto vec = [&](const std::string& name, Vec& v) {
    job(name, [&fill, &v](const SafeTensors::Entry& e) { fill.copy(e, dest_of(v)); });
  };
  // A Conv1D weight [in, out] into Linear weights [out, in], the columns split evenly.
  auto conv = [&](const std::string& name, int64_t in, int64_t out, const std::vector<Linear*>& parts) {
    std::vector<std::pair<Dest, int64_t>> dests;
    std::vector<Dest> all;
    for (Linear* l : parts) {
      dests.push_back({dest_of(l->W, l->W16, tiles), out / static_cast<int64_t>(parts.size())});
      all.push_back(dests.back().first);
    }
    job(
        name, [&fill, in, out, dests](const SafeTensors::Entry& e) { fill.transpose(e, in, out, dests); },
        fresh_memory(all, in * out / static_cast<int64_t>(parts.size())));
  };
  const Dest embed = dest_of(w.tok_embed, w.tok_embed16, tiles);
  job(
      prefix + "wte.weight", [&fill, embed](const SafeTensors::Entry& e) { fill.copy(e, embed); },
      fresh_memory({embed}, V * d));
  job(prefix + "wpe.weight", [&](const SafeTensors::Entry& e) { fill.copy(e, dest_of(w.pos_embed)); });
  for (int l = 0; l < c.n_layers; ++l) {
    Block& b = w.blocks[static_cast<size_t>(l)];
    vec(lname(l, "ln_1.weight"), b.ln1.g);
    vec(lname(l, "ln_1.bias"), b.ln1.b);
    conv(lname(l, "attn.c_attn.weight"), d, 3 * d, {&b.attn.q, &b.attn.k, &b.attn.v});  // q, k, v columns
    job(lname(l, "attn.c_attn.bias"), [&fill, &b, d](const SafeTensors::Entry& e) {
      Vec qkv(3 * d);
      fill.copy(e, dest_of(qkv));
      b.attn.q.b = qkv.segment(0, d);
      b.attn.k.b = qkv.segment(d, d);
      b.attn.v.b = qkv.segment(2 * d, d);
    });
    conv(lname(l, "attn.c_proj.weight"), d, d, {&b.attn.o});
    vec(lname(l, "attn.c_proj.bias"), b.attn.o.b);
    vec(lname(l, "ln_2.weight"), b.ln3.g);
    vec(lname(l, "ln_2.bias"), b.ln3.b);
    conv(lname(l, "mlp.c_fc.weight"), d, ff, {&b.ffn.up});
    vec(lname(l, "mlp.c_fc.bias"), b.ffn.up.b);
    conv(lname(l, "mlp.c_proj.weight"), ff, d, {&b.ffn.down});
    vec(lname(l, "mlp.c_proj.bias"), b.ffn.down.b);
  }
  vec(prefix + "ln_f.weight", w.ln_final.g);
  vec(prefix + "ln_f.bias", w.ln_final.b);
  if (lm_head) {
    // GPT2LMHeadModel ties lm_head to wte; a file whose head differs (compared as
    // float32 values, in the file) is loaded untied.
    const SafeTensors::Entry* wte = st.find(prefix + "wte.weight");
    job(lm_head->name, [&, wte](const SafeTensors::Entry& e) {
      if (fill.same_values(e, *wte)) return;
      Weights::allocate_matrix(p, w.lm_head, w.lm_head16, V, d);
      c.tied_head = false;
      fill.copy(e, dest_of(w.lm_head, w.lm_head16, tiles));
    });
  }
  run_in_file_order(st, jobs);
  if (tiles) w.mark_tiles();
}

// ------------------------------------------------------------------ decoderscope

bool is_vector_name(const std::string& name) { return ends_with(name, ".g") || ends_with(name, ".b"); }

// A lower bound on the parameters cfg implies (its matrices), in double so it cannot
// overflow: checked against the file before anything is allocated.
double matrix_params(const Config& c) {
  const double d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff, V = c.vocab_size;
  const double attn = 2 * q * d + 2 * kv * d;
  const double mlp = (c.gated() ? 3 : 2) * ff * d;
  double n = V * d + (c.pos == PosKind::Learned ? double(c.max_seq) * d : 0) + (c.tied_head ? 0 : V * d);
  n += c.n_layers * (attn * (c.encoder_decoder ? 2 : 1) + mlp);
  if (c.encoder_decoder) n += c.n_enc_layers * (attn + mlp) + (c.pos == PosKind::Learned ? double(c.max_src) * d : 0);
  return n;
}

// The "vocab" of a "chars" or "words" tokenizer block: an array of vocab_size strings
// that the tokenizer of that kind accepts (no duplicates, no empty entries, ...).
// Throws ds::Error naming the problem.
std::vector<std::string> checked_vocab(const json& tok, const Config& cfg, const std::string& kind) {
  if (!tok.contains("vocab") || !tok["vocab"].is_array())
    throw Error("field \"tokenizer\".\"vocab\" must be an array of strings");
  const json& v = tok["vocab"];
  if (static_cast<int64_t>(v.size()) != cfg.vocab_size)
    throw Error("field \"tokenizer\".\"vocab\" has " + std::to_string(v.size()) + " entries but vocab_size is " +
                std::to_string(cfg.vocab_size));
  std::vector<std::string> vocab;
  vocab.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_string())
      throw Error("field \"tokenizer\".\"vocab\" entry " + std::to_string(vocab.size()) + " is not a string");
    vocab.push_back(e.get<std::string>());
  }
  if (kind == "chars")
    CharTokenizer check(vocab, cfg.bos_id);  // throws on a bad vocabulary
  else
    WordTokenizer check(vocab, cfg.bos_id);
  return vocab;
}

// Leaves the float32 large matrices of `todo` where the mapped file holds them, once
// checked (the tiles their Dest may ask for do not apply); the rest are read as usual.
// Returns false, doing nothing, unless every large matrix is F32 in the file at a
// 4-byte boundary and the file can be mapped.
bool read_own_in_place(const SafeTensors& st, Weights& w,
                       const std::vector<std::tuple<const SafeTensors::Entry*, Dest, bool>>& todo) {
  if (std::endian::native != std::endian::little) return false;
  for (const auto& [e, dest, matrix] : todo)
    if (matrix && (e->dtype != "F32" || !dest.f32 || (st.data_start() + e->begin) % alignof(float) != 0)) return false;
  std::shared_ptr<const MappedFile> file;
  try {
    file = st.map();
  } catch (const Error&) {
    return false;  // a file that cannot be mapped (some network or special file systems) is read
  }
  char* base = const_cast<char*>(file->data()) + st.data_start();
  Filler fill(st);
  std::map<const float*, float*> where;
  std::vector<ReadJob> jobs;
  for (const auto& [e, dest, matrix] : todo) {
    if (!matrix) {
      jobs.push_back({e, [&fill, d = dest](const SafeTensors::Entry& en) { fill.copy(en, d); }, {}});
      continue;
    }
    const float* at = reinterpret_cast<const float*>(base + e->begin);
    where[dest.f32] = const_cast<float*>(at);
    jobs.push_back({e, [&fill, at](const SafeTensors::Entry& en) { fill.check_in_place(en, at); }, {}});
  }
  run_in_file_order(st, jobs);
  if (!file->intact()) throw Error(file->why_changed());
  w.use_mapped_file(file, where);  // the block Weights::zeros mapped for them, never touched, is given back
  return true;
}

void load_own(FolderModel& m, const json& j, const std::string& config_path, const std::string& st_path, Precision p,
              bool tiles, bool in_place) {
  m.format = "decoderscope";
  try {
    const int version = json_int(j, "version");
    if (version != 1)
      throw Error("field \"version\" is " + std::to_string(version) + "; this decoderscope reads version 1");
    m.cfg = config_from_json(j);
    if (!j.contains("tokenizer") || !j["tokenizer"].is_object())
      throw Error("field \"tokenizer\" must be an object {\"kind\": \"chars\" | \"words\" | \"gpt2-bpe\", ...}");
    const json& tok = j["tokenizer"];
    m.tokenizer_kind = json_string(tok, "kind");
    if (m.tokenizer_kind == "chars") {
      m.chars_vocab = checked_vocab(tok, m.cfg, "chars");
    } else if (m.tokenizer_kind == "words") {
      m.words_vocab = checked_vocab(tok, m.cfg, "words");
    } else if (m.tokenizer_kind != "gpt2-bpe") {
      throw Error("field \"tokenizer\".\"kind\" must be \"chars\", \"words\" or \"gpt2-bpe\", is " +
                  excerpt(json(m.tokenizer_kind).dump(-1, ' ', true, json::error_handler_t::replace)));
    }
    if (j.contains("training")) m.training = j["training"].dump();
    const Config& c = m.cfg;
    const double kv_bytes = 2.0 * 4.0 * c.n_layers * double(c.max_seq) * c.kv_dim();
    if (kv_bytes > kMaxKVCacheBytes)
      throw Error("max_seq " + std::to_string(c.max_seq) + " would need a " + std::to_string(kv_bytes / (1 << 30)) +
                  " GiB KV cache");
  } catch (const Error& e) {
    throw Error(config_path + ": " + e.what());
  }
  const Config& c = m.cfg;
  SafeTensors st = SafeTensors::open(st_path);
  double held = 0;
  for (const auto& e : st.entries()) held += double(e.numel());
  if (matrix_params(c) > held)
    throw Error(config_path + ": describes a model of at least " + std::to_string(int64_t(matrix_params(c))) +
                " parameters but " + st_path + " holds only " + std::to_string(int64_t(held)) + " values");

  m.w = Weights::zeros(c, p, true);
  Weights& w = m.w;
  if (c.encoder_decoder && st.find("encoder.tok_embed")) {
    Weights::allocate_matrix(p, w.enc_tok_embed, w.enc_tok_embed16, c.vocab_size, c.d_model);
  }
  // Every tensor present with its shape, and nothing else, before any is read.
  std::set<std::string> used;
  std::vector<std::tuple<const SafeTensors::Entry*, Dest, bool>> todo;  // tensor, where it goes, a large matrix
  for (auto& t : w.tensors()) {
    const Shape shape = is_vector_name(t.name) ? Shape{t.rows} : Shape{t.rows, t.cols};
    todo.push_back({&need_tensor(st, t.name, shape), dest_of(t, tiles), t.matrix});
    used.insert(t.name);
  }
  std::vector<std::string> unknown;
  for (const auto& e : st.entries())
    if (!used.count(e.name)) unknown.push_back(e.name);
  if (!unknown.empty())
    throw Error(st_path + ": holds tensors this configuration does not use: " + list_names(unknown));
  if (in_place && p == Precision::F32 && read_own_in_place(st, w, todo)) return;  // else as asked, tiles or rows
  Filler fill(st);
  std::vector<ReadJob> jobs;
  for (auto& [e, dest, matrix] : todo)
    jobs.push_back(
        {e, [&fill, d = dest](const SafeTensors::Entry& en) { fill.copy(en, d); }, fresh_memory({dest}, e->numel())});
  run_in_file_order(st, jobs);
  if (tiles) w.mark_tiles();
}

FolderModel load_hf_folder(const std::string& dir, const json& j, Precision precision, bool tiles) {
  HfModel h = load_hf_model(dir, j, precision, tiles);
  FolderModel m;
  m.dir = dir;
  m.format = "hf";
  m.tokenizer_kind = "hf";
  m.cfg = std::move(h.cfg);
  m.w = std::move(h.w);
  m.arch = std::move(h.arch);
  m.dtype = std::move(h.dtype);
  m.stop_ids = std::move(h.stop_ids);
  return m;
}

}  // namespace

FolderModel load_model_folder(const std::string& dir, Precision precision, bool tiles, bool in_place) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir + ": not a folder");
  const fs::path d(dir);
  const std::string config_path = (d / "config.json").string();
  const std::string st_path = (d / "model.safetensors").string();
  if (fs::exists(config_path, ec)) {
    json j = read_json_file(config_path);
    if (!j.contains("format") && is_hf_llama_family(j)) return load_hf_folder(dir, j, precision, tiles);
  }
  if (!fs::exists(st_path, ec)) {
    if (fs::exists(d / "pytorch_model.bin", ec))
      throw Error(dir +
                  " holds pytorch_model.bin only; decoderscope reads model.safetensors (download it from the "
                  "same model page)");
    if (fs::exists(d / "model.safetensors.index.json", ec))
      throw Error(dir +
                  " holds a sharded checkpoint (model.safetensors.index.json); decoderscope reads shards for the "
                  "architectures " +
                  hf_architectures() + ", and a single model.safetensors otherwise");
    throw Error(dir + ": no model.safetensors (a model folder holds config.json and model.safetensors)");
  }
  if (!fs::exists(config_path, ec))
    throw Error(dir + ": no config.json (a model folder holds config.json and model.safetensors)");
  const json j = read_json_file(config_path);

  FolderModel m;
  m.dir = dir;
  if (j.contains("format")) {
    std::string format;
    try {
      format = json_string(j, "format");
    } catch (const Error& e) {
      throw Error(config_path + ": " + e.what());
    }
    if (format != "decoderscope")
      throw Error(config_path + ": field \"format\" is " +
                  excerpt(json(format).dump(-1, ' ', true, json::error_handler_t::replace)) +
                  ", expected \"decoderscope\"");
    load_own(m, j, config_path, st_path, precision, tiles, in_place);
  } else {
    load_gpt2(m, j, config_path, st_path, precision, tiles);
  }
  return m;
}

void save_model_folder(const std::string& dir, const Config& cfg, const Weights& w, const json& tokenizer,
                       const json& extra, const std::string& dtype) {
  cfg.validate();
  // tensors() is non-const; nothing is written. Matrices in tiles are saved row-major.
  std::optional<Weights> in_rows;
  if (const_cast<Weights&>(w).in_tiles()) {
    in_rows.emplace(w);
    in_rows->to_rows();
  }
  Weights& wm = in_rows ? *in_rows : const_cast<Weights&>(w);
  // The tensors cfg implies, by name and shape.
  std::map<std::string, std::pair<int64_t, int64_t>> want;
  {
    Weights z = Weights::zeros(cfg, Precision::F32);  // large matrices never written: address space only
    for (auto& t : z.tensors()) want[t.name] = {t.rows, t.cols};
    if (cfg.encoder_decoder) want["encoder.tok_embed"] = {cfg.vocab_size, cfg.d_model};
  }
  std::vector<SafeTensorOut> out;
  for (auto& t : wm.tensors()) {
    auto it = want.find(t.name);
    if (it == want.end())
      throw Error(dir + ": cannot save: tensor " + t.name + " does not belong to this configuration");
    if (it->second != std::pair<int64_t, int64_t>{t.rows, t.cols})
      throw Error(dir + ": cannot save: tensor " + t.name + " is " + std::to_string(t.rows) + "x" +
                  std::to_string(t.cols) + ", expected " + std::to_string(it->second.first) + "x" +
                  std::to_string(it->second.second));
    want.erase(it);
    SafeTensorOut o;
    o.name = t.name;
    o.shape = is_vector_name(t.name) ? Shape{t.rows} : Shape{t.rows, t.cols};
    if (t.data) {
      o.data = t.data;
      o.dtype = dtype;
    } else {  // kept as 16-bit floats: written in their own type, unchanged
      o.data16 = t.data16;
      o.dtype = t.type == Precision::BF16 ? "BF16" : "F16";
    }
    out.push_back(std::move(o));
  }
  want.erase("encoder.tok_embed");  // optional
  if (!want.empty()) throw Error(dir + ": cannot save: tensor " + want.begin()->first + " is missing");

  if (!tokenizer.is_object() || !tokenizer.contains("kind") || !tokenizer["kind"].is_string())
    throw Error(dir + ": cannot save: the tokenizer must be {\"kind\": \"chars\" | \"words\" | \"gpt2-bpe\", ...}");
  const std::string kind = tokenizer["kind"].get<std::string>();
  if (kind == "chars" || kind == "words") {
    try {
      checked_vocab(tokenizer, cfg, kind);
    } catch (const Error& e) {
      throw Error(dir + ": cannot save: a " + kind + " tokenizer: " + e.what());
    }
  } else if (kind != "gpt2-bpe") {
    throw Error(dir + ": cannot save: tokenizer kind must be \"chars\", \"words\" or \"gpt2-bpe\"");
  }

  nlohmann::ordered_json conf = nlohmann::ordered_json::object();
  conf["format"] = "decoderscope";
  conf["version"] = 1;
  const json fields = config_to_json(cfg);
  for (auto it = fields.begin(); it != fields.end(); ++it) conf[it.key()] = *it;
  conf["tokenizer"] = tokenizer;
  if (!extra.is_null()) {
    if (!extra.is_object()) throw Error(dir + ": cannot save: extra config keys must be a JSON object");
    for (auto& [k, v] : extra.items()) {
      if (conf.contains(k)) throw Error(dir + ": cannot save: extra key \"" + k + "\" would replace a format key");
      conf[k] = v;
    }
  }
  std::string text;
  try {
    text = conf.dump(2) + "\n";
  } catch (const json::exception&) {
    throw Error(dir + ": cannot save: a string in the config or vocabulary is not valid UTF-8");
  }

  // Both files are written into a temporary folder that then replaces dir (keeping
  // dir's other files): a failed save leaves the previous model whole.
  save_folder(dir, [&](const std::string& temp) {
    const fs::path d(temp);
    save_safetensors((d / "model.safetensors").string(), out, {{"format", "pt"}, {"producer", "decoderscope"}});
    save_file((d / "config.json").string(), text);
  });
}

}  // namespace ds
