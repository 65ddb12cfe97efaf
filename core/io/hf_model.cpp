#include "io/hf_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numbers>
#include <set>

#include "io/gguf_model.h"
#include "io/safetensors.h"
#include "io/tensor_fill.h"
#include "model/config_json.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ds {

namespace {

constexpr const char* kArchs[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                  "Gemma3ForCausalLM"};
constexpr int kMaxShards = 4096;

std::string shown(const json& v) { return excerpt(v.dump(-1, ' ', true, json::error_handler_t::replace)); }

std::string first_architecture(const json& j) {
  const json* a = j.contains("architectures") ? &j["architectures"] : nullptr;
  if (a && !a->is_null()) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      throw Error("field \"architectures\" must be a list of names, e.g. [\"LlamaForCausalLM\"]");
    return (*a)[0].get<std::string>();
  }
  if (json_string(j, "model_type", "") == "gemma3_text") return "Gemma3ForCausalLM";
  throw Error("field \"architectures\" is missing");
}

// A config value that must be absent, null or false (a feature the engine does not follow).
void refuse(const json& j, const std::string& key, const std::string& what) {
  if (!j.contains(key) || j[key].is_null() || j[key] == false) return;
  throw Error("field \"" + key + "\" is " + shown(j[key]) + ": " + what + " is not supported");
}

int positive(const json& j, const std::string& key, int def, int hi) {
  const int v = def < 0 ? json_int(j, key) : json_int(j, key, def);
  if (v < 1 || v > hi)
    throw Error("field \"" + key + "\" is " + std::to_string(v) + ", outside 1.." + std::to_string(hi));
  return v;
}

float finite(const json& j, const std::string& key, float def) {
  const float v = json_float(j, key, def);
  if (!std::isfinite(v) || v <= 0) throw Error("field \"" + key + "\" must be a positive number");
  return v;
}

// Llama 3.1/3.2's rotary scaling as one divisor per frequency (see hf_model.h).
std::vector<float> llama3_factors(const json& rs, const Config& c) {
  const double factor = finite(rs, "factor", -1), low = finite(rs, "low_freq_factor", 1.0f),
               high = finite(rs, "high_freq_factor", 4.0f);
  const double original = positive(rs, "original_max_position_embeddings", 8192, 1 << 30);
  if (high <= low) throw Error("rope_scaling: high_freq_factor must be above low_freq_factor");
  std::vector<float> out(size_t(c.d_head / 2));
  for (int i = 0; i < c.d_head / 2; ++i) {
    const double freq = std::pow(double(c.rope_theta), -2.0 * i / c.d_head);
    const double wavelen = 2 * std::numbers::pi / freq;
    double divisor = 1.0;
    if (wavelen > original / low) {
      divisor = factor;
    } else if (wavelen >= original / high) {
      const double s = (original / wavelen - low) / (high - low);
      divisor = 1.0 / ((1 - s) / factor + s);
    }
    out[size_t(i)] = float(divisor);
  }
  return out;
}

void read_rope_scaling(const json& j, Config& c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& rs = j["rope_scaling"];
  if (!rs.is_object()) throw Error("field \"rope_scaling\" must be an object or null");
  const std::string type = rs.contains("rope_type") ? json_string(rs, "rope_type") : json_string(rs, "type", "default");
  if (type == "default") return;
  if (type == "linear") {
    c.rope_scale = float(1.0 / finite(rs, "factor", -1));
  } else if (type == "llama3") {
    c.rope_freq_factors = llama3_factors(rs, c);
  } else {
    throw Error("rope_scaling type " + shown(type) +
                " is not supported; decoderscope follows \"default\", \"linear\" and \"llama3\"");
  }
}

