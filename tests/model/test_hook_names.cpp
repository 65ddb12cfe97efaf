// Hook names a student can type from TransformerLens: every point decoderscope
// publishes under its own name can also be named, and subscribed to, in
// TransformerLens's spelling, and both spellings reach the very same tensors.
#include <gtest/gtest.h>

#include <cmath>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/loader.h"
#include "model/hooks.h"
#include "model/model.h"
#include "util/error.h"

namespace {

// The built-in dates model: an encoder-decoder, so it has every kind of hook point
// (encoder, decoder self-attention, cross-attention, final norms).
ds::LoadedModel dates() { return ds::load_model("builtin:dates"); }

TEST(HookNames, EveryPointButMaskAndLogitsHasATransformerLensName) {
  const auto m = dates();
  std::set<std::string> aliases;
  for (const std::string& n : ds::Hooks::names(m.model->cfg)) {
    const std::string tl = ds::Hooks::transformerlens_name(n);
    const bool none = n.ends_with(".mask") || n == "logits";
    EXPECT_EQ(tl.empty(), none) << n << " -> '" << tl << "'";
    if (tl.empty()) continue;
    EXPECT_NE(tl, n);
    EXPECT_TRUE(aliases.insert(tl).second) << "two points share the alias " << tl;
    // The alias parses to the same point as the name.
    ds::Stack s1, s2;
    int l1, l2;
    ds::Point p1, p2;
    ASSERT_TRUE(ds::Hooks::parse(n, s1, l1, p1));
    ASSERT_TRUE(ds::Hooks::parse(tl, s2, l2, p2)) << tl;
    EXPECT_EQ(s1, s2);
    EXPECT_EQ(l1, l2);
    EXPECT_EQ(p1, p2);
  }
}

TEST(HookNames, TransformerLensSpellingsAsTheyAreWritten) {
  EXPECT_EQ(ds::Hooks::transformerlens_name("blocks.0.attn.pattern"), "blocks.0.attn.hook_pattern");
  EXPECT_EQ(ds::Hooks::transformerlens_name("blocks.3.attn.scores"), "blocks.3.attn.hook_attn_scores");
  EXPECT_EQ(ds::Hooks::transformerlens_name("blocks.0.resid_pre"), "blocks.0.hook_resid_pre");
  EXPECT_EQ(ds::Hooks::transformerlens_name("blocks.1.mlp.post"), "blocks.1.mlp.hook_post");
  EXPECT_EQ(ds::Hooks::transformerlens_name("embed"), "hook_embed");
  EXPECT_EQ(ds::Hooks::transformerlens_name("ln_final"), "ln_final.hook_normalized");
  EXPECT_EQ(ds::Hooks::transformerlens_name("not.a.hook"), "");
  EXPECT_TRUE(ds::Hooks::matches("blocks.*.attn.hook_pattern", "blocks.2.attn.pattern"));
  EXPECT_TRUE(ds::Hooks::matches("blocks.*.hook_resid_post", "blocks.0.resid_post"));
  EXPECT_FALSE(ds::Hooks::matches("blocks.*.attn.hook_pattern", "blocks.2.cross_attn.pattern"));
  EXPECT_FALSE(ds::Hooks::matches("blocks.*.hook_resid_post", "blocks.0.resid_pre"));
  ds::Stack s;
  int l;
  ds::Point p;
  EXPECT_FALSE(ds::Hooks::parse("blocks.0.hook_pattern", s, l, p));  // the pattern is under attn.
  EXPECT_FALSE(ds::Hooks::parse("hook_resid_pre", s, l, p));         // a block point needs its block
}

// What each subscription saw: hook name -> (calls, sum of values).
std::map<std::string, std::pair<int, double>> observe(const ds::LoadedModel& m, const std::string& pattern) {
  ds::Engine e(m.model);
  std::map<std::string, std::pair<int, double>> seen;
  e.hooks().subscribe(pattern, [&](ds::HookEvent& ev) {
    double sum = 0;
    for (int64_t i = 0; i < ev.t.size(); ++i)
      if (std::isfinite(ev.t.data[i])) sum += ev.t.data[i];
    auto& s = seen[ds::Hooks::name(ev.stack, ev.layer, ev.point)];
    s.first += 1;
    s.second += sum;
  });
  const std::vector<int> src = ds::encode_prompt(m, "22 Nov 2026");
  e.encode(src);
  const std::vector<int> tgt = {m.model->cfg.bos_id >= 0 ? m.model->cfg.bos_id : 0, 5, 7};
  for (int t : tgt) e.forward({&t, 1});
  return seen;
}

TEST(HookNames, BothSpellingsSubscribeToTheSameTensors) {
  const auto m = dates();
  const std::pair<const char*, const char*> same[] = {
      {"blocks.*.attn.pattern", "blocks.*.attn.hook_pattern"},
      {"blocks.*.cross_attn.scores", "blocks.*.cross_attn.hook_attn_scores"},
      {"encoder.blocks.*.resid_post", "encoder.blocks.*.hook_resid_post"},
      {"blocks.0.mlp.pre", "blocks.0.mlp.hook_pre"},
      {"embed", "hook_embed"},
  };
  for (auto [ours, theirs] : same) {
    const auto a = observe(m, ours), b = observe(m, theirs);
    EXPECT_FALSE(a.empty()) << ours;
    EXPECT_EQ(a, b) << ours << " vs " << theirs;
  }
  EXPECT_THROW(observe(m, "blocks.*.attn.hook_nothing"), ds::Error);
}

}  // namespace

// ---- the command line: `hooks` lists both spellings; `generate --trace --hooks`
// records exactly the points the patterns name, in either spelling.

TEST(HookNamesCli, HooksListsEveryPointWithItsTransformerLensName) {
  const auto r = ds::test::run_cli("hooks --model builtin:adder");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto m = ds::load_model("builtin:adder");
  for (const std::string& n : ds::Hooks::names(m.model->cfg)) {
    EXPECT_NE(r.out.find(n + " "), std::string::npos) << n;
    const std::string tl = ds::Hooks::transformerlens_name(n);
    if (!tl.empty()) {
      EXPECT_NE(r.out.find(tl), std::string::npos) << tl;
    }
  }
}

TEST(HookNamesCli, TraceRecordsOnlyThePointsAskedForInEitherSpelling) {
  ds::test::TempDir tmp;
  const std::string tr = tmp.path("t.json");
  const auto r =
      ds::test::run_cli("generate --model builtin:adder --prompt '12+34=' --steps 9 --temperature 0 --trace " +
                        ds::test::quoted(tr) + " --hooks 'blocks.*.attn.hook_pattern,blocks.1.hook_resid_post'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(ds::test::read_file(tr));
  const auto m = ds::load_model("builtin:adder");
  std::set<std::string> want;
  for (int l = 0; l < m.model->cfg.n_layers; ++l) want.insert("blocks." + std::to_string(l) + ".attn.pattern");
  want.insert("blocks.1.resid_post");
  ASSERT_FALSE(j["steps"].empty());
  for (const auto& step : j["steps"]) {
    std::set<std::string> got;
    for (const auto& [name, t] : step["tensors"].items()) got.insert(name);
    EXPECT_EQ(got, want);
  }
}

TEST(HookNamesCli, HooksWithoutTraceIsAnError) {
  const auto r = ds::test::run_cli("generate --model builtin:adder --prompt '1+1=' --hooks logits");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--trace"), std::string::npos) << r.err;
}
