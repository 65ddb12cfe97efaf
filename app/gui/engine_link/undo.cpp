#include "engine_link/undo.h"

#include <algorithm>
#include <iterator>

#include "util/error.h"

namespace dsgui {

size_t Undo::bytes() const { return trace.bytes() + removed_trace.bytes() + sizeof(Undo); }

void UndoStack::push(Undo u) {
  bytes_ += u.bytes();
  d_.push_back(std::move(u));
  while (d_.size() > 1 && (int(d_.size()) > kUndoDepth || bytes_ > kUndoBytes)) {
    bytes_ -= std::min(bytes_, d_.front().bytes());
    d_.pop_front();
  }
}

std::optional<Undo> UndoStack::pop() {
  if (d_.empty()) return std::nullopt;
  Undo u = std::move(d_.back());
  d_.pop_back();
  bytes_ = d_.empty() ? 0 : bytes_ - std::min(bytes_, u.bytes());
  return u;
}

void UndoStack::clear() {
  d_.clear();
  bytes_ = 0;
}

ds::Trace undone_trace(const ds::Trace& now, Undo& u) {
  if (u.whole) return std::move(u.trace);
  if (u.shared < 0 || u.shared > int(now.steps.size()))
    throw ds::Error("cannot undo " + u.label + ": the trace has " + std::to_string(now.steps.size()) +
                    " steps, not the " + std::to_string(u.shared) + " the undone steps follow");
  ds::Trace t;
  t.config = now.config;
  t.model_name = now.model_name;
  t.source = now.source;
  t.source_text = now.source_text;
  t.encoder = now.encoder;
  t.steps.assign(now.steps.begin(), now.steps.begin() + u.shared);
  std::move(u.trace.steps.begin(), u.trace.steps.end(), std::back_inserter(t.steps));
  u.trace.steps.clear();
  return t;
}

cmd::Restore restore_command(const Undo& u, const ds::Trace& t, int threads) {
  cmd::Restore c;
  c.threads = threads;
  c.restart = u.whole;
  c.keep = u.whole ? 0 : u.shared;
  if (u.whole && !t.steps.empty()) {
    c.prompt = t.steps.front().input;  // the first step feeds the whole prompt
    c.src = t.source;
    c.kv_cache = t.steps.front().kv_cache;
  }
  for (size_t s = size_t(std::max(0, c.keep)); s < t.steps.size(); ++s) {
    const ds::TraceStep& st = t.steps[s];
    if (!st.sample) throw ds::Error("cannot undo " + u.label + ": step " + std::to_string(s + 1) + " drew no token");
    c.forced.push_back(st.sample->token);
    c.step_samplers.push_back(st.sample->config);
  }
  return c;
}

cmd::Heads restore_heads(const Undo& u) { return cmd::Heads{u.heads_off, u.cross_heads_off}; }

bool same_tokens(const ds::Trace& a, const ds::Trace& b) {
  if (a.steps.size() != b.steps.size()) return false;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    const ds::TraceStep &x = a.steps[s], &y = b.steps[s];
    if (x.input != y.input || bool(x.sample) != bool(y.sample)) return false;
    if (x.sample && x.sample->token != y.sample->token) return false;
  }
  return true;
}

}  // namespace dsgui
