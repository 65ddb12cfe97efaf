// Beam search as a tree: every hypothesis kept at each step, the tokens it was extended
// with and their log-probabilities, what was kept, finished or pruned, and the winner's
// path. The winner (and any node clicked) is kept as a branch beside the generation,
// which stays live: Branches compares them and can make one live.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_link/choice.h"
#include "views/common.h"

namespace dsgui {

namespace {

struct BeamsState {
  int width = 3;
  float length_penalty = 1.0f;
  int positions = 48;     // positions in all the search may fill (prompt included), at most the context
  int per_hyp = 4;        // candidates drawn per hypothesis (kept and finished ones always are)
  bool show_sum = false;  // nodes show the running sum instead of the token's log-probability
  std::shared_ptr<const BeamAnswer> ans;
  const ModelInfo* model = nullptr;  // the model the answer is for
  bool waiting = false;
  bool branch_waiting = false;  // a hypothesis is on its way to be kept as a branch
  bool asked = false;           // a search was asked for this model (run once on opening the view)
  int reveal = 0;               // steps of the tree shown
  int sel_step = -1, sel_hyp = -1, sel_cand = -1;
  float scroll_to = -1;  // x to scroll the tree to (the newest column)
};

// A node drawn: candidate j of hypothesis h of step t (t = -1: the prompt).
struct Node {
  int t = -1, h = 0, j = -1;
  ImVec2 a, b;  // rectangle
};

const ds::BeamCandidate* cand_of(const ds::BeamResult& r, int t, int h, int j) {
  if (t < 0 || t >= int(r.steps.size())) return nullptr;
  const auto& hy = r.steps[size_t(t)].hyps;
  if (h < 0 || h >= int(hy.size())) return nullptr;
  const auto& cs = hy[size_t(h)].candidates;
  return j >= 0 && j < int(cs.size()) ? &cs[size_t(j)] : nullptr;
}

std::string text_of(const BeamAnswer& a, int id) {
  auto it = a.text.find(id);
  return visible(it == a.text.end() ? "#" + std::to_string(id) : it->second);
}

// A finished hypothesis's text (its first `chars` bytes at most, on a character
// boundary), decoded as the CLI prints it, its end token named apart.
std::string finished_text(const BeamAnswer& a, size_t i, size_t chars = 120) {
  const ds::BeamFinished& f = a.result.finished[i];
  std::string t = i < a.finished_text.size() ? a.finished_text[i] : "";
  if (t.size() > chars) {
    size_t cut = chars;
    while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    t = t.substr(0, cut) + "...";
  }
  return "\"" + t + "\"" + (f.eos ? " + " + text_of(a, f.tokens.back()) : " (not ended)");
}

// A hypothesis's text so far and a candidate's after it, decoded (BeamAnswer).
std::string hyp_text(const BeamAnswer& a, int t, int h) {
  return t < int(a.hyp_text.size()) && h < int(a.hyp_text[size_t(t)].size()) ? a.hyp_text[size_t(t)][size_t(h)] : "";
}
std::string cand_text(const BeamAnswer& a, int t, int h, int j) {
  if (t >= int(a.cand_text.size()) || h >= int(a.cand_text[size_t(t)].size())) return "";
  const auto& c = a.cand_text[size_t(t)][size_t(h)];
  return j < int(c.size()) ? c[size_t(j)] : "";
}

// Whether candidate j of hypothesis h at step t lies on the winner's path.
bool on_winner(const ds::BeamResult& r, int t, int h, int j) {
  if (r.finished.empty()) return false;
  const ds::BeamFinished& f = r.finished[0];
  if (t > f.step || f.path.at(size_t(t)) != h) return false;
  const ds::BeamCandidate* c = cand_of(r, t, h, j);
  return c && c->token == f.tokens[size_t(t)];
}

// The candidates of a hypothesis that are drawn: its best per_hyp, and every one kept,
// finished or skipped.
std::vector<int> shown_candidates(const ds::BeamHyp& hyp, int per_hyp) {
  std::vector<int> out;
  for (int j = 0; j < int(hyp.candidates.size()); ++j)
    if (j < per_hyp || hyp.candidates[size_t(j)].fate != ds::BeamFate::Pruned) out.push_back(j);
  return out;
}

// Keeps a hypothesis (its tokens, then the candidate's; t -1: the winner) as a branch
// beside the generation, which stays live: the worker runs it through a session of its
// own (cmd::BeamBranch) and the Branches view compares the two.
void keep_hypothesis(App& app, BeamsState& st, int t, int h, int j) {
  if (!st.ans || !app.engine.model) return;
  if (t >= 0 && !cand_of(st.ans->result, t, h, j)) return;
  st.sel_step = t, st.sel_hyp = h, st.sel_cand = j;
  cmd::BeamBranch c;
  c.answer = st.ans;
  c.step = t, c.hyp = h, c.cand = j;
  c.threads = app.engine.threads;
  app.engine.ask(std::move(c));
  st.branch_waiting = true;
}

void run_search(App& app, BeamsState& st) {
  if (!app.engine.model) return;
  cmd::Beam c;
  c.prompt = app.inputs.prompt;
  c.source = app.inputs.source;
  c.chat = app.chat_input();
  c.width = st.width;
  c.length_penalty = st.length_penalty;
  c.positions = std::min(st.positions, app.engine.model->cfg.max_seq);
  c.threads = app.engine.threads;
  app.engine.ask(std::move(c));
  st.waiting = true;
  st.asked = true;
  st.model = app.engine.model.get();
}

// How each fate is drawn: the box's fill (dark with white text in the dark theme,
// light with black text in the light one) and the edge leading to it, strong enough to
// read on either background.
struct FateColours {
  ImU32 fill_dark, fill_light, edge_dark, edge_light;
};
const FateColours& fate_colours(ds::BeamFate f) {
  static const FateColours kept{IM_COL32(45, 90, 170, 255), IM_COL32(165, 200, 245, 255), IM_COL32(90, 140, 230, 255),
                                IM_COL32(50, 100, 200, 255)};
  static const FateColours finished{IM_COL32(35, 125, 65, 255), IM_COL32(165, 225, 180, 255),
                                    IM_COL32(70, 180, 100, 255), IM_COL32(30, 140, 70, 255)};
  static const FateColours skipped{IM_COL32(110, 50, 45, 255), IM_COL32(245, 200, 195, 255), IM_COL32(160, 80, 70, 255),
                                   IM_COL32(200, 110, 100, 255)};
  static const FateColours pruned{IM_COL32(58, 58, 62, 255), IM_COL32(228, 228, 228, 255), IM_COL32(95, 95, 100, 255),
                                  IM_COL32(180, 180, 180, 255)};
  switch (f) {
    case ds::BeamFate::Kept:
      return kept;
    case ds::BeamFate::Finished:
      return finished;
    case ds::BeamFate::Skipped:
      return skipped;
    case ds::BeamFate::Pruned:
      break;
  }
  return pruned;
}
ImU32 fate_colour(ds::BeamFate f, bool light) { return light ? fate_colours(f).fill_light : fate_colours(f).fill_dark; }
ImU32 edge_colour(ds::BeamFate f, bool light) { return light ? fate_colours(f).edge_light : fate_colours(f).edge_dark; }

const char* fate_text(ds::BeamFate f) {
  switch (f) {
    case ds::BeamFate::Kept:
      return "kept: one of the hypotheses of the next step";
    case ds::BeamFate::Finished:
      return "finished: an end token among the W best, so this hypothesis is complete";
    case ds::BeamFate::Skipped:
      return "skipped: an end token ranked W or worse among the step's candidates";
    case ds::BeamFate::Pruned:
      break;
  }
  return "pruned: not among the W best continuations of this step";
}

void node_tooltip(const BeamsState& st, const Node& n) {
  const BeamAnswer& a = *st.ans;
  const ds::BeamResult& r = a.result;
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
  if (n.t < 0) {
    ImGui::Text("The prompt ends with \"%s\"", text_of(a, r.prompt.back()).c_str());
    ImGui::TextUnformatted("Every hypothesis starts here with a log-probability sum of 0.");
  } else {
    const ds::BeamHyp& hyp = r.steps[size_t(n.t)].hyps[size_t(n.h)];
    const ds::BeamCandidate& c = hyp.candidates[size_t(n.j)];
    ImGui::Text("Step %d, hypothesis %d + \"%s\"", n.t + 1, n.h + 1, text_of(a, c.token).c_str());
    ImGui::Text("text: \"%s%s\"", hyp_text(a, n.t, n.h).c_str(), cand_text(a, n.t, n.h, n.j).c_str());
    ImGui::Text("log p(token) = %.4f   (p = %.4f)", c.logprob, std::exp(c.logprob));
    ImGui::Text("sum of log-probabilities = %.4f + %.4f = %.4f", hyp.sum, c.logprob, c.sum);
    if (c.rank >= 0) ImGui::Text("rank among this step's %d best pairs: %d", 2 * a.width, c.rank + 1);
    ImGui::TextUnformatted(fate_text(c.fate));
    if (c.finished >= 0 && c.finished < int(r.finished.size())) {
      const ds::BeamFinished& f = r.finished[size_t(c.finished)];
      ImGui::Text("score = sum / length^%.2f = %.4f / %zu^%.2f = %.4f  (finished #%d)", a.length_penalty, f.sum,
                  f.tokens.size(), a.length_penalty, f.score, c.finished + 1);
    }
    ImGui::TextDisabled("Click to keep this hypothesis as a branch: Branches compares it with the generation.");
  }
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

// The nodes of the tree's first `reveal` steps, laid out in columns from `origin`.
std::vector<Node> layout(const BeamsState& st, ImVec2 origin, float colw, float nodew, float rowh, ImVec2& size) {
  const ds::BeamResult& r = st.ans->result;
  std::vector<Node> nodes;
  nodes.push_back({-1, 0, -1, origin, ImVec2(origin.x + nodew, origin.y + rowh * 0.8f)});
  size = ImVec2(colw, rowh);
  for (int t = 0; t < std::min(st.reveal, int(r.steps.size())); ++t) {
    float y = origin.y;
    const float x = origin.x + colw * float(t + 1);
    for (int h = 0; h < int(r.steps[size_t(t)].hyps.size()); ++h) {
      for (int j : shown_candidates(r.steps[size_t(t)].hyps[size_t(h)], st.per_hyp)) {
        nodes.push_back({t, h, j, ImVec2(x, y), ImVec2(x + nodew, y + rowh * 0.8f)});
        y += rowh;
      }
      y += rowh * 0.35f;  // a gap between the children of different hypotheses
    }
    size.x = std::max(size.x, x + colw - origin.x);
    size.y = std::max(size.y, y - origin.y);
  }
  return nodes;
}

// Where each hypothesis of step t sits: the node of the candidate it came from.
const Node* parent_node(const std::vector<Node>& nodes, const ds::BeamResult& r, int t, int h) {
  if (t == 0) return &nodes[0];
  const int parent = r.steps[size_t(t)].hyps[size_t(h)].parent;
  for (const Node& n : nodes)
    if (n.t == t - 1 && n.h == parent) {
      const ds::BeamCandidate* c = cand_of(r, n.t, n.h, n.j);
      if (c && c->fate == ds::BeamFate::Kept && c->child == h) return &n;
    }
  return nullptr;
}

void draw_node(ImDrawList* dl, const App& app, const BeamsState& st, const Node& n, bool winner, bool hovered) {
  const BeamAnswer& a = *st.ans;
  const float font = ImGui::GetFontSize();
  std::string label, value;
  ImU32 fill = fate_colour(ds::BeamFate::Kept, app.look.light);
  bool pruned = false;
  if (n.t < 0) {
    label = text_of(a, a.result.prompt.back());  // the column says "prompt"
  } else {
    const ds::BeamCandidate& c = *cand_of(a.result, n.t, n.h, n.j);
    label = text_of(a, c.token);
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", st.show_sum ? c.sum : c.logprob);
    value = b;
    fill = fate_colour(c.fate, app.look.light);
    pruned = c.fate == ds::BeamFate::Pruned || c.fate == ds::BeamFate::Skipped;
  }
  dl->AddRectFilled(n.a, n.b, fill, font * 0.25f);
  const bool selected = n.t >= 0 && n.t == st.sel_step && n.h == st.sel_hyp && n.j == st.sel_cand;
  if (winner) dl->AddRect(n.a, n.b, IM_COL32(245, 190, 30, 255), font * 0.25f, 0, font * 0.18f);
  if (selected || hovered)
    dl->AddRect(ImVec2(n.a.x - 3, n.a.y - 3), ImVec2(n.b.x + 3, n.b.y + 3),
                app.look.light ? IM_COL32(20, 20, 20, 255) : IM_COL32(255, 255, 255, 255), font * 0.3f, 0,
                selected ? 3.0f : 1.5f);
  const ImU32 ink = pruned ? (app.look.light ? IM_COL32(105, 105, 105, 255) : IM_COL32(160, 160, 160, 255))
                           : (app.look.light ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255));
  const float pad = font * 0.3f, mid = n.a.y + (n.b.y - n.a.y - font) * 0.5f;
  dl->PushClipRect(n.a, n.b, true);
  dl->AddText(ImVec2(n.a.x + pad, mid), ink, label.c_str());
  // The number when both fit (it is always in the box's tooltip).
  const ImVec2 vs = ImGui::CalcTextSize(value.c_str());
  if (ImGui::CalcTextSize(label.c_str()).x + vs.x + pad * 3 <= n.b.x - n.a.x)
    dl->AddText(ImVec2(n.b.x - pad - vs.x, mid), ink, value.c_str());
  dl->PopClipRect();
}

void draw_tree(App& app, BeamsState& st) {
  const ds::BeamResult& r = st.ans->result;
  const float font = ImGui::GetFontSize();
  // Columns as wide as fit the view (the whole tree on screen when it can be), between
  // a box that still holds a token and "-12.34" and a comfortable width.
  const int cols = std::min(st.reveal, int(r.steps.size())) + 1;
  const float avail = ImGui::GetContentRegionAvail().x - ImGui::GetStyle().ScrollbarSize - font;
  const float colw = std::clamp(avail / float(cols), font * 6.0f, font * 8.5f);
  const float nodew = colw - font * 1.6f, rowh = font * 1.7f;
  ImGui::BeginChild("beamtree", ImVec2(0, 0), true, ImGuiWindowFlags_HorizontalScrollbar);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 origin = ImGui::GetCursorScreenPos();
  for (int t = -1; t < std::min(st.reveal, int(r.steps.size())); ++t) {
    char b[32];
    std::snprintf(b, sizeof b, t < 0 ? "prompt" : "step %d", t + 1);
    dl->AddText(ImVec2(origin.x + colw * float(t + 1), origin.y), ImGui::GetColorU32(ImGuiCol_TextDisabled), b);
  }
  origin.y += font * 1.5f;
  ImVec2 size;
  const std::vector<Node> nodes = layout(st, origin, colw, nodew, rowh, size);
  const ImVec2 mouse = ImGui::GetMousePos();
  const bool in_child = ImGui::IsWindowHovered();
  int hovered = -1;
  for (int i = 0; i < int(nodes.size()); ++i)
    if (in_child && mouse.x >= nodes[size_t(i)].a.x && mouse.x < nodes[size_t(i)].b.x &&
        mouse.y >= nodes[size_t(i)].a.y && mouse.y < nodes[size_t(i)].b.y)
      hovered = i;
  // Edges first, from each hypothesis to its candidates; the winner's path on top.
  for (int pass = 0; pass < 2; ++pass)
    for (const Node& n : nodes) {
      if (n.t < 0) continue;
      const Node* p = parent_node(nodes, r, n.t, n.h);
      if (!p) continue;
      const bool win = on_winner(r, n.t, n.h, n.j);
      if (win != (pass == 1)) continue;
      const ds::BeamCandidate& c = *cand_of(r, n.t, n.h, n.j);
      ImU32 col = win ? IM_COL32(245, 190, 30, 255) : edge_colour(c.fate, app.look.light);
      const float th = win ? font * 0.22f : (c.fate == ds::BeamFate::Pruned ? 1.0f : 2.0f);
      const ImVec2 p0(p->b.x, (p->a.y + p->b.y) * 0.5f), p1(n.a.x, (n.a.y + n.b.y) * 0.5f);
      dl->AddBezierCubic(p0, ImVec2(p0.x + font * 1.2f, p0.y), ImVec2(p1.x - font * 1.2f, p1.y), p1, col, th);
    }
  for (int i = 0; i < int(nodes.size()); ++i) {
    const Node& n = nodes[size_t(i)];
    draw_node(dl, app, st, n, n.t < 0 || on_winner(r, n.t, n.h, n.j), i == hovered);
  }
  ImGui::Dummy(ImVec2(size.x + font, size.y + font * 2.5f));
  if (hovered >= 0) {
    node_tooltip(st, nodes[size_t(hovered)]);
    const Node& n = nodes[size_t(hovered)];
    if (n.t >= 0 && ImGui::IsMouseClicked(ImGuiMouseButton_Left) && !app.engine.worker.busy())
      keep_hypothesis(app, st, n.t, n.h, n.j);
  }
  if (st.scroll_to >= 0) {
    ImGui::SetScrollX(std::max(0.0f, st.scroll_to - ImGui::GetWindowWidth() + colw));
    st.scroll_to = -1;
  }
  ImGui::EndChild();
}

// Width of a labelled slider or button: the frame plus its label.
float labelled(float frame, const char* label) {
  return frame + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize(label).x;
}

void controls(App& app, BeamsState& st) {
  const float font = ImGui::GetFontSize();
  ImGui::SetNextItemWidth(font * 8);
  ImGui::SliderInt("width W", &st.width, 1, 8);
  tooltip(app, "How many hypotheses beam search keeps at every step. Width 1 is greedy decoding.");
  flow(labelled(font * 8, "length penalty"));
  ImGui::SetNextItemWidth(font * 8);
  ImGui::SliderFloat("length penalty", &st.length_penalty, -1.0f, 3.0f, "%.2f");
  tooltip(app,
          "A finished hypothesis scores (sum of its log-probabilities) / length^penalty. Above 0 favours longer "
          "texts, below 0 shorter ones; 0 compares plain sums.");
  flow(labelled(font * 7, "positions"));
  ImGui::SetNextItemWidth(font * 7);
  const int ctx = app.engine.model ? app.engine.model->cfg.max_seq : 1;
  st.positions = std::clamp(st.positions, 2, std::max(2, ctx));
  ImGui::SliderInt("positions", &st.positions, 2, std::max(2, ctx));
  tooltip(app,
          "How many positions the search may fill, prompt included (at most the model's context). Each step runs "
          "the model once per hypothesis, so long searches of large models take a while.");
  flow(ImGui::CalcTextSize("Run beam search").x + font);
  ImGui::BeginDisabled(!app.engine.model || app.engine.worker.busy());
  if (ImGui::Button("Run beam search")) run_search(app, st);
  ImGui::EndDisabled();
  tooltip(app, "Search from the prompt (and source) in the boxes above, with this width and length penalty.");
  flow(labelled(font * 6, "shown per hypothesis"));
  ImGui::SetNextItemWidth(font * 6);
  ImGui::SliderInt("shown per hypothesis", &st.per_hyp, 1, 2 * std::max(1, st.width));
  tooltip(app, "How many of each hypothesis's best next tokens are drawn (kept and finished ones always are).");
  int which = st.show_sum ? 1 : 0;
  flow(ImGui::CalcTextSize("numbers: log p of the token running sum").x + font * 4);
  ImGui::TextUnformatted("numbers:");
  ImGui::SameLine();
  ImGui::RadioButton("log p of the token", &which, 0);
  ImGui::SameLine();
  ImGui::RadioButton("running sum", &which, 1);
  st.show_sum = which == 1;
  tooltip(app,
          "A box's number: the log-probability of its token given the hypothesis it extends, or the sum of the "
          "log-probabilities from the prompt to it, which is what beam search ranks.");
}

std::string best_line(const BeamAnswer& a) {
  const ds::BeamFinished& w = a.result.finished[0];
  char b[96];
  std::snprintf(b, sizeof b, "   score %.4f = %.4f / %zu^%.2f", w.score, w.sum, w.tokens.size(), a.length_penalty);
  return "Best: " + finished_text(a, 0, 400) + b;
}

// The finished hypotheses after the best, each whole up to 160 bytes, with its score.
std::vector<std::string> runners_up(const BeamAnswer& a) {
  std::vector<std::string> out;
  for (size_t i = 1; i < a.result.finished.size() && i < 4; ++i) {
    char b[64];
    std::snprintf(b, sizeof b, "#%zu ", i + 1);
    std::string line = b + finished_text(a, i, 160);
    std::snprintf(b, sizeof b, "   score %.4f", a.result.finished[i].score);
    out.push_back(line + b);
  }
  return out;
}

std::string runners_up_line(const BeamAnswer& a) {
  std::string others;
  for (const std::string& r : runners_up(a)) others += "   " + r;
  return "Runners-up:" + others;
}

void summary(App& app, BeamsState& st) {
  const BeamAnswer& a = *st.ans;
  const ds::BeamResult& r = a.result;
  const float font = ImGui::GetFontSize();
  if (r.finished.empty()) return;
  ImGui::TextWrapped("%s", best_line(a).c_str());
  char info[200];
  std::snprintf(info, sizeof info, "(width %d, %zu steps, %.0f ms%s)", a.width, r.steps.size(), a.seconds * 1000,
                r.stopped_early ? ", stopped early: no running hypothesis could still win" : "");
  flow(ImGui::CalcTextSize(info).x);
  ImGui::TextDisabled("%s", info);
  flow(ImGui::CalcTextSize("Step through from the start").x + font);
  if (ImGui::SmallButton("Step through from the start")) {
    st.reveal = 1;
    st.scroll_to = 0;
  }
  tooltip(app, "Show the search one step at a time: Right shows the next step, Left goes back, Space plays.");
  if (r.finished.size() > 1) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextUnformatted("Runners-up:");
    for (const std::string& line : runners_up(a)) {  // side by side while they fit, else each on its line
      flow(ImGui::CalcTextSize(line.c_str()).x + font);
      ImGui::TextWrapped("%s", line.c_str());
    }
    ImGui::PopStyleColor();
  }
}

void legend_row(const App& app) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  bool first = true;
  auto swatch = [&](ImU32 col, const char* what, bool outline) {
    if (!first) flow(font * 1.6f + ImGui::GetStyle().ItemSpacing.x + ImGui::CalcTextSize(what).x);
    first = false;
    ImVec2 p = ImGui::GetCursorScreenPos();
    if (outline)
      dl->AddRect(p, ImVec2(p.x + font * 1.5f, p.y + font), col, 2, 0, font * 0.18f);
    else
      dl->AddRectFilled(p, ImVec2(p.x + font * 1.5f, p.y + font), col, 2);
    ImGui::Dummy(ImVec2(font * 1.6f, font));
    ImGui::SameLine();
    ImGui::TextUnformatted(what);
  };
  swatch(fate_colour(ds::BeamFate::Kept, app.look.light), "kept", false);
  swatch(fate_colour(ds::BeamFate::Finished, app.look.light), "finished (end token)", false);
  swatch(fate_colour(ds::BeamFate::Pruned, app.look.light), "pruned", false);
  swatch(fate_colour(ds::BeamFate::Skipped, app.look.light), "end token skipped", false);
  swatch(IM_COL32(245, 190, 30, 255), "the winner's path", true);
}

}  // namespace

