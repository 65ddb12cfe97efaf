// decoderscope-cli tokenize with a GPT-2 tokenizer folder: --jsonl against the
// reference ids of real GPT-2 tokenizers (shared fixture), and its errors.
#include <gtest/gtest.h>

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

struct TokCliRun {
  int code;
  std::string out;
  std::string err;
};

// Runs the CLI with args, feeding stdin_text (written to a file first) on its input.
TokCliRun run_tok_cli(const std::string& args, const std::string& stdin_text = "") {
  static int n = 0;
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(n++);
  const fs::path err = fs::temp_directory_path() / ("ds_tokcli_err_" + tag);
  const fs::path in = fs::temp_directory_path() / ("ds_tokcli_in_" + tag);
  {
    std::ofstream f(in, std::ios::binary);
    f << stdin_text;
  }
  const std::string cmd = std::string(DS_CLI_PATH) + " " + args + " 2>'" + err.string() + "' <'" + in.string() + "'";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  const int st = pclose(p);
  std::ifstream ef(err);
  std::stringstream es;
  es << ef.rdbuf();
  fs::remove(err);
  fs::remove(in);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out, es.str()};
}

fs::path gpt2_dir() { return fs::path(DS_SHARED_DIR) / "fixtures" / "gpt2-tokenizer"; }

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

#define NEED_GPT2_CLI_FIXTURE()                                                          \
  if (!fs::exists(gpt2_dir() / "reference_pairs.jsonl"))                                 \
  GTEST_SKIP() << "../shared/fixtures/gpt2-tokenizer is absent: skipping the CLI check " \
                  "against real GPT-2 tokenizer outputs"

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
  TokCliRun r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " --jsonl", in);
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
  TokCliRun r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
}

TEST(CliTokenize, InvalidJsonLineIsNamed) {
  NEED_GPT2_CLI_FIXTURE();
  TokCliRun r = run_tok_cli("tokenize --tokenizer " + quoted(gpt2_dir()) + " --jsonl",
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
  TokCliRun r = run_tok_cli("tokenize --tokenizer " + quoted(dir / "tokenizer.bin") + " hi");
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
