// The window's engine thread without a window: commands in, events out, and stepping
// back then forward through the worker reproduces the same steps.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "drain.h"
#include "engine_link/models.h"
#include "engine_link/worker.h"
#include "io/hf_writer.h"
#include "io/loader.h"
#include "probe/lens.h"
#include "text/gguf_tokenizer.h"

namespace {

using dsgui::Command;
using dsgui::Event;
namespace cmd = dsgui::cmd;
namespace ev = dsgui::ev;

template <class T>
bool is(const Event& e) {
  return std::holds_alternative<T>(e);
}
// The message of an error event ("" for any other), for the failure messages.
std::string msg(const Event& e) {
  const auto* err = std::get_if<ev::Error>(&e);
  return err ? err->msg : "";
}

using dsgui_test::drain;

std::vector<int> drawn(const std::vector<Event>& evs) {
  std::vector<int> out;
  for (auto& e : evs)
    if (const auto* s = std::get_if<ev::Step>(&e)) out.push_back(s->step.sample->token);
  return out;
}

void load(dsgui::Worker& w, const std::string& spec) { w.post(cmd::Load{spec, "", ds::Precision::F32}); }
void start(dsgui::Worker& w, const std::string& prompt, const std::string& source = "") {
  cmd::Start c;
  c.prompt = prompt;
  c.source = source;
  w.post(std::move(c));
}
void step(dsgui::Worker& w, int count) { w.post(cmd::Step{count}); }
void rewind(dsgui::Worker& w, int keep) { w.post(cmd::Rewind{keep}); }

void set_seed(dsgui::Worker& w, uint64_t seed) {
  cmd::Sampler c;
  c.config.temperature = 1.0f;
  c.config.top_p = 1.0f;
  c.config.seed = seed;
  w.post(std::move(c));
}

TEST(GuiWorker, StepsStreamAndRewindReproduces) {
  dsgui::Worker w;
  load(w, "random:decoder");
  set_seed(w, 7);
  start(w, "hello");
  auto evs = drain(w);
  bool loaded = false, started = false;
  for (auto& e : evs) {
    ASSERT_FALSE(is<ev::Error>(e)) << msg(e);
    loaded |= is<ev::Loaded>(e);
    started |= is<ev::Started>(e);
  }
  ASSERT_TRUE(loaded && started);

  step(w, 8);
  auto first = drawn(drain(w));
  ASSERT_EQ(first.size(), 8u);

  // Back to step 3 and forward again: the same tokens (the RNG is restored).
  rewind(w, 3);
  step(w, 5);
  auto evs2 = drain(w);
  ASSERT_FALSE(evs2.empty());
  ASSERT_TRUE(is<ev::Truncate>(evs2.front()));
  EXPECT_EQ(std::get<ev::Truncate>(evs2.front()).kept, 3);
  auto again = drawn(evs2);
  ASSERT_EQ(again.size(), 5u);
  EXPECT_TRUE(std::equal(again.begin(), again.end(), first.begin() + 3));

  // Another seed draws afresh from the rewound step.
  set_seed(w, 12345);
  rewind(w, 3);
  step(w, 5);
  auto other = drawn(drain(w));
  ASSERT_EQ(other.size(), 5u);
  EXPECT_FALSE(std::equal(other.begin(), other.end(), first.begin() + 3));
}

// A finished text (the context is full) takes no more steps: a Step, or a Rewind that
// keeps every step, answers that it is done instead of nothing (the window would wait
// for a step that never comes, and Play would never stop).
TEST(GuiWorker, AFinishedTextSaysSoWhenAskedForMore) {
  dsgui::Worker w;
  load(w, "random:decoder");
  start(w, "ab");
  step(w, -1);
  auto evs = drain(w);
  ASSERT_FALSE(evs.empty());
  int steps = 0;
  for (auto& e : evs) steps += is<ev::Step>(e);
  ASSERT_GT(steps, 0);
  for (bool as_step : {true, false}) {
    if (as_step)
      step(w, 1);
    else
      rewind(w, steps);
    auto more = drain(w);
    bool told = false;
    for (auto& e : more) {
      EXPECT_FALSE(is<ev::Step>(e));
      EXPECT_FALSE(is<ev::Error>(e)) << msg(e);
      if (const auto* t = std::get_if<ev::Truncate>(&e)) {
        EXPECT_TRUE(t->done);
        EXPECT_EQ(t->kept, steps);
        told = true;
      }
    }
    EXPECT_TRUE(told) << (as_step ? "Step" : "Rewind");
  }
  // Rewinding one step makes room again.
  rewind(w, steps - 1);
  bool told = false;
  for (auto& e : drain(w))
    if (const auto* t = std::get_if<ev::Truncate>(&e)) {
      EXPECT_FALSE(t->done);
      told = true;
    }
  EXPECT_TRUE(told);
}

// A prompt too long for the context is refused, and the session that was running goes
// on from where it was: the window still shows that session's trace.
TEST(GuiWorker, ARefusedPromptKeepsTheSessionRunning) {
  dsgui::Worker w;
  load(w, "random:decoder");
  start(w, "ab");
  step(w, 2);
  ASSERT_EQ(drawn(drain(w)).size(), 2u);
  start(w, std::string(500, 'x'));  // random:decoder has 96 positions
  bool refused = false;
  for (auto& e : drain(w)) {
    EXPECT_FALSE(is<ev::Started>(e));
    refused |= is<ev::Error>(e) && std::get<ev::Error>(e).start_failed;
  }
  EXPECT_TRUE(refused);
  step(w, 1);
  int steps = 0;
  for (auto& e : drain(w)) {
    EXPECT_FALSE(is<ev::Error>(e)) << msg(e);
    if (const auto* st = std::get_if<ev::Step>(&e)) {
      EXPECT_EQ(st->index, 2);
      ++steps;
    }
  }
  EXPECT_EQ(steps, 1);
}

TEST(GuiWorker, ErrorsArriveAsEventsAndTheWorkerGoesOn) {
  dsgui::Worker w;
  load(w, "/nonexistent/model.bin");
  auto evs = drain(w);
  bool err = false;
  for (auto& e : evs) err |= msg(e).find("nonexistent") != std::string::npos;
  EXPECT_TRUE(err);
  load(w, "random:encdec");
  start(w, "", "abc");
  step(w, 2);
  auto ok = drain(w);
  int steps = 0;
  for (auto& e : ok) {
    EXPECT_FALSE(is<ev::Error>(e)) << msg(e);
    if (const auto* st = std::get_if<ev::Started>(&e)) {
      EXPECT_EQ(st->source.size(), 3u);
    }
    steps += is<ev::Step>(e);
  }
  EXPECT_EQ(steps, 2);
}

// Every step the worker sends carries the logit lens of its rows (the panel reads it
// from there), with the texts of its tokens, and a saved trace keeps it: a replay with
// no model shows the same lens.
TEST(GuiWorker, StepsAndSavedTracesCarryTheLogitLens) {
  dsgui::Worker w;
  load(w, "random:decoder");
  start(w, "hi");
  step(w, 3);
  auto evs = drain(w);
  auto t = std::make_shared<ds::Trace>();
  for (auto& e : evs)
    if (const auto* l = std::get_if<ev::Loaded>(&e)) t->config = l->info->cfg;
  for (auto& e : evs)
    if (auto* st = std::get_if<ev::Step>(&e)) t->steps.push_back(std::move(st->step));
  ASSERT_EQ(t->steps.size(), 3u);
  const int last = t->positions(2) - 1;
  const std::vector<ds::LensRow> live = ds::recorded_lens(*t, last);
  ASSERT_EQ(live.size(), size_t(t->config.n_layers + 1));
  EXPECT_EQ(live[0].label, "embedding");
  EXPECT_EQ(live.back().label, "after layer " + std::to_string(t->config.n_layers - 1));
  auto tok = dsgui::demo_tokenizer(t->config.vocab_size);
  for (auto& r : live) {
    ASSERT_EQ(r.ids.size(), size_t(ds::kWindowLensTopK));
    EXPECT_GE(r.probs[0], r.probs.back());
    for (size_t j = 0; j < r.ids.size(); ++j) {
      EXPECT_EQ(r.texts[j], tok->piece(r.ids[j]));
      EXPECT_TRUE(t->steps.back().token_text.count(r.ids[j]));
    }
  }
  const std::string path = (std::filesystem::temp_directory_path() / "ds_gui_worker_trace.json").string();
  cmd::SaveTrace c;
  c.path = path;
  c.trace = t;
  w.post(std::move(c));
  bool saved = false;
  for (auto& e : drain(w)) saved |= is<ev::Saved>(e);
  ASSERT_TRUE(saved);
  ds::Trace back = ds::Trace::load(path);
  EXPECT_EQ(back.steps.size(), 3u);
  for (int pos = 0; pos <= last; ++pos) {
    const std::vector<ds::LensRow> a = ds::recorded_lens(*t, pos), b = ds::recorded_lens(back, pos);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].ids, b[i].ids);
      EXPECT_EQ(a[i].texts, b[i].texts);
      for (size_t j = 0; j < a[i].probs.size(); ++j) EXPECT_NEAR(a[i].probs[j], b[i].probs[j], 1e-6);
    }
  }
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(text.find("gui_logit_lens"), std::string::npos);  // no splice: the lens is in the trace
  std::filesystem::remove(path);
}

