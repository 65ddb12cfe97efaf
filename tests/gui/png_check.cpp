// Checks the screenshots of the window (tests/gui/gui_test.sh):
//   ds_png_check blank   SHOT.png                 not blank, and SHOT.png.json says no GL error
//   ds_png_check heatmap SHOT.png NAME causal     cells above the diagonal, and only those, have the mask colour
//   ds_png_check heatmap SHOT.png NAME window:N   causal with a sliding window of N: the cells above the
//                                                 diagonal and those N or more keys before the query
//   ds_png_check heatmap SHOT.png NAME nomask     no cell has the mask colour
//   ds_png_check cover   SHOT.png NAME FRACTION   the heatmap is inside the window and spans FRACTION of its
//                                                 width or of its height
//   ds_png_check whole   SHOT.png NAME            the heatmap is inside the view's area and shows every
//                                                 cell (or, cells under a pixel, a square window on
//                                                 the newest tokens)
//   ds_png_check colours SHOT.png NAME FRACTION   at least FRACTION of the heatmap's pixels that are not
//                                                 the mask's lie on the colormap's curve (the sidecar's
//                                                 samples of the function the legends draw with)
//   ds_png_check same    A.png B.png              the two files are byte-for-byte equal
// The window writes SHOT.png.json beside each screenshot with where each heatmap's cells
// are (pixels from the top-left) and the two mask hatch colours; the expected mask is
// computed here from the rule, not read from the window.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "stb_image.h"

namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> px;  // RGB
  const unsigned char* at(int x, int y) const { return &px[(size_t(y) * w + x) * 3]; }
};

bool load(const std::string& path, Image& im) {
  int n = 0;
  unsigned char* d = stbi_load(path.c_str(), &im.w, &im.h, &n, 3);
  if (!d) {
    std::fprintf(stderr, "FAIL %s: cannot read the PNG (%s)\n", path.c_str(), stbi_failure_reason());
    return false;
  }
  im.px.assign(d, d + size_t(im.w) * im.h * 3);
  stbi_image_free(d);
  return true;
}

bool sidecar(const std::string& png, nlohmann::json& j) {
  std::ifstream f(png + ".json");
  if (!f) {
    std::fprintf(stderr, "FAIL %s.json: missing\n", png.c_str());
    return false;
  }
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL %s.json: %s\n", png.c_str(), e.what());
    return false;
  }
  return true;
}

int check_blank(const std::string& path) {
  Image im;
  if (!load(path, im)) return 1;
  std::set<unsigned> colours;
  double sum = 0, sum2 = 0;
  for (int y = 0; y < im.h; y += 2)
    for (int x = 0; x < im.w; x += 2) {
      const unsigned char* p = im.at(x, y);
      colours.insert(unsigned(p[0]) << 16 | unsigned(p[1]) << 8 | p[2]);
      double l = 0.3 * p[0] + 0.59 * p[1] + 0.11 * p[2];
      sum += l;
      sum2 += l * l;
    }
  double n = double((im.w + 1) / 2) * ((im.h + 1) / 2);
  double sd = std::sqrt(std::max(0.0, sum2 / n - (sum / n) * (sum / n)));
  if (colours.size() < 40 || sd < 8) {
    std::fprintf(stderr, "FAIL %s: looks blank (%zu colours, luminance spread %.1f)\n", path.c_str(), colours.size(),
                 sd);
    return 1;
  }
  nlohmann::json j;
  if (!sidecar(path, j)) return 1;
  if (j.value("gl_errors", -1) != 0) {
    std::fprintf(stderr, "FAIL %s: the window reported %d OpenGL errors\n", path.c_str(), j.value("gl_errors", -1));
    return 1;
  }
  if (j.value("width", 0) != im.w || j.value("height", 0) != im.h) {
    std::fprintf(stderr, "FAIL %s: size differs from the sidecar\n", path.c_str());
    return 1;
  }
  // The view's own area (below the tabs) must show something: enough of its pixels
  // differ from its background (its most common colour).
  auto vr = j.at("view_rect").get<std::vector<double>>();
  int vx0 = std::max(0, int(vr[0])), vy0 = std::max(0, int(vr[1]));
  int vx1 = std::min(im.w, int(vr[0] + vr[2])), vy1 = std::min(im.h, int(vr[1] + vr[3]));
  std::map<unsigned, long> hist;
  long total = 0;
  for (int y = vy0; y < vy1; ++y)
    for (int x = vx0; x < vx1; ++x) {
      const unsigned char* p = im.at(x, y);
      ++hist[unsigned(p[0]) << 16 | unsigned(p[1]) << 8 | p[2]];
      ++total;
    }
  long bg = 0;
  for (auto& [c, n] : hist) bg = std::max(bg, n);
  double drawn = total ? 1.0 - double(bg) / double(total) : 0.0;
  if (total < 1000 || drawn < 0.05 || hist.size() < 20) {
    std::fprintf(stderr, "FAIL %s: the view's area is nearly empty (%.1f%% drawn, %zu colours)\n", path.c_str(),
                 100 * drawn, hist.size());
    return 1;
  }
  std::printf("ok %s: %zu colours, luminance spread %.1f, view area %.0f%% drawn\n", path.c_str(), colours.size(), sd,
              100 * drawn);
  return 0;
}

