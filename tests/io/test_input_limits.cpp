// Input the loaders and the CLI must report instead of acting on: weights corrupted to
// huge finite values, error messages that would quote a whole 1 MB line, and command
// lines that ask for help or for --precision where it used to be refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "helpers.h"
#include "io/llama2c.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "text/char_tokenizer.h"
#include "text/gpt2_tokenizer.h"
#include "util/error.h"
#include "util/excerpt.h"

namespace {

namespace fs = std::filesystem;
using ds::test::TempDir;

using ds::test::contains;
using ds::test::error_of;

nlohmann::json chars_tokenizer(int n) {
  nlohmann::json v = nlohmann::json::array();
  for (int i = 0; i < n; ++i) v.push_back(std::string(1, char('!' + i)));
  return {{"kind", "chars"}, {"vocab", v}};
}

// The flat index and tensor a test corrupts.
struct Spot {
  std::string name;
  int64_t index;
};

// Sets one value of w (float32 weights) and returns where.
Spot corrupt(ds::Weights& w, size_t tensor, int64_t index, float value) {
  auto t = w.tensors();
  t.at(tensor).data[index] = value;
  return {t[tensor].name, index};
}

}  // namespace

// ---- weights too large to come from any trained model

TEST(HugeWeights, ModelFolderNamesTheTensorAndIndexAtEveryPrecision) {
  TempDir tmp;
  const ds::Config c = ds::test::tiny_llama_config();
  for (float bad : {2.4e37f, -3.0e20f, 1.5e10f}) {
    SCOPED_TRACE(bad);
    ds::Weights w = ds::Weights::random(c, 7, 0.1f);
    const Spot s = corrupt(w, 3, 5, bad);
    const std::string dir = tmp.path("m");
    for (const char* dtype : {"F32", "BF16"}) {
      ds::save_model_folder(dir, c, w, chars_tokenizer(c.vocab_size), {}, dtype);
      for (ds::Precision p : {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16}) {
        SCOPED_TRACE(std::string(dtype) + " as " + ds::precision_name(p));
        const std::string m = error_of([&] { ds::load_model_folder(dir, p); });
        EXPECT_TRUE(contains(m, s.name) && contains(m, "flat index 5") && contains(m, "1e10")) << m;
      }
    }
  }
  // Large but plausible values load.
  ds::Weights w = ds::Weights::random(c, 7, 0.1f);
  corrupt(w, 3, 5, 1e9f);
  ds::save_model_folder(tmp.path("ok"), c, w, chars_tokenizer(c.vocab_size));
  EXPECT_EQ(error_of([&] { ds::load_model_folder(tmp.path("ok")); }), "");
}

TEST(HugeWeights, Llama2cCheckpointAndInMemoryWeightsAreChecked) {
  TempDir tmp;
  const ds::Config c = ds::llama2c_config(16, 32, 2, 2, 2, 40, 16, true);
  ds::Weights w = ds::Weights::random(c, 3, 0.1f);
  const Spot s = corrupt(w, 4, 9, -2.4e37f);
  const std::string path = tmp.path("m.bin");
  ds::save_llama2c(path, c, w);
  for (ds::Precision p : {ds::Precision::F32, ds::Precision::BF16}) {
    const std::string m = error_of([&] { ds::load_llama2c(path, p); });
    EXPECT_TRUE(contains(m, s.name) && contains(m, "index 9") && contains(m, "1e10")) << m;
  }
  const std::string m = error_of([&] { w.check_finite(); });
  EXPECT_TRUE(contains(m, s.name) && contains(m, "flat index 9")) << m;
  // The CLI reports it and exits 1 instead of printing uniform-random ids.
  auto r = ds::test::run_cli("generate --ids --steps 6 --model " + ds::test::quoted(path));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.err, s.name)) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// ---- messages quote at most an excerpt of the file

