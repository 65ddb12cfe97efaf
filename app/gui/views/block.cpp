// The Block view: the selected layer's block drawn from the model's Config (pre- or
// post-norm, the cross-attention sub-layer, the feed-forward kind), every stage a box
// that opens on the selected token's real numbers, its equation, one sentence, and the
// lines of core/model/reference.cpp that compute it. The numbers come from the worker
// (cmd::Inspect, block_data.h), which runs the prefix again with the block's inner
// hook points subscribed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include <imgui_internal.h>

#include <sstream>

#include "engine_link/block_data.h"
#include "views/common.h"

namespace dsgui {

void layer_head_controls(App& app, int& layer, int& head, const char* id);

// The last snapshot the worker sent, and what was asked for (shared by the Block and
// KV cache views).
struct SnapshotState {
  std::shared_ptr<const BlockSnapshot> snap;
  uint64_t key = 0;  // of the last request
  bool pending = false;
};

// What the last frame of the Block view drew, for the scripted test's sidecar
// (block_sidecar): the key table's rows on screen, the equation's width against the
// room it had, the colour scales of the strips, the keys' states.
struct BlockShown {
  std::string stage;
  float eq_w = 0, eq_avail = 0;         // the equation's width; the width it could use
  float detail_x1 = 0, content_x1 = 0;  // the detail's right edge; the right-most item in it
  float window_w = 0, window_h = 0;
  int key_rows = 0, key_visible = 0;                  // the key table's rows; fully on screen
  float key_row_h = 0, key_top = 0;                   // a row's height; the table's top on screen
  float detail_y1 = 0;                                // the detail's bottom on screen
  int computed_end = -1;                              // keys [0, computed_end) were multiplied with the query
  std::vector<int> key_state;                         // per key: 0 read, 1 masked, 2 not computed yet
  std::vector<std::pair<std::string, float>> strips;  // each strip's label and colour scale
  std::vector<std::pair<std::string, float>> tables;  // each number table's name and colour scale
  std::vector<float> norm_in, norm_std;               // a norm stage's x and (x - mean) / std rows
};

struct BlockState {
  std::string stage = "attn.scores";  // the stage opened
  int hover_key = -1;                 // the key under the mouse in the scores table
  bool code = true;                   // show the reference code
  std::string scrolled;               // the stage the diagram last scrolled to
  bool narrow = false;                // the detail is short: numbers before strips and sentences
  int key_end = 1 << 30;              // the selected query met keys [0, key_end) (computed_keys)
  TablePick pick;                     // the number tables' positions and features
  bool pick_custom = false;           // the user changed them (else they follow the selection)
  BlockShown shown;
};

bool block_answer(App& app, Event& e) {
  auto* a = std::get_if<ev::Inspect>(&e);
  if (!a) return false;
  SnapshotState& st = app.state<SnapshotState>();
  if (!a->answer || a->answer->key != st.key) return true;
  st.snap = std::move(a->answer);
  st.pending = false;
  return true;
}

bool block_waiting(App& app) { return app.state<SnapshotState>().pending; }

void block_failed(App& app) { app.state<SnapshotState>().pending = false; }

bool block_ok(App& app) {
  const SnapshotState& st = app.state<SnapshotState>();
  return st.snap && st.snap->error.empty() && !st.snap->row.empty();
}

void block_open_stage(App& app, const std::string& id) { app.state<BlockState>().stage = id; }

const BlockSnapshot* block_snapshot(App& app, int layer, int head) {
  SnapshotState& st = app.state<SnapshotState>();
  const ds::Trace& t = app.history.trace;
  if (app.sel.cursor < 0 || app.sel.cursor >= int(t.steps.size())) return nullptr;
  const int n = t.positions(app.sel.cursor);
  const int pos = app.selected_position();
  uint64_t key = app.history.epoch * 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {uint64_t(n), uint64_t(layer), uint64_t(pos + 1), uint64_t(head + 1), app.history.version})
    key = (key ^ v) * 0x100000001B3ull;
  if (!app.engine.model) return st.snap.get();
  if (st.key != key) {
    st.key = key;
    cmd::Inspect c;
    std::vector<int> all = t.tokens();
    c.tokens.assign(all.begin(), all.begin() + std::min<int64_t>(n, int64_t(all.size())));
    c.src = t.source;
    c.layer = layer;
    c.head = std::max(0, head);
    c.pos = pos;
    c.key = key;
    c.threads = app.engine.threads;
    app.engine.ask_latest(std::move(c));
    st.pending = true;
  }
  return st.snap.get();
}

namespace {

// The colour of what is selected or stressed: gold on dark, a deep amber on light.
ImVec4 accent(const App& app) { return app.look.light ? ImVec4(0.62f, 0.33f, 0.0f, 1) : ImVec4(1.0f, 0.78f, 0.25f, 1); }

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m > 0 ? m : 1;
}

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// A vector as a row of coloured cells, wrapped to the width; hover shows the value.
void strip(App& app, const char* label, const std::vector<float>& v, float scale = 0) {
  const float font = ImGui::GetFontSize();
  if (v.empty()) {
    ImGui::TextDisabled("%s: not published by this model", label);
    return;
  }
  if (scale <= 0) scale = max_abs(v);
  app.state<BlockState>().shown.strips.push_back({label, scale});
  ImGui::TextWrapped("%s", label);
  char stats[96];
  std::snprintf(stats, sizeof stats, "[%zu]  |x| = %.3f   min %.3f   max %.3f", v.size(), norm2(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  flow(ImGui::CalcTextSize(stats).x);
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("%s", stats);
  ImGui::PopTextWrapPos();
  const float avail = ImGui::GetContentRegionAvail().x;
  const float cell = std::clamp(avail / float(std::min<size_t>(v.size(), 64)), 3.0f, font * 1.2f);
  const int per_row = std::max(1, int(avail / cell));
  const int rows = int((v.size() + size_t(per_row) - 1) / size_t(per_row));
  const float h = std::max(font * 0.9f, cell * 0.8f);
  ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = p.x + float(int(i) % per_row) * cell, y = p.y + float(int(i) / per_row) * (h + 2);
    dl->AddRectFilled(ImVec2(x, y), ImVec2(x + cell - (cell > 5 ? 1 : 0), y + h),
                      diverging(v[i] / scale, app.look.light));
  }
  ImGui::PushID(label);
  ImGui::InvisibleButton("##strip", ImVec2(std::max(1.0f, float(per_row) * cell), float(rows) * (h + 2)));
  ImGui::PopID();
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int i = int((m.x - p.x) / cell) + int((m.y - p.y) / (h + 2)) * per_row;
    if (i >= 0 && i < int(v.size())) ImGui::SetTooltip("%s[%d] = %.5g", label, i, v[size_t(i)]);
  }
}

// The colour scale the rows of a stage share: a bar from -scale (blue) to +scale (red).
void scale_note(App& app, float scale) {
  const float font = ImGui::GetFontSize();
  ImGui::TextDisabled("Colours:");
  ImGui::SameLine();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = font * 6, h = font * 0.8f;
  for (int i = 0; i < 24; ++i)
    dl->AddRectFilled(ImVec2(p.x + w * float(i) / 24, p.y + font * 0.1f),
                      ImVec2(p.x + w * float(i + 1) / 24, p.y + font * 0.1f + h),
                      diverging(float(i) / 11.5f - 1.0f, app.look.light));
  ImGui::Dummy(ImVec2(w, font));
  char b[128];
  std::snprintf(b, sizeof b, "\u2212%.3g to +%.3g, one scale for every row of this stage", double(scale),
                double(scale));
  flow(ImGui::CalcTextSize(b).x);
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("%s", b);
  ImGui::PopTextWrapPos();
}

// Rows of strips on one colour scale (stated above them); at least `least` (the largest
// |value| of a matrix drawn on the same scale below them).
void strips(App& app, const std::vector<StripRow>& rows, float least = 0) {
  const float sc = std::max(least, shared_scale(rows));
  scale_note(app, sc);
  for (const StripRow& r : rows) strip(app, r.label.c_str(), r.v, sc);
}

const std::vector<float>& orEmpty(const std::vector<float>* v) {
  static const std::vector<float> none;
  return v ? *v : none;
}