int check_heatmap(const std::string& path, const std::string& name, const std::string& rule) {
  Image im;
  nlohmann::json j;
  if (!load(path, im) || !sidecar(path, j)) return 1;
  std::vector<std::vector<int>> mc;
  for (auto& c : j.at("mask_colors")) mc.push_back(c.get<std::vector<int>>());
  const nlohmann::json* hm = nullptr;
  for (auto& h : j.at("heatmaps"))
    if (h.at("name") == name) hm = &h;
  if (!hm) {
    std::fprintf(stderr, "FAIL %s: no heatmap named %s on screen\n", path.c_str(), name.c_str());
    return 1;
  }
  const double x0 = hm->at("x"), y0 = hm->at("y"), cw = hm->at("cell_w"), ch = hm->at("cell_h");
  const int rows = hm->at("rows"), cols = hm->at("cols");
  // A zoomed or panned map shows a window of the matrix: its top-left matrix cell.
  const int row0 = hm->value("row0", 0), col0 = hm->value("col0", 0);
  if (rows < 2 || cols < 2 || cw < 3 || ch < 3) {
    std::fprintf(stderr, "FAIL %s: heatmap %s is too small to check (%dx%d cells of %.0f px)\n", path.c_str(),
                 name.c_str(), rows, cols, cw);
    return 1;
  }
  // Distance of a pixel to the nearer mask colour.
  auto mask_dist = [&](const unsigned char* p) {
    double best = 1e9;
    for (auto& c : mc) {
      double d = std::sqrt(
          double((p[0] - c[0]) * (p[0] - c[0]) + (p[1] - c[1]) * (p[1] - c[1]) + (p[2] - c[2]) * (p[2] - c[2])));
      best = std::min(best, d);
    }
    return best;
  };
  // window:N: a sliding-window layer (model/mask.h): query q reads keys q-N+1 .. q.
  const int window = rule.rfind("window:", 0) == 0 ? std::atoi(rule.c_str() + 7) : 0;
  const bool causal = rule == "causal" || window > 0;
  int bad = 0, masked = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int q = r + row0, k = c + col0;
      const bool expect = causal && (k > q || (window > 0 && q - k >= window));
      const int cx = int(x0 + (c + 0.5) * cw), cy = int(y0 + (r + 0.5) * ch);
      // The centre and its 8 neighbours must all agree.
      int n_mask = 0, n_clear = 0;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          int x = cx + dx, y = cy + dy;
          if (x < 0 || y < 0 || x >= im.w || y >= im.h) continue;
          double d = mask_dist(im.at(x, y));
          if (d <= 12)
            ++n_mask;
          else if (d >= 60)
            ++n_clear;
        }
      const bool ok = expect ? n_mask == 9 : n_clear == 9;
      masked += n_mask == 9;
      if (!ok && bad++ < 8) {
        const unsigned char* p = im.at(cx, cy);
        std::fprintf(stderr, "FAIL %s: %s cell (query %d, key %d) at (%d,%d) is rgb(%d,%d,%d): expected %s\n",
                     path.c_str(), name.c_str(), r, c, cx, cy, p[0], p[1], p[2],
                     expect ? "the mask colour" : "no mask colour");
      }
    }
  if (bad) {
    std::fprintf(stderr, "FAIL %s: %d of %d cells wrong\n", path.c_str(), bad, rows * cols);
    return 1;
  }
  std::printf("ok %s: %s %dx%d cells, %d masked, rule %s\n", path.c_str(), name.c_str(), rows, cols, masked,
              rule.c_str());
  return 0;
}

