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
// A message for a class: every absolute path in s (from '/' up to a space, a quote, a
// comma or a colon followed by a space) shortened to its file name. The message's full
// text goes behind a "Details" toggle.
std::string without_folders(const std::string& s);
// without_folders, and the names of tensors after the word "tensor" left out ("weight tensor
// blk.0.attn_q.weight holds a NaN" -> "weight tensor holds a NaN"): a teacher's popup.
std::string plain_words(const std::string& s);

}  // namespace dsgui
