// The next token: candidates before and after the repetition penalty, temperature,
// top-k and top-p, the filters' casualties, the drawn token, and the random number that
// picked it; for contrastive search each candidate's confidence, degeneration penalty
// and score. Moving a setting previews it on the step shown: the worker reshapes the
// step's whole logits row (cmd::Shape) and nothing is drawn until Re-draw.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "engine_link/choice.h"
#include "imgui_internal.h"
#include "shell/notices.h"
#include "views/common.h"
#include "views/heads_ablation.h"

namespace dsgui {

namespace {

const ds::Candidate* find_cand(const ds::SampleRecord& r, int id) {
  for (auto& c : r.candidates)
    if (c.id == id) return &c;
  return nullptr;
}

std::string settings_text(const ds::SamplerConfig& c, bool greedy) {
  char b[200];
  char rep[48] = "";
  if (c.repetition_penalty != 1.0f) std::snprintf(rep, sizeof rep, ", repetition penalty %.2f", c.repetition_penalty);
  if (c.contrastive)
    std::snprintf(b, sizeof b, "contrastive search, alpha %.2f over the top %d%s", c.penalty_alpha,
                  std::max(1, c.top_k), rep);
  else if (greedy)
    std::snprintf(b, sizeof b, "temperature 0 (greedy: always the most probable token)%s", rep);
  else {
    char k[24];
    if (c.top_k > 0)
      std::snprintf(k, sizeof k, "%d", c.top_k);
    else
      std::snprintf(k, sizeof k, "off");
    std::snprintf(b, sizeof b, "temperature %.2f, top-k %s, top-p %s%.2f, seed %llu%s", c.temperature, k,
                  c.top_p >= 1.0f ? "off " : "", c.top_p, (unsigned long long)c.seed, rep);
  }
  return b;
}

// Settings that give the same distribution (the seed only changes the draw).
bool same_shape(const ds::SamplerConfig& a, const ds::SamplerConfig& b) {
  return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p &&
         a.repetition_penalty == b.repetition_penalty && a.contrastive == b.contrastive &&
         (!a.contrastive || a.penalty_alpha == b.penalty_alpha);
}

ImU32 seg_colour(int i) {
  static const ImU32 cols[] = {IM_COL32(70, 140, 220, 255), IM_COL32(230, 150, 50, 255),  IM_COL32(90, 180, 100, 255),
                               IM_COL32(200, 90, 160, 255), IM_COL32(150, 120, 220, 255), IM_COL32(60, 180, 180, 255)};
  return cols[i % 6];
}

// Contrastive search draws no number: how the candidate with the best score won.
std::string contrastive_sentence(const ds::SampleRecord& r) {
  const ds::Candidate* best = nullptr;
  int n = 0;
  for (auto& c : r.candidates)
    if (c.lookahead) {
      ++n;
      if (c.id == r.token) best = &c;
    }
  const float a = r.config.penalty_alpha;
  char b[900];
  if (r.token < 0) {
    std::snprintf(b, sizeof b,
                  "Contrastive search: Re-draw runs each of the top %d candidates one token ahead to measure how much "
                  "it would repeat what is already written (its degeneration penalty), then takes the best score.",
                  std::max(1, r.config.top_k));
    return b;
  }
  if (!best || n == 0) return "Contrastive search took the most probable token (no room was left to look ahead).";
  std::snprintf(
      b, sizeof b,
      "Contrastive search draws no random number. Each of the %d candidates was run one token ahead; its degeneration "
      "penalty is the largest cosine similarity between its hidden state and those of every position so far (1: it "
      "would say what was said before). score = (1 - %.2f) x confidence - %.2f x penalty. \"%s\" has the highest "
      "score, %.4f (confidence %.4f, penalty %.4f).%s",
      n, a, a, visible(best->text).c_str(), best->score, best->confidence, best->degeneration,
      a == 0.0f ? " With alpha 0 this is greedy: the most probable token." : "");
  return b;
}
void contrastive_note(const ds::SampleRecord& r) { ImGui::TextWrapped("%s", contrastive_sentence(r).c_str()); }

// The kept tokens of a sampled step, most probable first (the order the draw walks).
std::vector<const ds::Candidate*> kept_in_order(const ds::SampleRecord& r) {
  std::vector<const ds::Candidate*> kept;
  for (auto& c : r.candidates)
    if (c.removed == 0 && c.p_final > 0) kept.push_back(&c);
  std::sort(kept.begin(), kept.end(),
            [](auto* a, auto* b) { return a->p_final != b->p_final ? a->p_final > b->p_final : a->id < b->id; });
  return kept;
}

}  // namespace

// How a sampled step's u picked its token, in words: the running total of the kept
// tokens' probabilities across the drawn one, which u falls within.
std::string draw_sentence(const ds::SampleRecord& r) {
  float cum = 0;
  char b[400];
  for (const ds::Candidate* c : kept_in_order(r)) {
    if (c->id == r.token) {
      const std::string s = visible(c->text);
      std::snprintf(b, sizeof b,
                    "Adding up the kept tokens from the most probable, the total goes from %.3f to %.3f at \"%s\": "
                    "u = %.3f falls in between, so \"%s\" came out.",
                    cum, cum + c->p_final, s.c_str(), r.u, s.c_str());
      return b;
    }
    cum += c->p_final;
  }
  std::snprintf(b, sizeof b, "u = %.3f fell among the less probable kept tokens (\"others\"), on token id %d.", r.u,
                r.token);
  return b;
}

namespace {

// The draw: kept tokens laid end to end by probability, and where u fell (a preview,
// token -1, has no u). A token given to the step (beam search, forced) was not drawn:
// what chose it instead.
void draw_strip(App& app, const ds::SampleRecord& r, float width) {
  const float font = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  if (r.chosen && r.token >= 0) return;  // not drawn: the lines above the table say what chose it
  if (r.config.contrastive) {
    contrastive_note(r);
    return;
  }
  if (r.greedy) {
    ImGui::TextWrapped("Temperature 0 is greedy: no random number is drawn, the most probable token always comes out.");
    return;
  }
  const bool preview = r.token < 0;
  const std::vector<const ds::Candidate*> kept = kept_in_order(r);
  if (preview)
    ImGui::TextUnformatted("What the draw would pick from (nothing drawn yet)");
  else
    ImGui::Text("The random draw: u = %.4f", r.u);
  tooltip(app,
          "The sampler picks a number u between 0 and 1 at random, lays the kept tokens end to end (longest "
          "first, each as long as its probability) and takes the token under u.");
  ImVec2 p = ImGui::GetCursorScreenPos();
  p.y += font * 1.2f;
  const float h = font * 2.0f;
  float x = p.x, cum = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    float w = kept[i]->p_final * width;
    ImU32 col = seg_colour(int(i));
    dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x + w, p.y + h), col);
    dl->AddRect(ImVec2(x, p.y), ImVec2(x + w, p.y + h), IM_COL32(0, 0, 0, 160));
    std::string s = visible(kept[i]->text);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    if (ts.x + 4 < w)
      dl->AddText(ImVec2(x + (w - ts.x) * 0.5f, p.y + (h - ts.y) * 0.5f), IM_COL32(255, 255, 255, 255), s.c_str());
    cum += kept[i]->p_final;
    x += w;
  }
  if (cum < 0.9999f) {
    dl->AddRectFilled(ImVec2(x, p.y), ImVec2(p.x + width, p.y + h), IM_COL32(110, 110, 110, 255));
    const char* o = "others";
    ImVec2 ts = ImGui::CalcTextSize(o);
    if (ts.x + 4 < p.x + width - x)
      dl->AddText(ImVec2(x + 4, p.y + (h - ts.y) * 0.5f), IM_COL32(255, 255, 255, 255), o);
  }
  // Ticks at 0, 0.5, 1 and the marker at u.
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  for (float f : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f}) {
    float tx = p.x + f * width;
    dl->AddLine(ImVec2(tx, p.y + h), ImVec2(tx, p.y + h + font * 0.3f), tc);
    char b[32];
    std::snprintf(b, sizeof b, "%g", double(f));
    ImVec2 ts = ImGui::CalcTextSize(b);
    dl->AddText(ImVec2(std::min(tx - ts.x * 0.5f, p.x + width - ts.x), p.y + h + font * 0.3f), tc, b);
  }
  if (preview) {
    ImGui::Dummy(ImVec2(width, h + font * 2.6f));
    ImGui::TextWrapped("Press \"Re-draw with these settings\" to draw a token from this distribution.");
    return;
  }
  float ux = p.x + float(r.u) * width;
  const ImU32 red = IM_COL32(255, 60, 60, 255);
  dl->AddLine(ImVec2(ux, p.y - font * 0.3f), ImVec2(ux, p.y + h + font * 0.2f), red, 3);
  dl->AddTriangleFilled(ImVec2(ux - font * 0.4f, p.y - font * 1.0f), ImVec2(ux + font * 0.4f, p.y - font * 1.0f),
                        ImVec2(ux, p.y - font * 0.3f), red);
  char ub[32];
  std::snprintf(ub, sizeof ub, "u = %.3f", r.u);
  ImVec2 us = ImGui::CalcTextSize(ub);
  dl->AddText(ImVec2(std::clamp(ux + font * 0.5f, p.x, p.x + width - us.x), p.y - font * 1.2f), red, ub);
  ImGui::Dummy(ImVec2(width, h + font * 2.6f));
  ImGui::TextWrapped("%s", draw_sentence(r).c_str());
}

}  // namespace