// Distance from colour p to the polyline through the curve's samples.
double curve_dist(const unsigned char* p, const std::vector<std::array<double, 3>>& curve) {
  double best = 1e9;
  for (size_t i = 0; i + 1 < curve.size(); ++i) {
    const auto &a = curve[i], &b = curve[i + 1];
    double ab2 = 0, ap_ab = 0;
    for (int k = 0; k < 3; ++k) {
      ab2 += (b[k] - a[k]) * (b[k] - a[k]);
      ap_ab += (p[k] - a[k]) * (b[k] - a[k]);
    }
    const double t = ab2 > 0 ? std::clamp(ap_ab / ab2, 0.0, 1.0) : 0.0;
    double d2 = 0;
    for (int k = 0; k < 3; ++k) {
      const double q = a[k] + t * (b[k] - a[k]) - p[k];
      d2 += q * q;
    }
    best = std::min(best, std::sqrt(d2));
  }
  return best;
}

// The heatmap NAME's cells show the colormap the sidecar names: at least `frac` of the
// pixels inside its cells that are not the mask's hatch lie within 6 (of 255) of the
// curve. A shader drawing another colormap, or none, puts almost none there.
int check_colours(const std::string& path, const std::string& name, const std::string& frac_s) {
  Image im;
  nlohmann::json j;
  if (!load(path, im) || !sidecar(path, j)) return 1;
  const double frac = std::atof(frac_s.c_str());
  std::vector<std::array<double, 3>> curve;
  for (auto& c : j.at("colormap").at("curve"))
    curve.push_back({c[0].get<double>(), c[1].get<double>(), c[2].get<double>()});
  std::vector<std::vector<int>> mc;
  for (auto& c : j.at("mask_colors")) mc.push_back(c.get<std::vector<int>>());
  for (auto& h : j.at("heatmaps")) {
    if (h.at("name") != name) continue;
    const double x0 = h.at("x"), y0 = h.at("y"), cw = h.at("cell_w"), ch = h.at("cell_h");
    const int rows = h.at("rows"), cols = h.at("cols");
    long on = 0, n = 0;
    for (int y = int(std::ceil(y0)); y < int(y0 + rows * ch) && y < im.h; ++y)
      for (int x = int(std::ceil(x0)); x < int(x0 + cols * cw) && x < im.w; ++x) {
        const unsigned char* p = im.at(x, y);
        bool mask = false;
        for (auto& c : mc) mask = mask || (std::abs(p[0] - c[0]) + std::abs(p[1] - c[1]) + std::abs(p[2] - c[2]) <= 12);
        if (mask) continue;
        ++n;
        on += curve_dist(p, curve) <= 6.0;
      }
    const double got = n ? double(on) / double(n) : 0.0;
    if (n < 100 || got < frac) {
      std::fprintf(stderr, "FAIL %s: %s: %.1f%% of %ld pixels on the colormap %d's curve, want %.0f%%\n", path.c_str(),
                   name.c_str(), 100 * got, n, j.at("colormap").at("index").get<int>(), 100 * frac);
      return 1;
    }
    std::printf("ok %s: %s: %.1f%% of %ld pixels on the colormap %d's curve\n", path.c_str(), name.c_str(), 100 * got,
                n, j.at("colormap").at("index").get<int>());
    return 0;
  }
  std::fprintf(stderr, "FAIL %s: no heatmap named %s on screen\n", path.c_str(), name.c_str());
  return 1;
}

