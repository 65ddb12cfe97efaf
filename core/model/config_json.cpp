#include "model/config_json.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace ds {

using nlohmann::json;

namespace {

// A JSON value for a message: ASCII, one line, cut short if long.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 60) + "...";
  return s;
}

[[noreturn]] void bad(const std::string& key, const std::string& what) { throw Error("field \"" + key + "\" " + what); }

const json* lookup(const json& obj, const std::string& key) {
  if (!obj.is_object()) throw Error("configuration is " + std::string(obj.type_name()) + ", not a JSON object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& need(const json& obj, const std::string& key) {
  const json* v = lookup(obj, key);
  if (!v) bad(key, "is missing");
  return *v;
}

int to_int(const json& v, const std::string& key) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int>::max())) bad(key, "is out of range: " + shown(v));
    return static_cast<int>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
      bad(key, "is out of range: " + shown(v));
    return static_cast<int>(i);
  }
  bad(key, "must be an integer, is " + shown(v));
}

bool to_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) bad(key, "must be true or false, is " + shown(v));
  return v.get<bool>();
}

float to_float(const json& v, const std::string& key) {
  if (!v.is_number()) bad(key, "must be a number, is " + shown(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) bad(key, "is out of range: " + shown(v));
  return static_cast<float>(d);
}

std::string to_str(const json& v, const std::string& key) {
  if (!v.is_string()) bad(key, "must be a string, is " + shown(v));
  return v.get<std::string>();
}

// The shortest decimal that reads back as f, so 1e-5f is stored as 1e-05 rather
// than 9.999999747378752e-06.
json float_json(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = static_cast<double>(f);
  if (r.ec == std::errc()) {
    double parsed = 0;
    auto back = std::from_chars(buf, r.ptr, parsed);
    if (back.ec == std::errc() && static_cast<float>(parsed) == f) d = parsed;
  }
  return d;
}

template <class E>
E pick(const std::string& s, std::initializer_list<std::pair<const char*, E>> names, const char* what) {
  std::string list;
  for (auto& [n, e] : names) {
    if (s == n) return e;
    list += list.empty() ? "" : ", ";
    list += n;
  }
  json shown_s = s;
  throw Error(std::string(what) + " " + shown(shown_s) + " is not one of " + list);
}

}  // namespace

NormKind norm_kind_from_string(const std::string& s) {
  return pick<NormKind>(s, {{"layernorm", NormKind::LayerNorm}, {"rmsnorm", NormKind::RMSNorm}}, "norm");
}
NormPlace norm_place_from_string(const std::string& s) {
  return pick<NormPlace>(s, {{"pre", NormPlace::Pre}, {"post", NormPlace::Post}}, "norm_place");
}
PosKind pos_kind_from_string(const std::string& s) {
  return pick<PosKind>(s,
                       {{"none", PosKind::None},
                        {"learned", PosKind::Learned},
                        {"sinusoidal", PosKind::Sinusoidal},
                        {"rotary", PosKind::Rotary}},
                       "pos");
}
FFNKind ffn_kind_from_string(const std::string& s) {
  return pick<FFNKind>(s,
                       {{"gelu", FFNKind::GELU},
                        {"gelu_tanh", FFNKind::GELUTanh},
                        {"relu", FFNKind::ReLU},
                        {"swiglu", FFNKind::SwiGLU},
                        {"geglu", FFNKind::GeGLU}},
                       "ffn");
}
RopeStyle rope_style_from_string(const std::string& s) {
  return pick<RopeStyle>(s, {{"interleaved", RopeStyle::Interleaved}, {"half", RopeStyle::Half}}, "rope_style");
}

int json_int(const json& obj, const std::string& key) { return to_int(need(obj, key), key); }
int json_int(const json& obj, const std::string& key, int def) {
  const json* v = lookup(obj, key);
  return v ? to_int(*v, key) : def;
}
bool json_bool(const json& obj, const std::string& key) { return to_bool(need(obj, key), key); }
bool json_bool(const json& obj, const std::string& key, bool def) {
  const json* v = lookup(obj, key);
  return v ? to_bool(*v, key) : def;
}
float json_float(const json& obj, const std::string& key) { return to_float(need(obj, key), key); }
float json_float(const json& obj, const std::string& key, float def) {
  const json* v = lookup(obj, key);
  return v ? to_float(*v, key) : def;
}
std::string json_string(const json& obj, const std::string& key) { return to_str(need(obj, key), key); }
std::string json_string(const json& obj, const std::string& key, const std::string& def) {
  const json* v = lookup(obj, key);
  return v ? to_str(*v, key) : def;
}

namespace {
// The llama-family options of a config (absent: the defaults).
void read_llama_family(const json& j, Config& c, RopeStyle style) {
  c.rope_style = style;
  c.rope_scale = json_float(j, "rope_scale", 1.0f);
  if (const json* f = lookup(j, "rope_freq_factors")) {
    if (!f->is_array() || f->size() > 65536) bad("rope_freq_factors", "must be an array of numbers");
    for (const json& x : *f) c.rope_freq_factors.push_back(to_float(x, "rope_freq_factors"));
  }
  c.qk_norm = json_bool(j, "qk_norm", false);
  c.sandwich_norm = json_bool(j, "sandwich_norm", false);
  c.attn_scale = json_float(j, "attn_scale", 0.0f);
  c.logit_softcap = json_float(j, "logit_softcap", 0.0f);
  c.sliding_window = json_int(j, "sliding_window", 0);
  if (const json* l = lookup(j, "sliding_layers")) {
    if (!l->is_array() || l->size() > 4096) bad("sliding_layers", "must be an array of 0 and 1, one per layer");
    for (const json& x : *l) c.sliding_layers.push_back(uint8_t(to_int(x, "sliding_layers") != 0));
  }
  c.rope_theta_local = json_float(j, "rope_theta_local", 10000.0f);
}
}  // namespace

