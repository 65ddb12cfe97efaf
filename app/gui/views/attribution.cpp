// Direct logit attribution: the shown step's logit of a token (the drawn one, any
// candidate, or the difference of two) split into what the embedding, every head, every
// MLP and the biases wrote into the residual stream, each read through the final norm
// with the run's scale (probe/attribution.h). A ranked list of signed bars, a layer x
// head grid in diverging colours (click a head: what it writes; double-click or the
// button: open it in Attention), and the tokens the selected head pushes up and down.
// The engine computes it on request (cmd::Attribute); post-norm models get a notice.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "views/common.h"
#include "widgets/draw.h"

namespace dsgui {

namespace {

struct AttribState {
  std::shared_ptr<const AttributionAnswer> shown;
  std::string asked;        // the request in flight ("": none)
  std::string failed_key;   // a request the engine refused: not asked again
  std::string want_key;     // what the view last wanted on screen (asked once the worker is idle)
  int token = -1, vs = -1;  // the token chosen (-1: the drawn one) and the one subtracted (-1: none)
  ds::HeadSite site = ds::HeadSite::Self;
  int layer = -1, head = -1;        // the head whose writes are shown
  std::string want_token, want_vs;  // scripted: chosen once the step is there
  std::string want_head;            // scripted: "L:H" or "cL:H"
  std::vector<int> fed;             // the tokens of the last request (for the sidecar)
  int bars_drawn = 0, grid_rows = 0, grid_cols = 0;
  float grid_cell = 0;
};

AttribState& state(App& app) { return app.state<AttribState>(); }

// The tokens fed up to step s, its last position, and the request's key.
struct StepInputs {
  std::vector<int> tokens;
  int pos = -1, drawn = -1;
};

StepInputs inputs_of(const ds::Trace& t, int s) {
  StepInputs in;
  for (int i = 0; i <= s && i < int(t.steps.size()); ++i)
    in.tokens.insert(in.tokens.end(), t.steps[size_t(i)].input.begin(), t.steps[size_t(i)].input.end());
  in.pos = int(in.tokens.size()) - 1;
  const ds::TraceStep& st = t.steps[size_t(s)];
  if (st.sample) in.drawn = st.sample->token;
  return in;
}

std::string key_of(const ds::Trace& t, const StepInputs& in, int token, int vs, const AttribState& st) {
  uint64_t x = 1469598103934665603ull;
  auto mix = [&](int64_t v) { x = (x ^ uint64_t(v)) * 1099511628211ull; };
  for (int id : t.source) mix(id);
  mix(-1);
  for (int id : in.tokens) mix(id);
  std::ostringstream k;
  k << x << "/" << in.pos << "/" << token << "/" << vs << "/" << (st.site == ds::HeadSite::Cross ? "c" : "") << st.layer
    << ":" << st.head;
  return k.str();
}

// The text of a token as the step's candidates or the answer name it.
std::string text_of(const App& app, int step, int id, const AttributionAnswer* a = nullptr) {
  if (a)
    if (auto it = a->text.find(id); it != a->text.end()) return it->second;
  const ds::Trace& t = app.history.trace;
  if (step >= 0 && step < int(t.steps.size()) && t.steps[size_t(step)].sample)
    for (const ds::Candidate& c : t.steps[size_t(step)].sample->candidates)
      if (c.id == id) return visible(c.text);
  return "#" + std::to_string(id);
}

// A scripted choice ("#ID" or a candidate's text) as a token id of the step, or -1.
int resolve(const App& app, int step, const std::string& want) {
  if (want.size() > 1 && want[0] == '#') return std::atoi(want.c_str() + 1);
  const ds::TraceStep& st = app.history.trace.steps[size_t(step)];
  if (st.sample)
    for (const ds::Candidate& c : st.sample->candidates)
      if (c.text == want || visible(c.text) == want) return c.id;
  return -1;
}

void apply_wanted(App& app, AttribState& st, int step) {
  if (!st.want_token.empty()) {
    st.token = resolve(app, step, st.want_token);
    if (st.token < 0) app.fail("--attribute-token '" + st.want_token + "' is not a candidate of this step");
    st.want_token.clear();
  }
  if (!st.want_vs.empty()) {
    st.vs = resolve(app, step, st.want_vs);
    if (st.vs < 0) app.fail("--attribute-vs '" + st.want_vs + "' is not a candidate of this step");
    st.want_vs.clear();
  }
  if (!st.want_head.empty()) {
    std::string v = st.want_head;
    st.site = !v.empty() && v[0] == 'c' ? ds::HeadSite::Cross : ds::HeadSite::Self;
    if (st.site == ds::HeadSite::Cross) v.erase(0, 1);
    if (std::sscanf(v.c_str(), "%d:%d", &st.layer, &st.head) != 2) st.layer = st.head = -1;
    st.want_head.clear();
  }
}

void open_in_attention(App& app, ds::HeadSite site, int l, int h) {
  if (site == ds::HeadSite::Cross) {
    cross_show(app, l, h, false);
    app.sel.view = view_index("cross");
  } else {
    app.sel.layer = l, app.sel.head = h;
    app.sel.view = view_index("attention");
  }
  app.sel.view_request = true;
}

void select_head(AttribState& st, const ds::AttributionPart& p) {
  if (p.kind != ds::PartKind::Head && p.kind != ds::PartKind::CrossHead) return;
  st.site = p.kind == ds::PartKind::CrossHead ? ds::HeadSite::Cross : ds::HeadSite::Self;
  st.layer = p.layer, st.head = p.head;
}

// A signed number with `digits` decimals; "0" when it rounds to zero (never "-0.0").
std::string num(double v, int digits = 4) {
  char b[48];
  std::snprintf(b, sizeof b, "%+.*f", digits, v);
  for (const char* c = b + 1; *c; ++c)
    if (*c != '0' && *c != '.') return b;
  return "0";
}

// The token chooser: the drawn token, any candidate of the step, or "A minus B".
void token_chooser(App& app, AttribState& st, int step, const StepInputs& in) {
  const ds::TraceStep& ts = app.history.trace.steps[size_t(step)];
  const float font = ImGui::GetFontSize();
  auto name = [&](int id) {
    if (id < 0) return std::string(in.drawn >= 0 ? "drawn '" + text_of(app, step, in.drawn) + "'" : "most probable");
    return "'" + text_of(app, step, id, st.shown.get()) + "'" + (id == in.drawn ? " (drawn)" : "");
  };
  auto combo = [&](const char* label, int& id, bool allow_none) {
    ImGui::SetNextItemWidth(font * 11);
    if (!ImGui::BeginCombo(label, allow_none && id < 0 ? "(none)" : name(id).c_str())) return;
    if (allow_none && ImGui::Selectable("(none)", id < 0)) id = -1;
    if (!allow_none && ImGui::Selectable(name(-1).c_str(), id < 0)) id = -1;
    if (ts.sample)
      for (size_t i = 0; i < ts.sample->candidates.size() && i < 40; ++i) {
        const ds::Candidate& c = ts.sample->candidates[i];
        char b[160];
        std::snprintf(b, sizeof b, "'%s'  p %.3f##%d", visible(c.text).c_str(), c.p_raw, c.id);
        if (ImGui::Selectable(b, id == c.id)) id = c.id;
      }
    ImGui::EndCombo();
  };
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Token");
  ImGui::SameLine();
  combo("##token", st.token, false);
  tooltip(app, "Whose logit to split: the token the step drew, or any candidate of the step.");
  ImGui::SameLine();
  ImGui::TextUnformatted("minus");
  ImGui::SameLine();
  combo("##vs", st.vs, true);
  tooltip(app, "Choose a second token to split the difference of the two logits (A minus B) instead.");
}

void ask(App& app, AttribState& st, const StepInputs& in, const std::string& key, int token) {
  st.want_key = key;
  if ((st.shown && st.shown->key == key) || st.asked == key || st.failed_key == key || app.engine.worker.busy()) return;
  cmd::Attribute c;
  c.key = st.asked = key;
  c.tokens = in.tokens;
  c.src = app.history.trace.source;
  c.pos = in.pos, c.token = token, c.vs = st.vs;
  c.site = st.site, c.layer = st.layer, c.head = st.head;
  c.threads = app.engine.threads;
  app.engine.ask_latest(std::move(c));
}

// The largest |contribution| (the bars' and the grid's scale).
double scale_of(const ds::Attribution& a) {
  double m = 0;
  for (const auto& p : a.parts) m = std::max(m, std::fabs(p.value));
  return m > 0 ? m : 1;
}

void part_tooltip(App& app, const ds::Attribution& a, const ds::AttributionPart& p, double abs_sum) {
  if (!app.look.tooltips || !ImGui::IsItemHovered()) return;
  const bool head = p.kind == ds::PartKind::Head || p.kind == ds::PartKind::CrossHead;
  ImGui::SetTooltip("%s: %+.6f\n%.1f%% of the sum of the contributions' sizes\nof the logit %+.6f%s",
                    ds::part_label(p).c_str(), p.value, abs_sum > 0 ? 100.0 * std::fabs(p.value) / abs_sum : 0.0,
                    a.logit, head ? "\nclick: what it writes; double-click: open it in Attention" : "");
}

// The ranked list: a row per part, largest |contribution| first, a signed bar about 0.
void bar_list(App& app, AttribState& st, const ds::Attribution& a, ImVec2 size) {
  if (!ImGui::BeginChild("attr_bars", size, true)) {
    ImGui::EndChild();
    return;
  }
  std::vector<size_t> order(a.parts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return std::fabs(a.parts[x].value) > std::fabs(a.parts[y].value); });
  const double scale = scale_of(a);
  double abs_sum = 0;
  for (const auto& p : a.parts) abs_sum += std::fabs(p.value);
  const float font = ImGui::GetFontSize(), line = ImGui::GetTextLineHeightWithSpacing();
  const float w = ImGui::GetContentRegionAvail().x;
  const float label_w = ImGui::CalcTextSize("L00 cross bias ").x, value_w = ImGui::CalcTextSize("+000.000 ").x;
  const float bar_w = std::max(font * 3, w - label_w - value_w);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const bool light = app.look.light;
  st.bars_drawn = 0;
  ImGuiListClipper clip;
  clip.Begin(int(order.size()), line);
  while (clip.Step())
    for (int r = clip.DisplayStart; r < clip.DisplayEnd; ++r) {
      const ds::AttributionPart& p = a.parts[order[size_t(r)]];
      const ImVec2 o = ImGui::GetCursorScreenPos();
      ImGui::PushID(r);
      const bool chosen = (p.kind == ds::PartKind::Head || p.kind == ds::PartKind::CrossHead) && p.layer == st.layer &&
                          p.head == st.head && (p.kind == ds::PartKind::CrossHead) == (st.site == ds::HeadSite::Cross);
      if (ImGui::Selectable("##row", chosen, ImGuiSelectableFlags_AllowDoubleClick, ImVec2(w, line - 2))) {
        select_head(st, p);
        if (ImGui::IsMouseDoubleClicked(0) && st.layer >= 0) open_in_attention(app, st.site, st.layer, st.head);
      }
      part_tooltip(app, a, p, abs_sum);
      ImGui::PopID();
      dl->AddText(o, ImGui::GetColorU32(ImGuiCol_Text), ds::part_label(p).c_str());
      const float mid = o.x + label_w + bar_w * 0.5f, len = float(p.value / scale) * bar_w * 0.5f;
      const float y0 = o.y + 2, y1 = o.y + line - 4;
      dl->AddLine(ImVec2(mid, o.y), ImVec2(mid, o.y + line), ImGui::GetColorU32(ImGuiCol_Border));
      dl->AddRectFilled(ImVec2(std::min(mid, mid + len), y0), ImVec2(std::max(mid, mid + len) + 1, y1),
                        diverging(p.value >= 0 ? 0.85f : -0.85f, light));
      dl->AddText(ImVec2(o.x + label_w + bar_w + font * 0.3f, o.y), ImGui::GetColorU32(ImGuiCol_Text),
                  num(p.value, 3).c_str());
      ++st.bars_drawn;
    }
  ImGui::EndChild();
}

// One layer x head grid (self or cross heads) with each layer's MLP in a last column.
void head_grid(App& app, AttribState& st, const ds::Attribution& a, bool cross, float width, float height) {
  const ds::Config& c = app.history.trace.config;
  const int L = c.n_layers, H = c.n_heads;
  const float font = ImGui::GetFontSize();
  const float label_w = ImGui::CalcTextSize("L00 ").x, head_h = ImGui::GetTextLineHeightWithSpacing();
  const float cell =
      std::clamp(std::min((width - label_w) / float(H + 1.4f), (height - head_h) / float(L)), 4.0f, font * 3.2f);
  const ImVec2 o = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // The colours' scale: the largest head (an MLP beyond it is drawn at full colour).
  double scale = 0;
  for (const auto& p : a.parts)
    if (p.kind == ds::PartKind::Head || p.kind == ds::PartKind::CrossHead) scale = std::max(scale, std::fabs(p.value));
  if (scale <= 0) scale = scale_of(a);
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  std::vector<const ds::AttributionPart*> at(size_t(L) * (H + 1), nullptr);  // [layer][head, MLP]
  const ds::PartKind hk = cross ? ds::PartKind::CrossHead : ds::PartKind::Head;
  for (const auto& p : a.parts) {
    if (p.kind == hk) at[size_t(p.layer) * (H + 1) + size_t(p.head)] = &p;
    if (p.kind == ds::PartKind::Mlp && !cross) at[size_t(p.layer) * (H + 1) + size_t(H)] = &p;
  }
  const int hstep = std::max(1, int(std::ceil(ImGui::CalcTextSize(H > 10 ? "H00 " : "H0 ").x / cell)));
  for (int h = 0; h < H; h += hstep)
    dl->AddText(ImVec2(o.x + label_w + h * cell + 2, o.y), text, ("H" + std::to_string(h)).c_str());
  if (!cross) dl->AddText(ImVec2(o.x + label_w + (H + 0.3f) * cell, o.y), text, "MLP");
  double abs_sum = 0;
  for (const auto& p : a.parts) abs_sum += std::fabs(p.value);
  const int lstep = cell < font ? std::max(1, int(font / cell)) : 1;
  for (int l = 0; l < L; ++l) {
    const float y = o.y + head_h + l * cell;
    if (l % lstep == 0)
      dl->AddText(ImVec2(o.x, y + std::max(0.0f, (cell - font) * 0.5f)), text, ("L" + std::to_string(l)).c_str());
    for (int h = 0; h <= H; ++h) {
      const ds::AttributionPart* p = at[size_t(l) * (H + 1) + size_t(h)];
      if (!p) continue;
      const float x = o.x + label_w + (h == H ? H + 0.3f : float(h)) * cell;
      const ImVec2 a0(x + 1, y + 1), a1(x + cell - 1, y + cell - 1);
      dl->AddRectFilled(a0, a1, diverging(float(p->value / scale), app.look.light));
      ImGui::SetCursorScreenPos(ImVec2(x, y));
      ImGui::PushID(int(l * (H + 1) + h + (cross ? 100000 : 0)));
      ImGui::InvisibleButton("cell", ImVec2(cell, cell));
      if (ImGui::IsItemClicked()) select_head(st, *p);
      if (ImGui::IsItemHovered() && ImGui::IsMouseDoubleClicked(0) && h < H) open_in_attention(app, st.site, l, h);
      part_tooltip(app, a, *p, abs_sum);
      ImGui::PopID();
      const bool chosen = h < H && st.layer == l && st.head == h && (st.site == ds::HeadSite::Cross) == cross;
      if (chosen) dl->AddRect(ImVec2(x, y), ImVec2(x + cell, y + cell), IM_COL32(255, 200, 40, 255), 0, 0, 3);
      if (cell > ImGui::CalcTextSize("+0.0").x + 4) {
        const std::string v = num(p->value, 1);
        const ImVec2 ts = ImGui::CalcTextSize(v.c_str());
        dl->AddText(ImVec2(x + (cell - ts.x) * 0.5f, y + (cell - ts.y) * 0.5f), text, v.c_str());
      }
    }
  }
  st.grid_rows = L, st.grid_cols = H, st.grid_cell = cell;
  ImGui::SetCursorScreenPos(ImVec2(o.x, o.y + head_h + L * cell + font * 0.2f));
  if (!cross) ImGui::TextDisabled("full colour: %.2f", scale);
}

// What the selected head writes at this position: the tokens it pushes up and down.
void writes_panel(App& app, AttribState& st, const AttributionAnswer& ans, int step) {
  const float font = ImGui::GetFontSize();
  if (st.layer < 0 || ans.writes_part < 0) {
    ImGui::TextWrapped("Click a head (in the grid or the list) to see what it writes.");
    return;
  }
  const std::string name = ds::part_label(ans.attr.parts[size_t(ans.writes_part)]);
  ImGui::TextWrapped(
      "What %s writes here: the tokens it pushes up and down (through the final norm and the unembedding)",
      name.c_str());
  if (ImGui::SmallButton(("Open " + name + " in Attention").c_str()))
    open_in_attention(app, st.site, st.layer, st.head);
  const ImGuiTableFlags fl = ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV;
  if (!ImGui::BeginTable("writes", 4, fl)) return;
  ImGui::TableSetupColumn("up", ImGuiTableColumnFlags_WidthFixed, font * 5);
  ImGui::TableSetupColumn("##upv", ImGuiTableColumnFlags_WidthFixed, ImGui::CalcTextSize("+00.00").x);
  ImGui::TableSetupColumn("down", ImGuiTableColumnFlags_WidthFixed, font * 5);
  ImGui::TableSetupColumn("##downv", ImGuiTableColumnFlags_WidthFixed, ImGui::CalcTextSize("+00.00").x);
  ImGui::TableHeadersRow();
  const size_t n = std::max(ans.writes.up.size(), ans.writes.down.size());
  const float rows_fit = std::max(3.0f, ImGui::GetContentRegionAvail().y / ImGui::GetTextLineHeightWithSpacing() - 1);
  for (size_t i = 0; i < n && float(i) < rows_fit; ++i) {
    ImGui::TableNextRow();
    for (const auto* v : {&ans.writes.up, &ans.writes.down}) {
      ImGui::TableNextColumn();
      if (i < v->size()) ImGui::Text("'%s'", shorten(text_of(app, step, (*v)[i].id, &ans), 8).c_str());
      ImGui::TableNextColumn();
      if (i < v->size()) ImGui::TextUnformatted(num((*v)[i].value, 2).c_str());
    }
  }
  ImGui::EndTable();
}

void headline(App& app, const AttributionAnswer& ans, int step, bool stale) {
  const ds::Attribution& a = ans.attr;
  const std::string tok = "'" + text_of(app, step, a.token, &ans) + "'";
  std::string what =
      a.vs >= 0 ? "logit(" + tok + ") - logit('" + text_of(app, step, a.vs, &ans) + "')" : "the logit of " + tok;
  char b[512];
  std::snprintf(b, sizeof b, "Step %d, position %d: %s = %.4f%s", step + 1, a.pos, what.c_str(), a.logit,
                stale ? "  (updating...)" : "");
  ImGui::PushTextWrapPos(0);
  ImGui::TextUnformatted(b);
  ImGui::PopTextWrapPos();
  std::snprintf(b, sizeof b, "= the parts %+.4f + the final norm's bias %+.4f", a.total() - a.bias_term, a.bias_term);
  const float w = ImGui::CalcTextSize(b).x;
  if (ImGui::GetCursorPosX() + ImGui::GetItemRectSize().x + w + ImGui::GetFontSize() < ImGui::GetContentRegionMax().x)
    ImGui::SameLine();
  ImGui::TextUnformatted(b);
  tooltip(app,
          "Each part's vector at this position is read through the final norm (its scale taken from this run, "
          "centred for LayerNorm) and the token's row of the unembedding: the parts add up to the logit.");
}

// The grids and the writes, in the right column: side by side when it is wide enough
// for both, else the writes under the grids.
void right_column(App& app, AttribState& st, const AttributionAnswer& ans, int step, ImVec2 size) {
  if (!ImGui::BeginChild("attr_right", size, false)) {
    ImGui::EndChild();
    return;
  }
  const bool cross = app.history.trace.config.encoder_decoder;
  const float font = ImGui::GetFontSize(), writes_w = font * 17.5f;
  const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetContentRegionAvail().y;
  const bool beside = w - writes_w >= font * 11;
  const float grid_w = beside ? w - writes_w - font * 0.6f : w;
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const float grid_h = beside ? (h - 2 * line) / (cross ? 2.0f : 1.0f) : h * (cross ? 0.32f : 0.55f);
  ImGui::BeginGroup();
  ImGui::TextUnformatted(cross ? "Self-attention heads and MLPs" : "Heads (layer x head) and MLPs");
  head_grid(app, st, ans.attr, false, grid_w, grid_h);
  if (cross) {
    ImGui::TextUnformatted("Cross-attention heads");
    head_grid(app, st, ans.attr, true, grid_w, grid_h);
  }
  ImGui::EndGroup();
  if (beside) {
    ImGui::SameLine(0, font * 1.5f);
    ImGui::BeginGroup();
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + writes_w);
    writes_panel(app, st, ans, step);
    ImGui::PopTextWrapPos();
    ImGui::EndGroup();
  } else {
    writes_panel(app, st, ans, step);
  }
  ImGui::EndChild();
}

}  // namespace