TEST(Messages, ExcerptCutsAtACharacterBoundaryAndSaysTheLength) {
  EXPECT_EQ(ds::excerpt("short"), "short");
  EXPECT_EQ(ds::excerpt("a\nb\x7F"), "a\\x0Ab\\x7F");
  EXPECT_EQ(ds::quoted_excerpt("ab"), "\"ab\"");
  const std::string long_ascii(1000, 'z');
  EXPECT_EQ(ds::excerpt(long_ascii), std::string(ds::kExcerptBytes, 'z') + "... (1000 bytes)");
  EXPECT_EQ(ds::quoted_excerpt(long_ascii), "\"" + std::string(ds::kExcerptBytes, 'z') + "...\" (1000 bytes)");
  // "é" is two bytes: a cut at an odd byte would split one.
  std::string accents;
  for (int i = 0; i < 100; ++i) accents += "\xC3\xA9";
  const std::string e = ds::excerpt(accents);
  const std::string kept = e.substr(0, e.find("..."));
  EXPECT_EQ(kept.size() % 2, 0u);
  EXPECT_LE(kept.size(), ds::kExcerptBytes);
  EXPECT_GE(kept.size(), ds::kExcerptBytes - 3);
  EXPECT_EQ(kept, accents.substr(0, kept.size()));
}

namespace {

// A GPT-2 vocab.json holding the 256 byte symbols (ids 0..255) and `more`.
std::string byte_vocab(const std::vector<std::string>& more) {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[ds::GPT2Tokenizer::byte_to_unicode(static_cast<unsigned char>(b))] = b;
  int id = 256;
  for (const auto& s : more) v[s] = id++;
  return v.dump();
}

// A message of one line, short whatever the input's size.
void expect_short(const std::string& m, size_t input_bytes) {
  EXPECT_FALSE(m.empty());
  EXPECT_LT(m.size(), 400u) << m.substr(0, 400);
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_TRUE(contains(m, std::to_string(input_bytes) + " bytes")) << m.substr(0, 400);
}

}  // namespace

TEST(Messages, TokenizerFilesQuoteAnExcerptOfAMegabyteLine) {
  TempDir tmp;
  const std::string huge(1 << 20, 'a');
  const std::string vocab = tmp.write("vocab.json", byte_vocab({}));
  // A line that is not two symbols.
  std::string m =
      error_of([&] { ds::GPT2Tokenizer::from_files(vocab, tmp.write("m1.txt", "#version: 0.2\n" + huge)); });
  expect_short(m, huge.size());
  EXPECT_TRUE(contains(m, "m1.txt:2")) << m.substr(0, 400);
  // A merge of a symbol the vocabulary does not hold.
  m = error_of([&] { ds::GPT2Tokenizer::from_files(vocab, tmp.write("m2.txt", huge + " b\n")); });
  expect_short(m, huge.size() + 2);
  // vocab.json: a token whose id is not an integer, and invalid JSON after a huge literal.
  const std::string merges = tmp.write("ok.txt", "#version: 0.2\n");
  m = error_of([&] { ds::GPT2Tokenizer::from_files(tmp.write("v1.json", "{\"" + huge + "\": \"x\"}"), merges); });
  expect_short(m, huge.size());
  m = error_of([&] { ds::GPT2Tokenizer::from_files(tmp.write("v2.json", "{\"a\": t" + huge + "}"), merges); });
  EXPECT_FALSE(m.empty());
  EXPECT_LT(m.size(), 400u) << m.substr(0, 400);
  // A character vocabulary entry repeated.
  m = error_of([&] { ds::CharTokenizer({huge, huge}, -1); });
  EXPECT_LT(m.size(), 400u) << m.substr(0, 400);
}

