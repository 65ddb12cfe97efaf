// The window's engine thread without a window: commands in, events out, and stepping
// back then forward through the worker reproduces the same steps.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "models.h"
#include "probe/lens.h"
#include "worker.h"

namespace {

using dsgui::Command;
using dsgui::Event;

// Posts nothing; collects events until the worker is idle (or 60 s pass).
std::vector<Event> drain(dsgui::Worker& w) {
  std::vector<Event> all;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    for (auto& e : w.poll()) all.push_back(std::move(e));
    if (!w.busy()) {
      for (auto& e : w.poll()) all.push_back(std::move(e));
      return all;
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) return all;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::vector<int> drawn(const std::vector<Event>& evs) {
  std::vector<int> out;
  for (auto& e : evs)
    if (e.kind == Event::Step) out.push_back(e.step->sample->token);
  return out;
}

// n: Step's count or Rewind's steps kept; a, b: Load's model and tokenizer, or Start's
// prompt and source.
void post(dsgui::Worker& w, Command::Kind k, int n = 1, const std::string& a = "", const std::string& b = "") {
  Command c;
  c.kind = k;
  c.count = n;
  c.keep = n;
  if (k == Command::Load) c.spec = a, c.tokenizer = b;
  if (k == Command::Start) c.prompt = a, c.source = b;
  w.post(std::move(c));
}

void set_seed(dsgui::Worker& w, uint64_t seed) {
  Command c;
  c.kind = Command::Sampler;
  c.sampler.temperature = 1.0f;
  c.sampler.top_p = 1.0f;
  c.sampler.seed = seed;
  w.post(std::move(c));
}

TEST(GuiWorker, StepsStreamAndRewindReproduces) {
  dsgui::Worker w;
  post(w, Command::Load, 1, "random:decoder");
  set_seed(w, 7);
  post(w, Command::Start, 1, "hello");
  auto evs = drain(w);
  bool loaded = false, started = false;
  for (auto& e : evs) {
    ASSERT_NE(e.kind, Event::Error) << e.msg;
    loaded |= e.kind == Event::Loaded;
    started |= e.kind == Event::Started;
  }
  ASSERT_TRUE(loaded && started);

  post(w, Command::Step, 8);
  auto first = drawn(drain(w));
  ASSERT_EQ(first.size(), 8u);

  // Back to step 3 and forward again: the same tokens (the RNG is restored).
  post(w, Command::Rewind, 3);
  post(w, Command::Step, 5);
  auto evs2 = drain(w);
  ASSERT_FALSE(evs2.empty());
  EXPECT_EQ(evs2.front().kind, Event::Truncate);
  EXPECT_EQ(evs2.front().kept, 3);
  auto again = drawn(evs2);
  ASSERT_EQ(again.size(), 5u);
  EXPECT_TRUE(std::equal(again.begin(), again.end(), first.begin() + 3));

  // Another seed draws afresh from the rewound step.
  set_seed(w, 12345);
  post(w, Command::Rewind, 3);
  post(w, Command::Step, 5);
  auto other = drawn(drain(w));
  ASSERT_EQ(other.size(), 5u);
  EXPECT_FALSE(std::equal(other.begin(), other.end(), first.begin() + 3));
}

// A finished text (the context is full) takes no more steps: a Step, or a Rewind that
// keeps every step, answers that it is done instead of nothing (the window would wait
// for a step that never comes, and Play would never stop).
TEST(GuiWorker, AFinishedTextSaysSoWhenAskedForMore) {
  dsgui::Worker w;
  post(w, Command::Load, 0, "random:decoder");
  post(w, Command::Start, 0, "ab");
  post(w, Command::Step, -1);
  auto evs = drain(w);
  ASSERT_FALSE(evs.empty());
  int steps = 0;
  for (auto& e : evs) steps += e.kind == Event::Step;
  ASSERT_GT(steps, 0);
  for (int k : {Command::Step, Command::Rewind}) {
    post(w, Command::Kind(k), k == Command::Step ? 1 : steps);
    auto more = drain(w);
    bool told = false;
    for (auto& e : more) {
      EXPECT_NE(e.kind, Event::Step);
      EXPECT_NE(e.kind, Event::Error) << e.msg;
      if (e.kind == Event::Truncate) {
        EXPECT_TRUE(e.done);
        EXPECT_EQ(e.kept, steps);
        told = true;
      }
    }
    EXPECT_TRUE(told) << (k == Command::Step ? "Step" : "Rewind");
  }
  // Rewinding one step makes room again.
  post(w, Command::Rewind, steps - 1);
  bool told = false;
  for (auto& e : drain(w))
    if (e.kind == Event::Truncate) {
      EXPECT_FALSE(e.done);
      told = true;
    }
  EXPECT_TRUE(told);
}

// A prompt too long for the context is refused, and the session that was running goes
// on from where it was: the window still shows that session's trace.
TEST(GuiWorker, ARefusedPromptKeepsTheSessionRunning) {
  dsgui::Worker w;
  post(w, Command::Load, 0, "random:decoder");
  post(w, Command::Start, 0, "ab");
  post(w, Command::Step, 2);
  ASSERT_EQ(drawn(drain(w)).size(), 2u);
  post(w, Command::Start, 0, std::string(500, 'x'));  // random:decoder has 96 positions
  bool refused = false;
  for (auto& e : drain(w)) {
    EXPECT_NE(e.kind, Event::Started);
    refused |= e.kind == Event::Error;
  }
  EXPECT_TRUE(refused);
  post(w, Command::Step, 1);
  int steps = 0;
  for (auto& e : drain(w)) {
    EXPECT_NE(e.kind, Event::Error) << e.msg;
    if (e.kind == Event::Step) {
      EXPECT_EQ(e.step_index, 2);
      ++steps;
    }
  }
  EXPECT_EQ(steps, 1);
}

TEST(GuiWorker, ErrorsArriveAsEventsAndTheWorkerGoesOn) {
  dsgui::Worker w;
  post(w, Command::Load, 1, "/nonexistent/model.bin");
  auto evs = drain(w);
  bool err = false;
  for (auto& e : evs) err |= e.kind == Event::Error && e.msg.find("nonexistent") != std::string::npos;
  EXPECT_TRUE(err);
  post(w, Command::Load, 1, "random:encdec");
  post(w, Command::Start, 1, "", "abc");
  post(w, Command::Step, 2);
  auto ok = drain(w);
  int steps = 0;
  for (auto& e : ok) {
    EXPECT_NE(e.kind, Event::Error) << e.msg;
    if (e.kind == Event::Started) {
      EXPECT_EQ(e.source.size(), 3u);
    }
    steps += e.kind == Event::Step;
  }
  EXPECT_EQ(steps, 2);
}

// Every step the worker sends carries the logit lens of its rows (the panel reads it
// from there), with the texts of its tokens, and a saved trace keeps it: a replay with
// no model shows the same lens.
TEST(GuiWorker, StepsAndSavedTracesCarryTheLogitLens) {
  dsgui::Worker w;
  post(w, Command::Load, 1, "random:decoder");
  post(w, Command::Start, 1, "hi");
  post(w, Command::Step, 3);
  auto evs = drain(w);
  auto t = std::make_shared<ds::Trace>();
  for (auto& e : evs)
    if (e.kind == Event::Loaded) t->config = e.info->cfg;
  for (auto& e : evs)
    if (e.kind == Event::Step) t->steps.push_back(*e.step);
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
  Command c;
  c.kind = Command::SaveTrace;
  c.path = path;
  c.trace = t;
  w.post(std::move(c));
  bool saved = false;
  for (auto& e : drain(w)) saved |= e.kind == Event::Saved;
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
    Command c;
    c.kind = Command::Load;
    c.spec = "random:decoder";
    c.precision = p;
    w.post(std::move(c));
    post(w, Command::Start, 1, "hi");
    post(w, Command::Step, 3);
    auto evs = drain(w);
    std::shared_ptr<const dsgui::ModelInfo> info;
    for (auto& e : evs) {
      EXPECT_NE(e.kind, Event::Error) << e.msg;
      if (e.kind == Event::Loaded) info = e.info;
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
  post(w, Command::Load, 1, "random:decoder");
  post(w, Command::Start, 1, "hi");
  post(w, Command::Step, 20);
  for (uint64_t v = 1; v <= 8; ++v) {
    Command c;
    c.kind = Command::Lens;
    c.resid = {std::vector<float>(64, 0.1f)};
    c.labels = {"x"};
    c.version = v;
    w.post_latest(std::move(c));
  }
  std::vector<uint64_t> answered;
  for (auto& e : drain(w)) {
    EXPECT_NE(e.kind, Event::Error) << e.msg;
    if (e.kind == Event::Lens) answered.push_back(e.lens.version);
  }
  ASSERT_FALSE(answered.empty());
  EXPECT_LE(answered.size(), 2u);  // at most one already running, then the latest
  EXPECT_EQ(answered.back(), 8u);
}

}  // namespace