void compare_draws(App& app, const ds::SampleRecord& before, const ds::SampleRecord& after, const char* before_label,
                   const char* after_label) {
  const float font = ImGui::GetFontSize();
  std::vector<int> ids;
  auto add_top = [&](const ds::SampleRecord& r) {
    std::vector<const ds::Candidate*> v;
    for (auto& c : r.candidates) v.push_back(&c);
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->p_raw > b->p_raw; });
    for (size_t i = 0; i < v.size() && i < 6; ++i)
      if (std::find(ids.begin(), ids.end(), v[i]->id) == ids.end()) ids.push_back(v[i]->id);
  };
  add_top(before);
  add_top(after);
  auto p_of = [](const ds::SampleRecord& r, int id) {
    const ds::Candidate* c = find_cand(r, id);
    return c ? c->p_raw : -1.0f;
  };
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return p_of(before, a) > p_of(before, b); });
  if (ImGui::BeginTable("compare", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("token");
    ImGui::TableSetupColumn(before_label);
    ImGui::TableSetupColumn(after_label);
    ImGui::TableSetupColumn("change");
    ImGui::TableHeadersRow();
    const float bw = font * 6;
    for (int id : ids) {
      const ds::Candidate* cb = find_cand(before, id);
      const ds::Candidate* ca = find_cand(after, id);
      std::string s = visible(cb ? cb->text : ca ? ca->text : "#" + std::to_string(id));
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%s%s", s.c_str(), id == after.token ? "  (drawn)" : "");
      float pb = p_of(before, id), pa = p_of(after, id);
      char b[32];
      ImGui::TableNextColumn();
      std::snprintf(b, sizeof b, pb < 0 ? "small" : "%.4g", double(pb));
      bar(std::max(pb, 0.0f), bw, IM_COL32(140, 140, 150, 255), b);
      ImGui::TableNextColumn();
      std::snprintf(b, sizeof b, pa < 0 ? "small" : "%.4g", double(pa));
      bar(std::max(pa, 0.0f), bw, IM_COL32(70, 140, 220, 255), b);
      ImGui::TableNextColumn();
      if (pa >= 0 && pb >= 0) {
        float d = pa - pb;
        // Four significant digits (sig4): a head's small effect is not shown as "-0.000".
        const std::string ds = sig4(double(d));
        ImGui::TextColored(d >= 0 ? ImVec4(0.4f, 0.9f, 0.4f, 1) : ImVec4(1, 0.45f, 0.4f, 1), "%s", ds.c_str());
      } else {
        ImGui::TextDisabled("-");
      }
    }
    ImGui::EndTable();
  }
  (void)app;
}

