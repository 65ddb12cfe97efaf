#pragma once
// What the window's loop needs besides the views: fonts and style for the scale and
// theme, PNG files of the window and of a heatmap, and a clock.
#include <cstdint>
#include <string>
#include <vector>

namespace dsgui {

class App;

// Fonts and style for the current scale and theme. The first call happens before the
// backend builds its font texture; later ones rebuild it.
void apply_fonts_and_style(App& app, bool first);
// The font file NAME (DejaVuSans.ttf): fonts/NAME of decoderscope's data (util/data_dir.h),
// else the system's copy from Debian's fonts-dejavu-core.
std::string font_file(const char* name);
// RGBA pixels, top row first, to a PNG file. Both PNG saves replace the file
// atomically (util/atomic_file.h); on failure they return false, leave the previous
// file as it was and, given error, set it to the reason.
bool write_png(const std::string& path, int w, int h, const std::vector<uint8_t>& rgba_top_down,
               std::string* error = nullptr);
// The whole window (the back buffer, before the swap) to a PNG file.
bool save_window(const std::string& path, int w, int h, std::string* error = nullptr);
// Seconds on a steady clock.
double now_s();

}  // namespace dsgui
