#include "shell/window_io.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>

#include "backends/imgui_impl_opengl3.h"
#include "imgui.h"
#include "shell/app.h"
#include "stb_image_write.h"
#include "util/atomic_file.h"
#include "util/data_dir.h"
#include "util/error.h"
#include "widgets/gl.h"

namespace dsgui {

std::string font_file(const char* name) {
  std::string p = ds::find_data(std::string("fonts/") + name);
  return p.empty() ? std::string("/usr/share/fonts/truetype/dejavu/") + name : p;
}

void apply_fonts_and_style(App& app, bool first) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  const float px = std::round(18.0f * app.look.ui_scale);
  // Latin-1 and Latin Extended-A, Greek (the equations' mu, sigma, gamma... and Greek
  // text), Cyrillic, sub- and superscripts, arrows, the maths signs the views write,
  // the whitespace symbols, the play triangles.
  static const ImWchar ranges[] = {0x0020, 0x017F, 0x0370, 0x03FF, 0x0400, 0x04FF, 0x1D40, 0x1D4D, 0x2013,
                                   0x2026, 0x2070, 0x208E, 0x2190, 0x2193, 0x2205, 0x2205, 0x2211, 0x2212,
                                   0x221A, 0x221A, 0x221E, 0x221E, 0x2264, 0x2265, 0x2295, 0x2299, 0x22C5,
                                   0x22C5, 0x23CE, 0x23CE, 0x2423, 0x2423, 0x25B2, 0x25C0, 0};
  ImFont* f = nullptr;
  std::error_code ec;
  const std::string font = font_file("DejaVuSans.ttf"), mono = font_file("DejaVuSansMono.ttf");
  if (std::filesystem::exists(font, ec)) {
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    f = io.Fonts->AddFontFromFileTTF(font.c_str(), px, &cfg, ranges);
  }
  dsgui::set_unicode_font(f != nullptr);
  app.look.mono_font = nullptr;
  if (f && std::filesystem::exists(mono, ec)) {
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    app.look.mono_font = io.Fonts->AddFontFromFileTTF(mono.c_str(), std::round(px * 0.9f), &cfg, ranges);
  }
  if (!f) {
    ImFontConfig cfg;
    cfg.SizePixels = px;
    io.Fonts->AddFontDefault(&cfg);
  }
  if (!first) {
    ImGui_ImplOpenGL3_DestroyFontsTexture();
    ImGui_ImplOpenGL3_CreateFontsTexture();
  }
  ImGuiStyle st;
  if (app.look.light)
    ImGui::StyleColorsLight(&st);
  else
    ImGui::StyleColorsDark(&st);
  st.FrameRounding = 4;
  st.GrabRounding = 4;
  st.TabRounding = 4;
  st.WindowBorderSize = 0;
  st.ItemSpacing = ImVec2(8, 6);
  st.FramePadding = ImVec2(6, 4);
  if (!app.look.light) st.Colors[ImGuiCol_WindowBg] = ImVec4(0.09f, 0.09f, 0.10f, 1);
  st.ScaleAllSizes(app.look.ui_scale);
  ImGui::GetStyle() = st;
  app.look.font_dirty = false;
}

namespace {

// A PNG of w x h pixels of `channels` bytes each, written through stb_image_write's
// callback into an atomic save (util/atomic_file.h): a failed or interrupted save
// leaves the previous file at path as it was. The callback is called from C code, so
// it never throws: the first failure is kept and reported when stb returns.
bool save_png(const std::string& path, int w, int h, int channels, const uint8_t* px, bool flip, std::string* error) {
  try {
    ds::save_file(path, [&](ds::SaveFile& f) {
      struct Sink {
        ds::SaveFile* file;
        std::exception_ptr failed;
      } sink{&f, nullptr};
      auto put = [](void* ctx, void* data, int size) {
        auto* s = static_cast<Sink*>(ctx);
        if (s->failed || size <= 0) return;
        try {
          s->file->write(data, size_t(size));
        } catch (...) {
          s->failed = std::current_exception();
        }
      };
      stbi_flip_vertically_on_write(flip ? 1 : 0);
      const int ok = stbi_write_png_to_func(put, &sink, w, h, channels, px, w * channels);
      stbi_flip_vertically_on_write(0);
      if (sink.failed) std::rethrow_exception(sink.failed);
      if (!ok) throw ds::Error(path + ": cannot save: the PNG encoder failed");
    });
    return true;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

}  // namespace

bool write_png(const std::string& path, int w, int h, const std::vector<uint8_t>& rgba_top_down, std::string* error) {
  return save_png(path, w, h, 4, rgba_top_down.data(), false, error);
}

// The whole window: read the back buffer before the swap.
bool save_window(const std::string& path, int w, int h, std::string* error) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, px.data());
  return save_png(path, w, h, 3, px.data(), true, error);
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace dsgui