namespace {

// What the Next token view keeps between frames: the reshaped table it asked the
// worker for while a setting differs from the step's.
struct NextState {
  bool preview = true;  // show the settings on the step before drawing
  uint64_t asked = 0;   // the last request's version
  int asked_step = -1;
  uint64_t asked_trace = 0;  // App::version when asked
  ds::SamplerConfig asked_cfg;
  bool waiting = false;
  std::map<uint64_t, uint64_t> trace_of;  // request version -> App::version when asked
  std::shared_ptr<const ShapeAnswer> answer;
  uint64_t answer_trace = 0;
  // A value typed into a slider (Ctrl+click) is taken on Enter or a click elsewhere:
  // until then the settings being typed live here, and "0" on the way to "0.9" is fine.
  bool typing = false;
  ds::SamplerConfig edit;
  std::string field_error;  // why a typed value was not taken, shown under the sliders
};

// The columns of a candidate table.
struct Columns {
  bool rep = false;            // the repetition penalty was on
  bool topk = false;           // top-k was on (sampling)
  bool contrastive = false;    // confidence, penalty and score instead of temperature and filters
  float bar = 60;              // width of a bar column
  bool before_chosen = false;  // the token marked "before" was given to the step, not drawn
};

// A probability as a bar; grey for a row a filter removed, "0 (cut)" where it was cut.
void prob_cell(float p, float pmax, float w, ImU32 col, bool grey, bool cut = false) {
  char b[32];
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, cut ? "0 (cut)" : "%.4f", p);
  bar(p / pmax, w, grey ? IM_COL32(90, 90, 90, 255) : col, b);
}

