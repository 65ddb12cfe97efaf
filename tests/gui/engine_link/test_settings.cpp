// The window's settings file (engine_link/settings.h): what is saved reads back the same;
// damaged, empty, huge, non-UTF-8 or wrongly typed files are ignored with a notice and
// never throw; where the file is (XDG) and where the window saves by default.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine_link/settings.h"

namespace {

namespace fs = std::filesystem;
using dsgui::Settings;
// A temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int n = 0;
    dir_ = fs::temp_directory_path() / ("ds_settings_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(dir_ / "cwd", fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string sub(const std::string& name) const {
    fs::create_directories(dir_ / name);
    return path(name);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

 private:
  fs::path dir_;
};

Settings load(const std::string& path, std::string& notice) {
  notice.clear();
  return dsgui::load_settings(path, &notice);
}

TEST(Settings, SavedListsReadBackInOrder) {
  TempDir tmp;
  const std::string path = tmp.path("config/decoderscope/settings.json");  // folders made by the save
  Settings s;
  for (const char* m : {"builtin:stories", "/home/t/models/gpt2", "builtin:dates", "/home/t/ü model.gguf"})
    dsgui::remember(s.recent_models, m);
  dsgui::remember(s.recent_traces, "/tmp/a.dstrace");
  std::string error, notice;
  ASSERT_TRUE(dsgui::save_settings(path, s, &error)) << error;
  Settings r = load(path, notice);
  EXPECT_EQ(notice, "");
  EXPECT_EQ(r.recent_models, (std::vector<std::string>{"/home/t/ü model.gguf", "builtin:dates", "/home/t/models/gpt2",
                                                       "builtin:stories"}));
  EXPECT_EQ(r.recent_traces, s.recent_traces);
  // A missing file: nothing remembered, nothing to say.
  r = load(tmp.path("none.json"), notice);
  EXPECT_TRUE(r.recent_models.empty() && r.recent_traces.empty());
  EXPECT_EQ(notice, "");
}

TEST(Settings, RememberPutsFirstOnceAndKeepsTheNewest) {
  std::vector<std::string> l;
  for (int i = 0; i < dsgui::kRecentMax + 3; ++i) dsgui::remember(l, "m" + std::to_string(i));
  ASSERT_EQ(int(l.size()), dsgui::kRecentMax);
  EXPECT_EQ(l.front(), "m" + std::to_string(dsgui::kRecentMax + 2));
  dsgui::remember(l, "m5");
  EXPECT_EQ(l.front(), "m5");
  EXPECT_EQ(std::count(l.begin(), l.end(), "m5"), 1);
  EXPECT_EQ(int(l.size()), dsgui::kRecentMax);
  const std::vector<std::string> before = l;
  for (const std::string& bad : {std::string(), std::string("bad \xff\xfe utf-8"),
                                 std::string(dsgui::kRecentItemMaxBytes + 1, 'x'), std::string("nul\0inside", 10)})
    dsgui::remember(l, bad);
  EXPECT_EQ(l, before);
}

TEST(Settings, DamagedFilesAreIgnoredWithANotice) {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"blank", " \n\t "},
      {"truncated", "{\"recent_models\": [\"builtin:dates\""},
      {"not json", "recent_models=builtin:dates\n"},
      {"not an object", "[\"builtin:dates\"]"},
      {"invalid utf-8", "{\"recent_models\": [\"\xc3\x28\"]}"},
      {"binary", std::string("\x00\x01\x02\xff\xfe{", 6)},
  };
  for (const auto& [name, bytes] : cases) {
    const std::string path = tmp.write(name + ".json", bytes);
    std::string notice;
    Settings s;
    EXPECT_NO_THROW(s = load(path, notice)) << name;
    EXPECT_TRUE(s.recent_models.empty() && s.recent_traces.empty()) << name;
    EXPECT_NE(notice.find(path), std::string::npos) << name << ": " << notice;
    EXPECT_NE(notice.find("ignored"), std::string::npos) << name << ": " << notice;
  }
}

TEST(Settings, HugeFileIsNotRead) {
  TempDir tmp;
  // A valid JSON file, larger than the limit: refused by its size, not parsed.
  std::string big = "{\"recent_models\": [\"builtin:dates\"], \"pad\": \"";
  big += std::string(dsgui::kSettingsMaxBytes, 'x') + "\"}";
  const std::string path = tmp.write("big.json", big);
  std::string notice;
  Settings s = load(path, notice);
  EXPECT_TRUE(s.recent_models.empty());
  EXPECT_NE(notice.find("bytes"), std::string::npos) << notice;
  // A folder where the file should be, and a file that cannot be read.
  fs::create_directories(tmp.path("dir.json"));
  s = load(tmp.path("dir.json"), notice);
  EXPECT_NE(notice, "");
  if (::geteuid() != 0) {  // root reads anything
    const std::string locked = tmp.write("locked.json", "{}");
    ::chmod(locked.c_str(), 0);
    s = load(locked, notice);
    EXPECT_NE(notice, "");
  }
}

