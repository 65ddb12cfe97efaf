#include "util/data_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "util/error.h"

namespace fs = std::filesystem;

namespace ds {

namespace {

// A relative name that stays inside the folder it is looked up in.
bool inside(const std::string& name) {
  if (name.empty()) return false;
  const fs::path p(name);
  if (p.is_absolute() || p.has_root_name()) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

// The program runs from the folder it was built in.
bool in_build_tree(const DataSearch& s) {
  if (s.exe.empty() || s.build_dir.empty() || s.source_dir.empty()) return false;
  std::error_code ec, ec2;
  const fs::path exe_dir = fs::weakly_canonical(fs::path(s.exe), ec).parent_path();
  const fs::path build = fs::weakly_canonical(fs::path(s.build_dir), ec2);
  return !ec && !ec2 && exe_dir == build;
}

}  // namespace

DataSearch DataSearch::from_process() {
  DataSearch s;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) s.exe = exe.string();
#ifdef DS_BINARY_DIR
  s.build_dir = DS_BINARY_DIR;
#endif
#ifdef DS_SOURCE_DIR
  s.source_dir = DS_SOURCE_DIR;
#endif
  if (const char* env = std::getenv("DECODERSCOPE_DATA"); env && *env) s.env = env;
  return s;
}

std::vector<DataPlace> data_places(const std::string& name, const DataSearch& s) {
  std::vector<DataPlace> out;
  if (!inside(name)) return out;
  if (!s.exe.empty())
    out.push_back(
        {"installed",
         (fs::path(s.exe).parent_path() / ".." / "share" / "decoderscope" / name).lexically_normal().string()});
  if (in_build_tree(s)) {
    const bool shader = fs::path(name).begin()->string() == "shaders";
    const fs::path root = shader ? fs::path(s.source_dir) : fs::path(s.source_dir) / "assets";
    out.push_back({"build tree", (root / name).lexically_normal().string()});
  }
  if (!s.env.empty()) out.push_back({"DECODERSCOPE_DATA", (fs::path(s.env) / name).lexically_normal().string()});
  return out;
}

std::string find_data(const std::string& name, const DataSearch& s) {
  for (const DataPlace& p : data_places(name, s)) {
    std::error_code ec;
    if (fs::exists(p.path, ec)) return p.path;
  }
  return "";
}

std::string require_data(const std::string& name, const std::string& what, const DataSearch& s) {
  if (!inside(name)) throw Error(what + ": '" + name + "' is not a name inside decoderscope's data folder");
  std::string found = find_data(name, s);
  if (!found.empty()) return found;
  std::string looked;
  for (const DataPlace& p : data_places(name, s)) looked += (looked.empty() ? "" : ", ") + p.path + " (" + p.rule + ")";
  if (looked.empty()) looked = "nowhere: the program's own path is unknown";
  std::string hint = s.env.empty() ? "set DECODERSCOPE_DATA to a folder laid out as share/decoderscope"
                                   : "DECODERSCOPE_DATA is " + s.env;
  throw Error(what + ": not found; looked in " + looked + " (" + hint + ")");
}

std::vector<std::string> list_data(const std::string& name, const DataSearch& s) {
  std::vector<std::string> out;
  for (const DataPlace& p : data_places(name, s)) {
    std::error_code ec;
    if (!fs::is_directory(p.path, ec)) continue;
    for (fs::directory_iterator it(p.path, ec), end; !ec && it != end; it.increment(ec))
      out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace ds
