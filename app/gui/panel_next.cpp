// The next token: candidates before and after temperature, top-k and top-p, the
// filters' casualties, the drawn token, and the random number that picked it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "app.h"

namespace dsgui {

namespace {

const ds::Candidate* find_cand(const ds::SampleRecord& r, int id) {
  for (auto& c : r.candidates)
    if (c.id == id) return &c;
  return nullptr;
}

std::string settings_text(const ds::SamplerConfig& c, bool greedy) {
  char b[160];
  if (greedy)
    std::snprintf(b, sizeof b, "temperature 0 (greedy: always the most probable token)");
  else {
    char k[24];
    if (c.top_k > 0)
      std::snprintf(k, sizeof k, "%d", c.top_k);
    else
      std::snprintf(k, sizeof k, "off");
    std::snprintf(b, sizeof b, "temperature %.2f, top-k %s, top-p %s%.2f, seed %llu", c.temperature, k,
                  c.top_p >= 1.0f ? "off " : "", c.top_p, (unsigned long long)c.seed);
  }
  return b;
}

ImU32 seg_colour(int i) {
  static const ImU32 cols[] = {IM_COL32(70, 140, 220, 255), IM_COL32(230, 150, 50, 255),  IM_COL32(90, 180, 100, 255),
                               IM_COL32(200, 90, 160, 255), IM_COL32(150, 120, 220, 255), IM_COL32(60, 180, 180, 255)};
  return cols[i % 6];
}

// The draw: kept tokens laid end to end by probability, and where u fell.
void draw_strip(App& app, const ds::SampleRecord& r, float width) {
  const float font = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  if (r.greedy) {
    ImGui::TextWrapped("Temperature 0 is greedy: no random number is drawn, the most probable token always comes out.");
    return;
  }
  std::vector<const ds::Candidate*> kept;
  for (auto& c : r.candidates)
    if (c.removed == 0 && c.p_final > 0) kept.push_back(&c);
  std::sort(kept.begin(), kept.end(),
            [](auto* a, auto* b) { return a->p_final != b->p_final ? a->p_final > b->p_final : a->id < b->id; });
  ImGui::Text("The random draw: u = %.4f", r.u);
  tooltip(app,
          "The sampler picks a number u between 0 and 1 at random, lays the kept tokens end to end (longest "
          "first, each as long as its probability) and takes the token under u.");
  ImVec2 p = ImGui::GetCursorScreenPos();
  p.y += font * 1.2f;
  const float h = font * 2.0f;
  float x = p.x, cum = 0;
  const ds::Candidate* hit = nullptr;
  float hit_lo = 0, hit_hi = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    float w = kept[i]->p_final * width;
    ImU32 col = seg_colour(int(i));
    bool drawn = kept[i]->id == r.token;
    dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x + w, p.y + h), col);
    dl->AddRect(ImVec2(x, p.y), ImVec2(x + w, p.y + h), IM_COL32(0, 0, 0, 160));
    std::string s = visible(kept[i]->text);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    if (ts.x + 4 < w)
      dl->AddText(ImVec2(x + (w - ts.x) * 0.5f, p.y + (h - ts.y) * 0.5f), IM_COL32(255, 255, 255, 255), s.c_str());
    if (drawn) hit = kept[i], hit_lo = cum, hit_hi = cum + kept[i]->p_final;
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
  if (hit) {
    std::string s = visible(hit->text);
    ImGui::TextWrapped(
        "Adding up the kept tokens from the most probable, the total goes from %.3f to %.3f at \"%s\": u = %.3f "
        "falls in between, so \"%s\" came out.",
        hit_lo, hit_hi, s.c_str(), r.u, s.c_str());
  } else {
    ImGui::TextWrapped("u = %.3f fell among the less probable kept tokens (\"others\"), on token id %d.", r.u, r.token);
  }
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
      std::snprintf(b, sizeof b, pb < 0 ? "small" : "%.3f", pb);
      bar(std::max(pb, 0.0f), bw, IM_COL32(140, 140, 150, 255), b);
      ImGui::TableNextColumn();
      std::snprintf(b, sizeof b, pa < 0 ? "small" : "%.3f", pa);
      bar(std::max(pa, 0.0f), bw, IM_COL32(70, 140, 220, 255), b);
      ImGui::TableNextColumn();
      if (pa >= 0 && pb >= 0) {
        float d = pa - pb;
        ImGui::TextColored(d >= 0 ? ImVec4(0.4f, 0.9f, 0.4f, 1) : ImVec4(1, 0.45f, 0.4f, 1), "%+.3f", d);
      } else {
        ImGui::TextDisabled("-");
      }
    }
    ImGui::EndTable();
  }
  (void)app;
}

