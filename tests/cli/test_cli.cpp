// The command-line tool against llama2.c's own run.c outputs (shared fixtures), and
// its handling of bad arguments and bad files.
#include <gtest/gtest.h>

#include "helpers.h"

#include <sys/wait.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

using ds::test::CliRun;
using ds::test::run_cli;
std::string slurp(const fs::path& p) { return ds::test::read_file(p); }
fs::path fixture_dir() { return ds::test::fixture("aidreams260K"); }

#define NEED_FIXTURE() DS_NEED_FIXTURE(fixture_dir() / "model.bin", "the comparison with llama2.c's run.c")

std::string q(const fs::path& p) { return ds::test::quoted(p); }

}  // namespace

TEST(CliRunC, GreedyIdsFromBosMatchRunC) {
  NEED_FIXTURE();
  CliRun r = run_cli("generate --model " + q(fixture_dir() / "model.bin") + " --steps 128 --temperature 0 --ids");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream a(r.out), b(slurp(fixture_dir() / "greedy_from_bos.ids"));
  std::vector<int> got, want;
  for (int x; a >> x;) got.push_back(x);
  for (int x; b >> x;) want.push_back(x);
  ASSERT_EQ(want.size(), 128u);
  EXPECT_EQ(got, want);
  // One line, ids only.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
}

TEST(CliRunC, GreedyTextFromBosMatchesRunC) {
  NEED_FIXTURE();
  CliRun r = run_cli("generate --model " + q(fixture_dir() / "model.bin") + " --tokenizer " +
                     q(fixture_dir() / "tok512.bin") + " --steps 128 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, slurp(fixture_dir() / "greedy_from_bos.txt"));
}

TEST(CliRunC, GreedyTextFromPromptMatchesRunC) {
  NEED_FIXTURE();
  CliRun r = run_cli("generate --model " + q(fixture_dir() / "model.bin") + " --tokenizer " +
                     q(fixture_dir() / "tok512.bin") + " --prompt 'The robot dreams of' --steps 64 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, slurp(fixture_dir() / "greedy_prompt_robot.txt"));
}

TEST(CliRunC, SeededSamplingRepeatsAndTraceIsWritten) {
  NEED_FIXTURE();
  ds::test::TempDir tmp;
  const fs::path tr = tmp.path("trace.json");
  std::string base = "generate --model " + q(fixture_dir() / "model.bin") +
                     " --steps 40 --temperature 0.9 --top-k 40 --top-p 0.95 --seed 11 --ids";
  CliRun a = run_cli(base + " --trace " + q(tr));
  CliRun b = run_cli(base);
  CliRun c = run_cli("generate --model " + q(fixture_dir() / "model.bin") +
                     " --steps 40 --temperature 0.9 --top-k 40 --top-p 0.95 --seed 12 --ids");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);  // recording a trace does not change what is drawn
  EXPECT_NE(a.out, c.out);
  EXPECT_TRUE(fs::exists(tr));
  EXPECT_GT(fs::file_size(tr), 1000u);
}

TEST(CliErrors, BadArgumentsEndWithOneLineAndNonZeroExit) {
  const char* cases[] = {
      "",
      "frobnicate",
      "generate",
      "generate --model /nonexistent/model.bin",
      "generate --model /tmp --steps 3",
      "generate --model /dev/null",
      "bench --model /nonexistent",
      "inspect",
  };
  for (auto* c : cases) {
    SCOPED_TRACE(c);
    CliRun r = run_cli(c);
    EXPECT_NE(r.code, 0);
    EXPECT_LT(r.code, 128) << "crashed";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
  }
}

TEST(CliErrors, BadOptionValuesAndPromptsAreRejected) {
  NEED_FIXTURE();
  std::string m = " --model " + q(fixture_dir() / "model.bin");
  std::string t = " --tokenizer " + q(fixture_dir() / "tok512.bin");
  const std::string cases[] = {
      "generate" + m + " --steps abc",
      "generate" + m + " --temperature -1",
      "generate" + m + " --temperature nan",
      "generate" + m + " --top-p 1.5",
      "generate" + m + " --top-k -3",
      "generate" + m + " --prompt-ids '1 99999'",
      "generate" + m + " --prompt-ids ''",
      "generate" + m + " --prompt-ids 'x y'",
      "generate" + m + " --prompt hello",  // no tokenizer
      "generate" + m + t + " --prompt 'a long prompt that is longer than the steps allow' --steps 3",
      "generate" + m + " --source-ids '1 2'",  // decoder-only model
      "generate" + m + " --bogus 1",
      "generate" + m + " --tokenizer /dev/null",
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c);
    CliRun r = run_cli(c);
    EXPECT_NE(r.code, 0);
    EXPECT_LT(r.code, 128) << "crashed";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(CliErrors, MalformedCheckpointFilesEndInAClearError) {
  ds::test::TempDir tmp;
  const fs::path dir = tmp.dir();
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return dir / name;
  };
  auto header = [](std::initializer_list<int> v) {
    std::string s;
    for (int x : v) s.append(reinterpret_cast<const char*>(&x), 4);
    return s;
  };
  const fs::path files[] = {
      write("empty.bin", ""),
      write("short.bin", "abc"),
      write("negdim.bin", header({-64, 172, 4, 4, 4, 512, 128})),
      write("huge.bin", header({1 << 30, 1 << 30, 1 << 30, 4, 4, 512, 128})),
      write("truncated.bin", header({64, 172, 4, 4, 4, 512, 128}) + std::string(1000, '\0')),
      write("heads.bin", header({64, 172, 4, 5, 5, 512, 128}) + std::string(1000, '\0')),
  };
  for (auto& f : files) {
    SCOPED_TRACE(f.string());
    CliRun r = run_cli("generate --ids --steps 4 --model " + q(f));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}