// Gemma 3's sliding-window layers: layer_types, or every layer but each pattern-th.
void read_gemma_layers(const json& j, Config& c) {
  c.sliding_window = positive(j, "sliding_window", 4096, 1 << 24);
  c.sliding_layers.assign(size_t(c.n_layers), 0);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& t = j["layer_types"];
    if (!t.is_array() || t.size() != size_t(c.n_layers))
      throw Error("field \"layer_types\" must list one type per layer (" + std::to_string(c.n_layers) + ")");
    for (int l = 0; l < c.n_layers; ++l) {
      const json& v = t[size_t(l)];
      if (v != "sliding_attention" && v != "full_attention")
        throw Error("field \"layer_types\" entry " + std::to_string(l) + " is " + shown(v) +
                    "; decoderscope follows \"sliding_attention\" and \"full_attention\"");
      c.sliding_layers[size_t(l)] = uint8_t(v == "sliding_attention");
    }
  } else {
    const int n = positive(j, "sliding_window_pattern", 6, 1 << 20);
    for (int l = 0; l < c.n_layers; ++l) c.sliding_layers[size_t(l)] = uint8_t((l + 1) % n != 0);
  }
  c.rope_theta_local = finite(j, "rope_local_base_freq", 10000.0f);
}

void read_family(const json& j, const std::string& arch, Config& c) {
  const bool gemma = arch == "Gemma3ForCausalLM";
  const std::string act =
      gemma ? json_string(j, "hidden_activation", "gelu_pytorch_tanh") : json_string(j, "hidden_act");
  if (act != (gemma ? "gelu_pytorch_tanh" : "silu"))
    throw Error("activation " + shown(act) + " is not supported for " + arch + " (decoderscope follows " +
                (gemma ? "gelu_pytorch_tanh" : "silu") + ")");
  c.ffn = gemma ? FFNKind::GeGLU : FFNKind::SwiGLU;
  c.attn_bias = arch == "Qwen2ForCausalLM" || json_bool(j, "attention_bias", false);
  refuse(j, "mlp_bias", "a bias on the feed-forward layers");
  c.qk_norm = arch == "Qwen3ForCausalLM" || gemma;
  if (arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM")
    refuse(j, "use_sliding_window", "Qwen's sliding-window attention");
  if (arch == "MistralForCausalLM" && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    c.sliding_window = positive(j, "sliding_window", -1, 1 << 24);
    c.sliding_layers.assign(size_t(c.n_layers), 1);
    c.rope_theta_local = c.rope_theta;
  }
  if (gemma) {
    c.scale_embed = c.sandwich_norm = true;
    read_gemma_layers(j, c);
    c.attn_scale = float(1.0 / std::sqrt(double(finite(j, "query_pre_attn_scalar", 256.0f))));
    refuse(j, "attn_logit_softcapping", "soft-capping of attention scores");
    if (j.contains("final_logit_softcapping") && !j["final_logit_softcapping"].is_null())
      c.logit_softcap = finite(j, "final_logit_softcapping", -1);
  }
}

// One id or a list of ids, each inside the vocabulary.
std::vector<int> token_ids(const json& j, const std::string& key, int vocab) {
  std::vector<int> ids;
  if (!j.contains(key) || j[key].is_null()) return ids;
  const json& v = j[key];
  for (const json& x : v.is_array() ? v : json::array({v})) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
      throw Error("field \"" + key + "\" holds " + shown(x) + ", not an id of the vocabulary of " +
                  std::to_string(vocab));
    ids.push_back(x.get<int>());
  }
  return ids;
}

// ------------------------------------------------------------------ the weight files

// model.safetensors.index.json: its weight_map (tensor -> shard file name, each name a
// file in dir, no tensor listed twice) and the shards' paths.
struct Index {
  std::string path;
  json map;
  std::vector<std::string> files;
};

