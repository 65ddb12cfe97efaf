// Where the programs find their data (util/data_dir.h): an installed program reads
// <its folder>/../share/decoderscope, a program in its build folder the source tree's
// assets/ (and shaders/), then $DECODERSCOPE_DATA; an installed copy never reads the
// checkout; a missing name is an error that names every place looked in.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "helpers.h"
#include "util/data_dir.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;
using ds::test::TempDir;

// A fake machine in a temporary folder: an installed prefix, a source tree with its build
// folder, and a folder for DECODERSCOPE_DATA, each holding the files it is given.
struct FakeMachine {
  TempDir tmp;
  std::string prefix = tmp.sub("prefix"), src = tmp.sub("src"), build = tmp.sub("src/build"), env = tmp.sub("env");
  std::string installed(const std::string& name) const { return prefix + "/share/decoderscope/" + name; }
  void put(const std::string& path) const {
    fs::create_directories(fs::path(path).parent_path());
    tmp.write(fs::relative(path, tmp.dir()).string(), "x");
  }
  ds::DataSearch installed_program() const { return {prefix + "/bin/decoderscope", build, src, env}; }
  ds::DataSearch built_program() const { return {build + "/decoderscope", build, src, env}; }
};

std::string error_of(const std::string& name, const ds::DataSearch& s) {
  try {
    ds::require_data(name, "the thing", s);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "";
}

TEST(DataDir, InstalledProgramReadsItsShareFolderThenTheVariableNeverTheCheckout) {
  FakeMachine m;
  m.put(m.src + "/assets/models/m/config.json");
  m.put(m.src + "/shaders/heatmap.frag");
  ds::DataSearch s = m.installed_program();
  // Only the checkout has them: an installed program does not see it.
  EXPECT_EQ(ds::find_data("models/m/config.json", s), "");
  EXPECT_EQ(ds::find_data("shaders/heatmap.frag", s), "");
  const std::vector<ds::DataPlace> places = ds::data_places("models/m", s);
  ASSERT_EQ(places.size(), 2u);
  EXPECT_EQ(places[0].rule, "installed");
  EXPECT_EQ(fs::path(places[0].path), fs::path(m.installed("models/m")).lexically_normal());
  EXPECT_EQ(places[1].rule, "DECODERSCOPE_DATA");
  m.put(m.env + "/models/m/config.json");
  EXPECT_EQ(fs::path(ds::find_data("models/m/config.json", s)), fs::path(m.env + "/models/m/config.json"));
  m.put(m.installed("models/m/config.json"));
  EXPECT_EQ(fs::path(ds::find_data("models/m/config.json", s)), fs::path(m.installed("models/m/config.json")));
}

TEST(DataDir, BuiltProgramReadsTheSourceTreeAssetsAndShaders) {
  FakeMachine m;
  m.put(m.src + "/assets/models/m/config.json");
  m.put(m.src + "/assets/lessons/one.json");
  m.put(m.src + "/shaders/heatmap.frag");
  ds::DataSearch s = m.built_program();
  EXPECT_EQ(fs::path(ds::find_data("models/m/config.json", s)), fs::path(m.src + "/assets/models/m/config.json"));
  EXPECT_EQ(fs::path(ds::find_data("lessons", s)), fs::path(m.src + "/assets/lessons"));
  EXPECT_EQ(fs::path(ds::find_data("shaders/heatmap.frag", s)), fs::path(m.src + "/shaders/heatmap.frag"));
  // Run through a path with "..": still the build folder.
  s.exe = m.build + "/../build/decoderscope";
  EXPECT_EQ(fs::path(ds::find_data("shaders/heatmap.frag", s)), fs::path(m.src + "/shaders/heatmap.frag"));
}

TEST(DataDir, OrderIsInstalledThenBuildTreeThenVariable) {
  FakeMachine m;
  // A program built in bin/ of a prefix that also has share/: both rules apply.
  ds::DataSearch s{m.prefix + "/bin/decoderscope", m.prefix + "/bin", m.src, m.env};
  const std::string in = m.installed("models/m"), tree = m.src + "/assets/models/m", var = m.env + "/models/m";
  for (const std::string& d : {in, tree, var}) m.put(d + "/config.json");
  std::vector<std::string> rules;
  for (const ds::DataPlace& p : ds::data_places("models/m", s)) rules.push_back(p.rule);
  EXPECT_EQ(rules, (std::vector<std::string>{"installed", "build tree", "DECODERSCOPE_DATA"}));
  EXPECT_EQ(fs::path(ds::find_data("models/m", s)), fs::path(in).lexically_normal());
  fs::remove_all(in);
  EXPECT_EQ(fs::path(ds::find_data("models/m", s)), fs::path(tree));
  fs::remove_all(tree);
  EXPECT_EQ(fs::path(ds::find_data("models/m", s)), fs::path(var));
  fs::remove_all(var);
  EXPECT_EQ(ds::find_data("models/m", s), "");
}

TEST(DataDir, MissingNameNamesEveryPlaceLooked) {
  FakeMachine m;
  std::string e = error_of("models/nope", m.built_program());
  EXPECT_NE(e.find("the thing: not found"), std::string::npos) << e;
  for (const ds::DataPlace& p : ds::data_places("models/nope", m.built_program())) {
    EXPECT_NE(e.find(p.path + " (" + p.rule + ")"), std::string::npos) << e;
  }
  EXPECT_NE(e.find(m.src + "/assets/models/nope (build tree)"), std::string::npos) << e;
  EXPECT_NE(e.find("DECODERSCOPE_DATA is " + m.env), std::string::npos) << e;
  ds::DataSearch no_var = m.installed_program();
  no_var.env.clear();
  e = error_of("models/nope", no_var);
  EXPECT_NE(e.find("(installed)"), std::string::npos) << e;
  EXPECT_EQ(e.find(m.src), std::string::npos) << e;
  EXPECT_NE(e.find("set DECODERSCOPE_DATA"), std::string::npos) << e;
}

TEST(DataDir, NamesThatLeaveTheFolderAreRefused) {
  FakeMachine m;
  m.put(m.prefix + "/share/secret");
  ds::DataSearch s = m.installed_program();
  for (const char* bad : {"", "../secret", "models/../../secret", "/etc/passwd"}) {
    EXPECT_TRUE(ds::data_places(bad, s).empty()) << bad;
    EXPECT_EQ(ds::find_data(bad, s), "") << bad;
    EXPECT_NE(error_of(bad, s), "") << bad;
  }
}

TEST(DataDir, ListingJoinsEveryPlaceOnce) {
  FakeMachine m;
  ds::DataSearch s{m.prefix + "/bin/decoderscope", m.prefix + "/bin", m.src, m.env};
  m.put(m.installed("models/b/config.json"));
  m.put(m.src + "/assets/models/a/config.json");
  m.put(m.src + "/assets/models/b/config.json");
  m.put(m.env + "/models/c/config.json");
  EXPECT_EQ(ds::list_data("models", s), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(ds::list_data("lessons", s).empty());
}

TEST(DataDir, TheProcessReadsItsOwnPathAndTheVariable) {
  const char* old = std::getenv("DECODERSCOPE_DATA");
  const std::string saved = old ? old : "";
  ::setenv("DECODERSCOPE_DATA", "/some/where", 1);
  ds::DataSearch s = ds::DataSearch::from_process();
  EXPECT_EQ(s.env, "/some/where");
  ::setenv("DECODERSCOPE_DATA", "", 1);
  EXPECT_EQ(ds::DataSearch::from_process().env, "");  // empty: unset
  if (old)
    ::setenv("DECODERSCOPE_DATA", saved.c_str(), 1);
  else
    ::unsetenv("DECODERSCOPE_DATA");
  EXPECT_EQ(fs::path(s.exe), fs::read_symlink("/proc/self/exe"));
  // This test program runs from the build folder: the checkout's models are found.
  const std::vector<ds::DataPlace> places = ds::data_places("models", s);
  ASSERT_GE(places.size(), 2u);
  EXPECT_EQ(places[1].rule, "build tree");
  EXPECT_EQ(fs::path(places[1].path), (fs::path(DS_SOURCE_DIR) / "assets" / "models").lexically_normal());
}

}  // namespace