std::vector<float> slice(const std::vector<float>* v, int begin, int n) {
  if (!v || begin < 0 || begin + n > int(v->size())) return {};
  return {v->begin() + begin, v->begin() + begin + n};
}

std::vector<float> sum(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return {};
  std::vector<float> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// The residual stream around each stage, as the block computes it.
struct Flow {
  std::vector<float> in, out;  // the stage's input and output vectors (when they are vectors)
};

// Walks the stages as the model does, keeping the stream: returns each stage's input
// and output vector (empty where the stage's numbers are not one vector).
std::vector<Flow> flows(const BlockSnapshot& s, const std::vector<Stage>& stages, int head) {
  std::vector<Flow> f(stages.size());
  const int dh = s.cfg.d_head, kh = head / std::max(1, s.cfg.n_heads / std::max(1, s.cfg.n_kv_heads));
  std::vector<float> stream, sub_out;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& st = stages[i];
    const std::vector<float>& hook = orEmpty(s.get(st.hook));
    switch (st.kind) {
      case StageKind::Input:
        stream = hook;
        f[i].out = stream;
        break;
      case StageKind::Norm:
        f[i].in = stream;
        f[i].out = hook;
        if (s.cfg.norm_place == ds::NormPlace::Post) stream = hook;
        break;
      case StageKind::OutProj:
      case StageKind::FFNDown:
        f[i].out = sub_out = hook;
        break;
      case StageKind::SubNorm: {
        // No point is published between this norm and the add: its output is the
        // stream after the add (the stage's hook) minus the stream before it.
        f[i].in = sub_out;
        std::vector<float> d;
        if (hook.size() == stream.size())
          for (size_t j = 0; j < hook.size(); ++j) d.push_back(hook[j] - stream[j]);
        f[i].out = sub_out = d;
        break;
      }
      case StageKind::Add:
        f[i].in = stream;
        f[i].out = sum(stream, sub_out);
        stream = f[i].out;  // post-norm: the norm that follows reads it
        break;
      case StageKind::FinalNorm:
        f[i].in = stream;
        f[i].out = hook;
        break;
      case StageKind::Output:
        f[i].out = stream;
        break;
      case StageKind::QKV:
      case StageKind::QKNorm:
      case StageKind::Mix: {
        // v (the QKV stage of a model with q/k norms) has the key/value heads.
        const bool kv = st.hook.size() > 2 && st.hook.compare(st.hook.size() - 2, 2, ".v") == 0;
        f[i].out = slice(s.get(st.hook), (kv ? kh : head) * dh, dh);
        break;
      }
      case StageKind::Scores:
      case StageKind::Softmax: {
        const int S = st.group == 1 ? s.src_len : s.positions;
        f[i].out = slice(s.get(st.hook), head * S, S);
        break;
      }
      default:
        f[i].out = hook;
    }
  }
  return f;
}

ImU32 group_colour(int group, int kind_norm, bool light) {
  ImVec4 c = group == 0   ? ImVec4(0.95f, 0.62f, 0.25f, 1)
             : group == 1 ? ImVec4(0.70f, 0.48f, 0.95f, 1)
             : group == 2 ? ImVec4(0.35f, 0.65f, 0.95f, 1)
             : kind_norm  ? ImVec4(0.90f, 0.82f, 0.35f, 1)
                          : ImVec4(0.62f, 0.62f, 0.66f, 1);
  const float a = light ? 0.35f : 0.28f;
  return ImGui::ColorConvertFloat4ToU32(ImVec4(c.x, c.y, c.z, a));
}

// A cell that was never computed: grey lines the other way from the mask's hatching.
void uncomputed_rect(ImDrawList* dl, ImVec2 a, ImVec2 b) {
  dl->AddRectFilled(a, b, IM_COL32(70, 70, 76, 255));
  dl->PushClipRect(a, b, true);
  const float h = b.y - a.y;
  for (float x = a.x; x < b.x + h; x += 7.0f)
    dl->AddLine(ImVec2(x, b.y), ImVec2(x - h, a.y), IM_COL32(150, 150, 156, 255), 1.5f);
  dl->PopClipRect();
}

// One clickable box of the diagram with a thin strip of its output underneath.
void stage_box(App& app, BlockState& bs, const Stage& st, const Flow& fl, ImVec2 a, ImVec2 b) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::SetCursorScreenPos(a);
  ImGui::PushID(st.id.c_str());
  const bool clicked = ImGui::InvisibleButton("##box", ImVec2(b.x - a.x, b.y - a.y));
  const bool hovered = ImGui::IsItemHovered();
  ImGui::PopID();
  if (clicked) bs.stage = bs.scrolled = st.id;
  const bool sel = bs.stage == st.id;
  // A stage opened from elsewhere (--stage, the first frame): the diagram scrolls to it.
  if (sel && bs.scrolled != st.id) {
    ImGui::SetScrollFromPosY(a.y - ImGui::GetWindowPos().y, 0.3f);
    bs.scrolled = st.id;
  }
  const float r = ImGui::GetFontSize() * 0.3f;
  const bool norm = st.kind == StageKind::Norm || st.kind == StageKind::SubNorm || st.kind == StageKind::FinalNorm;
  dl->AddRectFilled(a, b, group_colour(st.group, norm, app.look.light), r);
  const ImU32 border = sel       ? IM_COL32(255, 200, 40, 255)
                       : hovered ? ImGui::GetColorU32(ImGuiCol_Text)
                                 : ImGui::GetColorU32(ImGuiCol_Border);
  dl->AddRect(a, b, border, r, 0, sel ? 3.0f : 1.0f);
  // The label, smaller when the box is narrow (never past its edges).
  const float font = ImGui::GetFontSize();
  const ImVec2 ts = ImGui::CalcTextSize(st.label.c_str());
  const float fit = std::clamp((b.x - a.x - font * 0.3f) / std::max(1.0f, ts.x), 0.6f, 1.0f);
  const float tw = ts.x * fit;
  dl->PushClipRect(a, b, true);
  dl->AddText(ImGui::GetFont(), font * fit, ImVec2((a.x + b.x - tw) * 0.5f, a.y + font * (0.15f + (1 - fit) * 0.5f)),
              ImGui::GetColorU32(ImGuiCol_Text), st.label.c_str());
  dl->PopClipRect();
  if (st.kind == StageKind::Mask && !fl.out.empty()) {
    const float y0 = a.y + font * 1.3f, y1 = b.y - font * 0.2f, x0 = a.x + font * 0.3f, x1 = b.x - font * 0.3f;
    const float w = (x1 - x0) / float(fl.out.size());
    for (size_t j = 0; j < fl.out.size(); ++j) {
      const ImVec2 c0(x0 + float(j) * w, y0), c1(x0 + float(j + 1) * w - (w > 4), y1);
      if (st.group == 0 && int(j) >= bs.key_end)
        uncomputed_rect(dl, c0, c1);
      else if (fl.out[j] == 0.0f)
        hatch_rect(dl, c0, c1);
      else
        dl->AddRectFilled(c0, c1, ImGui::GetColorU32(ImGuiCol_TextDisabled));
    }
  } else if (!fl.out.empty()) {
    const float y0 = a.y + font * 1.3f, y1 = b.y - font * 0.2f, x0 = a.x + font * 0.3f, x1 = b.x - font * 0.3f;
    const int n = std::min(int(fl.out.size()), std::max(1, int((x1 - x0) / 3)));
    const float sc = max_abs(fl.out), w = (x1 - x0) / float(n);
    for (int i = 0; i < n; ++i) {
      const size_t j = size_t(i) * fl.out.size() / size_t(n);
      dl->AddRectFilled(ImVec2(x0 + float(i) * w, y0), ImVec2(x0 + float(i + 1) * w, y1),
                        diverging(fl.out[j] / sc, app.look.light));
    }
  }
  if (hovered && app.look.tooltips) ImGui::SetTooltip("%s\n%s\n(click to open)", st.title.c_str(), st.equation.c_str());
}

void arrow(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col) {
  dl->AddLine(a, b, col, 2.0f);
  const float s = ImGui::GetFontSize() * 0.3f;
  const bool down = std::fabs(b.y - a.y) >= std::fabs(b.x - a.x);
  if (down)
    dl->AddTriangleFilled(ImVec2(b.x - s, b.y - s), ImVec2(b.x + s, b.y - s), b, col);
  else
    dl->AddTriangleFilled(ImVec2(b.x - s, b.y - s), ImVec2(b.x - s, b.y + s), b, col);
}