Index read_index(const std::string& dir, const std::string& ip) {
  std::set<std::string> seen, twice;
  // Keys inside "weight_map" (depth 2) are collected as they are parsed: a JSON object
  // keeps one value of a repeated key, so a tensor listed twice is caught here.
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 2 && !seen.insert(parsed.get<std::string>()).second)
      twice.insert(parsed.get<std::string>());
    return true;
  };
  const json j = read_json_file(ip, cb);
  if (!twice.empty()) throw Error(ip + ": lists tensor " + *twice.begin() + " twice");
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(ip + ": field \"weight_map\" must be an object {tensor: file}");
  std::set<std::string> files;
  for (auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(ip + ": tensor " + name + " is placed in " + shown(file) + ", not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw Error(ip + ": tensor " + name + " is placed in " + shown(f) + ", not a file name of this folder");
    files.insert(f);
  }
  if (files.empty()) throw Error(ip + ": field \"weight_map\" lists no tensor");
  if (files.size() > size_t(kMaxShards)) throw Error(ip + ": names more than " + std::to_string(kMaxShards) + " files");
  Index out{ip, j["weight_map"], {}};
  std::error_code ec;
  for (const std::string& f : files) {
    const fs::path p = fs::path(dir) / f;
    if (!fs::is_regular_file(p, ec)) throw Error(ip + ": names " + f + ", which is not in " + dir);
    out.files.push_back(p.string());
  }
  return out;
}

// Every tensor of the model, in whichever file holds it.
class Shards {
 public:
  explicit Shards(const std::string& dir) {
    const std::string ip = (fs::path(dir) / "model.safetensors.index.json").string();
    std::error_code ec;
    if (fs::exists(ip, ec)) {
      const Index ix = read_index(dir, ip);
      for (const std::string& path : ix.files) files_.push_back(SafeTensors::open(path));
      check_index(ix);
    } else {
      for (const std::string& path : hf_weight_files(dir)) files_.push_back(SafeTensors::open(path));
    }
    for (size_t f = 0; f < files_.size(); ++f)
      for (const SafeTensors::Entry& e : files_[f].entries()) {
        auto [it, fresh] = where_.insert({e.name, {f, &e}});
        if (!fresh)
          throw Error(files_[f].path() + ": tensor " + e.name + " is also in " + files_[it->second.first].path());
      }
  }
  const SafeTensors::Entry* find(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : it->second.second;
  }
  size_t file_of(const std::string& name) const { return where_.at(name).first; }
  const SafeTensors& file(size_t f) const { return files_[f]; }
  size_t size() const { return files_.size(); }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& [name, at] : where_) n.push_back(name);
    return n;
  }
  std::string dtypes() const {
    std::set<std::string> d;
    for (const auto& [name, at] : where_) d.insert(at.second->dtype);
    std::string s;
    for (const std::string& x : d) s += (s.empty() ? "" : " + ") + x;
    return s;
  }

 private:
  // The index's weight_map must agree with the shards' headers: each tensor in the file
  // it names.
  void check_index(const Index& ix) {
    const std::string& ip = ix.path;
    const json& map = ix.map;
    std::map<std::string, size_t> file_index;
    for (size_t f = 0; f < files_.size(); ++f) file_index[fs::path(files_[f].path()).filename().string()] = f;
    for (auto& [name, file] : map.items()) {
      const SafeTensors& st = files_[file_index.at(file.get<std::string>())];
      if (!st.find(name)) throw Error(ip + ": places tensor " + name + " in " + st.path() + ", which does not hold it");
    }
    for (const SafeTensors& st : files_)
      for (const SafeTensors::Entry& e : st.entries())
        if (!map.contains(e.name))
          throw Error(st.path() + ": holds tensor " + e.name + ", which " + ip + " does not list");
  }

  std::vector<SafeTensors> files_;
  std::map<std::string, std::pair<size_t, const SafeTensors::Entry*>> where_;
};

// ------------------------------------------------------------------ placing the tensors

struct Want {
  std::string hf;    // name in the files
  std::string ours;  // Weights::tensors() name
};

