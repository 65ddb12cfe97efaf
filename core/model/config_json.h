#pragma once
// Config <-> JSON, as stored in the config.json of decoderscope's own model folders,
// and the string <-> enum helpers for the architecture options.
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace ds {

// Every Config field under its own name; enums as their to_string names
// ("layernorm", "pre", "rotary", "swiglu", ...).
nlohmann::json config_to_json(const Config& cfg);
// The inverse. Every Config field is required and must have the right JSON type
// (integers for sizes and ids, booleans, numbers for norm_eps and rope_theta, the
// enum names); other keys are ignored. Throws ds::Error naming the field, then runs
// Config::validate().
Config config_from_json(const nlohmann::json& j);

// Throw ds::Error listing the accepted names.
NormKind norm_kind_from_string(const std::string& s);
NormPlace norm_place_from_string(const std::string& s);
PosKind pos_kind_from_string(const std::string& s);
FFNKind ffn_kind_from_string(const std::string& s);

// Typed field readers shared by the config parsers. `obj` must be an object. Each
// throws ds::Error 'field "KEY" ...' when the key is missing (for the overloads
// without a default) or holds the wrong type or an out-of-range value; a JSON null
// counts as missing.
int json_int(const nlohmann::json& obj, const std::string& key);
int json_int(const nlohmann::json& obj, const std::string& key, int def);
bool json_bool(const nlohmann::json& obj, const std::string& key);
bool json_bool(const nlohmann::json& obj, const std::string& key, bool def);
float json_float(const nlohmann::json& obj, const std::string& key);
float json_float(const nlohmann::json& obj, const std::string& key, float def);
std::string json_string(const nlohmann::json& obj, const std::string& key);
std::string json_string(const nlohmann::json& obj, const std::string& key, const std::string& def);

}  // namespace ds