TEST(Messages, ConfigAndSafetensorsQuoteAnExcerpt) {
  TempDir tmp;
  const std::string huge(1 << 20, 'q');
  const ds::Config c = ds::test::tiny_llama_config();
  const std::string dir = tmp.path("m");
  ds::save_model_folder(dir, c, ds::Weights::random(c, 1, 0.1f), chars_tokenizer(c.vocab_size));
  const std::string config = ds::test::read_file(fs::path(dir) / "config.json");
  // A huge string value, then invalid JSON after a huge literal.
  auto j = nlohmann::json::parse(config);
  j["format"] = huge;
  tmp.write("m/config.json", j.dump());
  std::string m = error_of([&] { ds::load_model_folder(dir); });
  EXPECT_FALSE(m.empty());
  EXPECT_LT(m.size(), 400u) << m.substr(0, 400);
  tmp.write("m/config.json", "{\"format\": f" + huge + "}");
  m = error_of([&] { ds::load_model_folder(dir); });
  EXPECT_FALSE(m.empty());
  EXPECT_LT(m.size(), 400u) << m.substr(0, 400);
  // A safetensors tensor with a huge name and an unknown dtype.
  const std::string header = nlohmann::json{{huge, {{"dtype", "Q9"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  const std::string st = tmp.write("x.safetensors", file + header + "abcd");
  m = error_of([&] { ds::SafeTensors::open(st); });
  expect_short(m, huge.size());
}

// ---- the CLI

TEST(CliOptions, GenerateTakesPrecision) {
  TempDir tmp;
  const std::string model = ds::test::quoted(tmp.path("m.bin"));
  auto r = ds::test::run_cli("random --out " + model +
                             " --dim 32 --hidden 64 --layers 2 --heads 4 --vocab 64 --seq-len 16 --seed 3");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string gen = "generate --ids --steps 12 --temperature 0 --prompt-ids '1 5 9' --model " + model;
  auto plain = ds::test::run_cli(gen), f32 = ds::test::run_cli(gen + " --precision f32");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(f32.code, 0) << f32.err;
  EXPECT_EQ(f32.out, plain.out);  // float32 is the default
  for (const char* p : {"bf16", "f16"}) {
    auto r16 = ds::test::run_cli(gen + " --precision " + p);
    ASSERT_EQ(r16.code, 0) << r16.err;
    std::istringstream ids(r16.out);
    int n = 0, id;
    while (ids >> id) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 64);
      ++n;
    }
    EXPECT_EQ(n, int(std::count(plain.out.begin(), plain.out.end(), ' ')) + 1) << r16.out;
  }
  auto bad = ds::test::run_cli(gen + " --precision f8");
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(contains(bad.err, "--precision")) << bad.err;
  // Beam search takes it too, as before.
  auto beam =
      ds::test::run_cli("generate --ids --steps 12 --prompt-ids '1 5 9' --beam 2 --precision bf16 --model " + model);
  EXPECT_EQ(beam.code, 0) << beam.err;
}

TEST(CliOptions, HelpAfterAnyCommandPrintsItsUsage) {
  for (const std::string cmd :
       {"generate", "hooks", "lens", "heads", "bench", "inspect", "tokenize", "random", "train", "eval", "batch"}) {
    for (const std::string args : {" --help", " -h", " --steps 3 --help", " --model x -h"}) {
      SCOPED_TRACE(cmd + args);
      auto r = ds::test::run_cli(cmd + args);
      EXPECT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(r.err, "");
      EXPECT_EQ(r.out.rfind("usage:\n", 0), 0u) << r.out;
      EXPECT_TRUE(contains(r.out, "decoderscope-cli " + cmd + " ")) << r.out;
      // Only this command's usage lines.
      for (const std::string other : {"hooks ", "inspect ", "batch "}) {
        if (other != cmd + " ") {
          EXPECT_FALSE(contains(r.out, "decoderscope-cli " + other)) << r.out;
        }
      }
    }
  }
  // The option paragraphs of the command come along.
  auto r = ds::test::run_cli("generate --help");
  EXPECT_TRUE(contains(r.out, "--precision f32|bf16|f16:")) << r.out;
  EXPECT_TRUE(contains(r.out, "--trace FILE.json records")) << r.out;
  r = ds::test::run_cli("train -h");
  EXPECT_TRUE(contains(r.out, "train: trains a built-in model")) << r.out;
  r = ds::test::run_cli("frobnicate --help");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "unknown command")) << r.err;
}