// The contrastive cells of one row: confidence, degeneration penalty, score.
void contrastive_cells(const ds::Candidate& c, float pmax, float w, bool chosen) {
  if (!c.lookahead) {
    for (int i = 0; i < 3; ++i) {
      ImGui::TableNextColumn();
      ImGui::TextDisabled("-");
    }
    return;
  }
  char b[32];
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, "%.4f", c.confidence);
  bar(c.confidence / pmax, w, IM_COL32(90, 150, 220, 255), b);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("p(v): the model's probability of this candidate");
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, "%.4f", c.degeneration);
  bar(std::clamp(c.degeneration, 0.0f, 1.0f), w, IM_COL32(220, 110, 80, 255), b);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("largest cosine similarity between this candidate's hidden state and those of the text so far");
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, "%+.4f", c.score);
  if (chosen)
    ImGui::TextColored(readable(ImVec4(1, 0.7f, 0.2f, 1)), "%s", b);
  else
    ImGui::TextUnformatted(b);
}

// One row of the candidate table: rank, token, its probability at every stage (bars
// relative to pmax) and whether it was drawn or cut. before: the token the step drew,
// marked in a preview (r.token -1).
void candidate_row(const ds::SampleRecord& r, const ds::Candidate& c, int rank, float pmax, const Columns& col,
                   int before) {
  const bool is_drawn = c.id == r.token;
  ImGui::TableNextRow();
  if (is_drawn)
    ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0,
                           light_background() ? IM_COL32(250, 200, 120, 160) : IM_COL32(200, 120, 20, 110));
  const bool removed = c.removed != 0 && !col.contrastive;
  if (removed) ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TableNextColumn();
  ImGui::Text("%d", is_drawn ? r.rank + 1 : rank);
  ImGui::TableNextColumn();
  std::string vs = visible(c.text);
  ImGui::TextUnformatted(vs.c_str());
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("token id %d", c.id);
  prob_cell(c.p_raw, pmax, col.bar, IM_COL32(140, 140, 160, 255), removed);
  if (col.rep) {
    prob_cell(c.p_rep, pmax, col.bar, c.repeated ? IM_COL32(200, 90, 160, 255) : IM_COL32(140, 140, 160, 255), removed);
    if (c.repeated && ImGui::IsItemHovered())
      ImGui::SetTooltip("already in the text: the repetition penalty pushed its logit down");
  }
  if (col.contrastive) {
    contrastive_cells(c, pmax, col.bar, is_drawn);
  } else {
    prob_cell(c.p_temp, pmax, col.bar, IM_COL32(90, 150, 220, 255), removed);
    if (col.topk)
      prob_cell(c.p_topk, pmax, col.bar, IM_COL32(150, 120, 220, 255), removed, c.removed == ds::kRemovedTopK);
    char b[32];
    ImGui::TableNextColumn();
    std::snprintf(b, sizeof b, removed ? "0 (cut)" : "%.4f", c.p_final);
    bar(c.p_final / pmax, col.bar, is_drawn ? IM_COL32(240, 150, 40, 255) : IM_COL32(70, 170, 100, 255), b);
  }
  ImGui::TableNextColumn();
  if (removed) ImGui::PopStyleColor();
  if (is_drawn)
    ImGui::TextColored(readable(ImVec4(1, 0.7f, 0.2f, 1)), col.contrastive || r.chosen ? "CHOSEN" : "DRAWN");
  else if (c.id == before)
    ImGui::TextColored(readable(ImVec4(0.95f, 0.75f, 0.4f, 1)), col.before_chosen ? "chosen before" : "drawn before");
  else if (removed && c.removed == ds::kRemovedTopK)
    ImGui::TextColored(readable(ImVec4(0.9f, 0.45f, 0.4f, 1)), "cut by top-k");
  else if (removed && c.removed == ds::kRemovedTopP)
    ImGui::TextColored(readable(ImVec4(0.9f, 0.45f, 0.4f, 1)), "cut by top-p");
  else if (c.repeated)
    ImGui::TextColored(readable(ImVec4(0.85f, 0.5f, 0.75f, 1)), "repeat");
}