TEST(Settings, WrongItemsAreDroppedAndTheRestKept) {
  TempDir tmp;
  const std::string path =
      tmp.write("mixed.json",
                "{\"recent_models\": [\"builtin:dates\", 7, null, [\"x\"], \"\", \"builtin:dates\", \"/m/a\"], "
                "\"recent_traces\": {\"a\": 1}, \"unknown_key\": true}");
  std::string notice;
  Settings s = load(path, notice);
  EXPECT_EQ(s.recent_models, (std::vector<std::string>{"builtin:dates", "/m/a"}));
  EXPECT_TRUE(s.recent_traces.empty());
  EXPECT_NE(notice.find("partly damaged"), std::string::npos) << notice;
  EXPECT_NE(notice.find("recent_traces is not a list"), std::string::npos) << notice;
  // More items than kept: the first kRecentMax.
  std::string many = "{\"recent_traces\": [";
  for (int i = 0; i < 50; ++i) many += (i ? ", \"/t/" : "\"/t/") + std::to_string(i) + "\"";
  s = load(tmp.write("many.json", many + "]}"), notice);
  ASSERT_EQ(int(s.recent_traces.size()), dsgui::kRecentMax);
  EXPECT_EQ(s.recent_traces.front(), "/t/0");
}

TEST(Settings, SaveLeavesOutItemsThatCannotBeWritten) {
  TempDir tmp;
  Settings s;
  s.recent_models = {"builtin:dates", "bad \xff", "/m/a"};  // not through remember
  std::string error, notice;
  ASSERT_TRUE(dsgui::save_settings(tmp.path("s.json"), s, &error)) << error;
  EXPECT_EQ(load(tmp.path("s.json"), notice).recent_models, (std::vector<std::string>{"builtin:dates", "/m/a"}));
  // A folder that cannot be made: false and the reason, no throw.
  tmp.write("file", "x");
  EXPECT_FALSE(dsgui::save_settings(tmp.path("file/sub/s.json"), s, &error));
  EXPECT_NE(error, "");
}

TEST(Settings, PathFollowsXdgConfigHome) {
  EXPECT_EQ(dsgui::settings_path("/x/conf", "/home/t"), "/x/conf/decoderscope/settings.json");
  EXPECT_EQ(dsgui::settings_path("", "/home/t"), "/home/t/.config/decoderscope/settings.json");
  EXPECT_EQ(dsgui::settings_path(nullptr, "/home/t"), "/home/t/.config/decoderscope/settings.json");
  EXPECT_EQ(dsgui::settings_path("relative/conf", "/home/t"), "/home/t/.config/decoderscope/settings.json");
  EXPECT_EQ(dsgui::settings_path(nullptr, nullptr), "");
}

TEST(Settings, OutputFolderIsTheCurrentOneWhenWritableElseXdg) {
  TempDir tmp;
  const std::string home = tmp.sub("home"), cwd = tmp.sub("cwd"), conf = tmp.sub("home/.config");
  EXPECT_EQ(dsgui::output_dir("PICTURES", cwd, nullptr, home.c_str()), cwd);
  const std::string gone = tmp.path("gone");  // a folder that does not exist is not writable
  // No Pictures folder: the home folder.
  EXPECT_EQ(dsgui::output_dir("PICTURES", gone, nullptr, home.c_str()), home);
  const std::string pics = tmp.sub("home/Pictures");
  EXPECT_EQ(dsgui::output_dir("PICTURES", gone, nullptr, home.c_str()), pics);
  // user-dirs.dirs names other folders ($HOME-relative or absolute).
  const std::string bilder = tmp.sub("home/Bilder"), docs = tmp.sub("elsewhere/Dokumente");
  std::ofstream(conf + "/user-dirs.dirs") << "# written by xdg-user-dirs-update\nXDG_PICTURES_DIR=\"$HOME/Bilder\"\n"
                                          << "XDG_DOCUMENTS_DIR=\"" << docs << "\"\n";
  EXPECT_EQ(dsgui::output_dir("PICTURES", gone, nullptr, home.c_str()), bilder);
  EXPECT_EQ(dsgui::output_dir("DOCUMENTS", gone, nullptr, home.c_str()), docs);
  EXPECT_EQ(dsgui::output_dir("DOCUMENTS", gone, conf.c_str(), home.c_str()), docs);
  if (::geteuid() != 0) {  // root writes anywhere
    ::chmod(cwd.c_str(), 0555);
    EXPECT_EQ(dsgui::output_dir("PICTURES", cwd, nullptr, home.c_str()), bilder);
    ::chmod(cwd.c_str(), 0755);
  }
}

}  // namespace
