// Text and colours that read in both themes.
#include "widgets/text.h"

namespace dsgui {

bool light_background() {
  const ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  return 0.299f * bg.x + 0.587f * bg.y + 0.114f * bg.z > 0.5f;
}

ImVec4 readable(ImVec4 c) {
  if (!light_background()) return c;
  return ImVec4(c.x * 0.55f, c.y * 0.5f, c.z * 0.5f, c.w);
}

ImU32 text_on(ImU32 bg) {
  const ImVec4 c = ImGui::ColorConvertU32ToFloat4(bg);
  // Over a half-transparent fill the window's background shows through.
  const ImVec4 w = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  const float r = c.x * c.w + w.x * (1 - c.w), g = c.y * c.w + w.y * (1 - c.w), b = c.z * c.w + w.z * (1 - c.w);
  return 0.299f * r + 0.587f * g + 0.114f * b > 0.55f ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255);
}

std::string fit_text(const std::string& s, float width) {
  if (ImGui::CalcTextSize(s.c_str()).x <= width) return s;
  size_t lo = 0, hi = s.size();
  while (lo + 1 < hi) {  // the longest prefix that fits with "..."
    size_t mid = (lo + hi) / 2;
    while (mid > lo && (static_cast<unsigned char>(s[mid]) & 0xC0) == 0x80) --mid;  // a character's start
    if (mid == lo) break;
    if (ImGui::CalcTextSize((s.substr(0, mid) + "...").c_str()).x <= width)
      lo = mid;
    else
      hi = mid;
  }
  return s.substr(0, lo) + "...";
}

std::string without_folders(const std::string& s) {
  std::string out;
  size_t i = 0;
  auto ends = [&](size_t k) {
    const char c = s[k];
    return c == ' ' || c == '"' || c == '\'' || c == ',' || c == '\n' || c == ')' ||
           (c == ':' && (k + 1 == s.size() || s[k + 1] == ' '));
  };
  while (i < s.size()) {
    const bool starts =
        s[i] == '/' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '"' || s[i - 1] == '\'' || s[i - 1] == '(');
    if (!starts) {
      out += s[i++];
      continue;
    }
    size_t j = i;
    while (j < s.size() && !ends(j)) ++j;
    const std::string path = s.substr(i, j - i);
    const size_t slash = path.find_last_of('/', path.size() > 1 && path.back() == '/' ? path.size() - 2 : path.npos);
    out += slash == std::string::npos || slash + 1 >= path.size() ? path : path.substr(slash + 1);
    i = j;
  }
  return out;
}

namespace {

// A tensor's name as the files and traces spell it: no spaces, and dots, underscores or
// digits in it ("blk.0.attn_q.weight", "L3.attn.pattern", "model.layers.2.mlp.up_proj").
bool tensor_like(const std::string& w) {
  if (w.empty()) return false;
  bool mark = false;
  for (char c : w) {
    if (c == '.' || c == '_' || (c >= '0' && c <= '9'))
      mark = true;
    else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-'))
      return false;
  }
  return mark && w.back() != '.';
}

// The length of a tensor name (quoted or not) at t[i], with the space after it; 0 if
// what is there is no tensor name.
size_t name_at(const std::string& t, size_t i) {
  size_t j = i;
  const bool quoted = j < t.size() && (t[j] == '\'' || t[j] == '"');
  if (quoted) ++j;
  size_t k = j;
  while (k < t.size() && t[k] != ' ' && t[k] != ',' && t[k] != ':' && t[k] != '\'' && t[k] != '"' && t[k] != ')') ++k;
  if (!tensor_like(t.substr(j, k - j))) return 0;
  if (quoted && k < t.size() && (t[k] == '\'' || t[k] == '"')) ++k;
  if (k < t.size() && t[k] == ' ') ++k;
  return k - i;
}

}  // namespace

std::string plain_words(const std::string& s) {
  const std::string t = without_folders(s);
  std::string out;
  size_t i = 0;
  auto ends_with = [&](const char* w) {
    const size_t n = std::char_traits<char>::length(w);
    return out.size() >= n && out.compare(out.size() - n, n, w) == 0;
  };
  while (i < t.size()) {
    // "tensor NAME", "tensors NAME or NAME": the word stays, the names go.
    size_t n = ends_with("tensor ") || ends_with("tensors ") ? name_at(t, i) : 0;
    if (n == 0) {
      out += t[i++];
      continue;
    }
    i += n;
    for (const char* joint : {"or ", "and "}) {
      const size_t jl = std::char_traits<char>::length(joint);
      if (t.compare(i, jl, joint) == 0 && (n = name_at(t, i + jl)) > 0) i += jl + n;
    }
    if (t[i - 1] != ' ' && out.back() == ' ') out.pop_back();  // "tensor NAME:" -> "tensor:"
  }
  return out;
}

}  // namespace dsgui
