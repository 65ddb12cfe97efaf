// Small drawing pieces the views and the shell share: colours, hatching, bars, legends,
// rotated text, a row that flows onto the next line. Nothing here knows App.
#include "widgets/draw.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "widgets/text.h"

namespace dsgui {

ImU32 cmap_u32(int cmap, float t) {
  auto c = colormap(cmap, t);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(c[0], c[1], c[2], 1.0f));
}

ImU32 diverging(float t, bool light) {
  t = std::clamp(std::isfinite(t) ? t : 0.0f, -1.0f, 1.0f);
  const float a = std::fabs(t);
  const ImVec4 mid = light ? ImVec4(0.96f, 0.96f, 0.96f, 1) : ImVec4(0.16f, 0.16f, 0.18f, 1);
  const ImVec4 end = t < 0 ? ImVec4(0.23f, 0.49f, 0.95f, 1) : ImVec4(0.93f, 0.33f, 0.25f, 1);
  return ImGui::ColorConvertFloat4ToU32(
      ImVec4(mid.x + (end.x - mid.x) * a, mid.y + (end.y - mid.y) * a, mid.z + (end.z - mid.z) * a, 1));
}

void vertical_text(ImDrawList* dl, ImVec2 pos, ImU32 col, const char* text) {
  // ImGui clips text on the CPU against the current clip rectangle before we rotate
  // it, so lay it out under an unlimited one, then give its draw command the window's
  // clip rectangle back for the GPU.
  const ImVec2 cmin = dl->GetClipRectMin(), cmax = dl->GetClipRectMax();
  dl->PushClipRect(ImVec2(-1e6f, -1e6f), ImVec2(1e6f, 1e6f), false);
  const int v0 = dl->VtxBuffer.Size;
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), pos, col, text);
  for (int i = v0; i < dl->VtxBuffer.Size; ++i) {
    ImVec2& p = dl->VtxBuffer[i].pos;
    float dx = p.x - pos.x, dy = p.y - pos.y;
    p = ImVec2(pos.x + dy, pos.y - dx);
  }
  if (!dl->CmdBuffer.empty()) dl->CmdBuffer.back().ClipRect = ImVec4(cmin.x, cmin.y, cmax.x, cmax.y);
  dl->PopClipRect();
}

void hatch_rect(ImDrawList* dl, ImVec2 a, ImVec2 b) {
  const ImU32 ca = IM_COL32(kMaskA[0], kMaskA[1], kMaskA[2], 255);
  const ImU32 cb = IM_COL32(kMaskB[0], kMaskB[1], kMaskB[2], 255);
  dl->AddRectFilled(a, b, cb);
  dl->PushClipRect(a, b, true);
  const float h = b.y - a.y;
  for (float x = a.x - h; x < b.x; x += 8.0f) dl->AddLine(ImVec2(x, b.y), ImVec2(x + h, a.y), ca, 4.0f);
  dl->PopClipRect();
}

void flow(float w) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x * 2 + w <= right)
    ImGui::SameLine(0, ImGui::GetStyle().ItemSpacing.x * 2);
}

void bar(float f, float w, ImU32 col, const char* overlay, ImU32 bg) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  float h = ImGui::GetFrameHeight() * 0.8f;
  if (!bg) bg = ImGui::GetColorU32(ImGuiCol_FrameBg);
  dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), bg);
  f = std::clamp(std::isfinite(f) ? f : 0.0f, 0.0f, 1.0f);
  const float fx = f > 0 ? p.x + std::max(1.0f, w * f) : p.x;
  if (f > 0) dl->AddRectFilled(p, ImVec2(fx, p.y + h), col);
  if (overlay) {  // black or white over the fill, and over the rest, whichever reads on each
    ImVec2 ts = ImGui::CalcTextSize(overlay);
    const ImVec2 at(p.x + 4, p.y + (h - ts.y) * 0.5f);
    dl->PushClipRect(ImVec2(p.x, p.y - h), ImVec2(fx, p.y + 2 * h), true);
    dl->AddText(at, text_on(col), overlay);
    dl->PopClipRect();
    dl->PushClipRect(ImVec2(fx, p.y - h), ImVec2(p.x + std::max(w, ts.x + 8), p.y + 2 * h), true);
    dl->AddText(at, text_on(bg), overlay);
    dl->PopClipRect();
  }
  ImGui::Dummy(ImVec2(w, h));
}