// The heatmap NAME's visible cells lie inside the window and span at least `frac` of
// its width or of its height (the map fills the room it has).
int check_cover(const std::string& path, const std::string& name, const std::string& frac_text) {
  nlohmann::json j;
  if (!sidecar(path, j)) return 1;
  char* end = nullptr;
  const double frac = std::strtod(frac_text.c_str(), &end);
  if (end == frac_text.c_str() || *end || !(frac > 0 && frac <= 1)) {
    std::fprintf(stderr, "FAIL cover: the fraction '%s' is not a number in (0, 1]\n", frac_text.c_str());
    return 1;
  }
  const double ww = j.at("width"), wh = j.at("height");
  for (auto& h : j.at("heatmaps")) {
    if (h.at("name") != name) continue;
    const double x = h.at("x"), y = h.at("y"), cw = h.at("cell_w"), ch = h.at("cell_h");
    const int rows = h.at("rows"), cols = h.at("cols");
    const double w = cw * cols, hh = ch * rows;
    if (x < 0 || y < 0 || x + w > ww + 0.5 || y + hh > wh + 0.5) {
      std::fprintf(stderr, "FAIL %s: heatmap %s (%.0fx%.0f at %.0f,%.0f) is not inside the %.0fx%.0f window\n",
                   path.c_str(), name.c_str(), w, hh, x, y, ww, wh);
      return 1;
    }
    if (w < frac * ww && hh < frac * wh) {
      std::fprintf(stderr,
                   "FAIL %s: heatmap %s is %.0fx%.0f px in a %.0fx%.0f window: less than %.0f%% of either side\n",
                   path.c_str(), name.c_str(), w, hh, ww, wh, 100 * frac);
      return 1;
    }
    std::printf(
        "ok %s: heatmap %s %dx%d cells of %.0fx%.0f px = %.0fx%.0f px, %.0f%% of the width, %.0f%% of the height\n",
        path.c_str(), name.c_str(), rows, cols, cw, ch, w, hh, 100 * w / ww, 100 * hh / wh);
    return 0;
  }
  std::fprintf(stderr, "FAIL %s: no heatmap named %s on screen\n", path.c_str(), name.c_str());
  return 1;
}

// The heatmap NAME lies inside the view's area (view_rect: not under the status bar or
// past the window's edge), and shows the whole matrix, or, when the cells would be
// under a pixel, a window as many tokens down as across that ends at the newest token.
int check_whole(const std::string& path, const std::string& name) {
  nlohmann::json j;
  if (!sidecar(path, j)) return 1;
  const auto vr = j.at("view_rect").get<std::vector<double>>();
  for (auto& h : j.at("heatmaps")) {
    if (h.at("name") != name) continue;
    const double x = h.at("x"), y = h.at("y"), cw = h.at("cell_w"), ch = h.at("cell_h");
    const int rows = h.at("rows"), cols = h.at("cols"), row0 = h.at("row0"), col0 = h.at("col0");
    const int mr = h.at("matrix_rows"), mc = h.at("matrix_cols");
    const double w = cw * cols, hh = ch * rows;
    if (vr.size() != 4 || x < vr[0] - 0.5 || y < vr[1] - 0.5 || x + w > vr[0] + vr[2] + 0.5 ||
        y + hh > vr[1] + vr[3] + 0.5) {
      std::fprintf(stderr, "FAIL %s: heatmap %s (%.0fx%.0f at %.0f,%.0f) is not inside the view's area\n", path.c_str(),
                   name.c_str(), w, hh, x, y);
      return 1;
    }
    const bool all = rows == mr && cols == mc && row0 == 0 && col0 == 0;
    const bool window = cw <= 1.0 && rows == cols && row0 == col0 && row0 + rows == mr && col0 + cols == mc;
    if (!all && !window) {
      std::fprintf(stderr,
                   "FAIL %s: heatmap %s shows rows %d-%d and columns %d-%d of %dx%d in cells of %.3f px: neither the "
                   "whole matrix nor a square window on its newest tokens\n",
                   path.c_str(), name.c_str(), row0, row0 + rows - 1, col0, col0 + cols - 1, mr, mc, cw);
      return 1;
    }
    std::printf("ok %s: heatmap %s shows %s (%dx%d of %dx%d) in cells of %.3f px, inside the view\n", path.c_str(),
                name.c_str(), all ? "the whole matrix" : "the newest tokens", rows, cols, mr, mc, cw);
    return 0;
  }
  std::fprintf(stderr, "FAIL %s: no heatmap named %s on screen\n", path.c_str(), name.c_str());
  return 1;
}

