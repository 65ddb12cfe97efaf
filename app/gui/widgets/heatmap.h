#pragma once
// Heatmaps on the GPU: a matrix is uploaded as an R32F texture (and its mask as R8)
// and coloured by shaders/heatmap.frag into an offscreen framebuffer, which the
// window shows with ImGui::Image. The colormaps are also here for the CPU (legends,
// tinted text), with the same stops as the shader.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "widgets/gl.h"

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
  // The window of cells drawn (a zoomed or panned heatmap, the last N tokens): rows
  // [row0, row0 + rows) and columns [col0, col0 + cols) of the matrix; 0 rows or cols:
  // to the matrix's end.
  int row0 = 0, col0 = 0, rows = 0, cols = 0;
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

// What went to the GPU, for the frame-time benchmark.
struct UploadStats {
  uint64_t whole = 0;    // matrices sent whole
  uint64_t appends = 0;  // matrices that only got their new rows (and new columns)
  uint64_t bytes = 0;    // bytes of values and mask sent
};

// A matrix's cells on the GPU, kept from frame to frame: values as R32F and the mask
// as R8 (1 allowed, 0 masked), with room to grow (the allocation doubles), so that
// a matrix that gains rows (one query row per generated token) sends only those.
// The shader reads texels [0, cols) x [0, rows) by index; what lies beyond is unused.
class HeatTexture {
 public:
  HeatTexture() = default;
  ~HeatTexture();
  HeatTexture(const HeatTexture&) = delete;
  HeatTexture& operator=(const HeatTexture&) = delete;

  // Sends rows x cols cells (row-major; mask: 1 allowed, 0 masked) whole.
  void set(int rows, int cols, const float* values, const uint8_t* mask, UploadStats& stats);
  // The same matrix grown: its top-left rows() x cols() cells are the ones held now.
  // Sends only the new rows and, for the rows held, the new columns (a larger
  // allocation gets the cells held copied over on the GPU). Returns false, sending
  // nothing, when it cannot (a smaller matrix, or nothing held).
  bool grow(int rows, int cols, const float* values, const uint8_t* mask, UploadStats& stats);
  // Rows [row0, row0 + n) of width cols, given alone (n x cols), appended at the
  // bottom (row0 must be rows()); the rows held become cols wide with masked zeros.
  // Returns false, sending nothing, when it cannot.
  bool append_rows(int row0, int n, int cols, const float* values, const uint8_t* mask, UploadStats& stats);

  // Sends m whole, or only what it gained, when lineage (an id of the matrix: the
  // same id promises that the matrix only gained rows or columns since) is the one
  // the texture holds; 0 always sends it whole. Returns false when the texture
  // already held m (nothing sent).
  template <class M>
  bool sync(const M& m, uint64_t lineage, UploadStats& stats) {
    if (lineage != 0 && lineage == lineage_ && m.rows == rows_ && m.cols == cols_) return false;
    if (lineage == 0 || lineage != lineage_ || !grow(m.rows, m.cols, m.v.data(), m.mask.data(), stats))
      set(m.rows, m.cols, m.v.data(), m.mask.data(), stats);
    lineage_ = lineage;
    return true;
  }
  uint64_t lineage() const { return lineage_; }

  // Room for at least rows x cols cells, keeping the cells held (copied on the GPU
  // when the storage grows).
  void reserve(int rows, int cols);
  int capacity_rows() const { return cap_r_; }
  int capacity_cols() const { return cap_c_; }

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  GLuint values_texture() const { return vals_; }
  GLuint mask_texture() const { return mask_; }

 private:
  bool fits(int rows, int cols) const { return vals_ && rows <= cap_r_ && cols <= cap_c_; }
  // Cells [x, x + w) x [y, y + h) from values/mask laid out with `stride` cells a row
  // (mask null: masked zeros).
  void put(int x, int y, int w, int h, const float* values, const uint8_t* mask, int stride, UploadStats& stats);

  GLuint vals_ = 0, mask_ = 0;
  int rows_ = 0, cols_ = 0, cap_r_ = 0, cap_c_ = 0;
  uint64_t lineage_ = 0;
  std::vector<float> zeros_;
  std::vector<uint8_t> bytes_;
};

class HeatmapRenderer {
 public:
  // Loads heatmap.vert/.frag from shader_dir. On failure returns false and sets error.
  bool init(const std::string& shader_dir, std::string& error);
  ~HeatmapRenderer();
  bool ready() const { return progs_[0].prog != 0; }
  // Draws rows x cols cells into the pixel rectangle (x, y from the bottom-left of the
  // bound target). mask: rows*cols bytes, 1 allowed, 0 masked; null = all allowed.
  // Sends the matrix to a scratch texture first (drawings that keep nothing).
  void draw(int rows, int cols, const float* values, const uint8_t* mask, const HeatStyle& st, int x, int y, int w,
            int h, UploadStats& stats);
  // Draws the cells a HeatTexture holds (the window of them st names).
  void draw(const HeatTexture& tex, const HeatStyle& st, int x, int y, int w, int h);
  void clear(float r, float g, float b);

 private:
  // One program per colormap and scale, made when first used: Mesa's software renderer
  // runs both sides of a branch, so a shader that chose them from uniforms paid for the
  // log scale and all three colormaps at every pixel (about 12 ms an 800x800 map, against
  // 8.5 for the linear viridis one alone).
  struct Program {
    GLuint prog = 0;
    GLint u_values = -1, u_mask = -1, u_cells = -1, u_rect = -1, u_mode = -1, u_range = -1, u_mask_a = -1,
          u_mask_b = -1, u_allowed = -1, u_gap = -1, u_gap_px = -1, u_origin = -1;
  };
  static constexpr int kVariants = 6;  // 3 colormaps x (linear, log)
  const Program* program(int cmap, bool log);
  bool build(int variant, std::string& error);
  std::string vs_src_, fs_src_;
  Program progs_[kVariants];
  bool failed_[kVariants] = {};
  GLuint vao_ = 0;
  HeatTexture scratch_;
};

// The folder of the shaders: shaders/ of decoderscope's data (util/data_dir.h: installed,
// build tree, $DECODERSCOPE_DATA). "" when none has heatmap.frag (*error then names the
// places looked in).
std::string find_shader_dir(std::string* error = nullptr);

// Where a heatmap landed on screen, for the scripted test's checker.
struct HeatmapPlacement {
  std::string name;    // "attention", "cross", ...
  float x = 0, y = 0;  // top-left of the cells, window pixels from the top-left
  float cell_w = 0, cell_h = 0;
  int rows = 0, cols = 0;
  int row0 = 0, col0 = 0;                // the matrix cell shown top-left (zoomed, panned or the last N tokens)
  int matrix_rows = 0, matrix_cols = 0;  // the whole matrix
  bool causal = false;                   // self-attention of a decoder: keys after the query are masked
  int window = 0;             // causal with a sliding window: keys window or more before the query masked too
  std::vector<uint8_t> mask;  // what the window drew as masked (1 allowed)
};

}  // namespace dsgui
