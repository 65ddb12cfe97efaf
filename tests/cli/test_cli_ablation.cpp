// decoderscope-cli heads --ablation: its table and its JSON say what probe/ablation.h
// computes for the same run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "helpers.h"
#include "io/loader.h"
#include "probe/ablation.h"
#include "session/session.h"

namespace {

using ds::test::CliRun;
using ds::test::run_cli;

bool have_model(const std::string& name) {
  return std::filesystem::exists(std::filesystem::path(DS_SOURCE_DIR) / "assets" / "models" / name / "config.json");
}

// The run the command makes for --temperature 0 --steps n.
ds::Trace greedy(const ds::LoadedModel& m, const std::vector<int>& prompt, const std::vector<int>& src, int n) {
  ds::SessionOptions o;
  o.sampler.temperature = 0;
  o.sampler.top_p = 0.9f;
  o.steps = n;
  o.stop_ids = m.stop_ids;
  ds::Session s(m.model, m.tokenizer, o);
  s.start(prompt, src);
  while (!s.done()) s.step();
  return s.trace();
}

std::string site_name(ds::HeadSite s) { return s == ds::HeadSite::Cross ? "cross" : "self"; }

}  // namespace

TEST(CliAblation, JsonAndTableEqualTheCoreRanking) {
  if (!have_model("dates")) GTEST_SKIP() << "assets/models/dates is absent";
  const ds::LoadedModel m = ds::load_model("builtin:dates");
  const std::vector<int> src = m.tokenizer->encode("July 14, 1989", false);
  const ds::Trace t = greedy(m, {m.model->cfg.bos_id}, src, 10);
  const int step = 4;  // 1-based, as the command counts
  ds::HeadAblation want = ds::ablate_heads(m.model, ds::ablation_step(t, step - 1));
  ds::rank_by_effect(want.heads);
  const std::string args =
      "heads --ablation --model builtin:dates --source \"July 14, 1989\" --temperature 0 --steps 10 --step 4";

  CliRun j = run_cli(args + " --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json got = nlohmann::json::parse(j.out);
  EXPECT_EQ(got["step"], step);
  EXPECT_EQ(got["token"], want.token);
  EXPECT_NEAR(got["logp"].get<double>(), want.logp, 1e-12);
  ASSERT_EQ(got["heads"].size(), want.heads.size());
  for (size_t i = 0; i < want.heads.size(); ++i) {
    const auto& g = got["heads"][i];
    const ds::HeadEffect& w = want.heads[i];
    EXPECT_EQ(g["site"], site_name(w.site));
    EXPECT_EQ(g["layer"], w.layer);
    EXPECT_EQ(g["head"], w.head);
    EXPECT_NEAR(g["delta"].get<double>(), w.delta, 1e-12) << "rank " << i + 1;
  }

  // The table: rank, head, log p off, change in log p, p off, change in p (4 significant digits).
  CliRun r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  size_t rows = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    size_t rank;
    if (!(ls >> rank) || rank != rows + 1) continue;
    const ds::HeadEffect& w = want.heads[rows];
    std::string a, b;
    if (w.site == ds::HeadSite::Cross) ls >> a;
    ls >> a >> b;
    EXPECT_EQ(a, "L" + std::to_string(w.layer)) << line;
    EXPECT_EQ(b, "H" + std::to_string(w.head)) << line;
    double logp_off, delta, p_off, dp;
    std::string p_text;
    ASSERT_TRUE(ls >> logp_off >> delta >> p_text >> dp) << line;
    // "1-q" for a probability within 5e-4 of 1.
    p_off = p_text.rfind("1-", 0) == 0 ? 1 - std::stod(p_text.substr(2)) : std::stod(p_text);
    // Relative to the value: a change printed as "-0.000" (or 0) would fail for a real one.
    auto near4 = [](double x, double y) { return std::fabs(x - y) <= 6e-4 * std::fabs(y) + 1e-300; };
    EXPECT_TRUE(near4(logp_off, w.logp)) << line;
    EXPECT_TRUE(near4(delta, w.delta)) << line;
    if (p_text.rfind("1-", 0) == 0) {
      EXPECT_TRUE(near4(1 - p_off, -std::expm1(w.logp))) << line;
    } else {
      EXPECT_TRUE(near4(p_off, std::exp(w.logp))) << line;
    }
    EXPECT_TRUE(near4(dp, std::exp(w.logp) - std::exp(want.logp))) << line;
    ++rows;
  }
  EXPECT_EQ(rows, want.heads.size()) << r.out;
}

TEST(CliAblation, OneHeadAcrossStepsEqualsTheCore) {
  if (!have_model("stories")) GTEST_SKIP() << "assets/models/stories is absent";
  const ds::LoadedModel m = ds::load_model("builtin:stories");
  const ds::Trace t = greedy(m, ds::encode_prompt(m, "Once upon a time"), {}, 16);
  std::vector<ds::StepEffect> want = ds::head_across_steps(m.model, t, ds::HeadSite::Self, 1, 2);
  CliRun j = run_cli(
      "heads --ablation --model builtin:stories --prompt \"Once upon a time\" --temperature 0 --steps 16 "
      "--head 1:2 --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json got = nlohmann::json::parse(j.out);
  ASSERT_EQ(got["steps"].size(), want.size());
  double last = INFINITY;
  for (const auto& g : got["steps"]) {
    const int s = g["step"].get<int>() - 1;
    auto it = std::find_if(want.begin(), want.end(), [&](const ds::StepEffect& e) { return e.step == s; });
    ASSERT_NE(it, want.end());
    EXPECT_EQ(g["token"], it->token);
    EXPECT_NEAR(g["delta"].get<double>(), it->delta, 1e-12);
    EXPECT_LE(std::fabs(g["delta"].get<double>()), last);  // largest change first
    last = std::fabs(g["delta"].get<double>());
  }
}

TEST(CliAblation, BadOptionsSayWhatIsWrong) {
  for (const char* c :
       {"heads --ablation --model builtin:stories --head 9", "heads --ablation --model builtin:stories --head 9:0",
        "heads --ablation --model builtin:stories --step 0", "heads --ablation --model builtin:stories --bogus 1"}) {
    CliRun r = run_cli(c);
    EXPECT_EQ(r.code, 1) << c;
    EXPECT_NE(r.err.find("decoderscope-cli: error:"), std::string::npos) << c << ": " << r.err;
  }
}
