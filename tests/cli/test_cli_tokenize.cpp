// decoderscope-cli tokenize with a GPT-2 tokenizer folder: --jsonl against the
// reference ids of real GPT-2 tokenizers (shared fixture), and its errors.
#include <gtest/gtest.h>

#include "helpers.h"

#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

using ds::test::quoted;
// Runs the CLI with args, feeding stdin_text on its input.
ds::test::CliRun run_tok_cli(const std::string& args, const std::string& stdin_text = "") {
  return ds::test::run_cli(args, stdin_text);
}

fs::path gpt2_dir() { return ds::test::fixture("gpt2-tokenizer"); }

std::string read_all(const fs::path& p) { return ds::test::read_file(p); }

#define NEED_GPT2_CLI_FIXTURE() \
  DS_NEED_FIXTURE(gpt2_dir() / "reference_pairs.jsonl", "the CLI check against real GPT-2 tokenizer outputs")

}  // namespace

TEST(CliTokenize, JsonlMatchesEveryReferencePair) {
  NEED_GPT2_CLI_FIXTURE();
  const std::string ref = read_all(gpt2_dir() / "reference_pairs.jsonl");
  // Feed only the texts.
  std::string in;
  std::vector<nlohmann::json> want;
  std::istringstream rs(ref);
  for (std::string line; std::getline(rs, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    want.push_back(j);
    in += nlohmann::json{{"text", j["text"]}}.dump() + "\n";
  }
  ASSERT_GE(want.size(), 300u);
  ds::test::CliRun r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " --jsonl", in);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream os(r.out);
  size_t i = 0;
  for (std::string line; std::getline(os, line); ++i) {
    ASSERT_LT(i, want.size()) << "more output lines than input lines";
    auto got = nlohmann::json::parse(line);
    EXPECT_EQ(got["text"], want[i]["text"]) << "line " << i + 1;
    EXPECT_EQ(got["ids"], want[i]["ids"]) << "line " << i + 1 << ": " << want[i]["text"];
    // "text" comes first.
    EXPECT_EQ(line.rfind("{\"text\":", 0), 0u);
  }
  EXPECT_EQ(i, want.size());
}

TEST(CliTokenize, TextArgumentWithATokenizerFolder) {
  NEED_GPT2_CLI_FIXTURE();
  ds::test::CliRun r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
}

TEST(CliTokenize, InvalidJsonLineIsNamed) {
  NEED_GPT2_CLI_FIXTURE();
  ds::test::CliRun r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " --jsonl",
                                   "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n{\"text\": \"c\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "{\"text\":\"a\",\"ids\":[64]}\n");
  r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " --jsonl", "{\"text\": 5}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"text\""), std::string::npos) << r.err;
}

TEST(CliTokenize, ArgumentErrors) {
  const fs::path dir = fs::temp_directory_path() / ("ds_tokcli_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "tokenizer.bin", std::ios::binary);
    f << "not really";
  }
  // A llama2.c tokenizer.bin needs --model.
  ds::test::CliRun r = run_tok_cli("tokenize --tokenizer " + quoted(dir / "tokenizer.bin") + " hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  // A folder without tokenizer files names what it looked for.
  r = run_tok_cli("tokenize --tokenizer " + quoted(dir) + " hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("vocab.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  // Neither --model nor --tokenizer.
  r = run_tok_cli("tokenize hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--tokenizer"), std::string::npos) << r.err;
  fs::remove_all(dir);
  if (fs::exists(gpt2_dir() / "vocab.json")) {
    r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " --jsonl extra", "");
    EXPECT_EQ(r.code, 1);
    r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()), "");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("TEXT"), std::string::npos) << r.err;
  }
}