bool beams_waiting(App& app) {
  const BeamsState& st = app.state<BeamsState>();
  return st.waiting || st.branch_waiting;
}

namespace {

// The first step at which two traces drew different tokens (or one has no step): where
// a branch parts from the generation.
int parting_step(const ds::Trace& a, const ds::Trace& b) {
  size_t k = 0;
  while (k < a.steps.size() && k < b.steps.size() && a.steps[k].input == b.steps[k].input && a.steps[k].sample &&
         b.steps[k].sample && a.steps[k].sample->token == b.steps[k].sample->token)
    ++k;
  return int(k);
}

// A hypothesis's trace arrived: kept as a branch beside the generation (which stays
// live), unless the generation or a branch already has its tokens; Ctrl+Z forgets it.
void keep_branch(App& app, BeamsState& st, ev::BeamBranch& e) {
  st.branch_waiting = false;
  if (e.trace.steps.empty()) return;
  if (same_tokens(app.history.trace, e.trace)) {
    app.say("the generation shown already has the tokens of this hypothesis");
    return;
  }
  for (int i = 0; i < int(app.history.branches.size()); ++i)
    if (same_tokens(app.history.branches[size_t(i)].trace, e.trace)) {
      app.history.branch_shown = i;
      app.say("this hypothesis is kept already: branch " + std::to_string(i + 1));
      return;
    }
  const bool winner = e.answer && !e.answer->result.finished.empty() &&
                      e.trace.steps.size() == e.answer->result.finished[0].tokens.size() &&
                      e.step == e.answer->result.finished[0].step;
  char label[160];
  std::snprintf(label, sizeof label, "beam search, width %d, length penalty %.2f: %s", e.answer ? e.answer->width : 0,
                e.answer ? e.answer->length_penalty : 0.0f,
                winner ? "the best hypothesis" : ("a hypothesis of step " + std::to_string(e.step + 1)).c_str());
  Branch b;
  b.label = label;
  b.fork_step = std::min(parting_step(app.history.trace, e.trace), int(e.trace.steps.size()) - 1);
  b.trace = std::move(e.trace);
  app.history.branches.push_back(std::move(b));
  app.history.branch_shown = int(app.history.branches.size()) - 1;
  Undo u;
  u.label = "keeping the beam search's hypothesis as branch " + std::to_string(app.history.branch_shown + 1);
  u.has_trace = false;
  u.added_branch = app.history.branch_shown;
  app.history.undo.push(std::move(u));
  app.say("beam search: kept as branch " + std::to_string(app.history.branch_shown + 1) +
          " beside the generation (Branches compares them; Ctrl+Z forgets it)");
}

}  // namespace

