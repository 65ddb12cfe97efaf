// Draws decoderscope's icon: a causal attention pattern of six tokens, each row a query's
// weights over the tokens before it (viridis), the masked future left dark, on a rounded
// square. Writes decoderscope-N.png for each size asked for and decoderscope.svg; the
// same numbers give the same bytes.
//   usage: ds_make_icon OUT_DIR 48 128 256
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "stb_image_write.h"

namespace {

constexpr int kTokens = 6;
constexpr double kMargin = 0.14, kGap = 0.018, kCorner = 0.18;  // of the icon's side

struct Rgb {
  double r, g, b;
};

// Viridis at five stops, linearly between them.
Rgb viridis(double t) {
  static const std::array<Rgb, 5> stops = {{{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, int(t));
  const double f = t - i;
  const Rgb& a = stops[i];
  const Rgb& b = stops[i + 1];
  return {a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f};
}

// Row q's attention over tokens 0..q: a softmax that favours the previous token (an
// induction-like stripe) and the first; the weights are scaled so the row's largest is 1.
std::array<std::array<double, kTokens>, kTokens> pattern() {
  std::array<std::array<double, kTokens>, kTokens> w{};
  for (int q = 0; q < kTokens; ++q) {
    double sum = 0, top = 0;
    for (int k = 0; k <= q; ++k) {
      const double s = 2.2 * (k == q - 1) + 1.0 * (k == 0) + 0.4 * (k == q);
      w[q][k] = std::exp(s);
      sum += w[q][k];
    }
    for (int k = 0; k <= q; ++k) top = std::max(top, w[q][k] / sum);
    for (int k = 0; k <= q; ++k) w[q][k] = w[q][k] / sum / top;
  }
  return w;
}

const Rgb kBack{23, 23, 26}, kMasked{44, 44, 50};

// The colour at (x, y), in units of the icon's side; alpha 0 outside the rounded square.
bool shade(double x, double y, Rgb& c) {
  const double dx = std::max({kCorner - x, x - (1 - kCorner), 0.0});
  const double dy = std::max({kCorner - y, y - (1 - kCorner), 0.0});
  if (dx * dx + dy * dy > kCorner * kCorner) return false;
  c = kBack;
  const double cell = (1 - 2 * kMargin) / kTokens;
  const double gx = (x - kMargin) / cell, gy = (y - kMargin) / cell;
  if (gx < 0 || gy < 0 || gx >= kTokens || gy >= kTokens) return true;
  const int k = int(gx), q = int(gy);
  const double half_gap = kGap / cell / 2;
  if (gx - k < half_gap || gx - k > 1 - half_gap || gy - q < half_gap || gy - q > 1 - half_gap) return true;
  static const auto w = pattern();
  c = k > q ? kMasked : viridis(w[q][k]);
  return true;
}

// One PNG of side n: 4x4 samples a pixel.
bool write_png(const std::string& path, int n) {
  std::vector<unsigned char> px(size_t(n) * n * 4);
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      double r = 0, g = 0, b = 0, a = 0;
      for (int sy = 0; sy < 4; ++sy)
        for (int sx = 0; sx < 4; ++sx) {
          Rgb c;
          if (!shade((x + (sx + 0.5) / 4) / n, (y + (sy + 0.5) / 4) / n, c)) continue;
          r += c.r, g += c.g, b += c.b, a += 1;
        }
      unsigned char* p = &px[(size_t(y) * n + x) * 4];
      if (a > 0)
        p[0] = (unsigned char)std::lround(r / a), p[1] = (unsigned char)std::lround(g / a),
        p[2] = (unsigned char)std::lround(b / a);
      p[3] = (unsigned char)std::lround(a / 16 * 255);
    }
  return stbi_write_png(path.c_str(), n, n, 4, px.data(), n * 4) != 0;
}

std::string hex(const Rgb& c) {
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", int(std::lround(c.r)), int(std::lround(c.g)), int(std::lround(c.b)));
  return b;
}

bool write_svg(const std::string& path) {
  const double side = 256, cell = (1 - 2 * kMargin) / kTokens * side, gap = kGap * side;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"256\" height=\"256\" viewBox=\"0 0 256 256\">\n";
  s += "  <rect width=\"256\" height=\"256\" rx=\"" + std::to_string(kCorner * side) + "\" fill=\"" + hex(kBack) +
       "\"/>\n";
  const auto w = pattern();
  for (int q = 0; q < kTokens; ++q)
    for (int k = 0; k < kTokens; ++k) {
      char b[200];
      std::snprintf(b, sizeof b, "  <rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
                    kMargin * side + k * cell + gap / 2, kMargin * side + q * cell + gap / 2, cell - gap, cell - gap,
                    hex(k > q ? kMasked : viridis(w[q][k])).c_str());
      s += b;
    }
  s += "</svg>\n";
  std::ofstream f(path, std::ios::binary);
  f << s;
  return bool(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ds_make_icon OUT_DIR [SIZE ...]\n");
    return 2;
  }
  const std::string dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    const int n = std::atoi(argv[i]);
    if (n < 16 || n > 1024 || !write_png(dir + "/decoderscope-" + std::to_string(n) + ".png", n)) {
      std::fprintf(stderr, "ds_make_icon: cannot write a %s px icon in %s\n", argv[i], dir.c_str());
      return 1;
    }
  }
  if (!write_svg(dir + "/decoderscope.svg")) {
    std::fprintf(stderr, "ds_make_icon: cannot write %s/decoderscope.svg\n", dir.c_str());
    return 1;
  }
  return 0;
}