bool attribution_waiting(App& app) {
  const AttribState& st = state(app);
  const bool unmet =
      !st.want_key.empty() && st.want_key != st.failed_key && (!st.shown || st.shown->key != st.want_key);
  return !st.asked.empty() || unmet;
}

bool attribution_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Attribute>(&e);
  if (!a) return false;
  AttribState& st = state(app);
  if (a->answer && a->answer->key == st.asked) st.asked.clear();
  if (a->answer) st.shown = a->answer;
  return true;
}

void attribution_failed(App& app) {
  AttribState& st = state(app);
  if (st.asked.empty()) return;
  st.failed_key = st.asked;
  st.asked.clear();
}

void attribution_script(App& app, const std::string& token, const std::string& vs, const std::string& head) {
  AttribState& st = state(app);
  st.want_token = token, st.want_vs = vs, st.want_head = head;
}

void panel_attribution(App& app) {
  view_caption(app, "attribution");
  if (!has_step(app)) return;
  AttribState& st = state(app);
  const ds::Trace& t = app.history.trace;
  if (const std::string why = ds::attribution_refusal(t.config); !why.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextUnformatted(("No attribution for this model: " + why + ".").c_str());
    ImGui::TextDisabled("Open a pre-norm model (builtin:stories, builtin:dates, GPT-2, Llama) to split a logit.");
    ImGui::PopTextWrapPos();
    return;
  }
  if (app.history.replay || !app.engine.model) {
    ImGui::TextWrapped("The attribution runs the model again: open the model (a trace opened from a file has none).");
    return;
  }
  const int s = std::clamp(app.sel.cursor, 0, int(t.steps.size()) - 1);
  apply_wanted(app, st, s);
  const StepInputs in = inputs_of(t, s);
  st.fed = in.tokens;
  token_chooser(app, st, s, in);
  const int token = st.token >= 0 ? st.token : in.drawn;
  const std::string key = key_of(t, in, token, st.vs, st);
  ask(app, st, in, key, token);
  if (!st.shown) {
    ImGui::TextDisabled(st.failed_key == key ? "The engine could not split this logit (see the status line)."
                                             : "Splitting the logit...");
    return;
  }
  headline(app, *st.shown, s, st.shown->key != key);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float left = std::clamp(avail.x * 0.36f, ImGui::GetFontSize() * 16, avail.x * 0.5f);
  bar_list(app, st, st.shown->attr, ImVec2(left, avail.y));
  ImGui::SameLine();
  right_column(app, st, *st.shown, s, ImGui::GetContentRegionAvail());
}