namespace {

// One row of the candidate table: rank, token, its probability at every stage (bars
// relative to pmax, bwk wide) and whether it was drawn or cut.
void candidate_row(const ds::SampleRecord& r, const ds::Candidate& c, int rank, float pmax, float bwk, bool show_topk) {
  const bool is_drawn = c.id == r.token;
  ImGui::TableNextRow();
  if (is_drawn) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, IM_COL32(200, 120, 20, 110));
  const bool removed = c.removed != 0;
  if (removed) ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TableNextColumn();
  ImGui::Text("%d", is_drawn ? r.rank + 1 : rank);
  ImGui::TableNextColumn();
  std::string vs = visible(c.text);
  ImGui::TextUnformatted(vs.c_str());
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("token id %d", c.id);
  char b[32];
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, "%.4f", c.p_raw);
  bar(c.p_raw / pmax, bwk, removed ? IM_COL32(90, 90, 90, 255) : IM_COL32(140, 140, 160, 255), b);
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, "%.4f", c.p_temp);
  bar(c.p_temp / pmax, bwk, removed ? IM_COL32(90, 90, 90, 255) : IM_COL32(90, 150, 220, 255), b);
  if (show_topk) {
    ImGui::TableNextColumn();
    std::snprintf(b, sizeof b, c.removed == ds::kRemovedTopK ? "0 (cut)" : "%.4f", c.p_topk);
    bar(c.p_topk / pmax, bwk, removed ? IM_COL32(90, 90, 90, 255) : IM_COL32(150, 120, 220, 255), b);
  }
  ImGui::TableNextColumn();
  std::snprintf(b, sizeof b, removed ? "0 (cut)" : "%.4f", c.p_final);
  bar(c.p_final / pmax, bwk, is_drawn ? IM_COL32(240, 150, 40, 255) : IM_COL32(70, 170, 100, 255), b);
  ImGui::TableNextColumn();
  if (removed) ImGui::PopStyleColor();
  if (is_drawn)
    ImGui::TextColored(ImVec4(1, 0.7f, 0.2f, 1), "DRAWN");
  else if (c.removed == ds::kRemovedTopK)
    ImGui::TextColored(ImVec4(0.9f, 0.45f, 0.4f, 1), "cut by top-k");
  else if (c.removed == ds::kRemovedTopP)
    ImGui::TextColored(ImVec4(0.9f, 0.45f, 0.4f, 1), "cut by top-p");
}

// Left: the settings for the steps to come, and re-drawing a step with them. Returns
// the step the view explains (the one sampled at the selected position, else the
// cursor's).
int sampling_settings(App& app) {
  const ds::Trace& t = app.trace;
  const float font = ImGui::GetFontSize();
  ImGui::BeginGroup();
  const float lw = font * 15;
  ImGui::PushItemWidth(lw * 0.55f);
  ImGui::TextUnformatted("Settings for the next steps");
  bool changed = false;
  changed |= ImGui::SliderFloat("temperature", &app.sampler.temperature, 0.0f, 2.0f, "%.2f");
  tooltip(app,
          "Below 1 the likely tokens get likelier (more predictable text); above 1 the distribution flattens "
          "(more surprising text); 0 always takes the most probable token.");
  changed |= ImGui::SliderInt("top-k", &app.sampler.top_k, 0, 50, app.sampler.top_k == 0 ? "off" : "%d");
  tooltip(app, "Keep only the k most probable tokens (0: off).");
  changed |= ImGui::SliderFloat("top-p", &app.sampler.top_p, 0.05f, 1.0f, "%.2f");
  tooltip(app, "Keep the most probable tokens until their probabilities add up to p (1: off).");
  int seed = int(app.sampler.seed);
  if (ImGui::InputInt("seed", &seed)) {
    app.sampler.seed = uint64_t(std::max(0, seed));
    changed = true;
  }
  tooltip(app, "The random number generator's starting point: the same seed gives the same draws.");
  ImGui::PopItemWidth();
  if (changed) app.send_sampler();
  ImGui::TextDisabled("they apply from the next step");
  const int pos = app.selected_position();
  int s = step_sampling_at(t, pos);
  if (s < 0) s = app.cursor;
  ImGui::BeginDisabled(app.replay || !app.model || s < 0 || app.worker.busy());
  char rd[64];
  std::snprintf(rd, sizeof rd, "Re-draw step %d", s + 1);
  if (ImGui::Button(rd, ImVec2(lw, 0))) app.redraw_step(s);
  tooltip(app,
          "Draw this step's token again with the settings above (the steps after it are dropped). With the same "
          "seed the same random number comes out, so only changed settings change the draw.");
  if (ImGui::Button("New seed, draw again", ImVec2(lw, 0))) {
    app.sampler.seed += 1;
    app.redraw_step(s);
  }
  tooltip(app, "Take the next seed and draw this step again: a new random number u.");
  ImGui::EndDisabled();
  ImGui::EndGroup();

  return s;
}