// A sub-layer's frame: its title and the boxes of stages [i, j) left to right, in rows
// when they would be too narrow for their labels (a q/k norm makes the attention seven
// steps). Returns the frame's bottom.
float group_frame(App& app, BlockState& bs, const std::vector<Stage>& stages, const std::vector<Flow>& fl, size_t i,
                  size_t j, ImVec2 fa, float fw, float box_h) {
  const float font = ImGui::GetFontSize(), title_h = font * 1.3f, sep = font * 0.6f, row_gap = font * 0.9f;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 line = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const int n = int(j - i);
  auto box_w = [&](int per_row) { return (fw - font * 0.8f - float(per_row - 1) * sep) / float(per_row); };
  int rows = 1;
  while (rows < n && box_w((n + rows - 1) / rows) < font * 4.5f) ++rows;
  const int per_row = (n + rows - 1) / rows;
  const float cw = box_w(per_row);
  const ImVec2 fb(fa.x + fw, fa.y + title_h + float(rows) * box_h + float(rows - 1) * row_gap + font * 0.6f);
  dl->AddRect(fa, fb, group_colour(stages[i].group, 0, false) | IM_COL32(0, 0, 0, 255), font * 0.4f, 0, 1.5f);
  // The title, smaller when the frame is narrow, clipped to the frame (never past it).
  const char* title = group_title(stages[i].group);
  const float tfit = std::clamp((fw - font * 0.8f) / std::max(1.0f, ImGui::CalcTextSize(title).x), 0.6f, 1.0f);
  dl->PushClipRect(fa, ImVec2(fa.x + fw - font * 0.2f, fa.y + title_h), true);
  dl->AddText(ImGui::GetFont(), font * tfit, ImVec2(fa.x + font * 0.4f, fa.y + font * (0.15f + (1 - tfit) * 0.4f)),
              ImGui::GetColorU32(ImGuiCol_Text), title);
  dl->PopClipRect();
  ImVec2 prev;  // the previous box's top-left
  for (int k = 0; k < n; ++k) {
    const int r = k / per_row, c = k % per_row;
    const ImVec2 a(fa.x + font * 0.4f + float(c) * (cw + sep), fa.y + title_h + float(r) * (box_h + row_gap));
    stage_box(app, bs, stages[i + size_t(k)], fl[i + size_t(k)], a, ImVec2(a.x + cw, a.y + box_h));
    if (c > 0) {
      arrow(dl, ImVec2(a.x - sep, a.y + box_h * 0.5f), ImVec2(a.x, a.y + box_h * 0.5f), line);
    } else if (k > 0) {  // from the end of the row above down to the start of this one
      const float mid = a.y - row_gap * 0.5f, px = prev.x + cw * 0.5f;
      dl->AddLine(ImVec2(px, prev.y + box_h), ImVec2(px, mid), line, 2.0f);
      dl->AddLine(ImVec2(px, mid), ImVec2(a.x + cw * 0.5f, mid), line, 2.0f);
      arrow(dl, ImVec2(a.x + cw * 0.5f, mid), ImVec2(a.x + cw * 0.5f, a.y), line);
    }
    prev = a;
  }
  return fb.y;
}

// The block as a diagram, top to bottom (the seeds' layout): sub-layers are frames
// whose steps run left to right; the residual connections run down the right side.
void diagram(App& app, BlockState& bs, const std::vector<Stage>& stages, const std::vector<Flow>& fl, bool post_norm) {
  const float font = ImGui::GetFontSize();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float W = ImGui::GetContentRegionAvail().x - font;
  const float box_h = font * 2.1f, gap = font * 0.9f, cx = origin.x + W * 0.45f, bw = std::min(W * 0.62f, font * 16);
  const float skip_x = origin.x + W - font * 0.6f;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 line = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  float y = origin.y, prev_bottom = -1, branch_y = -1;
  const bool post = post_norm;
  for (size_t i = 0; i < stages.size();) {
    const Stage& st = stages[i];
    const bool starts_sub =
        (!post && st.kind == StageKind::Norm) || (post && st.group >= 0 && st.kind == StageKind::QKV);
    if (starts_sub) branch_y = y - gap * 0.5f;
    if (st.group >= 0) {
      size_t j = i;
      while (j < stages.size() && stages[j].group == st.group) ++j;
      if (prev_bottom >= 0) arrow(dl, ImVec2(cx, prev_bottom), ImVec2(cx, y), line);
      prev_bottom = group_frame(app, bs, stages, fl, i, j, ImVec2(origin.x, y), W - font * 2.2f, box_h);
      y = prev_bottom + gap;
      i = j;
      continue;
    }
    if (st.kind == StageKind::Add) {
      const float rad = font * 0.8f, cy = y + rad;
      if (prev_bottom >= 0) arrow(dl, ImVec2(cx, prev_bottom), ImVec2(cx, cy - rad), line);
      if (branch_y >= 0) {
        dl->AddLine(ImVec2(cx, branch_y), ImVec2(skip_x, branch_y), line, 2.0f);
        dl->AddLine(ImVec2(skip_x, branch_y), ImVec2(skip_x, cy), line, 2.0f);
        arrow(dl, ImVec2(skip_x, cy), ImVec2(cx + rad, cy), line);
      }
      ImGui::SetCursorScreenPos(ImVec2(cx - rad, cy - rad));
      ImGui::PushID(st.id.c_str());
      if (ImGui::InvisibleButton("##add", ImVec2(rad * 2, rad * 2))) bs.stage = st.id;
      const bool hov = ImGui::IsItemHovered();
      ImGui::PopID();
      const bool sel = bs.stage == st.id;
      dl->AddCircleFilled(ImVec2(cx, cy), rad, group_colour(-1, 0, app.look.light));
      dl->AddCircle(ImVec2(cx, cy), rad, sel ? IM_COL32(255, 200, 40, 255) : ImGui::GetColorU32(ImGuiCol_Text), 0,
                    sel ? 3.0f : 1.5f);
      dl->AddLine(ImVec2(cx - rad * 0.5f, cy), ImVec2(cx + rad * 0.5f, cy), ImGui::GetColorU32(ImGuiCol_Text), 2);
      dl->AddLine(ImVec2(cx, cy - rad * 0.5f), ImVec2(cx, cy + rad * 0.5f), ImGui::GetColorU32(ImGuiCol_Text), 2);
      if (hov && app.look.tooltips) ImGui::SetTooltip("%s\n%s\n(click to open)", st.title.c_str(), st.equation.c_str());
      const char* cap = post || cx - rad - ImGui::CalcTextSize("Add (the residual)").x - font * 0.4f < origin.x
                            ? "Add"
                            : "Add (the residual)";
      dl->AddText(ImVec2(cx - rad - ImGui::CalcTextSize(cap).x - font * 0.4f, cy - font * 0.5f), line, cap);
      prev_bottom = cy + rad;
      y = cy + rad + gap;
      branch_y = post ? branch_y : -1;
      ++i;
      continue;
    }
    if (prev_bottom >= 0) arrow(dl, ImVec2(cx, prev_bottom), ImVec2(cx, y), line);
    stage_box(app, bs, st, fl[i], ImVec2(cx - bw * 0.5f, y), ImVec2(cx + bw * 0.5f, y + box_h));
    if (post && st.kind == StageKind::Norm) branch_y = y + box_h + gap * 0.5f;
    prev_bottom = y + box_h;
    y += box_h + gap;
    ++i;
  }
  ImGui::SetCursorScreenPos(ImVec2(origin.x, y));
  ImGui::Dummy(ImVec2(W, font * 0.5f));
}

