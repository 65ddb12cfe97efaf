#pragma once
// Text and colours that read in both themes (text.cpp).
#include <string>

#include "imgui.h"

namespace dsgui {

// The window's theme is light (its background is bright).
bool light_background();
// c made dark enough to read on a light background (unchanged on a dark one).
ImVec4 readable(ImVec4 c);
// Black or white, whichever reads better on bg.
ImU32 text_on(ImU32 bg);
// s cut (with "...") to fit width pixels in the current font; s when it fits.
std::string fit_text(const std::string& s, float width);

}  // namespace dsgui