std::string attribution_sidecar(App& app) {
  const AttribState& st = state(app);
  std::ostringstream f;
  char b[64];
  auto d = [&](double v) {
    std::snprintf(b, sizeof b, "%.17g", v);
    return std::string(b);
  };
  f << "{\"refused\": \"" << ds::attribution_refusal(app.history.trace.config).substr(0, 60) << "\"";
  f << ", \"bars_drawn\": " << st.bars_drawn << ", \"grid\": [" << st.grid_rows << ", " << st.grid_cols << ", "
    << st.grid_cell << "]";
  f << ", \"fed\": [";
  for (size_t i = 0; i < st.fed.size(); ++i) f << (i ? ", " : "") << st.fed[i];
  f << "], \"source\": [";
  for (size_t i = 0; i < app.history.trace.source.size(); ++i) f << (i ? ", " : "") << app.history.trace.source[i];
  f << "]";
  if (st.shown) {
    const ds::Attribution& a = st.shown->attr;
    f << ", \"pos\": " << a.pos << ", \"token\": " << a.token << ", \"vs\": " << a.vs << ", \"logit\": " << d(a.logit)
      << ", \"bias_term\": " << d(a.bias_term) << ", \"total\": " << d(a.total()) << ", \"parts\": [";
    for (size_t i = 0; i < a.parts.size(); ++i)
      f << (i ? ", " : "") << "{\"label\": \"" << ds::part_label(a.parts[i]) << "\", \"value\": " << d(a.parts[i].value)
        << "}";
    f << "], \"writes_part\": " << st.shown->writes_part << ", \"up\": [";
    for (size_t i = 0; i < st.shown->writes.up.size(); ++i)
      f << (i ? ", " : "") << "[" << st.shown->writes.up[i].id << ", " << d(st.shown->writes.up[i].value) << "]";
    f << "], \"down\": [";
    for (size_t i = 0; i < st.shown->writes.down.size(); ++i)
      f << (i ? ", " : "") << "[" << st.shown->writes.down[i].id << ", " << d(st.shown->writes.down[i].value) << "]";
    f << "]";
  }
  f << "}";
  return f.str();
}

}  // namespace dsgui