// A few rows of a matrix as coloured cells (keys x d_head), the highlighted row outlined.
void matrix_cells(App& app, const char* label, const std::vector<float>& m, int rows, int stride, int offset, int cols,
                  int highlight, const std::vector<std::string>& labels, float scale) {
  if (rows <= 0 || m.size() < size_t(rows) * size_t(stride)) return;
  const float font = ImGui::GetFontSize();
  const int first = std::max(0, std::min(highlight + 4, rows) - 24), last = std::min(rows, first + 24);
  ImGui::TextWrapped("%s", label);
  if (first > 0) {
    ImGui::SameLine();
    ImGui::TextDisabled("(rows %d to %d of %d)", first, last - 1, rows);
  }
  const float lw = font * 5, cw = std::clamp((ImGui::GetContentRegionAvail().x - lw) / float(cols), 3.0f, font),
              ch = font * 0.8f;
  const float sc = scale > 0 ? scale : 1;  // the stage's shared scale: |q| and |k| compare
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  for (int r = first; r < last; ++r) {
    const float y = p.y + float(r - first) * (ch + 1);
    const std::string lab = r < int(labels.size()) ? shorten(labels[size_t(r)], 6) : std::to_string(r);
    dl->AddText(ImGui::GetFont(), font * 0.75f, ImVec2(p.x, y - 1), ImGui::GetColorU32(ImGuiCol_TextDisabled),
                lab.c_str());
    for (int c = 0; c < cols; ++c)
      dl->AddRectFilled(ImVec2(p.x + lw + float(c) * cw, y), ImVec2(p.x + lw + float(c + 1) * cw - 1, y + ch),
                        diverging(m[size_t(r) * stride + offset + c] / sc, app.look.light));
    if (r == highlight)
      dl->AddRect(ImVec2(p.x + lw - 2, y - 1), ImVec2(p.x + lw + float(cols) * cw + 1, y + ch + 1),
                  IM_COL32(255, 200, 40, 255), 0, 0, 2);
  }
  ImGui::Dummy(ImVec2(lw + float(cols) * cw, float(last - first) * (ch + 1)));
}

std::vector<std::string> key_labels(App& app, const BlockSnapshot& s, bool cross) {
  std::vector<std::string> out;
  if (cross) {
    for (auto& t : app.source_labels()) out.push_back(t);
  } else {
    const auto& toks = app.tokens();
    for (int i = 0; i < s.positions; ++i) out.push_back(i < int(toks.size()) ? visible(toks[size_t(i)].text) : "?");
  }
  return out;
}

void number_tables(App& app, BlockState& bs, const BlockSnapshot& s, int head, bool qkv, bool scores);

void qkv_numbers(App& app, BlockState& bs, const BlockSnapshot& s, const Stage& st, int head) {
  const ds::Config& c = s.cfg;
  const bool cross = st.group == 1;
  const int dh = c.d_head, kh = head / std::max(1, c.n_heads / std::max(1, c.n_kv_heads)), kvd = c.kv_dim();
  const std::string p = cross ? "cross_attn." : "attn.";
  char lab[96];
  if (st.kind == StageKind::QKV && c.qk_norm && !cross) {
    // The engine publishes q and k after the q/k norm (and rotary): the projections'
    // own q and k are not kept, so this stage shows v alone.
    std::snprintf(lab, sizeof lab, "v of this token, head %d", kh);
    strip(app, lab, slice(s.get("attn.v"), kh * dh, dh));
    ImGui::TextWrapped(
        "q and k are published only after their norm%s: open the next stage to see them. v is "
        "neither normalised nor rotated.",
        c.pos == ds::PosKind::Rotary ? " and the rotation" : "");
    return;
  }
  if (st.kind == StageKind::QKNorm)
    ImGui::TextWrapped(
        "After the norm each head's q and k would have length \u221ad_head = %.2f if every gain were 1; the gains "
        "\u03b3 stretch each feature%s.",
        std::sqrt(double(dh)), c.pos == ds::PosKind::Rotary ? ", and the rotation keeps the length" : "");
  std::vector<StripRow> rows;
  std::snprintf(lab, sizeof lab, "q, head %d", head);
  rows.push_back({lab, slice(s.get(p + "q"), head * dh, dh)});
  if (!cross) {
    std::snprintf(lab, sizeof lab, "k of this token, head %d", kh);
    rows.push_back({lab, slice(s.get("attn.k"), kh * dh, dh)});
    if (st.kind == StageKind::QKV) {  // v has no norm: the q/k norm's stage leaves it out
      std::snprintf(lab, sizeof lab, "v of this token, head %d", kh);
      rows.push_back({lab, slice(s.get("attn.v"), kh * dh, dh)});
    }
  }
  const std::vector<float>& K = cross ? s.cross_k : s.k;
  const int n = cross ? s.src_len : s.positions;
  float kmax = 0;  // the keys drawn below share the strips' scale
  for (int r = 0; r < n && K.size() >= size_t(n) * size_t(kvd); ++r)
    for (int i = 0; i < dh; ++i) kmax = std::max(kmax, std::fabs(K[size_t(r) * kvd + size_t(kh * dh + i)]));
  // A short detail (presenter mode, small screen) shows the number tables first.
  if (!cross && bs.narrow) number_tables(app, bs, s, head, st.kind == StageKind::QKV, false);
  strips(app, rows, kmax);
  const float sc = std::max(kmax, shared_scale(rows));
  if (!cross && !bs.narrow) number_tables(app, bs, s, head, st.kind == StageKind::QKV, false);
  ImGui::Spacing();
  const std::vector<std::string> labels = key_labels(app, s, cross);
  std::snprintf(lab, sizeof lab, "%s keys of head %d (rows: %s, columns: the %d features)",
                cross ? "The source's" : "Every position's", kh, cross ? "source tokens" : "positions", dh);
  matrix_cells(app, lab, K, n, kvd, kh * dh, dh, cross ? -1 : s.pos, labels, sc);
}

// The colour of text on a cell of colour c: dark on light cells, light on dark ones.
ImU32 ink_on(ImU32 c) {
  const ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  return 0.299f * v.x + 0.587f * v.y + 0.114f * v.z > 0.55f ? IM_COL32(10, 10, 10, 255) : IM_COL32(245, 245, 245, 255);
}

// The positions and features the number tables show: the last few positions up to
// the selected one and the first features, until the user picks others.
void pick_controls(BlockState& bs, const BlockSnapshot& s) {
  const int dh = s.cfg.d_head;
  if (!bs.pick_custom) bs.pick = TablePick::around(s.pos, dh);
  TablePick p = bs.pick.clamped(s.positions, dh);
  const float font = ImGui::GetFontSize();
  bool changed = false;
  auto input = [&](const char* label, const char* id, int& v) {
    flow(font * 12);
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(label);
    ImGui::SameLine();
    ImGui::SetNextItemWidth(font * 6);
    changed |= ImGui::InputInt(id, &v);
  };
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Numbers of");
  input("positions", "##p0", p.pos0);
  input("to", "##p1", p.pos1);
  input("features from", "##d0", p.dim0);
  input("count", "##dn", p.dims);
  ImGui::SameLine();
  if (ImGui::SmallButton("default")) bs.pick_custom = false, changed = false;
  if (changed) bs.pick = p.clamped(s.positions, dh), bs.pick_custom = true;
}

// One number table: rows (positions) x columns (features or keys), every cell coloured
// on `scale`; cells with state 1 are masked (-inf, hatched), 2 never computed.
struct NumTable {
  std::string name, corner;
  std::vector<std::string> row_names, col_names;
  std::vector<float> v;    // [rows, cols]
  std::vector<int> state;  // [rows, cols] or empty: 0 a number
};