int check_same(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  std::string da((std::istreambuf_iterator<char>(fa)), {}), db((std::istreambuf_iterator<char>(fb)), {});
  if (!fa.good() && da.empty()) {
    std::fprintf(stderr, "FAIL cannot read %s\n", a.c_str());
    return 1;
  }
  if (da.empty() || da != db) {
    std::fprintf(stderr, "FAIL %s and %s differ (%zu and %zu bytes)\n", a.c_str(), b.c_str(), da.size(), db.size());
    return 1;
  }
  std::printf("ok %s and %s are byte-for-byte equal (%zu bytes)\n", a.c_str(), b.c_str(), da.size());
  return 0;
}

// The view's own area (the sidecar's view_rect, below the tabs) of two screenshots is the
// same pixel for pixel: a live run and a replay of its trace differ only outside it (the
// model's name, the status line).
int check_same_view(const std::string& a, const std::string& b) {
  Image ia, ib;
  nlohmann::json ja, jb;
  if (!load(a, ia) || !load(b, ib) || !sidecar(a, ja) || !sidecar(b, jb)) return 1;
  const auto vr = ja.at("view_rect").get<std::vector<double>>();
  if (ia.w != ib.w || ia.h != ib.h || vr != jb.at("view_rect").get<std::vector<double>>()) {
    std::fprintf(stderr, "FAIL %s and %s: different sizes or view areas\n", a.c_str(), b.c_str());
    return 1;
  }
  const int x0 = std::max(0, int(vr[0])), y0 = std::max(0, int(vr[1]));
  const int x1 = std::min(ia.w, int(vr[0] + vr[2])), y1 = std::min(ia.h, int(vr[1] + vr[3]));
  long diff = 0, total = 0;
  int fx = -1, fy = -1;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x, ++total)
      if (std::memcmp(ia.at(x, y), ib.at(x, y), 3) != 0 && diff++ == 0) fx = x, fy = y;
  if (diff || total == 0) {
    std::fprintf(stderr, "FAIL %s and %s: %ld of %ld pixels of the view differ (the first at %d,%d)\n", a.c_str(),
                 b.c_str(), diff, total, fx, fy);
    return 1;
  }
  std::printf("ok %s and %s: the view's %ld pixels are equal\n", a.c_str(), b.c_str(), total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 2 && a[0] == "blank") return check_blank(a[1]);
  if (a.size() == 4 && a[0] == "heatmap" &&
      (a[3] == "causal" || a[3] == "nomask" || (a[3].rfind("window:", 0) == 0 && std::atoi(a[3].c_str() + 7) > 0)))
    return check_heatmap(a[1], a[2], a[3]);
  if (a.size() == 3 && a[0] == "same") return check_same(a[1], a[2]);
  if (a.size() == 3 && a[0] == "same-view") return check_same_view(a[1], a[2]);
  if (a.size() == 4 && a[0] == "cover") return check_cover(a[1], a[2], a[3]);
  if (a.size() == 3 && a[0] == "whole") return check_whole(a[1], a[2]);
  if (a.size() == 4 && a[0] == "colours") return check_colours(a[1], a[2], a[3]);
  std::fprintf(stderr,
               "usage: ds_png_check blank SHOT.png | heatmap SHOT.png NAME causal|window:N|nomask | same A.png B.png | "
               "same-view A.png B.png | cover SHOT.png NAME FRACTION | whole SHOT.png NAME | colours SHOT.png NAME "
               "FRACTION\n");
  return 2;
}
