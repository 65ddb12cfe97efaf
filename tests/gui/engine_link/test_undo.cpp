// Undo of the window's what-ifs (app/gui/undo.h) without a window: the bounded stack,
// the trace put back from the steps kept, and the engine's session put back so that
// the next step is the one the session would have taken had the what-if never run.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "drain.h"
#include "engine_link/undo.h"
#include "engine_link/worker.h"
#include "util/error.h"

namespace {

using dsgui::Command;
namespace ev = dsgui::ev;
using dsgui::Event;
using dsgui::Undo;

// A step fed `in` that drew `token` (hand-built: no model).
ds::TraceStep step_of(int pos0, std::vector<int> in, int token) {
  ds::TraceStep s;
  s.pos0 = pos0;
  s.input = std::move(in);
  s.sample.emplace();
  s.sample->token = token;
  return s;
}

// A hand-built trace: the prompt {1, 2} then one token a step, token k drawn at step k.
ds::Trace chain(int steps, int first_token) {
  ds::Trace t;
  int pos = 0;
  std::vector<int> in = {1, 2};
  for (int k = 0; k < steps; ++k) {
    t.steps.push_back(step_of(pos, in, first_token + k));
    pos += int(in.size());
    in = {first_token + k};
  }
  return t;
}

TEST(Undo, TheStackKeepsTheLatestWhatIfs) {
  dsgui::UndoStack st;
  EXPECT_FALSE(st.pop());
  const int n = dsgui::kUndoDepth + 5;
  for (int i = 0; i < n; ++i) {
    Undo u;
    u.label = std::to_string(i);
    u.trace = chain(1 + i % 3, 10);
    st.push(std::move(u));
  }
  ASSERT_EQ(st.size(), dsgui::kUndoDepth);
  EXPECT_EQ(st.top()->label, std::to_string(n - 1));
  for (int i = n - 1; i >= n - dsgui::kUndoDepth; --i) {
    EXPECT_GT(st.bytes(), 0u);
    auto u = st.pop();
    ASSERT_TRUE(u);
    EXPECT_EQ(u->label, std::to_string(i));  // latest first, the oldest five dropped
  }
  EXPECT_TRUE(st.empty());
  EXPECT_EQ(st.bytes(), 0u);
}

// The steps before `shared` come from the trace now, the rest from what was kept.
TEST(Undo, TheTraceComesBackFromTheStepsKept) {
  const ds::Trace was = chain(6, 10);
  ds::Trace now = chain(4, 10);
  now.steps[3] = step_of(now.steps[3].pos0, now.steps[3].input, 99);  // step 4 re-drawn
  Undo u;
  u.label = "re-draw of step 4";
  u.shared = 3;
  u.trace.steps.assign(was.steps.begin() + 3, was.steps.end());
  const ds::Trace back = dsgui::undone_trace(now, u);
  EXPECT_TRUE(dsgui::same_tokens(back, was));
  EXPECT_FALSE(dsgui::same_tokens(now, was));
  for (size_t s = 1; s < back.steps.size(); ++s) EXPECT_EQ(back.steps[s].pos0, back.positions(int(s) - 1));

  // The engine is told to keep 3 steps and take the kept ones again with their tokens.
  const dsgui::cmd::Restore c = dsgui::restore_command(u, back, 1);
  EXPECT_FALSE(c.restart);
  EXPECT_EQ(c.keep, 3);
  EXPECT_EQ(c.forced, (std::vector<int>{13, 14, 15}));

  // Fewer steps than the kept ones follow: a clear refusal, not a broken trace.
  Undo v;
  v.label = "fork at step 5";
  v.shared = 5;
  v.trace.steps.push_back(was.steps[5]);
  try {
    dsgui::undone_trace(chain(2, 10), v);
    FAIL() << "no error";
  } catch (const ds::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fork at step 5"), std::string::npos) << e.what();
  }
}

using dsgui_test::drain;

ds::SamplerConfig sampling() {
  ds::SamplerConfig s;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.seed = 7;
  return s;
}

void post(dsgui::Worker& w, Command c) { w.post(std::move(c)); }

// The error's message, "" for any other event.
std::string msg(const Event& e) {
  const auto* err = std::get_if<ev::Error>(&e);
  return err ? err->msg : "";
}

dsgui::cmd::Start start_cmd(bool encdec) {
  dsgui::cmd::Start c;
  (encdec ? c.source : c.prompt) = encdec ? "the cat sat" : "hello";
  return c;
}

// Loads the model, starts on "hello" and takes n steps; the steps as the window keeps them.
ds::Trace generate(dsgui::Worker& w, int n, bool encdec = false) {
  post(w, dsgui::cmd::Load{encdec ? "random:encdec" : "random:decoder", "", ds::Precision::F32});
  post(w, dsgui::cmd::Sampler{sampling()});
  post(w, start_cmd(encdec));
  post(w, dsgui::cmd::Step{n});
  ds::Trace t;
  for (auto& e : drain(w)) {
    EXPECT_TRUE(msg(e).empty()) << msg(e);
    if (auto* st = std::get_if<ev::Started>(&e)) t.source = st->source;
    if (auto* st = std::get_if<ev::Step>(&e)) t.steps.push_back(std::move(st->step));
  }
  return t;
}

// The step the worker takes next.
ds::TraceStep next_step(dsgui::Worker& w) {
  post(w, dsgui::cmd::Step{1});
  for (auto& e : drain(w)) {
    EXPECT_TRUE(msg(e).empty()) << msg(e);
    if (auto* st = std::get_if<ev::Step>(&e)) return std::move(st->step);
  }
  ADD_FAILURE() << "no step";
  return {};
}

void expect_same_step(const ds::TraceStep& a, const ds::TraceStep& b) {
  ASSERT_TRUE(a.sample && b.sample);
  EXPECT_EQ(a.pos0, b.pos0);
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.sample->token, b.sample->token);
  ASSERT_EQ(a.sample->candidates.size(), b.sample->candidates.size());
  for (size_t i = 0; i < a.sample->candidates.size(); ++i) {
    EXPECT_EQ(a.sample->candidates[i].id, b.sample->candidates[i].id);
    EXPECT_EQ(a.sample->candidates[i].p_final, b.sample->candidates[i].p_final);
  }
}