void num_table(App& app, const NumTable& t, float scale) {
  const float font = ImGui::GetFontSize();
  const int R = int(t.row_names.size()), C = int(t.col_names.size());
  if (R == 0 || C == 0 || t.v.size() != size_t(R) * C) return;
  ImGui::TextWrapped("%s", t.name.c_str());
  app.state<BlockState>().shown.tables.push_back({t.name, scale});
  const ImGuiTableFlags fl = ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollX |
                             ImGuiTableFlags_NoHostExtendX;
  const float row_h = ImGui::GetTextLineHeightWithSpacing() + 2;
  const float h = (float(R) + 1) * row_h + ImGui::GetStyle().ScrollbarSize + 4;
  ImGui::PushID(t.name.c_str());
  if (ImGui::BeginTable("##num", C + 1, fl,
                        ImVec2(std::min(ImGui::GetContentRegionAvail().x, font * float(C * 4 + 6)), h))) {
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn(t.corner.c_str(), 0, font * 4.5f);
    for (int c = 0; c < C; ++c) ImGui::TableSetupColumn(t.col_names[size_t(c)].c_str(), 0, font * 3.4f);
    ImGui::TableHeadersRow();
    for (int r = 0; r < R; ++r) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.row_names[size_t(r)].c_str());
      for (int c = 0; c < C; ++c) {
        ImGui::TableNextColumn();
        const size_t i = size_t(r) * C + c;
        const int st = t.state.empty() ? 0 : t.state[i];
        if (st != 0) {
          ImDrawList* dl = ImGui::GetWindowDrawList();
          const ImVec2 a = ImGui::GetCursorScreenPos();
          const ImVec2 b(a.x + ImGui::GetColumnWidth(), a.y + ImGui::GetTextLineHeight());
          if (st == 1)
            hatch_rect(dl, a, b);
          else
            uncomputed_rect(dl, a, b);
          ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 255, 255, 255));
          ImGui::TextUnformatted(st == 1 ? "\u2212\u221e" : "n/c");
          ImGui::PopStyleColor();
          if (ImGui::IsItemHovered())
            ImGui::SetTooltip(st == 1 ? "masked: \u2212\u221e is added, the weight is 0"
                                      : "not computed yet: this key entered the cache after this query's step");
          continue;
        }
        const ImU32 col = diverging(t.v[i] / scale, app.look.light);
        ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, col);
        ImGui::PushStyleColor(ImGuiCol_Text, ink_on(col));
        ImGui::Text("%.2f", double(t.v[i]));
        ImGui::PopStyleColor();
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip("%s\n%s, %s = %.6g", t.name.c_str(), t.row_names[size_t(r)].c_str(),
                            t.col_names[size_t(c)].c_str(), double(t.v[i]));
      }
    }
    ImGui::EndTable();
  }
  ImGui::PopID();
}

// Q, K, V (qkv) or Q, K and the scores (scores) of the picked positions and features
// of the selected head as number tables; Q, K and V share one colour scale.
void number_tables(App& app, BlockState& bs, const BlockSnapshot& s, int head, bool qkv, bool scores) {
  const ds::Config& c = s.cfg;
  const int dh = c.d_head, H = c.n_heads, kvd = c.kv_dim();
  const int kh = head / std::max(1, H / std::max(1, c.n_kv_heads));
  ImGui::Spacing();
  ImGui::Separator();
  pick_controls(bs, s);
  const TablePick p = bs.pick.clamped(s.positions, dh);
  const std::vector<std::string> labels = key_labels(app, s, false);
  auto pos_name = [&](int i) {
    return std::to_string(i) + " " + (i < int(labels.size()) ? shorten(labels[size_t(i)], 5) : std::string());
  };
  std::vector<NumTable> vecs;
  auto matrix = [&](const char* what, const std::vector<float>& m, int stride, int h) {
    NumTable t;
    t.name = std::string(what) + ", head " + std::to_string(h) + ": positions " + std::to_string(p.pos0) + " to " +
             std::to_string(p.pos1) + ", features " + std::to_string(p.dim0) + " to " +
             std::to_string(p.dim0 + p.dims - 1);
    t.corner = "pos";
    if (m.size() < size_t(p.pos1 + 1) * size_t(stride)) return;
    for (int d = p.dim0; d < p.dim0 + p.dims; ++d) t.col_names.push_back(std::to_string(d));
    for (int i = p.pos0; i <= p.pos1; ++i) {
      t.row_names.push_back(pos_name(i));
      for (int d = p.dim0; d < p.dim0 + p.dims; ++d) t.v.push_back(m[size_t(i) * stride + size_t(h * dh + d)]);
    }
    vecs.push_back(std::move(t));
  };
  matrix("Q", s.q_all, H * dh, head);
  matrix("K", s.k, kvd, kh);
  if (qkv) matrix("V", s.v, kvd, kh);
  float sc = 0;
  for (const NumTable& t : vecs)
    for (float v : t.v) sc = std::max(sc, std::fabs(v));
  sc = sc > 0 ? sc : 1;
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("Q, K and V share one colour scale: \u2212%.3g (blue) to +%.3g (red).", double(sc), double(sc));
  ImGui::PopTextWrapPos();
  for (const NumTable& t : vecs) num_table(app, t, sc);
  if (!scores) return;
  const int n = s.positions;
  if (s.scores_all.size() != size_t(n) * n || s.scores_all_head != head) return;
  NumTable t;
  t.name = "Scores q\u00b7k/\u221ad + M of head " + std::to_string(head) + " (rows: queries, columns: keys)";
  t.corner = "q \\ k";
  for (int j = p.pos0; j <= p.pos1; ++j) t.col_names.push_back(std::to_string(j));
  float ss = 0;
  for (int i = p.pos0; i <= p.pos1; ++i) {
    t.row_names.push_back(pos_name(i));
    const int end = computed_keys(app.history.trace, app.sel.cursor, i);
    for (int j = p.pos0; j <= p.pos1; ++j) {
      const float v = s.scores_all[size_t(i) * n + j];
      t.v.push_back(std::isfinite(v) ? v : 0.0f);
      t.state.push_back(std::isfinite(v) ? 0 : j >= end ? 2 : 1);
      if (std::isfinite(v)) ss = std::max(ss, std::fabs(v));
    }
  }
  ss = ss > 0 ? ss : 1;
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled(
      "Scores on their own scale: \u2212%.3g to +%.3g; hatched: masked (\u2212\u221e), grey: not computed yet.",
      double(ss), double(ss));
  ImGui::PopTextWrapPos();
  num_table(app, t, ss);
}

// A bar one line of text high (the table keeps more rows on screen than with frame-high
// bars), its value written on it.
void line_bar(float f, float w, ImU32 col, const char* text) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetTextLineHeight();
  f = std::clamp(std::isfinite(f) ? f : 0.0f, 0.0f, 1.0f);
  dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), ImGui::GetColorU32(ImGuiCol_FrameBg));
  if (f > 0) dl->AddRectFilled(p, ImVec2(p.x + std::max(1.0f, w * f), p.y + h), col);
  dl->AddText(ImVec2(p.x + ImGui::GetFontSize() * 0.2f, p.y), ImGui::GetColorU32(ImGuiCol_Text), text);
  ImGui::Dummy(ImVec2(w, h));
}

// Per key of the selected query's row: 0 read, 1 masked (q.k computed, then -inf
// added), 2 never computed (cached generation: the key entered the cache after the
// query's step). Cross-attention keys (the source) were all there from the start.
std::vector<int> key_states(App& app, const BlockSnapshot& s, int head, bool cross, int S, int& end) {
  end = cross ? S : std::min(S, computed_keys(app.history.trace, app.sel.cursor, s.pos));
  std::vector<int> st(size_t(S), 0);
  for (int j = 0; j < S; ++j) {
    const ScoreArithmetic a = score_arithmetic(s, head, j, cross);
    st[size_t(j)] = j >= end ? 2 : a.ok && a.masked ? 1 : 0;
  }
  return st;
}

// What the key table's rows mean in this mode of generation, in a sentence.
void key_note(App& app, const BlockSnapshot& s, int S, int end) {
  const bool cached = app.sel.cursor >= 0 && app.sel.cursor < int(app.history.trace.steps.size()) &&
                      app.history.trace.steps[size_t(app.sel.cursor)].kv_cache;
  ImGui::PushTextWrapPos(0);
  if (cached && end < S)
    ImGui::TextDisabled(
        "Generated with the KV cache: position %d's query was computed once, in the step that fed it, when the "
        "cache held keys 0 to %d. Keys %d to %d came later: no q\u00b7k was ever computed for them (grey: not "
        "computed yet).",
        s.pos, end - 1, end, S - 1);
  else if (!cached)
    ImGui::TextDisabled(
        "Generated without the KV cache: this step ran the whole prefix again and computed q\u00b7k for every key, "
        "the future ones too; the mask then adds \u2212\u221e to those.");
  ImGui::PopTextWrapPos();
}

