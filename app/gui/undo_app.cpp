// The window's side of undo (undo.h): what each what-if keeps, Ctrl+Z, Edit > Undo.
#include <algorithm>
#include <cstdio>

#include "app.h"
#include "util/error.h"

namespace dsgui {

std::string App::settings_label() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "T %.2f, top-k %d, top-p %.2f, seed %llu", sampler.temperature, sampler.top_k,
                sampler.top_p, (unsigned long long)sampler.seed);
  std::string s = buf;
  if (!heads_off.empty()) s += ", " + std::to_string(heads_off.size()) + " heads off";
  return s;
}

Undo App::snapshot(const std::string& label, int shared) const {
  Undo u;
  u.label = label;
  u.whole = shared < 0;
  u.shared = std::max(0, shared);
  if (u.whole) {
    u.trace = trace;
  } else {
    const size_t from = std::min(size_t(u.shared), trace.steps.size());
    u.trace.steps.assign(trace.steps.begin() + long(from), trace.steps.end());
  }
  u.replay = replay;
  u.done = done;
  u.cursor = cursor;
  u.sel_pos = sel_pos;
  u.heads_off = replay ? heads_off : heads_engine;  // what the kept steps were computed with
  u.sampler = sampler;
  // The settings the first replaced step was drawn with (a re-draw changes them first).
  if (!u.whole && u.shared < int(trace.steps.size()) && trace.steps[size_t(u.shared)].sample)
    u.sampler = trace.steps[size_t(u.shared)].sample->config;
  return u;
}

int App::keep_as_branch(const std::string& why, int s) {
  if (s < 0 || s >= int(trace.steps.size())) return -1;
  for (const Branch& b : branches)
    if (same_tokens(b.trace, trace)) return -1;  // kept already
  Branch b;
  b.label = why;
  b.trace = trace;
  b.fork_step = s;
  branches.push_back(std::move(b));
  branch_shown = int(branches.size()) - 1;
  return branch_shown;
}

void App::undo() {
  if (undo_stack.empty()) {
    say("nothing to undo");
    return;
  }
  if (loading || worker.busy()) {
    say("wait for the engine to finish, then undo");
    return;
  }
  Undo u = *undo_stack.pop();
  playing = false;
  if (u.added_branch >= 0 && u.added_branch < int(branches.size())) branches.erase(branches.begin() + u.added_branch);
  if (u.removed_at >= 0) {
    Branch b;
    b.label = u.removed_label;
    b.trace = std::move(u.removed_trace);
    b.fork_step = u.removed_fork;
    const int at = std::min(u.removed_at, int(branches.size()));
    branches.insert(branches.begin() + at, std::move(b));
    branch_shown = at;
  }
  branch_shown = std::clamp(branch_shown, 0, std::max(0, int(branches.size()) - 1));
  if (u.has_trace) {
    try {
      ds::Trace t = undone_trace(trace, u);
      Command c;
      const bool engine = !u.replay && model;
      if (engine) c = restore_command(u, t, engine_threads);
      trace = std::move(t);
      ++version;
      ++trace_epoch;
      replay = u.replay;
      done = u.done;
      cursor = std::clamp(u.cursor, trace.steps.empty() ? -1 : 0, int(trace.steps.size()) - 1);
      sel_pos = u.sel_pos;
      heads_off = u.heads_off;
      sampler = u.sampler;
      before.reset();
      steps_wanted = 0;
      if (engine) {
        send_sampler();
        send_heads();
        worker.post(std::move(c));
        started = true;
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
  const Undo* top = undo_stack.top();
  const std::string item = top ? "Undo " + top->label : std::string("Undo");
  if (ImGui::MenuItem(item.c_str(), "Ctrl+Z", false, top && !worker.busy() && !loading)) undo();
  if (ImGui::IsItemHovered() && tooltips)
    ImGui::SetTooltip(
        "Takes back the last what-if (a re-run with heads off, a re-draw, a fork, a forgotten branch, Reset, Start\n"
        "or an opened trace over the one shown): its steps, settings and branches come back. The last %d what-ifs\n"
        "are kept (fewer if they hold more than %d MB); %d now.",
        kUndoDepth, int(kUndoBytes >> 20), undo_stack.size());
  ImGui::EndMenu();
}

}  // namespace dsgui