bool beams_answer(App& app, Event& e) {
  BeamsState& st = app.state<BeamsState>();
  if (auto* b = std::get_if<ev::BeamBranch>(&e)) {
    keep_branch(app, st, *b);
    return true;
  }
  auto* a = std::get_if<ev::Beam>(&e);
  if (!a) return false;
  st.waiting = false;
  if (!a->answer) return true;
  st.ans = std::move(a->answer);
  st.reveal = int(st.ans->result.steps.size());
  st.scroll_to = 0;
  if (!st.ans->result.finished.empty()) keep_hypothesis(app, st, -1, 0, 0);  // the winner, as a branch
  return true;
}

void beams_failed(App& app) {
  app.state<BeamsState>().waiting = false;
  app.state<BeamsState>().branch_waiting = false;
}

void beams_set(App& app, int width, float length_penalty) {
  BeamsState& st = app.state<BeamsState>();
  if (width > 0) st.width = width;
  st.length_penalty = length_penalty;
}

bool beams_step(App& app, int dir) {
  if (app.sel.view < 0 || std::string(all_views()[size_t(app.sel.view)].id) != "beams") return false;
  BeamsState& st = app.state<BeamsState>();
  if (!st.ans || st.model != app.engine.model.get()) return false;
  const ds::BeamResult& r = st.ans->result;
  const int n = int(r.steps.size());
  const int next = std::clamp(st.reveal + dir, 1, n);
  if (next == st.reveal) return true;
  st.reveal = next;
  st.scroll_to = ImGui::GetFontSize() * 8.5f * float(next + 1);  // at most: a column is at most 8.5 fonts
  // Follow the winner's path: its node of the newest step is marked (the generation in
  // the other views stays as it is).
  if (!r.finished.empty()) {
    const ds::BeamFinished& w = r.finished[0];
    const int t = std::min(next - 1, w.step);
    const int h = w.path.at(size_t(t));
    const auto& cs = r.steps[size_t(t)].hyps[size_t(h)].candidates;
    for (int j = 0; j < int(cs.size()); ++j)
      if (cs[size_t(j)].token == w.tokens[size_t(t)]) st.sel_step = t, st.sel_hyp = h, st.sel_cand = j;
  }
  return true;
}