json config_to_json(const Config& c) {
  json j = json::object();
  j["d_model"] = c.d_model;
  j["n_layers"] = c.n_layers;
  j["n_enc_layers"] = c.n_enc_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["d_head"] = c.d_head;
  j["d_ff"] = c.d_ff;
  j["vocab_size"] = c.vocab_size;
  j["max_seq"] = c.max_seq;
  j["max_src"] = c.max_src;
  j["norm"] = to_string(c.norm);
  j["norm_place"] = to_string(c.norm_place);
  j["pos"] = to_string(c.pos);
  j["ffn"] = to_string(c.ffn);
  j["encoder_decoder"] = c.encoder_decoder;
  j["tied_head"] = c.tied_head;
  j["attn_bias"] = c.attn_bias;
  j["ffn_bias"] = c.ffn_bias;
  j["norm_bias"] = c.norm_bias;
  j["final_norm"] = c.final_norm;
  j["enc_final_norm"] = c.enc_final_norm;
  j["scale_embed"] = c.scale_embed;
  j["norm_eps"] = float_json(c.norm_eps);
  j["rope_theta"] = float_json(c.rope_theta);
  j["bos_id"] = c.bos_id;
  j["eos_id"] = c.eos_id;
  j["pad_id"] = c.pad_id;
  // The llama-family options, written only when they differ from the defaults (so the
  // configs of other models read as they always did).
  const Config d;
  if (c.rope_style != d.rope_style) j["rope_style"] = to_string(c.rope_style);
  if (c.rope_scale != d.rope_scale) j["rope_scale"] = float_json(c.rope_scale);
  if (!c.rope_freq_factors.empty()) {
    json f = json::array();
    for (float x : c.rope_freq_factors) f.push_back(float_json(x));
    j["rope_freq_factors"] = f;
  }
  if (c.qk_norm) j["qk_norm"] = true;
  if (c.sandwich_norm) j["sandwich_norm"] = true;
  if (c.attn_scale != d.attn_scale) j["attn_scale"] = float_json(c.attn_scale);
  if (c.logit_softcap != d.logit_softcap) j["logit_softcap"] = float_json(c.logit_softcap);
  if (c.sliding_window > 0) {
    j["sliding_window"] = c.sliding_window;
    j["sliding_layers"] = c.sliding_layers;
    j["rope_theta_local"] = float_json(c.rope_theta_local);
  }
  return j;
}

Config config_from_json(const json& j) {
  Config c;
  c.d_model = json_int(j, "d_model");
  c.n_layers = json_int(j, "n_layers");
  c.n_enc_layers = json_int(j, "n_enc_layers");
  c.n_heads = json_int(j, "n_heads");
  c.n_kv_heads = json_int(j, "n_kv_heads");
  c.d_head = json_int(j, "d_head");
  c.d_ff = json_int(j, "d_ff");
  c.vocab_size = json_int(j, "vocab_size");
  c.max_seq = json_int(j, "max_seq");
  c.max_src = json_int(j, "max_src");
  auto enum_field = [&](const char* key, auto parse, const char* def = nullptr) {
    const std::string s = def ? json_string(j, key, def) : json_string(j, key);
    try {
      return parse(s);
    } catch (const Error& e) {
      bad(key, std::string("is invalid: ") + e.what());
    }
  };
  c.norm = enum_field("norm", norm_kind_from_string);
  c.norm_place = enum_field("norm_place", norm_place_from_string);
  c.pos = enum_field("pos", pos_kind_from_string);
  c.ffn = enum_field("ffn", ffn_kind_from_string);
  c.encoder_decoder = json_bool(j, "encoder_decoder");
  c.tied_head = json_bool(j, "tied_head");
  c.attn_bias = json_bool(j, "attn_bias");
  c.ffn_bias = json_bool(j, "ffn_bias");
  c.norm_bias = json_bool(j, "norm_bias");
  c.final_norm = json_bool(j, "final_norm");
  c.enc_final_norm = json_bool(j, "enc_final_norm");
  c.scale_embed = json_bool(j, "scale_embed");
  c.norm_eps = json_float(j, "norm_eps");
  c.rope_theta = json_float(j, "rope_theta");
  c.bos_id = json_int(j, "bos_id");
  c.eos_id = json_int(j, "eos_id");
  c.pad_id = json_int(j, "pad_id");
  for (auto [key, id] : {std::pair<const char*, int>{"bos_id", c.bos_id}, {"eos_id", c.eos_id}, {"pad_id", c.pad_id}})
    if (id < -1) bad(key, "must be a token id or -1 (none), is " + std::to_string(id));
  read_llama_family(j, c, enum_field("rope_style", rope_style_from_string, "interleaved"));
  c.validate();
  return c;
}

}  // namespace ds
