// The window's side of undo (undo.h): what each what-if keeps, Ctrl+Z, Edit > Undo.
#include <algorithm>
#include <cstdio>

#include "shell/app.h"
#include "util/error.h"

namespace dsgui {

std::string App::settings_label() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "T %.2f, top-k %d, top-p %.2f, seed %llu", whatif.sampler.temperature,
                whatif.sampler.top_k, whatif.sampler.top_p, (unsigned long long)whatif.sampler.seed);
  std::string s = buf;
  if (const size_t n = whatif.heads_off.size() + whatif.cross_heads_off.size())
    s += ", " + std::to_string(n) + " heads off";
  return s;
}

Undo App::snapshot(const std::string& label, int shared) const {
  Undo u;
  u.label = label;
  u.whole = shared < 0;
  u.shared = std::max(0, shared);
  if (u.whole) {
    u.trace = history.trace;
  } else {
    const size_t from = std::min(size_t(u.shared), history.trace.steps.size());
    u.trace.steps.assign(history.trace.steps.begin() + long(from), history.trace.steps.end());
  }
  u.replay = history.replay;
  u.done = engine.done;
  u.cursor = sel.cursor;
  u.sel_pos = sel.pos;
  // What the kept steps were computed with (the engine's heads; in a replay, the lists).
  u.heads_off = history.replay ? whatif.heads_off : whatif.heads_engine;
  u.cross_heads_off = history.replay ? whatif.cross_heads_off : whatif.cross_heads_engine;
  u.sampler = whatif.sampler;
  // The settings the first replaced step was drawn with (a re-draw changes them first).
  if (!u.whole && u.shared < int(history.trace.steps.size()) && history.trace.steps[size_t(u.shared)].sample)
    u.sampler = history.trace.steps[size_t(u.shared)].sample->config;
  return u;
}

int App::keep_as_branch(const std::string& why, int s) {
  if (s < 0 || s >= int(history.trace.steps.size())) return -1;
  for (const Branch& b : history.branches)
    if (same_tokens(b.trace, history.trace)) return -1;  // kept already
  Branch b;
  b.label = why;
  b.trace = history.trace;
  b.fork_step = s;
  history.branches.push_back(std::move(b));
  history.branch_shown = int(history.branches.size()) - 1;
  return history.branch_shown;
}

void App::undo() {
  if (history.undo.empty()) {
    say("nothing to undo");
    return;
  }
  if (engine.loading || engine.worker.busy()) {
    say("wait for the engine to finish, then undo");
    return;
  }
  Undo u = *history.undo.pop();
  play.playing = false;
  if (u.added_branch >= 0 && u.added_branch < int(history.branches.size()))
    history.branches.erase(history.branches.begin() + u.added_branch);
  if (u.removed_at >= 0) {
    Branch b;
    b.label = u.removed_label;
    b.trace = std::move(u.removed_trace);
    b.fork_step = u.removed_fork;
    const int at = std::min(u.removed_at, int(history.branches.size()));
    history.branches.insert(history.branches.begin() + at, std::move(b));
    history.branch_shown = at;
  }
  history.branch_shown = std::clamp(history.branch_shown, 0, std::max(0, int(history.branches.size()) - 1));
  if (u.has_trace) {
    try {
      ds::Trace t = undone_trace(history.trace, u);
      cmd::Restore c;
      const bool to_engine = !u.replay && engine.model;
      if (to_engine) c = restore_command(u, t, engine.threads);
      history.trace = std::move(t);
      ++history.version;
      ++history.epoch;
      history.replay = u.replay;
      engine.done = u.done;
      sel.cursor = std::clamp(u.cursor, history.trace.steps.empty() ? -1 : 0, int(history.trace.steps.size()) - 1);
      sel.pos = u.sel_pos;
      const cmd::Heads heads = restore_heads(u);
      whatif.heads_off = heads.self;
      whatif.cross_heads_off = heads.cross;
      whatif.sampler = u.sampler;
      whatif.before.reset();
      engine.steps_wanted = 0;
      if (to_engine) {
        send_sampler();
        send_heads();
        engine.ask(std::move(c));
        engine.started = true;
      }
    } catch (const ds::Error& e) {
      fail(e.what());
      return;
    }
  }
  say("undid " + u.label);
}

void App::edit_menu() {
  if (!ImGui::BeginMenu("Edit")) return;
  const Undo* top = history.undo.top();
  const std::string item = top ? "Undo " + top->label : std::string("Undo");
  if (ImGui::MenuItem(item.c_str(), "Ctrl+Z", false, top && !engine.worker.busy() && !engine.loading)) undo();
  if (ImGui::IsItemHovered() && look.tooltips)
    ImGui::SetTooltip(
        "Takes back the last what-if (a re-run with heads off, a re-draw, a fork, a forgotten branch, Reset, Start\n"
        "or an opened trace over the one shown): its steps, settings and branches come back. The last %d what-ifs\n"
        "are kept (fewer if they hold more than %d MB); %d now.",
        kUndoDepth, int(kUndoBytes >> 20), history.undo.size());
  ImGui::EndMenu();
}

}  // namespace dsgui