// The precision chosen in the window reaches the model: the random models are built
// narrowed, the event says which precision is in use, and the engine still runs.
TEST(GuiWorker, LoadsTheWeightsInTheChosenPrecision) {
  int64_t f32_bytes = 0;
  for (ds::Precision p : {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16}) {
    dsgui::Worker w;
    w.post(cmd::Load{"random:decoder", "", p});
    start(w, "hi");
    step(w, 3);
    auto evs = drain(w);
    std::shared_ptr<const dsgui::ModelInfo> info;
    for (auto& e : evs) {
      EXPECT_FALSE(is<ev::Error>(e)) << msg(e);
      if (const auto* l = std::get_if<ev::Loaded>(&e)) info = l->info;
    }
    ASSERT_TRUE(info);
    EXPECT_EQ(info->precision, p);
    EXPECT_EQ(drawn(evs).size(), 3u);
    if (p == ds::Precision::F32)
      f32_bytes = info->weight_bytes;
    else
      EXPECT_LT(info->weight_bytes, f32_bytes * 3 / 4) << ds::precision_name(p);
  }
  ds::LoadedModel m = dsgui::open_model("random:encdec", "", ds::Precision::BF16);
  EXPECT_EQ(m.precision, ds::Precision::BF16);
  EXPECT_EQ(m.model->w.precision(), ds::Precision::BF16);
  ds::Precision p = ds::Precision::F32;
  EXPECT_TRUE(dsgui::parse_precision("f16", p));
  EXPECT_EQ(p, ds::Precision::F16);
  EXPECT_FALSE(dsgui::parse_precision("f8", p));
}