// The arithmetic of the key under the mouse (or the strongest key).
void key_arithmetic(App& app, BlockState& bs, const BlockSnapshot& s, int head, bool cross, int S,
                    const std::vector<int>& states, const std::vector<std::string>& labels) {
  const std::vector<float>* pat = s.get(std::string(cross ? "cross_attn." : "attn.") + "pattern");
  int best = 0;
  for (int j = 0; j < S; ++j)
    if (pat && (*pat)[size_t(head * S + j)] > (*pat)[size_t(head * S + best)]) best = j;
  const int shown = bs.hover_key >= 0 && bs.hover_key < S ? bs.hover_key : best;
  const ScoreArithmetic ar = score_arithmetic(s, head, shown, cross);
  const char* name = shown < int(labels.size()) ? labels[size_t(shown)].c_str() : "?";
  ImGui::PushTextWrapPos(0);
  ImGui::PushStyleColor(ImGuiCol_Text, accent(app));
  if (states[size_t(shown)] == 2)
    ImGui::Text("key %d \"%s\": not computed yet (it entered the cache after this query's step)", shown, name);
  else if (ar.ok)
    ImGui::Text("key %d \"%s\":  %s%s", shown, name, ar.text.c_str(),
                ar.masked ? ";  + (\u2212\u221e) = \u2212\u221e: masked" : ";  + 0");
  ImGui::PopStyleColor();
  ImGui::PopTextWrapPos();
  tooltip(app, "Hover a row of the table to see the arithmetic for that key.");
}

// The selected query's row, key by key: score, mask, weight (and the value it hands over).
void key_table(App& app, BlockState& bs, const BlockSnapshot& s, const Stage& st, int head) {
  const bool cross = st.group == 1;
  const std::string p = cross ? "cross_attn." : "attn.";
  const std::vector<float>* sc = s.get(p + "scores");
  const std::vector<float>* pat = s.get(p + "pattern");
  const int S = cross ? s.src_len : s.positions;
  if (!sc || S <= 0 || int(sc->size()) < (head + 1) * S) {
    ImGui::TextDisabled("the scores of this layer were not published");
    return;
  }
  const std::vector<std::string> labels = key_labels(app, s, cross);
  int end = S;
  const std::vector<int> states = key_states(app, s, head, cross, S, end);
  BlockShown& shown = bs.shown;
  shown.computed_end = end;
  shown.key_state = states;
  key_arithmetic(app, bs, s, head, cross, S, states, labels);
  if (!cross) key_note(app, s, S, end);
  bs.hover_key = -1;
  const int hi = st.kind == StageKind::Scores    ? 2
                 : st.kind == StageKind::Mask    ? 3
                 : st.kind == StageKind::Softmax ? 4
                                                 : 5;
  const float font = ImGui::GetFontSize();
  const ImGuiTableFlags fl = ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_ScrollX |
                             ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV;
  // At least 8 rows (or all of them): the detail scrolls when the room is shorter.
  const float row_h = ImGui::GetTextLineHeight() + ImGui::GetStyle().CellPadding.y * 2;
  const float want = (float(S) + 1.0f) * row_h + ImGui::GetStyle().ScrollbarSize + 4;
  const float least = (float(std::min(S, 8)) + 1.0f) * row_h + ImGui::GetStyle().ScrollbarSize + 4;
  const float h = std::min(want, std::max(least, ImGui::GetContentRegionAvail().y));
  shown.key_rows = S;
  shown.key_row_h = row_h;
  shown.key_top = ImGui::GetCursorScreenPos().y;
  shown.key_visible = 0;
  // The rows fully on screen: inside the table's box, the detail's and the window's.
  const ImVec2 clip_min = ImGui::GetWindowDrawList()->GetClipRectMin(),
               clip_max = ImGui::GetWindowDrawList()->GetClipRectMax();
  const float vis0 = std::max(shown.key_top, clip_min.y), vis1 = std::min(shown.key_top + h, clip_max.y);
  if (!ImGui::BeginTable("keys", 6, fl, ImVec2(0, h))) return;
  ImGui::TableSetupScrollFreeze(1, 1);
  const char* heads[] = {
      "key", "token",       s.cfg.attn_scale > 0 ? "s = q\u00b7k\u00d7scale" : "s = q\u00b7k/\u221ad",
      "+ M", "w = softmax", "w\u00b7v"};
  for (int c = 0; c < 6; ++c) ImGui::TableSetupColumn(heads[c], 0, c == 4 ? font * 7 : 0);
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int c = 0; c < 6; ++c) {
    ImGui::TableSetColumnIndex(c);
    if (c == hi) ImGui::PushStyleColor(ImGuiCol_Text, accent(app));
    ImGui::TableHeader(heads[c]);
    if (c == hi) ImGui::PopStyleColor();
  }
  const float body0 = ImGui::GetCursorScreenPos().y;  // below the frozen header
  ImGuiListClipper clip;
  clip.Begin(S);
  while (clip.Step())
    for (int j = clip.DisplayStart; j < clip.DisplayEnd; ++j) {
      ImGui::TableNextRow(0, row_h);
      const int state = states[size_t(j)];
      const float w = pat ? (*pat)[size_t(head * S + j)] : 0.0f;
      ImGui::TableNextColumn();
      const float y = ImGui::GetCursorScreenPos().y;
      if (y >= std::max(vis0, body0) - 1 && y + row_h <= vis1 + 1) ++shown.key_visible;
      char id[16];
      std::snprintf(id, sizeof id, "%d", j);
      ImGui::Selectable(id, false, ImGuiSelectableFlags_SpanAllColumns);
      if (ImGui::IsItemHovered()) bs.hover_key = j;
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(j < int(labels.size()) ? labels[size_t(j)].c_str() : "?");
      ImGui::TableNextColumn();
      if (state == 2) {
        const ImVec2 a = ImGui::GetCursorScreenPos();
        const char* nc = "not computed yet";
        const float cw = std::max(ImGui::GetContentRegionAvail().x, ImGui::CalcTextSize(nc).x);
        uncomputed_rect(ImGui::GetWindowDrawList(), a, ImVec2(a.x + cw, a.y + ImGui::GetTextLineHeight()));
        ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 255, 255, 255));
        ImGui::TextUnformatted(nc);
        ImGui::PopStyleColor();
      } else {
        const ScoreArithmetic a = score_arithmetic(s, head, j, cross);
        ImGui::Text("%.3f", a.ok ? a.scaled : double((*sc)[size_t(head * S + j)]));
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(state != 0 ? "\u2212\u221e" : "0");
      ImGui::TableNextColumn();
      char b[32];
      std::snprintf(b, sizeof b, "%.3f", w);
      line_bar(w, font * 6.5f, cmap_u32(app.look.cmap, 0.3f + 0.7f * w), b);
      ImGui::TableNextColumn();
      ImGui::TextDisabled(state != 0 ? "none" : "%.2f \u00d7 v%d", w, j);
    }
  ImGui::EndTable();
}