// What is wrong with settings the engine would refuse, in words ("" when none).
std::string refusal(const ds::SamplerConfig& c) {
  char b[200] = "";
  if (!(c.temperature >= 0))
    std::snprintf(b, sizeof b,
                  "Temperature cannot be below 0 (0 always takes the most probable token): %g was not taken.",
                  c.temperature);
  else if (c.top_k < 0)
    std::snprintf(b, sizeof b, "top-k cannot be below 0 (0 is off): %d was not taken.", c.top_k);
  else if (!(c.top_p > 0 && c.top_p <= 1))
    std::snprintf(b, sizeof b, "top-p must be more than 0 and at most 1 (1 is off): %g was not taken.", c.top_p);
  else if (!(c.repetition_penalty > 0) || !std::isfinite(c.repetition_penalty))
    std::snprintf(b, sizeof b, "The repetition penalty must be more than 0 (1 is off): %g was not taken.",
                  c.repetition_penalty);
  else if (!(c.penalty_alpha >= 0 && c.penalty_alpha <= 1))
    std::snprintf(b, sizeof b, "alpha must be between 0 and 1: %g was not taken.", c.penalty_alpha);
  return b;
}

// The sliders for the steps to come. Returns whether app.sampler changed; a typed
// value is taken when the typing ends, and one the engine would refuse is not taken
// (the reason shows under the sliders).
bool sampler_controls(App& app, float lw) {
  NextState& st = app.state<NextState>();
  ds::SamplerConfig c = st.typing ? st.edit : app.whatif.sampler;
  bool changed = false, typing = false, committed = false;
  const auto track = [&] {
    typing |= ImGui::TempInputIsActive(ImGui::GetItemID());
    committed |= ImGui::IsItemDeactivatedAfterEdit();
  };
  ImGui::PushItemWidth(lw * 0.55f);
  ImGui::BeginDisabled(c.contrastive);
  changed |= ImGui::SliderFloat("temperature", &c.temperature, 0.0f, 2.0f, "%.2f");
  track();
  tooltip(app,
          "Drag it: the table on the right shows this step's distribution reshaped live, nothing drawn. Below 1 "
          "the likely tokens get likelier (more predictable text); above 1 the distribution flattens (more "
          "surprising text); 0 always takes the most probable token.");
  ImGui::EndDisabled();
  changed |= ImGui::SliderInt("top-k", &c.top_k, 0, 50, c.top_k == 0 ? "off" : "%d");
  track();
  tooltip(app, "Keep only the k most probable tokens (0: off). Contrastive search compares this many candidates.");
  ImGui::BeginDisabled(c.contrastive);
  changed |= ImGui::SliderFloat("top-p", &c.top_p, 0.05f, 1.0f, "%.2f");
  track();
  tooltip(app, "Keep the most probable tokens until their probabilities add up to p (1: off).");
  ImGui::EndDisabled();
  changed |= ImGui::SliderFloat("repetition", &c.repetition_penalty, 0.5f, 2.0f,
                                c.repetition_penalty == 1.0f ? "off (1.00)" : "%.2f");
  track();
  tooltip(app,
          "Repetition penalty: the logit of every token already in the text is divided by this when positive and "
          "multiplied by it when negative, before temperature. Above 1: fewer repeats. 1: off. Ctrl+click to type.");
  int seed = int(c.seed);
  if (ImGui::InputInt("seed", &seed)) {
    c.seed = uint64_t(std::max(0, seed));
    changed = true;
  }
  tooltip(app, "The random number generator's starting point: the same seed gives the same draws.");
  changed |= ImGui::Checkbox("contrastive search", &c.contrastive);
  tooltip(app,
          "Instead of a random draw: of the top-k candidates, take the one with the best (1 - alpha) x probability "
          "- alpha x degeneration penalty, the penalty being how similar its hidden state is to those of the text "
          "so far. Needs top-k of 2 or more.");
  ImGui::BeginDisabled(!c.contrastive);
  changed |= ImGui::SliderFloat("alpha", &c.penalty_alpha, 0.0f, 1.0f, "%.2f");
  track();
  tooltip(app, "Contrastive search's weight of the degeneration penalty (0: greedy).");
  ImGui::EndDisabled();
  ImGui::PopItemWidth();
  if (!st.field_error.empty()) {
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + lw);
    ImGui::TextColored(readable(ImVec4(1.0f, 0.4f, 0.35f, 1)), "%s", st.field_error.c_str());
    ImGui::PopTextWrapPos();
  }
  st.typing = typing;
  if (typing) {  // not taken until the typing ends
    st.edit = c;
    return false;
  }
  if (!changed && !committed) return false;
  st.field_error = refusal(c);
  if (!st.field_error.empty()) return false;  // the settings before stay
  app.whatif.sampler = c;
  return true;
}

