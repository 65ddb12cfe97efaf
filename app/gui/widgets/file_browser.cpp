// The in-window file browser (file_browser.h).
#include "widgets/file_browser.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "imgui.h"
#include "imgui_stdlib.h"
#include "widgets/text.h"

namespace dsgui {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

bool wanted_file(const std::string& name, BrowseFor use) {
  const std::string ext = lower(fs::path(name).extension().string());
  if (use == BrowseFor::Model) return ext == ".bin" || ext == ".safetensors" || ext == ".gguf";
  if (use == BrowseFor::Trace || use == BrowseFor::SaveTrace) return ext == ".dstrace" || ext == ".json";
  if (use == BrowseFor::SavePng) return ext == ".png";
  return false;
}

// The reason a folder cannot be read, in words.
std::string why(const std::error_code& ec) {
  if (ec == std::errc::permission_denied) return "permission denied";
  if (ec == std::errc::no_such_file_or_directory) return "there is no such folder";
  if (ec == std::errc::not_a_directory) return "it is a file, not a folder";
  return ec.message();
}

}  // namespace

std::vector<FileEntry> list_folder(const std::string& dir, BrowseFor use, std::string& error) {
  error.clear();
  std::vector<FileEntry> out;
  const fs::path d = dir.empty() ? fs::path(".") : fs::path(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) {
    error = "cannot list " + d.string() + ": " + (ec ? why(ec) : "it is not a folder");
    return out;
  }
  fs::directory_iterator it(d, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    error = "cannot list " + d.string() + ": " + why(ec);
    return out;
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      error = "stopped listing " + d.string() + ": " + why(ec);
      break;
    }
    FileEntry e;
    e.name = it->path().filename().string();
    if (e.name.empty() || e.name[0] == '.') continue;
    std::error_code ec2;
    e.folder = it->is_directory(ec2);
    if (e.folder) {
      e.model_folder = use == BrowseFor::Model && fs::is_regular_file(it->path() / "config.json", ec2);
    } else if (!wanted_file(e.name, use)) {
      continue;
    }
    out.push_back(std::move(e));
    if (out.size() >= 5000) {
      error = "only the first 5000 entries are listed";
      break;
    }
  }
  std::sort(out.begin(), out.end(), [](const FileEntry& a, const FileEntry& b) {
    return a.folder != b.folder ? a.folder : lower(a.name) < lower(b.name);
  });
  return out;
}

namespace {

// The folder a typed path names: itself when it is one, else its parent.
std::string folder_of(const std::string& path) {
  std::error_code ec;
  if (!path.empty() && fs::is_directory(path, ec)) return path;
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir == "." ? name : (fs::path(dir) / name).string();
}

}  // namespace

bool file_browser(FileBrowser& fb, BrowseFor use, std::string& path, float height) {
  const float font = ImGui::GetFontSize();
  if (fb.dir.empty()) {  // the folder of the path in the box, written out in full
    std::error_code ec;
    const fs::path abs = fs::absolute(fs::path(folder_of(path)), ec);
    fs::path n = abs.lexically_normal();
    if (n.filename().empty() && n.has_parent_path()) n = n.parent_path();  // "/a/b/" is "/a/b"
    fb.dir = ec ? folder_of(path) : n.string();
  }
  if (fb.listed != fb.dir || fb.listed_for != use) {
    fb.entries = list_folder(fb.dir, use, fb.error);
    fb.listed = fb.dir;
    fb.listed_for = use;
    fb.selected = -1;
  }
  bool chosen = false;
  if (ImGui::Button("Up")) {
    std::error_code ec;
    fs::path abs = fs::absolute(fs::path(fb.dir), ec);
    fs::path n = abs.lexically_normal();
    if (n.filename().empty() && n.has_parent_path()) n = n.parent_path();  // "/a/b/" is "/a/b"
    if (!ec) fb.dir = n.parent_path().string();
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("The folder that holds this one");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 26);
  std::string typed = fb.dir;
  if (ImGui::InputText("folder", &typed, ImGuiInputTextFlags_EnterReturnsTrue)) fb.dir = typed;
  if (!fb.error.empty()) ImGui::TextColored(readable(ImVec4(1.0f, 0.4f, 0.35f, 1)), "%s", fb.error.c_str());
  ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_PopupBg);
  bg.w = 1;  // opaque: what is behind the dialog does not show through the list
  ImGui::PushStyleColor(ImGuiCol_ChildBg, bg);
  ImGui::BeginChild("##files", ImVec2(font * 34, height), true);
  const std::string dir = fb.dir;
  for (int i = 0; i < int(fb.entries.size()); ++i) {
    const FileEntry& e = fb.entries[size_t(i)];
    const std::string label = (e.folder ? (e.model_folder ? "[model] " : "[folder] ") : "") + e.name;
    ImGui::PushID(i);
    if (ImGui::Selectable(label.c_str(), fb.selected == i, ImGuiSelectableFlags_AllowDoubleClick)) {
      fb.selected = i;
      const std::string full = join(dir, e.name);
      if (is_save(use)) {
        path = e.folder ? join(full, fs::path(path).filename().string()) : full;
      } else {
        path = full;
      }
      if (ImGui::IsMouseDoubleClicked(0)) {
        if (e.folder && (!e.model_folder || is_save(use)))
          fb.dir = full;
        else
          chosen = !is_save(use);
      }
    }
    ImGui::PopID();
  }
  if (fb.entries.empty() && fb.error.empty())
    ImGui::TextDisabled(use == BrowseFor::Model   ? "no model files or folders here"
                        : use == BrowseFor::Trace ? "no traces (.dstrace, .json) here"
                                                  : "no folders here");
  ImGui::EndChild();
  ImGui::PopStyleColor();
  ImGui::TextDisabled(is_save(use) ? "Double-click a folder to go in; click a file to replace it, or type a new name."
                                   : "Double-click to open; a folder to go in.");
  return chosen;
}

std::string next_numbered_png(const std::string& dir, const std::string& stem) {
  const fs::path d = dir.empty() ? fs::path(".") : fs::path(dir);
  const std::string head = stem + "-";
  long highest = 0;
  std::error_code ec;
  fs::directory_iterator it(d, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= head.size() + 4 || name.compare(0, head.size(), head) != 0 ||
        lower(name.substr(name.size() - 4)) != ".png")
      continue;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - 4);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    highest = std::max(highest, std::stol(digits));
  }
  char num[24];
  std::snprintf(num, sizeof num, "%03ld", highest + 1);
  return (d / (head + num + ".png")).string();
}

}  // namespace dsgui
