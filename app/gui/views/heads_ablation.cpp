// "Which heads matter?" beside the All heads grids: every head switched off alone at the
// shown step (probe/ablation.h), ranked by how much that moves the log-probability of the
// token the step chose; one click re-runs the step with that head off (the what-if,
// undoable). And the selected head across the steps: where it matters most.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "views/common.h"
#include "views/heads_ablation.h"

namespace dsgui {

namespace {

struct AblateState {
  std::shared_ptr<const AblationAnswer> ranked, across;  // the answers shown
  std::string asked;                                     // the request in flight ("": none)
  bool open = false;                                     // the panel is shown
  int pick = 0;                                          // scripted: re-run with the head ranked `pick` off once ranked
  ds::HeadSite site = ds::HeadSite::Self;                // the head "across steps" is about
  int layer = -1, head = -1;
};

// What a ranking depends on: the source and the tokens fed up to step `last` (and with
// draws, the tokens each step drew), as a hash. A ranking stays good while they are the
// same: after a what-if re-ran the step (the heads it has off do not matter: every head
// is on but the one switched off), and after the what-if is undone.
uint64_t trace_hash(const App& app, int last, bool draws) {
  const ds::Trace& t = app.history.trace;
  uint64_t x = 1469598103934665603ull;
  auto mix = [&](int64_t v) { x = (x ^ uint64_t(v)) * 1099511628211ull; };
  for (int id : t.source) mix(id);
  mix(-1);
  for (int s = 0; s <= last && s < int(t.steps.size()); ++s) {
    for (int id : t.steps[size_t(s)].input) mix(id);
    mix(draws && t.steps[size_t(s)].sample ? t.steps[size_t(s)].sample->token : -2);
  }
  return x;
}

std::string ranked_key(const App& app, int step) {
  return "rank/" + std::to_string(step) + "/" + std::to_string(trace_hash(app, step, false));
}

std::string across_key(const App& app, ds::HeadSite site, int l, int h) {
  const int n = int(app.history.trace.steps.size());
  return "across/" + std::to_string(n) + "/" + std::to_string(trace_hash(app, n - 1, true)) + "/" +
         (site == ds::HeadSite::Cross ? "c" : "") + std::to_string(l) + ":" + std::to_string(h);
}

// The trace's steps up to `last` as the worker needs them: inputs, positions, the draws.
ds::Trace light_trace(const App& app, int last) {
  const ds::Trace& t = app.history.trace;
  ds::Trace out;
  out.config = t.config;
  out.source = t.source;
  for (int s = 0; s <= last && s < int(t.steps.size()); ++s) {
    const ds::TraceStep& st = t.steps[size_t(s)];
    ds::TraceStep c;
    c.pos0 = st.pos0;
    c.input = st.input;
    c.kv_cache = st.kv_cache;
    if (st.sample) {
      c.sample.emplace();
      c.sample->token = st.sample->token;
    }
    out.steps.push_back(std::move(c));
  }
  return out;
}

bool can_ask(App& app) {
  return !app.history.replay && app.engine.model && !app.engine.worker.busy() && app.state<AblateState>().asked.empty();
}

void ask_across(App& app, ds::HeadSite site, int l, int h) {
  AblateState& st = app.state<AblateState>();
  st.site = site, st.layer = l, st.head = h;
  if (!can_ask(app)) return;
  cmd::Ablate c;
  c.key = st.asked = across_key(app, site, l, h);
  c.trace = light_trace(app, int(app.history.trace.steps.size()) - 1);
  c.across = true;
  c.site = site, c.layer = l, c.head = h;
  c.threads = app.engine.threads;
  app.engine.ask(std::move(c));
}

// The token's text as the step's candidate table names it.
std::string token_text(const App& app, int step, int id) {
  const ds::Trace& t = app.history.trace;
  if (step >= 0 && step < int(t.steps.size()) && t.steps[size_t(step)].sample)
    for (const ds::Candidate& c : t.steps[size_t(step)].sample->candidates)
      if (c.id == id) return "'" + visible(c.text) + "'";
  return "#" + std::to_string(id);
}

std::string head_label(ds::HeadSite site, int l, int h) {
  char b[48];
  std::snprintf(b, sizeof b, "%sL%d H%d", site == ds::HeadSite::Cross ? "cross " : "", l, h);
  return b;
}

// A change as text over a bar of |d| / scale of the cell's width: red when the head helped
// the token (switching it off lowers it), green when it held the token back.
void delta_cell(double d, double scale) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetTextLineHeight();
  const float len = scale > 0 ? float(std::min(1.0, std::fabs(d) / scale)) * w : 0.0f;
  ImGui::GetWindowDrawList()->AddRectFilled(p, ImVec2(p.x + std::max(1.0f, len), p.y + h),
                                            d < 0 ? IM_COL32(225, 80, 70, 150) : IM_COL32(80, 190, 90, 150));
  ImGui::TextUnformatted(sig4(d).c_str());
}

// The what-if of one ranked head: the step again with that head alone off.
void rerun_without(App& app, const ds::HeadEffect& e, int step) {
  app.whatif.heads_off.clear();
  app.whatif.cross_heads_off.clear();
  (e.site == ds::HeadSite::Cross ? app.whatif.cross_heads_off : app.whatif.heads_off).push_back({e.layer, e.head});
  app.rerun_with_heads(step);
}

void ranked_table(App& app, AblateState& st, const AblationAnswer& a, float width) {
  const float font = ImGui::GetFontSize();
  const ds::HeadAblation& r = a.ranked;
  double scale = 0;
  for (const auto& e : r.heads) scale = std::max(scale, std::fabs(e.delta));
  const std::string tok = token_text(app, a.step, r.token);
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);
  ImGui::TextWrapped("Step %d chose %s: log p %s, p %s with every head on.", a.step + 1, tok.c_str(),
                     sig4(r.logp).c_str(), prob4(r.logp).c_str());
  const auto& now = app.history.trace.steps[size_t(a.step)].sample;
  if (now && now->token != r.token)
    ImGui::TextWrapped("(Ranked for that token: the step has since drawn %s.)",
                       token_text(app, a.step, now->token).c_str());
  ImGui::TextDisabled("Each head switched off alone (%.2f s). Click a row to re-run the step without it.", a.seconds);
  ImGui::PopTextWrapPos();
  const ImGuiTableFlags fl =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV;
  const float rows_h = std::max(font * 8, ImGui::GetContentRegionAvail().y * 0.6f);
  if (!ImGui::BeginTable("ablation", 5, fl, ImVec2(width, rows_h))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  auto wide = [](const char* s) { return ImGui::CalcTextSize(s).x; };
  ImGui::TableSetupColumn("#", ImGuiTableColumnFlags_WidthFixed, wide("000"));
  ImGui::TableSetupColumn("head", ImGuiTableColumnFlags_WidthFixed,
                          wide(app.history.trace.config.encoder_decoder ? "cross L00 H00" : "L00 H00"));
  ImGui::TableSetupColumn("change log p", ImGuiTableColumnFlags_WidthFixed, wide("change log p"));
  ImGui::TableSetupColumn("p off", ImGuiTableColumnFlags_WidthFixed, wide("1-1.234e-05"));
  ImGui::TableSetupColumn("change p", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  const bool can = !app.history.replay && app.engine.model && !app.engine.worker.busy();
  for (size_t i = 0; i < r.heads.size(); ++i) {
    const ds::HeadEffect& e = r.heads[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%zu", i + 1);
    ImGui::TableNextColumn();
    const std::string name = head_label(e.site, e.layer, e.head);
    const bool chosen = st.site == e.site && st.layer == e.layer && st.head == e.head;
    ImGui::PushID(int(i));
    if (ImGui::Selectable(name.c_str(), chosen, ImGuiSelectableFlags_SpanAllColumns) && can) {
      st.site = e.site, st.layer = e.layer, st.head = e.head;
      rerun_without(app, e, a.step);
    }
    ImGui::PopID();
    if (ImGui::IsItemHovered() && app.look.tooltips)
      ImGui::SetTooltip("Re-run step %d with %s switched off (Ctrl+Z undoes it)", a.step + 1, name.c_str());
    ImGui::TableNextColumn();
    delta_cell(e.delta, scale);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(prob4(e.logp).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(sig4(std::exp(e.logp) - std::exp(r.logp)).c_str());
  }
  ImGui::EndTable();
}

void across_table(App& app, const AblationAnswer& a, float width) {
  const float font = ImGui::GetFontSize();
  ImGui::TextWrapped("Where %s matters most (switched off at each step alone):",
                     head_label(a.site, a.layer, a.head).c_str());
  double scale = 0;
  for (const auto& e : a.across) scale = std::max(scale, std::fabs(e.delta));
  const ImGuiTableFlags fl = ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit;
  const float h = std::max(font * 5, ImGui::GetContentRegionAvail().y);
  if (!ImGui::BeginTable("across", 3, fl, ImVec2(width, h))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("step", ImGuiTableColumnFlags_WidthFixed, ImGui::CalcTextSize("step ").x);
  ImGui::TableSetupColumn("token", ImGuiTableColumnFlags_WidthFixed, font * 7);
  ImGui::TableSetupColumn("change in log p", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  for (const ds::StepEffect& e : a.across) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    char b[16];
    std::snprintf(b, sizeof b, "%d", e.step + 1);
    if (ImGui::Selectable(b, app.sel.cursor == e.step, ImGuiSelectableFlags_SpanAllColumns)) app.scrub_to(e.step);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(token_text(app, e.step, e.token).c_str());
    ImGui::TableNextColumn();
    delta_cell(e.delta, scale);
  }
  ImGui::EndTable();
}

}  // namespace

std::string sig4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.4g", v);
  return b[1] == '0' && b[2] == 0 ? std::string("0") : std::string(b);
}

std::string prob4(double logp) {
  const double q = -std::expm1(logp);
  if (q > 0 && q < 5e-4) return "1-" + sig4(q).substr(1);
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", std::exp(logp));
  return b;
}

void ablation_ask(App& app, int pick) {
  AblateState& st = app.state<AblateState>();
  st.open = true;
  st.pick = pick;
  const int s = app.sel.cursor;
  const ds::Trace& t = app.history.trace;
  if (s < 0 || s >= int(t.steps.size()) || !t.steps[size_t(s)].sample) return;
  if (!can_ask(app)) {
    if (app.history.replay) app.say("a replayed trace has no model to switch heads off in");
    return;
  }
  cmd::Ablate c;
  c.key = st.asked = ranked_key(app, s);
  c.trace = light_trace(app, s);
  c.step = s;
  c.threads = app.engine.threads;
  app.engine.ask(std::move(c));
}

bool ablation_waiting(App& app) { return !app.state<AblateState>().asked.empty(); }

void ablation_failed(App& app) { app.state<AblateState>().asked.clear(); }

bool ablation_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Ablate>(&e);
  if (!a) return false;
  AblateState& st = app.state<AblateState>();
  if (!a->answer || a->answer->key != st.asked) return true;
  st.asked.clear();
  if (a->answer->cancelled) {
    app.say("stopped switching heads off");
    return true;
  }
  if (a->answer->step >= 0) {
    st.ranked = a->answer;
    if (st.pick > 0 && st.pick <= int(st.ranked->ranked.heads.size())) {
      const ds::HeadEffect h = st.ranked->ranked.heads[size_t(st.pick) - 1];
      st.site = h.site, st.layer = h.layer, st.head = h.head;
      rerun_without(app, h, st.ranked->step);
    }
    st.pick = 0;
  } else {
    st.across = a->answer;
  }
  return true;
}

const ds::HeadAblation* ablation_now(const App& app) {
  const AblateState& st = const_cast<App&>(app).state<AblateState>();
  if (!st.ranked || st.ranked->key != ranked_key(app, app.sel.cursor)) return nullptr;
  return &st.ranked->ranked;
}

bool ablation_open(const App& app) { return const_cast<App&>(app).state<AblateState>().open; }

void ablation_button(App& app) {
  AblateState& st = app.state<AblateState>();
  const ds::Config& c = app.history.trace.config;
  const int n = c.n_layers * c.n_heads * (c.encoder_decoder ? 2 : 1);
  char b[64];
  std::snprintf(b, sizeof b, "Which heads matter? (%d)", n);
  ImGui::BeginDisabled(!can_ask(app));
  if (ImGui::Button(b)) ablation_ask(app);
  ImGui::EndDisabled();
  tooltip(app,
          "Switch every head off alone at this step (one forward pass each) and rank them by how much that changes "
          "the probability of the token the step chose.");
  if (st.open) {
    ImGui::SameLine();
    if (ImGui::SmallButton("hide")) st.open = false;
  }
}

void ablation_panel(App& app, float width) {
  AblateState& st = app.state<AblateState>();
  if (!st.asked.empty()) {
    const std::string act = app.engine.worker.activity();
    ImGui::TextWrapped("%s", act.empty() ? "waiting for the engine" : act.c_str());
    if (ImGui::Button("Stop")) app.engine.worker.cancel();
    return;
  }
  const int s = app.sel.cursor;
  if (const ds::HeadAblation* r = ablation_now(app); r && st.ranked) {
    ranked_table(app, st, *st.ranked, width);
  } else {
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);
    ImGui::TextWrapped("Step %d has no ranking yet: press \"Which heads matter?\" to switch each head off alone.",
                       s + 1);
    ImGui::PopTextWrapPos();
  }
  // The head chosen (a ranked row, or the head open in the Attention view) across the steps.
  if (st.layer < 0) st.site = ds::HeadSite::Self, st.layer = app.sel.layer, st.head = std::max(0, app.sel.head);
  const std::string name = head_label(st.site, st.layer, st.head);
  const bool fresh = st.across && st.across->key == across_key(app, st.site, st.layer, st.head);
  ImGui::BeginDisabled(!can_ask(app));
  const std::string label =
      "Where does " + name + " matter? (" + std::to_string(app.history.trace.steps.size()) + " steps)";
  if (ImGui::Button(label.c_str())) ask_across(app, st.site, st.layer, st.head);
  ImGui::EndDisabled();
  if (fresh) across_table(app, *st.across, width);
}

void ablation_sidecar(const App& app, std::ostream& f) {
  const AblateState& st = const_cast<App&>(app).state<AblateState>();
  auto list = [&](const std::vector<std::pair<int, int>>& v) {
    f << "[";
    for (size_t i = 0; i < v.size(); ++i) f << (i ? ", " : "") << "[" << v[i].first << ", " << v[i].second << "]";
    f << "]";
  };
  f << "  \"heads_off\": ";
  list(app.whatif.heads_off);
  f << ", \"cross_heads_off\": ";
  list(app.whatif.cross_heads_off);
  f << ", \"heads_engine\": ";
  list(app.whatif.heads_engine);
  f << ", \"cross_heads_engine\": ";
  list(app.whatif.cross_heads_engine);
  f << ",\n";
  if (!st.ranked) return;
  const ds::HeadAblation& r = st.ranked->ranked;
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", r.logp);
  f << "  \"ablation\": {\"step\": " << st.ranked->step << ", \"token\": " << r.token << ", \"logp\": " << b
    << ", \"heads\": [";
  for (size_t i = 0; i < r.heads.size(); ++i) {
    const ds::HeadEffect& e = r.heads[i];
    std::snprintf(b, sizeof b, "%.17g", e.delta);
    f << (i ? ", " : "") << "{\"site\": \"" << (e.site == ds::HeadSite::Cross ? "cross" : "self")
      << "\", \"layer\": " << e.layer << ", \"head\": " << e.head << ", \"delta\": " << b << "}";
  }
  f << "]},\n";
}

}  // namespace dsgui
