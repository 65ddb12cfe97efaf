#pragma once
// Heatmaps on the GPU: a matrix is uploaded as an R32F texture (and its mask as R8)
// and coloured by shaders/heatmap.frag into an offscreen framebuffer, which the
// window shows with ImGui::Image. The colormaps are also here for the CPU (legends,
// tinted text), with the same stops as the shader.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gl.h"

namespace dsgui {

enum Colormap { kViridis = 0, kMagma = 1, kGreys = 2 };
inline const char* kColormapNames[] = {"viridis", "magma", "greys"};

// The two hatch stripes of masked cells, as bytes: a saturated blue and a sky blue,
// far from every colour of every colormap (and from greys).
inline constexpr std::array<uint8_t, 3> kMaskA = {30, 100, 255};
inline constexpr std::array<uint8_t, 3> kMaskB = {120, 200, 255};

// RGB in [0,1] of a colormap at t in [0,1] (same stops as the shader).
std::array<float, 3> colormap(int which, float t);

struct HeatStyle {
  int cmap = kViridis;
  bool log = false;        // log colour scale (weights only)
  bool mask_only = false;  // show the mask alone
  float vmin = 0, vmax = 1;
  std::array<float, 3> allowed = {0.85f, 0.85f, 0.85f};
  std::array<float, 3> gap = {0.1f, 0.1f, 0.1f};
  float gap_px = 0;
};

// An offscreen colour buffer.
class RenderTarget {
 public:
  ~RenderTarget();
  void ensure(int w, int h);  // (re)allocates when the size changes
  void bind() const;          // draws go here (viewport set to the whole target)
  static void unbind(int window_w, int window_h);
  unsigned texture() const { return tex_; }
  int width() const { return w_; }
  int height() const { return h_; }
  // RGBA rows from the top.
  std::vector<uint8_t> read() const;

 private:
  GLuint fbo_ = 0, tex_ = 0;
  int w_ = 0, h_ = 0;
};

class HeatmapRenderer {
 public:
  // Loads heatmap.vert/.frag from shader_dir. On failure returns false and sets error.
  bool init(const std::string& shader_dir, std::string& error);
  ~HeatmapRenderer();
  bool ready() const { return prog_ != 0; }
  // Draws rows x cols cells into the pixel rectangle (x, y from the bottom-left of the
  // bound target). mask: rows*cols bytes, 1 allowed, 0 masked; null = all allowed.
  void draw(int rows, int cols, const float* values, const uint8_t* mask, const HeatStyle& st, int x, int y, int w,
            int h);
  void clear(float r, float g, float b);

 private:
  GLuint prog_ = 0, vao_ = 0, tex_vals_ = 0, tex_mask_ = 0;
  GLint u_values_ = -1, u_mask_ = -1, u_cells_ = -1, u_rect_ = -1, u_cmap_ = -1, u_scale_ = -1, u_mode_ = -1,
        u_range_ = -1, u_mask_a_ = -1, u_mask_b_ = -1, u_allowed_ = -1, u_gap_ = -1, u_gap_px_ = -1;
  std::vector<uint8_t> ones_;
};

// Where the shaders are: beside the executable (shaders/, ../shaders) or in the source
// tree (DS_SOURCE_DIR/shaders). Returns "" when none has heatmap.frag.
std::string find_shader_dir();

}  // namespace dsgui
