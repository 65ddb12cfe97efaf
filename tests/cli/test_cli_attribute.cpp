// decoderscope-cli attribute: its JSON adds up to the logit a plain forward pass of the
// engine computes for the same tokens, on the model kinds the engine opens; bad input
// ends in a clear message.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/loader.h"
#include "model/model.h"

namespace {

using ds::test::CliRun;
using ds::test::run_cli;

bool have_model(const std::string& name) {
  return std::filesystem::exists(std::filesystem::path(DS_SOURCE_DIR) / "assets" / "models" / name / "config.json");
}

// The logits at the last of `ids` (source `src`) from a plain forward pass.
std::vector<float> logits_of(const ds::LoadedModel& m, const std::vector<int>& ids, const std::vector<int>& src) {
  ds::Engine e(m.model);
  if (m.model->cfg.encoder_decoder) e.encode(src);
  const ds::MatRM out = e.forward_full(ids, false);
  return std::vector<float>(out.data(), out.data() + out.cols());
}

std::string joined(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// The JSON's parts and bias add up to `want`, and its logit is `want`.
void expect_sums_to(const nlohmann::json& j, double want) {
  double sum = j["bias_term"].get<double>();
  for (const auto& p : j["parts"]) sum += p["value"].get<double>();
  const double tol = 1e-4 * std::max(1.0, std::fabs(want));
  EXPECT_NEAR(sum, want, tol);
  EXPECT_NEAR(j["logit"].get<double>(), want, tol);
  EXPECT_NEAR(j["total"].get<double>(), want, tol);
}

}  // namespace

TEST(CliAttribute, StoriesJsonSumsToTheEnginesLogit) {
  if (!have_model("stories")) GTEST_SKIP() << "assets/models/stories is absent";
  const ds::LoadedModel m = ds::load_model("builtin:stories");
  const std::vector<int> ids = ds::encode_prompt(m, "Lily and Ben went to the park. Lily");
  const std::vector<float> l = logits_of(m, ids, {});
  const int greedy = int(std::max_element(l.begin(), l.end()) - l.begin());
  CliRun r = run_cli("attribute --model builtin:stories --prompt \"Lily and Ben went to the park. Lily\" --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["token"].get<int>(), greedy);
  EXPECT_EQ(j["pos"].get<int>(), int(ids.size()) - 1);
  expect_sums_to(j, l[size_t(greedy)]);
  // 4 layers of 4 heads, a bias each, 4 MLPs, the two embeddings.
  EXPECT_EQ(j["parts"].size(), 4u * 4 + 4 + 4 + 2);

  // Another token, and the difference of two, at an earlier position.
  const std::vector<int> head(ids.begin(), ids.begin() + 4);
  const std::vector<float> l4 = logits_of(m, head, {});
  CliRun d = run_cli("attribute --model builtin:stories --prompt-ids \"" + joined(ids) +
                     "\" --pos 3 --token '#30' --vs '#31' --json");
  ASSERT_EQ(d.code, 0) << d.err;
  expect_sums_to(nlohmann::json::parse(d.out), double(l4[30]) - double(l4[31]));

  // The table says the same total and the logit.
  CliRun t = run_cli("attribute --model builtin:stories --prompt \"Lily and Ben went to the park. Lily\" --top 5");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("final norm bias term"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("(21 more)"), std::string::npos) << t.out;
  char want[64];
  std::snprintf(want, sizeof want, "%+.6f", double(l[size_t(greedy)]));
  EXPECT_NE(t.out.find(want), std::string::npos) << "no " << want << " in\n" << t.out;
}

TEST(CliAttribute, DatesCrossAttentionHeads) {
  if (!have_model("dates")) GTEST_SKIP() << "assets/models/dates is absent";
  const ds::LoadedModel m = ds::load_model("builtin:dates");
  const std::vector<int> src = m.tokenizer->encode("July 14, 1989", false);
  const std::vector<int> ids = {m.model->cfg.bos_id};
  const std::vector<float> l = logits_of(m, ids, src);
  CliRun r = run_cli("attribute --model builtin:dates --source \"July 14, 1989\" --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const int tok = j["token"].get<int>();
  expect_sums_to(j, l[size_t(tok)]);
  int cross = 0;
  for (const auto& p : j["parts"]) cross += p["kind"] == "cross_head";
  EXPECT_EQ(cross, m.model->cfg.n_layers * m.model->cfg.n_heads);
}

// A GPT-2 folder (random weights) and, when the fixture is there, a llama2.c checkpoint.
TEST(CliAttribute, OtherModelKinds) {
  ds::test::TempDir dir;
  const std::string gpt2 = dir.path("gpt2");
  CliRun mk = run_cli("random --arch gpt2 --out " + ds::test::quoted(gpt2) +
                      " --dim 32 --layers 2 --heads 4 --vocab 300 --seq-len 32 --seed 3");
  ASSERT_EQ(mk.code, 0) << mk.err;
  const ds::LoadedModel g = ds::load_model(gpt2);
  const std::vector<int> ids = {5, 17, 99, 3};
  CliRun r =
      run_cli("attribute --model " + ds::test::quoted(gpt2) + " --prompt-ids \"5 17 99 3\" --token '#42' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_sums_to(nlohmann::json::parse(r.out), logits_of(g, ids, {})[42]);

  const auto bin = ds::test::fixture("aidreams260K") / "model.bin";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "the aidreams260K fixture is absent";
  const auto tok = ds::test::fixture("aidreams260K") / "tok512.bin";
  const ds::LoadedModel l2 = ds::load_model(bin.string(), tok.string());
  CliRun r2 = run_cli("attribute --model " + ds::test::quoted(bin) + " --tokenizer " + ds::test::quoted(tok) +
                      " --prompt-ids \"1 403 407\" --json");
  ASSERT_EQ(r2.code, 0) << r2.err;
  const auto j2 = nlohmann::json::parse(r2.out);
  expect_sums_to(j2, logits_of(l2, {1, 403, 407}, {})[size_t(j2["token"].get<int>())]);
}

TEST(CliAttribute, BadInputSaysWhy) {
  if (!have_model("stories") || !have_model("dates-postnorm")) GTEST_SKIP() << "the built-in models are absent";
  CliRun post = run_cli("attribute --model builtin:dates-postnorm --source \"July 14, 1989\"");
  EXPECT_EQ(post.code, 1);
  EXPECT_NE(post.err.find("defined for pre-norm models"), std::string::npos) << post.err;
  CliRun two = run_cli("attribute --model builtin:stories --prompt \"Once upon\" --token \"little girl\"");
  EXPECT_EQ(two.code, 1);
  EXPECT_NE(two.err.find("is not one token"), std::string::npos) << two.err;
  CliRun pos = run_cli("attribute --model builtin:stories --prompt \"Once upon\" --pos 99");
  EXPECT_EQ(pos.code, 1);
  EXPECT_NE(pos.err.find("--pos must be"), std::string::npos) << pos.err;
  CliRun vs = run_cli("attribute --model builtin:stories --prompt \"Once upon\" --vs '#3'");
  EXPECT_EQ(vs.code, 1);
  EXPECT_NE(vs.err.find("goes with --token"), std::string::npos) << vs.err;
}
