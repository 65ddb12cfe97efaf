#include "shell/recent.h"

#include <cstdio>
#include <filesystem>

#include "imgui.h"
#include "shell/app.h"
#include "shell/trace_io.h"

namespace fs = std::filesystem;

namespace dsgui {

namespace {

struct RecentState {
  std::string path;  // "": nothing is remembered
  Settings settings;
};

void save(App& app) {
  RecentState& r = app.state<RecentState>();
  std::string error;
  if (!r.path.empty() && !save_settings(r.path, r.settings, &error))
    std::fprintf(stderr, "decoderscope: cannot remember the recent files: %s\n", error.c_str());
}

// A path as an absolute one, so that it opens from any folder; specs (builtin:, random:)
// as they are.
std::string absolute(const std::string& spec) {
  std::error_code ec;
  if (spec.rfind("builtin:", 0) == 0 || spec.rfind("random:", 0) == 0 || !fs::exists(spec, ec)) return spec;
  const fs::path p = fs::absolute(spec, ec);
  return ec ? spec : p.lexically_normal().string();
}

}  // namespace

void recent_start(App& app, const std::string& path) {
  RecentState& r = app.state<RecentState>();
  r.path = path;
  std::string notice;
  r.settings = load_settings(path, &notice);
  if (notice.empty()) return;
  std::fprintf(stderr, "decoderscope: %s\n", notice.c_str());
  app.say(notice);
}

void recent_model(App& app, const std::string& spec) {
  RecentState& r = app.state<RecentState>();
  remember(r.settings.recent_models, absolute(spec));
  save(app);
}

void recent_trace(App& app, const std::string& path) {
  RecentState& r = app.state<RecentState>();
  remember(r.settings.recent_traces, absolute(path));
  save(app);
}

void recent_menu(App& app) {
  const Settings s = app.state<RecentState>().settings;  // a copy: a click changes the lists
  if (ImGui::BeginMenu("Recent models", !s.recent_models.empty())) {
    for (const std::string& m : s.recent_models)
      if (ImGui::MenuItem(m.c_str())) app.load_model(m, "");
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Recent traces", !s.recent_traces.empty())) {
    for (const std::string& t : s.recent_traces)
      if (ImGui::MenuItem(t.c_str())) open_trace_in_background(app, t);
    ImGui::EndMenu();
  }
}

const Settings& recent_settings(App& app) { return app.state<RecentState>().settings; }

void default_save_folders(App& app) {
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  const std::string pictures = default_output_dir("PICTURES"), documents = default_output_dir("DOCUMENTS");
  if (!ec && fs::path(pictures) == cwd && fs::path(documents) == cwd) return;  // the relative names stay
  app.inputs.png_path = (fs::path(pictures) / "decoderscope.png").string();
  app.inputs.trace_path = (fs::path(documents) / "trace.dstrace").string();
}

}  // namespace dsgui
