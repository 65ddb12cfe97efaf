#include "engine_link/settings.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/atomic_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace dsgui {

namespace {

bool set(const char* v) { return v && *v; }

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();  // nlohmann/json refuses invalid UTF-8 (type_error 316)
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

bool keepable(const std::string& item) {
  return !item.empty() && item.size() <= kRecentItemMaxBytes && item.find('\0') == std::string::npos &&
         valid_utf8(item);
}

// The list `key` of j: its keepable strings, in order, at most kRecentMax; what else was
// there is added to *bad.
std::vector<std::string> read_list(const json& j, const char* key, std::string& bad) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end()) return out;
  if (!it->is_array()) {
    bad += std::string(bad.empty() ? "" : "; ") + key + " is not a list";
    return out;
  }
  int skipped = 0;
  for (const json& v : *it) {
    if (!v.is_string() || !keepable(v.get<std::string>()))
      ++skipped;
    else if (int(out.size()) < kRecentMax && std::find(out.begin(), out.end(), v.get<std::string>()) == out.end())
      out.push_back(v.get<std::string>());
  }
  if (skipped)
    bad += std::string(bad.empty() ? "" : "; ") + key + ": " + std::to_string(skipped) + " item(s) that are not paths";
  return out;
}

// The XDG user folder `kind` from user-dirs.dirs (XDG_PICTURES_DIR="$HOME/Pictures"), or "".
std::string user_dirs_entry(const std::string& file, const std::string& kind, const std::string& home) {
  std::ifstream f(file);
  std::string line, key = "XDG_" + kind + "_DIR=";
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::string v = line.substr(key.size());
    if (v.size() < 2 || v.front() != '"' || v.back() != '"') return "";
    v = v.substr(1, v.size() - 2);
    if (v.rfind("$HOME", 0) == 0) return home.empty() ? "" : home + v.substr(5);
    return fs::path(v).is_absolute() ? v : "";
  }
  return "";
}

bool writable_dir(const std::string& d) {
  std::error_code ec;
  return !d.empty() && fs::is_directory(d, ec) && ::access(d.c_str(), W_OK) == 0;
}

}  // namespace

std::string settings_path(const char* xdg_config_home, const char* home) {
  if (set(xdg_config_home) && fs::path(xdg_config_home).is_absolute())
    return (fs::path(xdg_config_home) / "decoderscope" / "settings.json").string();
  if (set(home)) return (fs::path(home) / ".config" / "decoderscope" / "settings.json").string();
  return "";
}

std::string default_settings_path() { return settings_path(std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME")); }

Settings load_settings(const std::string& path, std::string* notice) {
  Settings s;
  auto say = [&](const std::string& why) {
    if (notice) *notice = "the settings file " + path + " " + why + "; it is ignored";
  };
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return s;
  const auto size = fs::file_size(path, ec);
  if (ec || !fs::is_regular_file(path, ec)) return say("cannot be read"), s;
  if (size > kSettingsMaxBytes)
    return say("is " + std::to_string(size) + " bytes, more than settings ever take (" +
               std::to_string(kSettingsMaxBytes) + ")"),
           s;
  std::ifstream f(path, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) return say("cannot be read"), s;
  if (text.str().find_first_not_of(" \t\r\n") == std::string::npos) return say("is empty"), s;
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& e) {
    return say("is damaged (not valid JSON or not UTF-8, at byte " + std::to_string(e.byte) + ")"), s;
  } catch (const json::exception&) {
    return say("is damaged (not valid JSON)"), s;
  }
  if (!j.is_object()) return say("does not hold a JSON object"), s;
  std::string bad;
  s.recent_models = read_list(j, "recent_models", bad);
  s.recent_traces = read_list(j, "recent_traces", bad);
  if (!bad.empty() && notice)
    *notice = "the settings file " + path + " is partly damaged (" + bad + "); that part is ignored";
  return s;
}

bool save_settings(const std::string& path, const Settings& s, std::string* error) {
  auto list = [](const std::vector<std::string>& v) {
    json a = json::array();
    for (const std::string& item : v)
      if (keepable(item) && a.size() < size_t(kRecentMax)) a.push_back(item);
    return a;
  };
  const json j = {{"version", 1}, {"recent_models", list(s.recent_models)}, {"recent_traces", list(s.recent_traces)}};
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    ds::save_file(path, j.dump(2) + "\n");
    return true;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

void remember(std::vector<std::string>& list, const std::string& item) {
  if (!keepable(item)) return;
  list.erase(std::remove(list.begin(), list.end(), item), list.end());
  list.insert(list.begin(), item);
  if (int(list.size()) > kRecentMax) list.resize(kRecentMax);
}

std::string output_dir(const std::string& kind, const std::string& cwd, const char* xdg_config_home, const char* home) {
  if (writable_dir(cwd)) return cwd;
  const std::string h = set(home) ? home : "";
  std::string config = set(xdg_config_home) && fs::path(xdg_config_home).is_absolute() ? std::string(xdg_config_home)
                       : h.empty()                                                     ? std::string()
                                                                                       : h + "/.config";
  std::string d = config.empty() ? "" : user_dirs_entry(config + "/user-dirs.dirs", kind, h);
  if (d.empty() && !h.empty()) d = h + (kind == "PICTURES" ? "/Pictures" : "/Documents");
  if (writable_dir(d)) return d;
  if (writable_dir(h)) return h;
  return cwd;
}

std::string default_output_dir(const std::string& kind) {
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  return output_dir(kind, ec ? std::string() : cwd.string(), std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME"));
}

}  // namespace dsgui
