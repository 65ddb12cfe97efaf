#pragma once
// What the window remembers between runs (the recent models and traces of the File menu),
// in a small JSON file under the XDG config folder, and where the files it writes go by
// default. No GL, no ImGui: tests/gui/engine_link/test_settings.cpp.
//
//   $XDG_CONFIG_HOME/decoderscope/settings.json (else ~/.config/decoderscope/settings.json):
//   {"version": 1, "recent_models": ["builtin:dates", "/home/t/gpt2"], "recent_traces": [...]}
#include <string>
#include <vector>

namespace dsgui {

inline constexpr int kRecentMax = 8;                         // items of each list kept
inline constexpr std::size_t kSettingsMaxBytes = 256 << 10;  // a larger file is not read
inline constexpr std::size_t kRecentItemMaxBytes = 4096;     // a longer item is dropped

struct Settings {
  std::vector<std::string> recent_models;  // newest first: model specs (builtin:NAME, paths)
  std::vector<std::string> recent_traces;  // newest first: trace files
};

// The settings file for these XDG_CONFIG_HOME and HOME values (null or empty: unset;
// a relative XDG_CONFIG_HOME is ignored, as the XDG spec says); "" when neither gives one.
std::string settings_path(const char* xdg_config_home, const char* home);
// settings_path of the environment.
std::string default_settings_path();

// The settings in path. A missing file gives empty settings and no notice. A damaged one
// (too large, not JSON, not UTF-8, items of the wrong type or too long) gives what could be
// read of it, or nothing, and *notice says what was wrong and that it is ignored. Never
// throws.
Settings load_settings(const std::string& path, std::string* notice);

// Writes the settings to path (its folder created, an atomic replace); false and *error
// when it cannot. Items that are not valid UTF-8 are left out.
bool save_settings(const std::string& path, const Settings& s, std::string* error);

// item at the front of list, once; at most kRecentMax kept. An empty item, one longer than
// kRecentItemMaxBytes or one that is not valid UTF-8 is not remembered.
void remember(std::vector<std::string>& list, const std::string& item);

// The folder the window's files go to by default: the current folder when it is writable,
// else the XDG user folder `kind` ("PICTURES" for pictures, "DOCUMENTS" for traces) that
// $XDG_CONFIG_HOME/user-dirs.dirs names (else ~/Pictures, ~/Documents), when it exists,
// else the home folder. Arguments as read from the environment: cwd, XDG_CONFIG_HOME, HOME.
std::string output_dir(const std::string& kind, const std::string& cwd, const char* xdg_config_home, const char* home);
// output_dir of this process.
std::string default_output_dir(const std::string& kind);

}  // namespace dsgui