bool beams_playing(App& app, bool& playing) {
  BeamsState& st = app.state<BeamsState>();
  if (!st.ans || st.model != app.engine.model.get()) return false;
  const int before = st.reveal;
  if (!beams_step(app, +1)) return false;
  if (st.reveal == before) playing = false;  // the whole tree is shown
  return true;
}

void beams_search_now(App& app, bool any_view) {
  const bool shown = app.sel.view >= 0 && std::string(all_views()[size_t(app.sel.view)].id) == "beams";
  if ((!shown && !any_view) || !app.engine.model) return;
  BeamsState& st = app.state<BeamsState>();
  st.model = app.engine.model.get();
  run_search(app, st);
}

void panel_beams(App& app) {
  view_caption(app, "beams");
  BeamsState& st = app.state<BeamsState>();
  if (!app.engine.model) {
    ImGui::TextDisabled("Load a model first: beam search runs the model itself, not a saved trace.");
    return;
  }
  if (st.model != app.engine.model.get()) {
    st.ans.reset();
    st.asked = false;
    st.sel_step = st.sel_hyp = st.sel_cand = -1;
  }
  if (!app.scripted && !st.asked && !st.waiting && app.engine.started && !app.engine.worker.busy()) run_search(app, st);
  controls(app, st);
  if (st.waiting || !st.ans) {
    if (!st.waiting) {
      ImGui::TextDisabled("Press Run beam search.");
      return;
    }
    const std::string what = app.engine.worker.activity();
    ImGui::Text("Searching... %s", what.c_str());
    ImGui::SameLine();
    if (ImGui::SmallButton("Stop")) app.engine.worker.cancel();
    tooltip(app, "End the search at this step: the hypotheses kept so far are scored and shown.");
    return;
  }
  if (st.ans->prompt != app.inputs.prompt || st.ans->source != app.inputs.source)
    ImGui::TextColored(ImVec4(0.9f, 0.6f, 0.2f, 1), "The boxes changed since this search: press Run beam search.");
  summary(app, st);
  legend_row(app);
  draw_tree(app, st);
}

