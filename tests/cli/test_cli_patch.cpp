// decoderscope-cli patch: its JSON grid against forward passes the test makes itself on
// the same tokens (the clean and corrupted runs; the first layer's residual stream,
// which restores everything at the changed token and nothing elsewhere), its table, and
// its messages for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/loader.h"
#include "model/model.h"

namespace {

using ds::test::CliRun;
using ds::test::contains;
using ds::test::run_cli;

bool have_model(const std::string& name) {
  return std::filesystem::exists(std::filesystem::path(DS_SOURCE_DIR) / "assets" / "models" / name / "config.json");
}

const char* kClean = "Once upon a time there was a girl named Lily .";
const char* kCorrupt = "Once upon a time there was a girl named Mia .";

// logit(answer) - logit(wrong) after ids, from a fresh engine.
double metric(const ds::LoadedModel& m, const std::vector<int>& ids, int answer, int wrong) {
  ds::Engine e(m.model);
  const ds::MatRM out = e.forward_full(ids, false);
  return double(out(0, answer)) - double(out(0, wrong));
}

TEST(CliPatch, GridMatchesTheEngineOnStories) {
  if (!have_model("stories")) GTEST_SKIP() << "builtin:stories is absent";
  const std::string args = std::string("patch --model builtin:stories --clean '") + kClean + "' --corrupt '" +
                           kCorrupt + "' --answer Lily --wrong Mia --json";
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const ds::LoadedModel m = ds::load_model("builtin:stories");
  const auto clean = ds::encode_prompt(m, kClean), corrupt = ds::encode_prompt(m, kCorrupt);
  EXPECT_EQ(j["clean_ids"].get<std::vector<int>>(), clean);
  EXPECT_EQ(j["corrupt_ids"].get<std::vector<int>>(), corrupt);
  const int answer = j["answer"]["id"], wrong = j["wrong"]["id"];
  EXPECT_EQ(m.tokenizer->piece(answer), "Lily");
  EXPECT_EQ(m.tokenizer->piece(wrong), "Mia");
  EXPECT_NEAR(j["clean_metric"].get<double>(), metric(m, clean, answer, wrong), 1e-5);
  EXPECT_NEAR(j["corrupt_metric"].get<double>(), metric(m, corrupt, answer, wrong), 1e-5);
  ASSERT_EQ(j["rows"], m.model->cfg.n_layers);
  ASSERT_EQ(j["cols"], int(clean.size()));
  for (size_t t = 0; t < clean.size(); ++t) {
    const double v = j["value"][0][t];
    EXPECT_EQ(v, clean[t] != corrupt[t] ? 1.0 : 0.0) << "layer 0, position " << t;
  }
  const CliRun text = run_cli(args.substr(0, args.size() - 7));  // the table
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "L3") && contains(text.out, "^^^") && contains(text.out, "Lily")) << text.out;
}

TEST(CliPatch, BadInputIsRefusedClearly) {
  if (!have_model("stories")) GTEST_SKIP() << "builtin:stories is absent";
  const std::string base = "patch --model builtin:stories ";
  auto err = [&](const std::string& a) {
    const CliRun r = run_cli(base + a);
    EXPECT_EQ(r.code, 1) << a;
    return r.err;
  };
  const std::string len = err("--clean 'Lily had a ball' --corrupt 'Lily had a red ball' --answer Tom --wrong Mia");
  EXPECT_TRUE(contains(len, "same length") && contains(len, "tokens")) << len;
  EXPECT_TRUE(contains(err("--clean 'Lily had' --corrupt 'Tom had' --answer 'a red' --wrong Mia"), "one token"));
  EXPECT_TRUE(contains(err("--clean 'Lily had' --corrupt 'Tom had' --answer Mia --wrong Mia"), "same token"));
  EXPECT_TRUE(
      contains(err("--clean 'Lily had' --corrupt 'Tom had' --answer Tom --wrong Mia --site nowhere"), "--site"));
  EXPECT_TRUE(contains(err("--clean 'Lily had' --corrupt 'Lily had' --answer Tom --wrong Mia"), "nothing to restore"));
  EXPECT_TRUE(contains(err("--clean 'Lily had' --corrupt 'Tom had' --answer Tom --wrong Mia --site cross_head"),
                       "cross-attention"));
  EXPECT_TRUE(contains(err("--clean 'Lily had' --answer Tom --wrong Mia"), "--corrupt"));
}

}  // namespace