// A re-run of step 4 with a head off, undone: the session is put back (rewound, the
// kept tokens taken again with the heads on), and its next step is the one a session
// that never re-ran anything takes: the same token, the same candidate table. The same
// after Start anew, undone (a new session on the old prompt).
TEST(Undo, TheEngineIsPutBackAsItWas) {
  dsgui::Worker ref;
  const ds::Trace plain = generate(ref, 8);
  ASSERT_EQ(plain.steps.size(), 8u);
  const ds::TraceStep want = next_step(ref);

  dsgui::Worker w;
  const ds::Trace was = generate(w, 8);
  ASSERT_TRUE(dsgui::same_tokens(was, plain));
  Undo u;
  u.label = "re-run of step 4 with 1 heads off";
  u.shared = 3;
  u.trace.steps.assign(was.steps.begin() + 3, was.steps.end());
  post(w, dsgui::cmd::Heads{{{0, 0}, {1, 1}}, {}});
  post(w, dsgui::cmd::Rewind{3});
  ds::Trace now = was;
  now.steps.resize(3);
  now.steps.push_back(next_step(w));  // step 4 with the heads off

  const ds::Trace back = dsgui::undone_trace(now, u);
  ASSERT_TRUE(dsgui::same_tokens(back, was));
  post(w, dsgui::cmd::Heads{});  // the heads the kept steps were computed with: all on
  post(w, dsgui::restore_command(u, back, 1));
  for (auto& e : drain(w)) {
    EXPECT_TRUE(msg(e).empty()) << msg(e);
    EXPECT_FALSE(std::holds_alternative<ev::Step>(e)) << "the window has the steps already";
  }
  expect_same_step(next_step(w), want);

  // Start anew (another prompt), undone: a new session on the kept trace's prompt.
  dsgui::cmd::Start start = start_cmd(false);
  start.prompt = "another text";
  post(w, start);
  post(w, dsgui::cmd::Step{2});
  drain(w);
  Undo whole;
  whole.label = "Start";
  whole.whole = true;
  whole.trace = was;
  const ds::Trace again = dsgui::undone_trace(now, whole);
  post(w, dsgui::restore_command(whole, again, 1));
  for (auto& e : drain(w)) EXPECT_TRUE(msg(e).empty()) << msg(e);
  expect_same_step(next_step(w), want);
}