std::string next_explanation(App& app);
std::string cross_note(const App& app);
std::string live_label(const App& app, int fork_step);

std::vector<std::pair<std::string, std::string>> beamtab_sidecar(App& app) {
  using json = nlohmann::json;
  std::vector<std::pair<std::string, std::string>> out;
  const auto js = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  const BeamsState& st = app.state<BeamsState>();
  if (st.ans && !st.ans->result.finished.empty()) {
    out.push_back({"beam_best", js(json(best_line(*st.ans)))});
    out.push_back({"beam_runners_up", js(json(runners_up_line(*st.ans)))});
    out.push_back({"beam_best_text", js(json(st.ans->finished_text.at(0)))});
    out.push_back({"beam_best_ids", js(json(st.ans->result.finished[0].tokens))});
  }
  json labels = json::array();
  for (const Branch& b : app.history.branches) labels.push_back(branch_method(b.trace, b.fork_step));
  out.push_back({"branch_labels", js(labels)});
  const int fork =
      app.history.branches.empty()
          ? 0
          : app.history.branches[size_t(std::clamp(app.history.branch_shown, 0, int(app.history.branches.size()) - 1))]
                .fork_step;
  out.push_back({"live_label", js(json(live_label(app, fork)))});
  json ids = json::array();
  for (const TokenInfo& t : tokens_as_of(app.history.trace, int(app.history.trace.steps.size()) - 1))
    ids.push_back(t.id);
  out.push_back({"live_ids", js(ids)});
  out.push_back({"next_text", js(json(next_explanation(app)))});
  if (!app.history.trace.config.encoder_decoder) out.push_back({"cross_text", js(json(cross_note(app)))});
  out.push_back({"can_undo", app.history.undo.empty() ? "false" : "true"});
  return out;
}

}  // namespace dsgui