// The tensors of the architecture, by both names. o_bias: the family puts a bias on o
// when it has biases (Llama's attention_bias; Qwen2's biases are on q, k and v only).
std::vector<Want> wanted(const Config& c, bool gemma, bool o_bias) {
  std::vector<Want> w = {{"model.embed_tokens.weight", "tok_embed"}, {"model.norm.weight", "ln_final.g"}};
  if (!c.tied_head) w.push_back({"lm_head.weight", "lm_head"});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".", o = "blocks." + std::to_string(l) + ".";
    auto add = [&](const std::string& a, const std::string& b) { w.push_back({h + a, o + b}); };
    add("input_layernorm.weight", "ln1.g");
    if (gemma) {
      add("post_attention_layernorm.weight", "post_attn.g");
      add("pre_feedforward_layernorm.weight", "ln3.g");
      add("post_feedforward_layernorm.weight", "post_ffn.g");
    } else {
      add("post_attention_layernorm.weight", "ln3.g");
    }
    for (const char* x : {"q", "k", "v", "o"}) {
      add(std::string("self_attn.") + x + "_proj.weight", std::string("attn.") + x + ".W");
      if (c.attn_bias && (*x != 'o' || o_bias))
        add(std::string("self_attn.") + x + "_proj.bias", std::string("attn.") + x + ".b");
    }
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", "attn.q_norm.g");
      add("self_attn.k_norm.weight", "attn.k_norm.g");
    }
    for (const char* x : {"gate", "up", "down"})
      add(std::string("mlp.") + x + "_proj.weight", std::string("mlp.") + x + ".W");
  }
  return w;
}

bool ignorable(const std::string& name) {
  return name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0;
}

void read_weights(const Shards& sh, HfModel& m, const std::vector<Want>& want_list, bool tiles) {
  std::map<std::string, Weights::TensorRef> ours;
  for (Weights::TensorRef& t : m.w.tensors()) ours.emplace(t.name, t);
  std::vector<std::vector<ReadJob>> jobs(sh.size());
  std::set<std::string> used;
  std::vector<std::unique_ptr<Filler>> fill;
  for (size_t f = 0; f < sh.size(); ++f) fill.push_back(std::make_unique<Filler>(sh.file(f)));
  for (const Want& want : want_list) {
    const Weights::TensorRef& t = ours.at(want.ours);
    const SafeTensors::Entry* e = sh.find(want.hf);
    const Shape shape = t.cols == 1 && !t.matrix ? Shape{t.rows} : Shape{t.rows, t.cols};
    const size_t f = e ? sh.file_of(want.hf) : 0;
    need_tensor(sh.file(f), want.hf, shape);  // throws: missing or mis-shaped
    used.insert(want.hf);
    const Dest d = dest_of(t, tiles);
    jobs[f].push_back(
        {e, [fl = fill[f].get(), d](const SafeTensors::Entry& en) { fl->copy(en, d); }, fresh_memory({d}, e->numel())});
  }
  std::vector<std::string> unknown;
  for (const std::string& n : sh.names())
    if (!used.count(n) && !ignorable(n)) unknown.push_back(n);
  if (!unknown.empty())
    throw Error(sh.file(0).path() + (sh.size() > 1 ? " and the other shards" : "") + ": tensors that " + m.arch +
                " with this config.json does not use: " + list_names(unknown));
  for (size_t f = 0; f < sh.size(); ++f) run_in_file_order(sh.file(f), jobs[f]);
  if (tiles) m.w.mark_tiles();
}

// Gemma's gains are stored as weight - 1.
void add_one_to_gemma_norms(Weights& w) {
  auto one = [](Norm& n) {
    if (n.g.size()) n.g.array() += 1.0f;
  };
  one(w.ln_final);
  for (Block& b : w.blocks) {
    for (Norm* n : {&b.ln1, &b.ln3, &b.post_attn, &b.post_ffn, &b.attn.q_norm, &b.attn.k_norm}) one(*n);
  }
}

}  // namespace

const char* hf_architectures() {
  return "LlamaForCausalLM (Llama 2 and 3.x, TinyLlama, SmolLM), MistralForCausalLM, Qwen2ForCausalLM, "
         "Qwen3ForCausalLM, Gemma3ForCausalLM";
}

bool is_hf_llama_family(const json& j) {
  if (!j.is_object()) return false;
  try {
    const std::string a = first_architecture(j);
    return std::find(std::begin(kArchs), std::end(kArchs), a) != std::end(kArchs);
  } catch (const Error&) {
    return false;
  }
}