// A logit-lens request posted with post_latest replaces the one still waiting, so
// requests made while steps run do not pile up behind them.
TEST(GuiWorker, NewerLensRequestsReplaceWaitingOnes) {
  dsgui::Worker w;
  load(w, "random:decoder");
  start(w, "hi");
  step(w, 20);
  for (uint64_t v = 1; v <= 8; ++v) {
    cmd::Lens c;
    cmd::Lens::Column col;
    col.pos = 0;
    col.resid = {std::vector<float>(64, 0.1f)};
    col.labels = {"x"};
    c.columns.push_back(std::move(col));
    c.version = v;
    w.post_latest(std::move(c));
  }
  std::vector<uint64_t> answered;
  for (auto& e : drain(w)) {
    EXPECT_FALSE(is<ev::Error>(e)) << msg(e);
    if (const auto* l = std::get_if<ev::Lens>(&e)) answered.push_back(l->lens.version);
  }
  ASSERT_FALSE(answered.empty());
  EXPECT_LE(answered.size(), 2u);  // at most one already running, then the latest
  EXPECT_EQ(answered.back(), 8u);
}

// Chat mode: the model's chat template makes the prompt of the system and user messages,
// its special tokens taken as themselves, as the library's render_chat and encode_chat
// make it; chat off runs the same text as a plain prompt. ModelInfo says the model can
// chat and lists its special tokens for the strip's colours.
TEST(GuiWorker, ChatModeRunsTheTemplatesPrompt) {
  namespace fs = std::filesystem;
  const fs::path tok = fs::path(DS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "hf-tokenizers" / "qwen3";
  if (!fs::exists(tok / "tokenizer.json")) GTEST_SKIP() << tok << " is absent: skipping the chat mode";
  const fs::path dir = fs::temp_directory_path() / ("ds_gui_chat_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ds::test::write_chat_model(dir.string(), tok);
  const ds::LoadedModel m = ds::load_model(dir.string());
  const nlohmann::json msgs = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Why?"}}};
  const std::vector<int> want =
      ds::encode_chat(*m.tokenizer, m.chat, m.special_ids, ds::render_chat(m.chat, msgs, m.name));
  const int im_start = dynamic_cast<const ds::VocabTokenizer&>(*m.tokenizer).find("<|im_start|>");

  dsgui::Worker w;
  load(w, dir.string());
  cmd::Start c;
  c.prompt = "Why?";
  c.chat = {true, "Be brief."};
  w.post(std::move(c));
  step(w, 1);
  std::shared_ptr<const dsgui::ModelInfo> info;
  std::vector<int> input;
  for (auto& e : drain(w)) {
    ASSERT_FALSE(is<ev::Error>(e)) << msg(e);
    if (const auto* l = std::get_if<ev::Loaded>(&e)) info = l->info;
    if (const auto* s = std::get_if<ev::Step>(&e)) input = s->step.input;
  }
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->has_chat);
  EXPECT_TRUE(std::binary_search(info->special_ids.begin(), info->special_ids.end(), im_start));
  EXPECT_EQ(input, want);
  EXPECT_EQ(input.front(), im_start);

  start(w, "Why?");  // chat off: the text alone
  step(w, 1);
  for (auto& e : drain(w))
    if (const auto* s = std::get_if<ev::Step>(&e)) input = s->step.input;
  EXPECT_EQ(input, ds::encode_prompt(m, "Why?"));
  fs::remove_all(dir);
}

}  // namespace