void ffn_numbers(App& app, const BlockSnapshot& s) {
  const std::vector<float>* pre = s.get("mlp.pre");
  const std::vector<float>* post = s.get("mlp.post");
  // Gated (SwiGLU, GeGLU): the engine publishes the gate before its activation and the
  // product; the up projection u is not published.
  const bool gated = s.cfg.gated();
  strips(app, {{gated         ? "g = x W_gate (the gate)"
                : s.biases.up ? "h = x W\u2081 + b\u2081"
                              : "h = x W\u2081",
                orEmpty(pre)},
               {gated ? "a = act(g) \u2299 u" : "a = act(h)", orEmpty(post)}});
  if (!post || post->empty()) return;
  std::vector<int> idx(post->size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int a, int b) { return std::fabs((*post)[size_t(a)]) > std::fabs((*post)[size_t(b)]); });
  int firing = 0;
  for (float v : *post) firing += std::fabs(v) > 1e-3f;
  ImGui::Text("%d of %zu neurons fire (|a| > 0.001); the strongest:", firing, post->size());
  const float font = ImGui::GetFontSize(), m = std::fabs((*post)[size_t(idx[0])]);
  if (!ImGui::BeginTable("neurons", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) return;
  ImGui::TableSetupColumn("neuron");
  ImGui::TableSetupColumn(gated ? "g (gate)" : "h (before)");
  ImGui::TableSetupColumn("a (after the activation)", 0, font * 12);
  ImGui::TableHeadersRow();
  for (size_t i = 0; i < std::min<size_t>(12, idx.size()); ++i) {
    const int n = idx[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("#%d", n);
    ImGui::TableNextColumn();
    ImGui::Text("%.3f", pre && n < int(pre->size()) ? (*pre)[size_t(n)] : 0.0f);
    ImGui::TableNextColumn();
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", (*post)[size_t(n)]);
    bar(std::fabs((*post)[size_t(n)]) / (m > 0 ? m : 1), font * 11, diverging((*post)[size_t(n)] / m, app.look.light),
        b);
  }
  ImGui::EndTable();
}

void logits_numbers(App& app, const BlockSnapshot& s) {
  const float font = ImGui::GetFontSize();
  if (s.top_ids.empty()) {
    ImGui::TextDisabled("no logits");
    return;
  }
  ImGui::Text("The most probable next tokens (temperature 1):");
  if (!ImGui::BeginTable("top", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) return;
  ImGui::TableSetupColumn("token");
  ImGui::TableSetupColumn("logit");
  ImGui::TableSetupColumn("p = softmax", 0, font * 12);
  ImGui::TableHeadersRow();
  for (size_t i = 0; i < s.top_ids.size(); ++i) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(visible(s.top_text[i]).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.3f", s.top_logits[i]);
    ImGui::TableNextColumn();
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", s.top_probs[i]);
    bar(s.top_probs[i], font * 11, cmap_u32(app.look.cmap, 0.3f + 0.7f * s.top_probs[i]), b);
  }
  ImGui::EndTable();
}

// The whole score matrix of the selected head with the mask added: the selected row
// outlined, masked cells hatched.
void mask_matrix(App& app, const BlockSnapshot& s) {
  const int n = s.positions;
  if (s.scores_all.size() != size_t(n) * n || n > 96) return;
  const float font = ImGui::GetFontSize();
  const float room = ImGui::GetContentRegionAvail().x * 0.6f;
  const float cell = std::clamp(std::min(room, font * 14) / float(n), 2.0f, font);
  ImGui::TextWrapped(
      "The scores of every query row of head %d plus the mask (hatched: \u2212\u221e%s):", s.scores_all_head,
      app.history.trace.steps[size_t(app.sel.cursor)].kv_cache ? "; grey: not computed yet" : "");
  float lo = INFINITY, hi = -INFINITY;
  for (float v : s.scores_all)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  for (int i = 0; i < n; ++i) {
    const int end = computed_keys(app.history.trace, app.sel.cursor, i);
    for (int j = 0; j < n; ++j) {
      const float v = s.scores_all[size_t(i) * n + j];
      const ImVec2 a(p.x + float(j) * cell, p.y + float(i) * cell), b(a.x + cell - (cell > 4), a.y + cell - (cell > 4));
      if (!std::isfinite(v) && j >= end)
        uncomputed_rect(dl, a, b);
      else if (!std::isfinite(v))
        hatch_rect(dl, a, b);
      else
        dl->AddRectFilled(a, b, cmap_u32(app.look.cmap, hi > lo ? (v - lo) / (hi - lo) : 0.5f));
    }
  }
  dl->AddRect(ImVec2(p.x - 1, p.y + float(s.pos) * cell - 1),
              ImVec2(p.x + float(n) * cell + 1, p.y + float(s.pos + 1) * cell + 1), IM_COL32(255, 200, 40, 255), 0, 0,
              2);
  ImGui::Dummy(ImVec2(float(n) * cell, float(n) * cell));
}

void vector_numbers(App& app, const BlockSnapshot& s, const Stage& st, const Flow& fl, int head) {
  switch (st.kind) {
    case StageKind::Norm:
    case StageKind::FinalNorm: {
      if (!fl.in.empty()) {
        double mu = 0, var = 0;
        const bool ln = s.cfg.norm == ds::NormKind::LayerNorm;
        if (ln) {
          for (float v : fl.in) mu += v;
          mu /= double(fl.in.size());
        }
        for (float v : fl.in) var += (v - mu) * (v - mu);
        var /= double(fl.in.size());
        ImGui::PushTextWrapPos(0);
        if (ln)
          ImGui::Text("\u03bc = %.4f    \u03c3 = %.4f    (x \u2212 \u03bc) / \u03c3, then \u2299 \u03b3%s", mu,
                      std::sqrt(var + double(s.cfg.norm_eps)), s.cfg.norm_bias ? " + \u03b2" : "");
        else
          ImGui::Text("rms(x) = \u221a(mean(x\u00b2) + \u03b5) = %.4f    x / rms(x), then \u2299 \u03b3",
                      std::sqrt(var + double(s.cfg.norm_eps)));
        ImGui::PopTextWrapPos();
      }
      const std::vector<StripRow> rows = norm_rows(fl.in, fl.out, s.cfg);
      app.state<BlockState>().shown.norm_in = rows[0].v;
      app.state<BlockState>().shown.norm_std = rows[1].v;
      strips(app, rows);
      break;
    }
    case StageKind::SubNorm: {
      const bool attn = st.norm == 1;
      if (!fl.in.empty()) {
        double ms = 0;
        for (float v : fl.in) ms += double(v) * v;
        ms /= double(fl.in.size());
        ImGui::PushTextWrapPos(0);
        ImGui::Text("\u221a(mean(x\u00b2) + \u03b5) = %.4f:  x is divided by it, then \u2299 \u03b3",
                    std::sqrt(ms + double(s.cfg.norm_eps)));
        ImGui::PopTextWrapPos();
      }
      strips(app, {{attn ? "attn_out (the attention's output)" : "mlp_out (the FFN's output)", fl.in},
                   {"x / rms(x)  (before \u03b3)", standardized(fl.in, ds::NormKind::RMSNorm, s.cfg.norm_eps)},
                   {"normalised (\u2299 \u03b3)", fl.out}});
      ImGui::TextWrapped(
          "No hook point lies between this norm and the add, so \"normalised\" is derived: %s minus %s, the "
          "stream after the add minus the stream before it (to float32 rounding).",
          attn ? "resid_mid" : "resid_post", attn ? "resid_pre" : "resid_mid");
      break;
    }
    case StageKind::Add: {
      std::vector<float> added;
      if (fl.in.size() == fl.out.size())
        for (size_t i = 0; i < fl.in.size(); ++i) added.push_back(fl.out[i] - fl.in[i]);
      strips(app, {{"x (the stream)", fl.in}, {"+ the sub-layer's output", added}, {"= x + sub-layer", fl.out}});
      ImGui::Text("|x| = %.3f  \u2192  |x + sub-layer| = %.3f", norm2(fl.in), norm2(fl.out));
      break;
    }
    case StageKind::OutProj: {
      const bool cross = st.group == 1;
      strips(app,
             {{"z of every head, side by side", orEmpty(s.get(cross ? "cross_attn.z" : "attn.z"))}, {"out", fl.out}});
      break;
    }
    case StageKind::FFNDown:
      strips(app, {{"a (hidden activations)", orEmpty(s.get("mlp.post"))}, {"FFN(x)", fl.out}});
      break;
    default:
      strip(app, "x", fl.out);
  }
  (void)head;
}

void block_numbers(App& app, BlockState& bs, const BlockSnapshot& s, const Stage& st, const Flow& fl, int head) {
  const int dh = s.cfg.d_head;
  switch (st.kind) {
    case StageKind::QKV:
    case StageKind::QKNorm:
      qkv_numbers(app, bs, s, st, head);
      break;
    case StageKind::Mask:
      key_table(app, bs, s, st, head);
      if (st.group == 0) mask_matrix(app, s);
      break;
    case StageKind::Scores:
      key_table(app, bs, s, st, head);
      if (st.group == 0) number_tables(app, bs, s, head, false, true);
      break;
    case StageKind::Softmax:
      key_table(app, bs, s, st, head);
      break;
    case StageKind::Mix: {
      char lab[64];
      std::snprintf(lab, sizeof lab, "z of head %d", head);
      strip(app, lab, slice(s.get(st.group == 1 ? "cross_attn.z" : "attn.z"), head * dh, dh));
      key_table(app, bs, s, st, head);
      break;
    }
    case StageKind::FFNUp:
    case StageKind::FFNAct:
      ffn_numbers(app, s);
      break;
    case StageKind::Logits:
      logits_numbers(app, s);
      break;
    default:
      vector_numbers(app, s, st, fl, head);
  }
}

// The lines of core/model/reference.cpp that compute the stage.
void block_code(App& app, BlockState& bs, const Stage& st, float font) {
  ImGui::Separator();
  ImGui::Checkbox("The code that computes it", &bs.code);
  tooltip(app,
          "The lines of core/model/reference.cpp, the reference forward pass in plain loops, that compute this "
          "stage: the engine that made these numbers is tested against it.");
  ImGui::SameLine();
  ImGui::TextDisabled("core/model/reference.cpp");
  if (!bs.code) return;
  // The rest of the column, at least some ten lines (the column scrolls to them).
  ImGui::BeginChild("code", ImVec2(0, std::max(font * 11, ImGui::GetContentRegionAvail().y)), true,
                    ImGuiWindowFlags_HorizontalScrollbar);
  if (app.look.mono_font) ImGui::PushFont(app.look.mono_font);
  for (const std::string& fn : st.functions) {
    int first = 0;
    std::string text;
    if (!reference_function(fn, first, text)) continue;
    int line = first;
    size_t at = 0;
    while (at < text.size()) {
      const size_t nl = text.find('\n', at);
      const std::string l = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      ImGui::TextDisabled("%4d", line++);
      ImGui::SameLine();
      if (l.rfind("//", 0) == 0 || l.find("  //") != std::string::npos)
        ImGui::TextColored(ImVec4(0.45f, 0.75f, 0.45f, 1), "%s", l.c_str());
      else
        ImGui::TextUnformatted(l.c_str());
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
    ImGui::Spacing();
  }
  if (app.look.mono_font) ImGui::PopFont();
  ImGui::EndChild();
}

// The opened stage: its title, equation and sentence, its numbers and its code, in one
// column that scrolls; what it drew is kept for the sidecar (BlockShown).
void block_detail(App& app, BlockState& bs, const BlockSnapshot& s, const Stage& st, const Flow& fl, int head) {
  const float font = ImGui::GetFontSize();
  BlockShown& shown = bs.shown;
  shown = BlockShown{};
  shown.stage = st.id;
  shown.window_w = ImGui::GetIO().DisplaySize.x, shown.window_h = ImGui::GetIO().DisplaySize.y;
  ImGui::BeginChild("detail", ImVec2(0, 0), false);
  shown.detail_x1 = ImGui::GetWindowPos().x + ImGui::GetWindowWidth();
  shown.detail_y1 = ImGui::GetWindowPos().y + ImGui::GetWindowHeight();
  ImGui::PushStyleColor(ImGuiCol_Text, accent(app));
  ImGui::TextWrapped("%s", st.title.c_str());
  ImGui::PopStyleColor();
  ImGui::PushStyleColor(ImGuiCol_Text, app.look.light ? ImVec4(0.1f, 0.3f, 0.7f, 1) : ImVec4(0.55f, 0.85f, 1.0f, 1));
  shown.eq_avail = ImGui::GetContentRegionAvail().x;
  ImGui::TextWrapped("%s", st.equation.c_str());
  shown.eq_w = ImGui::GetItemRectSize().x;
  ImGui::PopStyleColor();
  // Narrow (presenter mode on a small screen): the numbers first, the sentence after them.
  const bool narrow = bs.narrow = ImGui::GetContentRegionAvail().y < font * 20;
  if (!narrow) ImGui::TextWrapped("%s", st.explain.c_str());
  ImGui::Separator();
  block_numbers(app, bs, s, st, fl, head);
  if (narrow) {
    ImGui::Separator();
    ImGui::TextWrapped("%s", st.explain.c_str());
  }
  block_code(app, bs, st, font);
  shown.content_x1 = ImGui::GetCurrentWindow()->DC.CursorMaxPos.x;
  ImGui::EndChild();
}

}  // namespace

// The Block view's last frame as a JSON object, for the scripted test's sidecar.
std::string block_sidecar(App& app) {
  const BlockShown& b = app.state<BlockState>().shown;
  std::ostringstream f;
  f << "{\"stage\": \"" << b.stage << "\", \"eq_w\": " << b.eq_w << ", \"eq_avail\": " << b.eq_avail
    << ", \"detail_x1\": " << b.detail_x1 << ", \"detail_y1\": " << b.detail_y1 << ", \"content_x1\": " << b.content_x1
    << ", \"window_w\": " << b.window_w << ", \"window_h\": " << b.window_h << ", \"key_rows\": " << b.key_rows
    << ", \"key_visible\": " << b.key_visible << ", \"key_row_h\": " << b.key_row_h << ", \"key_top\": " << b.key_top
    << ", \"computed_end\": " << b.computed_end << ", \"key_state\": [";
  for (size_t i = 0; i < b.key_state.size(); ++i) f << (i ? "," : "") << b.key_state[i];
  f << "], \"strips\": [";
  for (size_t i = 0; i < b.strips.size(); ++i) f << (i ? ", " : "") << "{\"scale\": " << b.strips[i].second << "}";
  f << "], \"tables\": [";
  for (size_t i = 0; i < b.tables.size(); ++i)
    f << (i ? ", " : "") << "{\"name\": \"" << b.tables[i].first.substr(0, 1) << "\", \"scale\": " << b.tables[i].second
      << "}";
  f << "], \"norm_in\": [";
  for (size_t i = 0; i < b.norm_in.size(); ++i) f << (i ? "," : "") << b.norm_in[i];
  f << "], \"norm_std\": [";
  for (size_t i = 0; i < b.norm_std.size(); ++i) f << (i ? "," : "") << b.norm_std[i];
  f << "]}";
  return f.str();
}

void panel_block(App& app) {
  BlockState& bs = app.state<BlockState>();
  view_caption(app, "block");
  if (!has_step(app)) return;
  const ds::Config& cfg = app.history.trace.config;
  const float font = ImGui::GetFontSize();
  layer_head_controls(app, app.sel.layer, app.sel.head, "block");
  const int head = std::max(0, app.sel.head);
  const int pos = app.selected_position();
  const auto& toks = app.tokens();
  flow(font * 24);
  ImGui::AlignTextToFramePadding();
  ImGui::Text("Token: position %d \"%s\"", pos,
              pos >= 0 && pos < int(toks.size()) ? visible(toks[size_t(pos)].text).c_str() : "?");
  tooltip(app, "Click a token in the strip above (or a row of the Attention view) to follow another token.");
  const BlockSnapshot* s = block_snapshot(app, app.sel.layer, head);
  if (!app.engine.model) {
    ImGui::TextDisabled(
        "The Block view runs the model again to show every number inside the block: load the model "
        "this trace came from.");
    return;
  }
  if (!s) {
    ImGui::TextDisabled("running the block...");
    return;
  }
  // Decoder-only blocks call their FFN's norm LN2 and its add add2 (the engine's ln3).
  if (!s->cfg.encoder_decoder && (bs.stage == "ln3" || bs.stage == "add3")) bs.stage.back() = '2';
  if (!s->error.empty()) {
    ImGui::TextColored(ImVec4(1, 0.5f, 0.4f, 1), "%s", s->error.c_str());
    return;
  }
  bs.key_end = computed_keys(app.history.trace, app.sel.cursor, s->pos);
  const std::vector<Stage> stages = block_stages(s->cfg, s->layer, &s->biases);
  const std::vector<Flow> fl = flows(*s, stages, head);
  size_t open = 0;
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].id == bs.stage) open = i;
  bs.stage = stages[open].id;
  if (block_waiting(app)) {
    ImGui::SameLine();
    ImGui::TextDisabled("(updating...)");
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Side by side when the detail keeps some 30 characters' width; else the diagram
  // above the detail, each scrolling on its own, never cut.
  const bool side = avail.x >= font * 50;
  const float dw = side ? std::clamp(avail.x * 0.36f, font * 19, font * 34) : avail.x;
  const float dh = side ? avail.y : std::max(font * 5.0f, avail.y * 0.22f);
  ImGui::BeginChild("diagram", ImVec2(dw, dh), false);
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("Layer %d of %d: %s", s->layer, cfg.n_layers, block_summary(s->cfg, s->layer).c_str());
  ImGui::PopTextWrapPos();
  diagram(app, bs, stages, fl, s->cfg.norm_place == ds::NormPlace::Post);
  ImGui::EndChild();
  if (side) ImGui::SameLine();
  block_detail(app, bs, *s, stages[open], fl[open], head);
}

}  // namespace dsgui
