// The file browser's folder listing for each use and the numbered pictures F12 saves
// (app/gui/widgets/file_browser.h), on folders made here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "widgets/file_browser.h"

namespace fs = std::filesystem;
using dsgui::BrowseFor;
using dsgui::list_folder;
using dsgui::next_numbered_png;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path =
        fs::temp_directory_path() / ("ds_browser_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                     "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void touch(const std::string& name) const { std::ofstream(path / name) << "x"; }
};

std::string name_of(const std::string& p) { return fs::path(p).filename().string(); }

}  // namespace

TEST(NumberedPng, CountsUpFromTheHighestNumberAndNeverReusesOne) {
  TempDir d;
  EXPECT_EQ(name_of(next_numbered_png(d.path.string(), "decoderscope")), "decoderscope-001.png");
  EXPECT_EQ(fs::path(next_numbered_png(d.path.string(), "decoderscope")).parent_path(), d.path);
  // Each picture taken makes the next number; a gap (a deleted picture) is not filled.
  d.touch("decoderscope-001.png");
  EXPECT_EQ(name_of(next_numbered_png(d.path.string(), "decoderscope")), "decoderscope-002.png");
  d.touch("decoderscope-007.png");
  EXPECT_EQ(name_of(next_numbered_png(d.path.string(), "decoderscope")), "decoderscope-008.png");
  d.touch("decoderscope-1200.PNG");  // past three digits, and any case of the extension
  EXPECT_EQ(name_of(next_numbered_png(d.path.string(), "decoderscope")), "decoderscope-1201.png");
  // Names that only look alike do not count.
  TempDir e;
  for (const char* n : {"decoderscope-12a.png", "decoderscope-.png", "decoderscope-5.jpg", "other-9.png",
                        "decoderscope-99999999999.png", "decoderscope_4.png"})
    e.touch(n);
  EXPECT_EQ(name_of(next_numbered_png(e.path.string(), "decoderscope")), "decoderscope-001.png");
  // A folder that cannot be listed counts as empty (no throw).
  EXPECT_EQ(name_of(next_numbered_png((d.path / "missing").string(), "decoderscope")), "decoderscope-001.png");
}

TEST(FileBrowser, SaveDialogsListTheFilesAlreadyThere) {
  TempDir d;
  for (const char* n : {"a.png", "b.dstrace", "c.json", "d.gguf", "e.txt", ".hidden.png"}) d.touch(n);
  fs::create_directories(d.path / "sub");
  std::string err;
  auto names = [&](BrowseFor u) {
    std::string s;
    for (auto& e : list_folder(d.path.string(), u, err)) s += (e.folder ? "[" + e.name + "]" : e.name) + " ";
    return s;
  };
  EXPECT_EQ(names(BrowseFor::SavePng), "[sub] a.png ");
  EXPECT_EQ(names(BrowseFor::SaveTrace), "[sub] b.dstrace c.json ");
  EXPECT_EQ(names(BrowseFor::Trace), "[sub] b.dstrace c.json ");
  EXPECT_EQ(names(BrowseFor::Model), "[sub] d.gguf ");
  EXPECT_TRUE(err.empty());
}