// Left: the settings for the steps to come, previewing them on this step, and
// re-drawing it with them. Returns the step the view explains (the one sampled at the
// selected position, else the cursor's).
// The step the view shows: the one that drew the selected position's token, else the
// cursor's.
int shown_step(const App& app) {
  const int s = step_sampling_at(app.history.trace, app.selected_position());
  return s < 0 ? app.sel.cursor : s;
}

void sampling_settings(App& app) {
  const float font = ImGui::GetFontSize();
  NextState& st = app.state<NextState>();
  ImGui::BeginGroup();
  const float lw = font * 16;
  ImGui::TextUnformatted("Settings for the next steps");
  if (sampler_controls(app, lw)) app.send_sampler();
  const int s = shown_step(app);
  ImGui::Checkbox("Preview on this step", &st.preview);
  tooltip(app,
          "While the settings differ from those this step was drawn with, the table shows the step's distribution "
          "reshaped by them (computed over the whole vocabulary), without drawing a token.");
  ImGui::TextDisabled("they apply from the next step");
  ImGui::BeginDisabled(app.history.replay || !app.engine.model || s < 0 || app.engine.worker.busy());
  if (ImGui::Button("Re-draw with these settings", ImVec2(lw, 0))) app.redraw_step(s);
  char tip[200];
  std::snprintf(tip, sizeof tip,
                "Draw step %d's token again with the settings above (the steps after it are dropped). With the same "
                "seed the same random number comes out, so only changed settings change the draw.",
                s + 1);
  tooltip(app, tip);
  if (ImGui::Button("New seed, draw again", ImVec2(lw, 0))) app.redraw_new_seed(s);
  tooltip(app, "Take the next seed and draw this step again: a new random number u.");
  ImGui::EndDisabled();
  ImGui::EndGroup();
}

// The reshaped table of step s under the window's settings, when they differ from the
// step's and a preview is on: asks the worker when the question changed and returns
// its latest answer for this step and trace (null until one arrives).
const ShapeAnswer* preview_of(App& app, int s, const ds::SampleRecord& drawn) {
  NextState& st = app.state<NextState>();
  if (!st.preview || app.history.replay || !app.engine.model || same_shape(app.whatif.sampler, drawn.config))
    return nullptr;
  if (st.asked_step != s || st.asked_trace != app.history.version || !same_shape(st.asked_cfg, app.whatif.sampler)) {
    cmd::Shape c;
    c.step = s;
    c.config = app.whatif.sampler;
    c.version = ++st.asked;
    st.asked_step = s;
    st.asked_trace = app.history.version;
    st.asked_cfg = app.whatif.sampler;
    st.waiting = true;
    st.trace_of[c.version] = app.history.version;
    app.engine.ask_latest(std::move(c));
  }
  if (st.answer && st.answer->step == s && st.answer_trace == app.history.version) return st.answer.get();
  return nullptr;
}