std::vector<std::string> hf_weight_files(const std::string& dir) {
  std::error_code ec;
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index, ec)) return read_index(dir, index.string()).files;
  if (fs::exists(single, ec)) return {single.string()};
  throw Error(dir + ": no model.safetensors or model.safetensors.index.json");
}

Config hf_config(const json& j, std::string& arch, std::vector<int>& stop_ids) {
  arch = first_architecture(j);
  if (std::find(std::begin(kArchs), std::end(kArchs), arch) == std::end(kArchs))
    throw Error("architecture " + shown(arch) + " is not supported; decoderscope opens " + hf_architectures());
  Config c;
  c.d_model = positive(j, "hidden_size", -1, 1 << 20);
  c.n_layers = positive(j, "num_hidden_layers", -1, 4096);
  c.n_heads = positive(j, "num_attention_heads", -1, 4096);
  c.n_kv_heads = positive(j, "num_key_value_heads", c.n_heads, 4096);
  c.d_head = positive(j, "head_dim", std::max(1, c.d_model / c.n_heads), 1 << 16);
  c.d_ff = positive(j, "intermediate_size", -1, 1 << 24);
  c.vocab_size = positive(j, "vocab_size", -1, 1 << 24);
  c.max_seq = std::min(positive(j, "max_position_embeddings", 2048, 1 << 30), kGgufMaxContext);
  const bool gemma = arch == "Gemma3ForCausalLM";
  c.norm = NormKind::RMSNorm;
  c.norm_place = NormPlace::Pre;
  c.pos = PosKind::Rotary;
  c.rope_style = RopeStyle::Half;
  c.ffn_bias = c.norm_bias = false;
  c.final_norm = true;
  c.norm_eps = finite(j, "rms_norm_eps", gemma ? 1e-6f : 1e-5f);
  c.rope_theta = finite(j, "rope_theta", gemma ? 1e6f : 10000.0f);
  c.tied_head = json_bool(j, "tie_word_embeddings", gemma);
  read_rope_scaling(j, c);
  read_family(j, arch, c);
  const std::vector<int> bos = token_ids(j, "bos_token_id", c.vocab_size);
  stop_ids = token_ids(j, "eos_token_id", c.vocab_size);
  c.bos_id = bos.empty() ? -1 : bos.front();
  c.eos_id = stop_ids.empty() ? -1 : stop_ids.front();
  c.pad_id = -1;
  c.validate();
  return c;
}

HfModel load_hf_model(const std::string& dir, const json& j, Precision precision, bool tiles) {
  HfModel m;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  try {
    m.cfg = hf_config(j, m.arch, m.stop_ids);
  } catch (const Error& e) {
    throw Error(config_path + ": " + e.what());
  }
  // generation_config.json's eos_token_id (Llama 3 instruct models list the end of a turn
  // there too) adds to the stop ids.
  const fs::path gen = fs::path(dir) / "generation_config.json";
  std::error_code ec;
  if (fs::exists(gen, ec)) {
    try {
      for (int id : token_ids(read_json_file(gen.string()), "eos_token_id", m.cfg.vocab_size))
        if (std::find(m.stop_ids.begin(), m.stop_ids.end(), id) == m.stop_ids.end()) m.stop_ids.push_back(id);
    } catch (const Error& e) {
      throw Error(gen.string() + ": " + e.what());
    }
  }
  const Shards sh(dir);
  // A checkpoint may carry lm_head.weight although the embeddings are tied: it is then
  // read as a head of its own.
  if (m.cfg.tied_head && sh.find("lm_head.weight")) m.cfg.tied_head = false;
  m.dtype = sh.dtypes();
  m.w = Weights::zeros(m.cfg, precision, true);
  const bool gemma = m.arch == "Gemma3ForCausalLM", o_bias = m.arch != "Qwen2ForCausalLM";
  if (!o_bias)
    for (Block& b : m.w.blocks) b.attn.o.b = Vec();
  read_weights(sh, m, wanted(m.cfg, gemma, o_bias), tiles);
  if (gemma) add_one_to_gemma_norms(m.w);
  return m;
}

}  // namespace ds