// Start anew on an encoder-decoder model, undone: the new session reads the kept
// trace's source again, and goes on as the first one would have.
TEST(Undo, AStartOnAnEncoderDecoderIsUndoneWithItsSource) {
  dsgui::Worker ref;
  ASSERT_FALSE(generate(ref, 5, true).source.empty());
  const ds::TraceStep want = next_step(ref);

  dsgui::Worker w;
  const ds::Trace was = generate(w, 5, true);
  dsgui::cmd::Start start = start_cmd(true);
  start.source = "a dog ran far";
  post(w, start);
  post(w, dsgui::cmd::Step{3});
  drain(w);
  Undo whole;
  whole.label = "Start";
  whole.whole = true;
  whole.trace = was;
  const ds::Trace back = dsgui::undone_trace(ds::Trace{}, whole);
  const dsgui::cmd::Restore c = dsgui::restore_command(whole, back, 1);
  EXPECT_TRUE(c.restart);
  EXPECT_EQ(c.src, was.source);
  post(w, c);
  for (auto& e : drain(w)) EXPECT_TRUE(msg(e).empty()) << msg(e);
  expect_same_step(next_step(w), want);
}

// Whether two steps drew from different candidate tables (a head switched off shows).
bool tables_differ(const ds::TraceStep& a, const ds::TraceStep& b) {
  if (!a.sample || !b.sample || a.sample->candidates.size() != b.sample->candidates.size()) return true;
  for (size_t i = 0; i < a.sample->candidates.size(); ++i)
    if (a.sample->candidates[i].id != b.sample->candidates[i].id ||
        a.sample->candidates[i].p_final != b.sample->candidates[i].p_final)
      return true;
  return false;
}

// A re-run with cross-attention heads off (an encoder-decoder model), undone: the heads
// the undo puts back (restore_heads) include the cross-attention ones, so the next step
// is the plain run's. Left off (the heads of the re-run kept), the next step differs:
// the check can fail.
TEST(Undo, CrossAttentionHeadsComeBackOn) {
  dsgui::Worker ref;
  const ds::Trace plain = generate(ref, 5, true);
  const ds::TraceStep want = next_step(ref);
  const dsgui::cmd::Heads off{{}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}};

  for (bool fixed : {true, false}) {
    dsgui::Worker w;
    const ds::Trace was = generate(w, 5, true);
    ASSERT_TRUE(dsgui::same_tokens(was, plain));
    Undo u;  // as App::snapshot keeps it before the re-run: every head on in the engine
    u.label = "re-run of step 4 with 4 heads off";
    u.shared = 3;
    u.trace.steps.assign(was.steps.begin() + 3, was.steps.end());
    post(w, off);
    post(w, dsgui::cmd::Rewind{3});
    ds::Trace now = was;
    now.steps.resize(3);
    now.steps.push_back(next_step(w));
    const ds::Trace back = dsgui::undone_trace(now, u);
    const dsgui::cmd::Heads heads = fixed ? dsgui::restore_heads(u) : dsgui::cmd::Heads{u.heads_off, off.cross};
    EXPECT_TRUE(heads.self.empty());
    if (fixed) {
      EXPECT_TRUE(heads.cross.empty());
    }
    post(w, heads);
    post(w, dsgui::restore_command(u, back, 1));
    for (auto& e : drain(w)) EXPECT_TRUE(msg(e).empty()) << msg(e);
    const ds::TraceStep next = next_step(w);
    if (fixed) {
      expect_same_step(next, want);
    } else {
      EXPECT_TRUE(tables_differ(next, want)) << "cross heads left off change nothing: the check proves nothing";
    }
  }
}

TEST(Undo, RestoreHeadsGivesBothLists) {
  Undo u;
  u.heads_off = {{1, 2}};
  u.cross_heads_off = {{0, 3}, {1, 1}};
  const dsgui::cmd::Heads h = dsgui::restore_heads(u);
  EXPECT_EQ(h.self, u.heads_off);
  EXPECT_EQ(h.cross, u.cross_heads_off);
}

}  // namespace