// The candidate table; returns the largest probability it shows. before: the token
// the step drew, marked in a preview.
float candidate_table(const ds::SampleRecord& r, float rw, int before, bool before_chosen) {
  const float font = ImGui::GetFontSize();
  const float row_h = ImGui::GetFrameHeight();
  // Room below for the draw's strip (a given token has none: the lines above explain it).
  const float below = before_chosen || (r.chosen && r.token >= 0) ? font * 3.0f : font * 10.0f;
  const float table_h = std::min(ImGui::GetContentRegionAvail().y - below, row_h * (r.candidates.size() + 1.5f));
  // Bars are drawn relative to the largest probability in the table, so small ones show.
  float pmax = 1e-6f;
  for (auto& c : r.candidates) pmax = std::max({pmax, c.p_raw, c.p_rep, c.p_temp, c.p_topk, c.p_final});
  Columns col;
  col.before_chosen = before_chosen;
  col.contrastive = r.config.contrastive;
  col.rep = r.config.repetition_penalty != 1.0f;
  col.topk = !col.contrastive && r.config.top_k > 0 && !r.greedy;
  const int n_bars = 2 + col.rep + (col.contrastive ? 2 : 1 + col.topk);
  // rank, token and the status column take about 16 characters; the bars share the rest.
  const float pad = ImGui::GetStyle().CellPadding.x * 2 * float(n_bars + 3);
  col.bar = std::max(ImGui::CalcTextSize("temperature").x + font * 0.3f, (rw - font * 16 - pad) / float(n_bars));
  const int n_cols = 3 + n_bars;  // rank, token, status (contrastive: the score counts as a bar)
  if (ImGui::BeginTable(
          "cands", n_cols,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_ScrollX | ImGuiTableFlags_SizingFixedFit,
          ImVec2(rw, std::max(table_h, row_h * 4)))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("rank");
    ImGui::TableSetupColumn("token");
    const auto bar_col = [&](const char* name) {
      ImGui::TableSetupColumn(name, ImGuiTableColumnFlags_WidthFixed, col.bar);
    };
    bar_col("model");
    if (col.rep) bar_col("repetition");
    if (col.contrastive) {
      bar_col("confidence");
      bar_col("penalty");
      ImGui::TableSetupColumn("score");
    } else {
      bar_col("temperature");
      if (col.topk) bar_col("after top-k");
      bar_col(col.topk ? "after top-p" : "after top-k, top-p");
    }
    ImGui::TableSetupColumn("");
    ImGui::TableHeadersRow();
    std::vector<const ds::Candidate*> rows;
    for (auto& c : r.candidates) rows.push_back(&c);
    std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->p_temp > b->p_temp; });
    for (size_t i = 0; i < rows.size(); ++i) candidate_row(r, *rows[i], int(i) + 1, pmax, col, before);
    ImGui::EndTable();
  }
  return pmax;
}

}  // namespace

bool next_waiting(App& app) { return app.state<NextState>().waiting; }

bool next_shape_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Shape>(&e);
  if (!a) return false;
  NextState& st = app.state<NextState>();
  std::shared_ptr<const ShapeAnswer> ans = std::move(a->answer);
  if (!ans) return true;
  if (ans->version == st.asked) st.waiting = false;
  auto it = st.trace_of.find(ans->version);
  if (it == st.trace_of.end()) return true;
  if (!st.answer || ans->version > st.answer->version) {
    st.answer = std::move(ans);
    st.answer_trace = it->second;
  }
  st.trace_of.erase(st.trace_of.begin(), std::next(it));  // older requests' answers will not be shown
  return true;
}

// A command failed: the reshaped table it may have been is not coming.
void next_failed(App& app) { app.state<NextState>().waiting = false; }

// The line above the table: what the step drew, or what the preview shows.
// Text wrapped at the right edge, in a colour (disabled text's when col.w is 0).
void wrapped(ImVec4 col, const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, col.w > 0 ? col : ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
}

std::string kept_text(int n) { return "; " + std::to_string(n) + (n == 1 ? " token kept" : " tokens kept"); }

// The first line: the step, where, and the token that came out and what chose it.
std::string step_title(int s, const std::string& after, int last, const ds::SampleRecord& r) {
  const ds::Candidate* c = find_cand(r, r.token);
  const std::string dt = visible(c ? c->text : "#" + std::to_string(r.token));
  const std::string who = r.chosen ? (r.chosen->by == "forced" ? "the step was given" : r.chosen->by + " chose")
                          : r.config.contrastive ? "contrastive search chose"
                          : r.greedy             ? "the model took its most probable token,"
                                                 : "the model drew";
  char b[320];
  std::snprintf(b, sizeof b, "Step %d: after \"%s\" (position %d) %s \"%s\"", s + 1, after.c_str(), last, who.c_str(),
                dt.c_str());
  return b;
}

// How the step's own record says its token was chosen (never the settings on the left,
// which may be a preview): "drawn by sampling (...)", "chosen by beam search (...)".
std::string how_chosen(const ds::SampleRecord& r) {
  const bool drawn = !r.chosen && !r.config.contrastive && !r.greedy;
  return (drawn ? "drawn by " : "chosen by ") + step_method(r);
}