// The candidate table of step s's draw; returns the largest probability it shows.
float candidate_table(const ds::SampleRecord& r, float rw) {
  const float font = ImGui::GetFontSize();
  const float row_h = ImGui::GetFrameHeight();
  const float table_h = std::min(ImGui::GetContentRegionAvail().y - font * 10.0f, row_h * (r.candidates.size() + 1.5f));
  // Bars are drawn relative to the largest probability in the table, so small ones show.
  float pmax = 1e-6f;
  for (auto& c : r.candidates) pmax = std::max({pmax, c.p_raw, c.p_temp, c.p_topk, c.p_final});
  const float bw = std::max(font * 5, (rw - font * 22) / 3);
  // The top-k stage gets its own column when top-k was on.
  const bool show_topk = r.config.top_k > 0 && !r.greedy;
  const float bwk = show_topk ? std::max(font * 4.5f, (rw - font * 22) / 4) : bw;
  if (ImGui::BeginTable("cands", show_topk ? 7 : 6,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit,
                        ImVec2(rw, std::max(table_h, row_h * 4)))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("rank");
    ImGui::TableSetupColumn("token");
    ImGui::TableSetupColumn("model", ImGuiTableColumnFlags_WidthFixed, bwk);
    ImGui::TableSetupColumn("temperature", ImGuiTableColumnFlags_WidthFixed, bwk);
    if (show_topk) ImGui::TableSetupColumn("after top-k", ImGuiTableColumnFlags_WidthFixed, bwk);
    ImGui::TableSetupColumn(show_topk ? "after top-p" : "after top-k, top-p", ImGuiTableColumnFlags_WidthFixed, bwk);
    ImGui::TableSetupColumn("");
    ImGui::TableHeadersRow();
    std::vector<const ds::Candidate*> rows;
    for (auto& c : r.candidates) rows.push_back(&c);
    std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->p_temp > b->p_temp; });
    for (size_t i = 0; i < rows.size(); ++i) candidate_row(r, *rows[i], int(i) + 1, pmax, bwk, show_topk);
    ImGui::EndTable();
  }
  return pmax;
}

}  // namespace

void panel_next(App& app) {
  view_caption(app, "next");
  const ds::Trace& t = app.trace;
  const float font = ImGui::GetFontSize();

  const int s = sampling_settings(app);
  if (s < 0 || s >= int(t.steps.size()) || !t.steps[s].sample) {
    ImGui::SameLine(0, font * 2);
    ImGui::TextDisabled("No token drawn yet: press Step (Right arrow).");
    return;
  }
  const ds::SampleRecord& r = *t.steps[s].sample;
  ImGui::SameLine(0, font * 1.5f);
  ImGui::BeginGroup();
  const float rw = ImGui::GetContentRegionAvail().x;
  auto toks = app.tokens();
  int last = t.positions(s) - 1;
  std::string after = last >= 0 && last < int(toks.size()) ? visible(toks[last].text) : "?";
  const ds::Candidate* drawn = find_cand(r, r.token);
  std::string dt = visible(drawn ? drawn->text : "#" + std::to_string(r.token));
  ImGui::Text("Step %d: after \"%s\" (position %d) the model drew \"%s\"", s + 1, after.c_str(), last, dt.c_str());
  ImGui::TextDisabled("%s; %d token%s kept after the filters", settings_text(r.config, r.greedy).c_str(), r.n_kept,
                      r.n_kept == 1 ? "" : "s");

  const float pmax = candidate_table(r, rw);
  ImGui::TextDisabled("bars: the longest is %.3f; grey rows were cut by a filter", pmax);
  draw_strip(app, r, rw - font);
  if (app.before && app.before_step == s) {
    ImGui::Separator();
    const ds::Candidate* bd = find_cand(*app.before, app.before->token);
    ImGui::Text("Before: \"%s\" was drawn with u = %.4f (%s)", visible(bd ? bd->text : "?").c_str(), app.before->u,
                settings_text(app.before->config, app.before->greedy).c_str());
  }
  ImGui::EndGroup();
}

}  // namespace dsgui