void legend(const HeatStyle& st, const char* value_name, bool show_mask) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::TextUnformatted(value_name);
  ImGui::SameLine();
  p = ImGui::GetCursorScreenPos();
  const float w = font * 14, h = font;
  if (st.mask_only) {
    dl->AddRectFilled(p, ImVec2(p.x + h * 2, p.y + h),
                      ImGui::ColorConvertFloat4ToU32(ImVec4(st.allowed[0], st.allowed[1], st.allowed[2], 1)));
    ImGui::Dummy(ImVec2(h * 2, h));
    ImGui::SameLine();
    ImGui::TextUnformatted("allowed (may look here)");
  } else {
    // The colormap is piecewise linear in 9 segments: each is an exact gradient.
    const int n = st.cmap == kGreys ? 1 : 9;
    for (int i = 0; i < n; ++i) {
      float x0 = p.x + w * i / n, x1 = p.x + w * (i + 1) / n;
      ImU32 c0 = cmap_u32(st.cmap, float(i) / n), c1 = cmap_u32(st.cmap, float(i + 1) / n);
      dl->AddRectFilledMultiColor(ImVec2(x0, p.y), ImVec2(x1, p.y + h), c0, c1, c1, c0);
    }
    ImGui::Dummy(ImVec2(w, h));
    char lo[32], mid[32], hi[32];
    float vm = st.log ? std::sqrt(std::max(st.vmin, 1e-4f) * std::max(st.vmax, 1e-4f)) : 0.5f * (st.vmin + st.vmax);
    std::snprintf(lo, sizeof lo, "%.3g", st.log ? std::max(st.vmin, 1e-4f) : st.vmin);
    std::snprintf(mid, sizeof mid, "%.3g", vm);
    std::snprintf(hi, sizeof hi, "%.3g", st.vmax);
    ImVec2 q = ImGui::GetCursorScreenPos();
    ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
    dl->AddText(ImVec2(p.x, q.y), tc, lo);
    dl->AddText(ImVec2(p.x + w * 0.5f - ImGui::CalcTextSize(mid).x * 0.5f, q.y), tc, mid);
    dl->AddText(ImVec2(p.x + w - ImGui::CalcTextSize(hi).x, q.y), tc, hi);
    ImGui::SetCursorScreenPos(ImVec2(p.x + w + font, p.y));
    ImGui::Text("%s scale", st.log ? "log" : "linear");
  }
  if (show_mask) {
    ImGui::SameLine(0, font * 1.5f);
    ImVec2 m = ImGui::GetCursorScreenPos();
    hatch_rect(dl, m, ImVec2(m.x + h * 2, m.y + h));
    ImGui::Dummy(ImVec2(h * 2, h));
    ImGui::SameLine();
    ImGui::TextUnformatted("masked: the model may not look here");
  }
  ImGui::Dummy(ImVec2(0, font));
}

void legend_vertical(const HeatStyle& st, const char* value_name, bool show_mask, float height) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const ImU32 tc = ImGui::GetColorU32(ImGuiCol_Text);
  ImGui::BeginGroup();
  ImGui::TextUnformatted(value_name);
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = font * 1.2f, h = std::max(font * 4, height);
  if (st.mask_only) {
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + font * 1.5f),
                      ImGui::ColorConvertFloat4ToU32(ImVec4(st.allowed[0], st.allowed[1], st.allowed[2], 1)));
    dl->AddText(ImVec2(p.x + w + font * 0.4f, p.y + font * 0.2f), tc, "allowed");
    ImGui::Dummy(ImVec2(w, font * 1.5f));
  } else {
    const int n = st.cmap == kGreys ? 1 : 9;
    for (int i = 0; i < n; ++i) {  // top = high values
      float y0 = p.y + h * i / n, y1 = p.y + h * (i + 1) / n;
      ImU32 c0 = cmap_u32(st.cmap, 1.0f - float(i) / n), c1 = cmap_u32(st.cmap, 1.0f - float(i + 1) / n);
      dl->AddRectFilledMultiColor(ImVec2(p.x, y0), ImVec2(p.x + w, y1), c0, c0, c1, c1);
    }
    char lo[32], mid[32], hi[32];
    float a = st.log ? std::max(st.vmin, 1e-4f) : st.vmin;
    float vm = st.log ? std::sqrt(a * std::max(st.vmax, 1e-4f)) : 0.5f * (st.vmin + st.vmax);
    std::snprintf(lo, sizeof lo, "%.3g", a);
    std::snprintf(mid, sizeof mid, "%.3g", vm);
    std::snprintf(hi, sizeof hi, "%.3g", st.vmax);
    const float x = p.x + w + font * 0.4f;
    dl->AddText(ImVec2(x, p.y), tc, hi);
    dl->AddText(ImVec2(x, p.y + h * 0.5f - font * 0.5f), tc, mid);
    dl->AddText(ImVec2(x, p.y + h - font), tc, lo);
    ImGui::Dummy(ImVec2(w, h));
    ImGui::TextDisabled("%s scale", st.log ? "log" : "linear");
  }
  if (show_mask) {
    ImGui::Dummy(ImVec2(0, font * 0.5f));
    ImVec2 m = ImGui::GetCursorScreenPos();
    hatch_rect(dl, m, ImVec2(m.x + w, m.y + font * 1.5f));
    ImGui::Dummy(ImVec2(w, font * 1.5f));
    ImGui::SameLine();
    ImGui::TextUnformatted("masked:\nmay not\nlook here");
  }
  ImGui::EndGroup();
}

void tooltip(bool enabled, const char* text) {
  if (!enabled || !ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) return;
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
  ImGui::TextUnformatted(text);
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

}  // namespace dsgui