// The lines above the table: what the step drew, and what the preview shows.
void step_heading(App& app, int s, const ds::SampleRecord& r, const ShapeAnswer* pv, bool asked) {
  const ds::Trace& t = app.history.trace;
  const auto& toks = app.tokens();
  int last = t.positions(s) - 1;
  std::string after = last >= 0 && last < int(toks.size()) ? visible(toks[last].text) : "?";
  ImGui::TextWrapped("%s", step_title(s, after, last, r).c_str());
  if (r.chosen) {  // what chose it, with its scores, whatever the table previews
    const ds::Candidate* c = find_cand(r, r.token);
    wrapped(readable(ImVec4(1, 0.75f, 0.3f, 1)), choice_text(r, visible(c ? c->text : "#" + std::to_string(r.token))));
  }
  const std::string used = how_chosen(r);
  if (pv && pv->error.empty()) {
    wrapped(ImVec4(0.45f, 0.8f, 1.0f, 1), "PREVIEW: " + settings_text(pv->config, pv->config.temperature == 0) +
                                              kept_text(pv->rec.n_kept) + ". Nothing drawn yet.");
    tooltip(app,
            "The step's logits (the whole vocabulary) reshaped by the settings on the left. The token drawn before "
            "is marked; Re-draw draws with these settings.");
    wrapped(ImVec4(), used);
    return;
  }
  if (pv) wrapped(ImVec4(1, 0.6f, 0.4f, 1), "No preview: " + pv->error);
  if (!pv && asked) wrapped(ImVec4(), "preview: computing...");
  wrapped(
      ImVec4(),
      used + (r.chosen ? "" : kept_text(r.n_kept) + (r.config.contrastive ? " as candidates" : " after the filters")));
}

// The Next token view's explanation of the step it shows, as the view writes it: the
// title, how the token was chosen, and why it came out (for the screenshot's sidecar).
std::string next_explanation(App& app) {
  const ds::Trace& t = app.history.trace;
  int s = step_sampling_at(t, app.selected_position());
  if (s < 0) s = app.sel.cursor;
  if (s < 0 || s >= int(t.steps.size()) || !t.steps[size_t(s)].sample) return "";
  const ds::SampleRecord& r = *t.steps[size_t(s)].sample;
  const auto& toks = app.tokens();
  const int last = t.positions(s) - 1;
  const std::string after = last >= 0 && last < int(toks.size()) ? visible(toks[size_t(last)].text) : "?";
  std::string why;
  if (r.chosen) {
    const ds::Candidate* c = find_cand(r, r.token);
    why = choice_text(r, visible(c ? c->text : "#" + std::to_string(r.token)));
  } else if (r.config.contrastive) {
    why = contrastive_sentence(r);
  } else if (!r.greedy) {
    why = draw_sentence(r);
  }
  return step_title(s, after, last, r) + "\n" + how_chosen(r) + "\n" + why;
}

void panel_next(App& app) {
  view_caption(app, "next");
  const ds::Trace& t = app.history.trace;
  const float font = ImGui::GetFontSize();

  // Beside the settings when the table fits there (about 52 characters), else above
  // them (the table is what the class looks at; the settings scroll into view).
  const bool beside = ImGui::GetContentRegionAvail().x > font * 52;
  if (beside) sampling_settings(app);
  const int s = shown_step(app);
  if (s < 0 || s >= int(t.steps.size()) || !t.steps[s].sample) {
    if (beside) ImGui::SameLine(0, font * 2);
    ImGui::TextDisabled("No token drawn yet: press Step (Right arrow).");
    if (!beside) sampling_settings(app);
    return;
  }
  const ds::SampleRecord& drawn = *t.steps[s].sample;
  const ShapeAnswer* pv = preview_of(app, s, drawn);
  const bool asked = app.state<NextState>().preview && !app.history.replay && app.engine.model &&
                     !same_shape(app.whatif.sampler, drawn.config);
  const bool showing = pv && pv->error.empty();
  const ds::SampleRecord& r = showing ? pv->rec : drawn;
  if (beside) ImGui::SameLine(0, font * 1.5f);
  ImGui::BeginGroup();
  const float rw = ImGui::GetContentRegionAvail().x;
  step_heading(app, s, drawn, pv, asked);
  const float pmax = candidate_table(r, rw, showing ? drawn.token : -1, drawn.chosen.has_value());
  ImGui::TextDisabled("bars: the longest is %.3f; grey rows were cut by a filter", pmax);
  draw_strip(app, r, rw - font);
  if (app.whatif.before && app.whatif.before_step == s) {
    ImGui::Separator();
    const ds::SampleRecord& b = *app.whatif.before;
    const ds::Candidate* bd = find_cand(b, b.token);
    char u[48] = "";
    if (!b.chosen && !b.greedy && !b.config.contrastive) std::snprintf(u, sizeof u, " with u = %.4f", b.u);
    ImGui::TextWrapped("Before: \"%s\" came out%s, %s", visible(bd ? bd->text : "?").c_str(), u, how_chosen(b).c_str());
  }
  ImGui::EndGroup();
  if (!beside) {
    ImGui::Separator();
    sampling_settings(app);
  }
}

}  // namespace dsgui
