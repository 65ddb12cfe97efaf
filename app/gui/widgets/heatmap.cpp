#include "widgets/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/data_dir.h"

namespace fs = std::filesystem;

namespace dsgui {

namespace {

const float kViridisStops[10][3] = {{0.267f, 0.004f, 0.329f}, {0.282f, 0.157f, 0.471f}, {0.243f, 0.286f, 0.537f},
                                    {0.192f, 0.408f, 0.557f}, {0.149f, 0.510f, 0.557f}, {0.122f, 0.620f, 0.537f},
                                    {0.208f, 0.718f, 0.475f}, {0.431f, 0.808f, 0.345f}, {0.710f, 0.871f, 0.169f},
                                    {0.992f, 0.906f, 0.145f}};
const float kMagmaStops[10][3] = {{0.000f, 0.000f, 0.016f}, {0.094f, 0.059f, 0.239f}, {0.267f, 0.059f, 0.463f},
                                  {0.447f, 0.122f, 0.506f}, {0.620f, 0.184f, 0.498f}, {0.804f, 0.251f, 0.443f},
                                  {0.945f, 0.376f, 0.365f}, {0.992f, 0.588f, 0.408f}, {0.996f, 0.792f, 0.553f},
                                  {0.988f, 0.992f, 0.749f}};

bool read_file(const fs::path& p, std::string& out) {
  std::ifstream f(p);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

GLuint compile(GLenum kind, const std::string& src, const std::string& name, std::string& error) {
  GLuint s = glCreateShader(kind);
  const char* p = src.c_str();
  glShaderSource(s, 1, &p, nullptr);
  glCompileShader(s);
  GLint ok = 0;
  glGetShaderiv(s, GL_COMPILE_STATUS, &ok);
  if (!ok) {
    char log[2048];
    glGetShaderInfoLog(s, sizeof log, nullptr, log);
    error = name + ": " + log;
    glDeleteShader(s);
    return 0;
  }
  return s;
}

}  // namespace

std::array<float, 3> colormap(int which, float t) {
  t = std::clamp(std::isfinite(t) ? t : 0.0f, 0.0f, 1.0f);
  if (which == kGreys) {
    float g = 0.06f + (1.0f - 0.06f) * t;
    return {g, g, g};
  }
  const float(*s)[3] = which == kMagma ? kMagmaStops : kViridisStops;
  float x = t * 9.0f;
  int i = std::min(int(std::floor(x)), 8);
  float f = x - float(i);
  return {s[i][0] + (s[i + 1][0] - s[i][0]) * f, s[i][1] + (s[i + 1][1] - s[i][1]) * f,
          s[i][2] + (s[i + 1][2] - s[i][2]) * f};
}

// ---- RenderTarget

RenderTarget::~RenderTarget() {
  if (tex_) glDeleteTextures(1, &tex_);
  if (fbo_) glDeleteFramebuffers(1, &fbo_);
}

void RenderTarget::ensure(int w, int h) {
  w = std::max(w, 1);
  h = std::max(h, 1);
  if (fbo_ && w == w_ && h == h_) return;
  if (!fbo_) {
    glGenFramebuffers(1, &fbo_);
    glGenTextures(1, &tex_);
  }
  w_ = w;
  h_ = h;
  glBindTexture(GL_TEXTURE_2D, tex_);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, w, h, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glFramebufferTexture2D(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, tex_, 0);
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
  glBindTexture(GL_TEXTURE_2D, 0);
}

void RenderTarget::bind() const {
  glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glViewport(0, 0, w_, h_);
}

void RenderTarget::unbind(int window_w, int window_h) {
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
  glViewport(0, 0, window_w, window_h);
}

std::vector<uint8_t> RenderTarget::read() const {
  std::vector<uint8_t> px(size_t(w_) * h_ * 4);
  if (!fbo_) return px;
  glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w_, h_, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
  // Bottom-up to top-down.
  std::vector<uint8_t> out(px.size());
  for (int y = 0; y < h_; ++y)
    std::copy_n(px.data() + size_t(h_ - 1 - y) * w_ * 4, size_t(w_) * 4, out.data() + size_t(y) * w_ * 4);
  return out;
}

// ---- HeatmapRenderer

std::string find_shader_dir(std::string* error) {
  try {
    return fs::path(ds::require_data("shaders/heatmap.frag", "the window's shaders (heatmap.frag)"))
        .parent_path()
        .string();
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return "";
  }
}

bool HeatmapRenderer::init(const std::string& dir, std::string& error) {
  if (!read_file(fs::path(dir) / "heatmap.vert", vs_src_) || !read_file(fs::path(dir) / "heatmap.frag", fs_src_)) {
    error = "cannot read heatmap.vert / heatmap.frag in " + dir;
    return false;
  }
  if (!build(0, error)) return false;  // the default (viridis, linear) now: the shaders' errors show at start
  glGenVertexArrays(1, &vao_);
  return true;
}

// Variant v: colormap v / 2, log scale when v is odd. The fragment shader's CMAP and
// LOG_SCALE are defined after its #version line.
bool HeatmapRenderer::build(int v, std::string& error) {
  const size_t eol = fs_src_.find('\n');
  if (eol == std::string::npos) {
    error = "heatmap.frag has no #version line";
    return false;
  }
  const std::string fs_src = fs_src_.substr(0, eol + 1) + "#define CMAP " + std::to_string(v / 2) +
                             "\n#define LOG_SCALE " + std::to_string(v % 2) + "\n" + fs_src_.substr(eol + 1);
  GLuint vs = compile(GL_VERTEX_SHADER, vs_src_, "heatmap.vert", error);
  if (!vs) return false;
  GLuint f = compile(GL_FRAGMENT_SHADER, fs_src, "heatmap.frag", error);
  if (!f) {
    glDeleteShader(vs);
    return false;
  }
  Program& p = progs_[v];
  p.prog = glCreateProgram();
  glAttachShader(p.prog, vs);
  glAttachShader(p.prog, f);
  glLinkProgram(p.prog);
  glDeleteShader(vs);
  glDeleteShader(f);
  GLint ok = 0;
  glGetProgramiv(p.prog, GL_LINK_STATUS, &ok);
  if (!ok) {
    char log[2048];
    glGetProgramInfoLog(p.prog, sizeof log, nullptr, log);
    error = std::string("heatmap shaders do not link: ") + log;
    glDeleteProgram(p.prog);
    p.prog = 0;
    return false;
  }
  const GLuint g = p.prog;
  p.u_values = glGetUniformLocation(g, "u_values");
  p.u_mask = glGetUniformLocation(g, "u_mask");
  p.u_cells = glGetUniformLocation(g, "u_cells");
  p.u_rect = glGetUniformLocation(g, "u_rect");
  p.u_mode = glGetUniformLocation(g, "u_mode");
  p.u_range = glGetUniformLocation(g, "u_range");
  p.u_mask_a = glGetUniformLocation(g, "u_mask_a");
  p.u_mask_b = glGetUniformLocation(g, "u_mask_b");
  p.u_allowed = glGetUniformLocation(g, "u_allowed");
  p.u_gap = glGetUniformLocation(g, "u_gap");
  p.u_gap_px = glGetUniformLocation(g, "u_gap_px");
  p.u_origin = glGetUniformLocation(g, "u_origin");
  return true;
}

const HeatmapRenderer::Program* HeatmapRenderer::program(int cmap, bool log) {
  const int v = std::clamp(cmap, 0, 2) * 2 + (log ? 1 : 0);
  if (!progs_[v].prog && !failed_[v]) {
    std::string error;
    failed_[v] = !build(v, error);
    if (failed_[v]) std::fprintf(stderr, "decoderscope: %s\n", error.c_str());
  }
  return progs_[v].prog ? &progs_[v] : progs_[0].prog ? &progs_[0] : nullptr;
}

HeatmapRenderer::~HeatmapRenderer() {
  for (const Program& p : progs_)
    if (p.prog) glDeleteProgram(p.prog);
  if (vao_) glDeleteVertexArrays(1, &vao_);
}

void HeatmapRenderer::clear(float r, float g, float b) {
  glDisable(GL_SCISSOR_TEST);
  glClearColor(r, g, b, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
}

void HeatmapRenderer::draw(int rows, int cols, const float* values, const uint8_t* mask, const HeatStyle& st, int x,
                           int y, int w, int h, UploadStats& stats) {
  if (!ready() || rows <= 0 || cols <= 0 || w <= 0 || h <= 0) return;
  scratch_.set(rows, cols, values, mask, stats);
  draw(scratch_, st, x, y, w, h);
}

void HeatmapRenderer::draw(const HeatTexture& tex, const HeatStyle& st, int x, int y, int w, int h) {
  const int r0 = std::clamp(st.row0, 0, tex.rows()), c0 = std::clamp(st.col0, 0, tex.cols());
  const int rows = st.rows > 0 ? std::min(st.rows, tex.rows() - r0) : tex.rows() - r0;
  const int cols = st.cols > 0 ? std::min(st.cols, tex.cols() - c0) : tex.cols() - c0;
  const Program* p = rows > 0 && cols > 0 && w > 0 && h > 0 ? program(st.cmap, st.log) : nullptr;
  if (!p) return;
  glActiveTexture(GL_TEXTURE0);
  glBindTexture(GL_TEXTURE_2D, tex.values_texture());
  glActiveTexture(GL_TEXTURE1);
  glBindTexture(GL_TEXTURE_2D, tex.mask_texture());
  glDisable(GL_BLEND);
  glDisable(GL_SCISSOR_TEST);
  glDisable(GL_DEPTH_TEST);
  glDisable(GL_CULL_FACE);
  glViewport(x, y, w, h);
  glUseProgram(p->prog);
  glUniform1i(p->u_values, 0);
  glUniform1i(p->u_mask, 1);
  glUniform2i(p->u_cells, cols, rows);
  glUniform2i(p->u_origin, c0, r0);
  glUniform4f(p->u_rect, float(x), float(y), float(w), float(h));
  glUniform1i(p->u_mode, st.mask_only ? 1 : 0);
  glUniform2f(p->u_range, st.vmin, st.vmax);
  glUniform3f(p->u_mask_a, kMaskA[0] / 255.0f, kMaskA[1] / 255.0f, kMaskA[2] / 255.0f);
  glUniform3f(p->u_mask_b, kMaskB[0] / 255.0f, kMaskB[1] / 255.0f, kMaskB[2] / 255.0f);
  glUniform3f(p->u_allowed, st.allowed[0], st.allowed[1], st.allowed[2]);
  glUniform3f(p->u_gap, st.gap[0], st.gap[1], st.gap[2]);
  glUniform1f(p->u_gap_px, st.gap_px);
  glBindVertexArray(vao_);
  glDrawArrays(GL_TRIANGLES, 0, 3);
  glBindVertexArray(0);
  glUseProgram(0);
  glActiveTexture(GL_TEXTURE1);
  glBindTexture(GL_TEXTURE_2D, 0);
  glActiveTexture(GL_TEXTURE0);
  glBindTexture(GL_TEXTURE_2D, 0);
}

// ---- HeatTexture

HeatTexture::~HeatTexture() {
  if (vals_) glDeleteTextures(1, &vals_);
  if (mask_) glDeleteTextures(1, &mask_);
}

void HeatTexture::reserve(int rows, int cols) {
  if (fits(rows, cols)) return;
  // Room to grow: powers of two from 32, at least as large as before.
  auto room = [](int need, int have) {
    int c = std::max(32, have);
    while (c < need) c *= 2;
    return c;
  };
  cap_r_ = room(rows, cap_r_);
  cap_c_ = room(cols, cap_c_);
  GLuint t[2];
  glGenTextures(2, t);
  const GLenum internal[2] = {GL_R32F, GL_R8}, type[2] = {GL_FLOAT, GL_UNSIGNED_BYTE};
  for (int k = 0; k < 2; ++k) {
    glBindTexture(GL_TEXTURE_2D, t[k]);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
    glTexImage2D(GL_TEXTURE_2D, 0, GLint(internal[k]), cap_c_, cap_r_, 0, GL_RED, type[k], nullptr);
  }
  if (vals_ && rows_ > 0 && cols_ > 0) {
    // Keep the cells held: copy them into the larger storage on the GPU, through a
    // framebuffer that reads the old texture.
    GLint prev = 0;
    glGetIntegerv(GL_READ_FRAMEBUFFER_BINDING, &prev);
    GLuint fbo = 0;
    glGenFramebuffers(1, &fbo);
    glBindFramebuffer(GL_READ_FRAMEBUFFER, fbo);
    const GLuint old[2] = {vals_, mask_};
    for (int k = 0; k < 2; ++k) {
      glFramebufferTexture2D(GL_READ_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, old[k], 0);
      glReadBuffer(GL_COLOR_ATTACHMENT0);
      glBindTexture(GL_TEXTURE_2D, t[k]);
      glCopyTexSubImage2D(GL_TEXTURE_2D, 0, 0, 0, 0, 0, cols_, rows_);
    }
    glBindFramebuffer(GL_READ_FRAMEBUFFER, GLuint(prev));
    glDeleteFramebuffers(1, &fbo);
  } else {
    rows_ = cols_ = 0;  // the new storage holds nothing yet
  }
  glBindTexture(GL_TEXTURE_2D, 0);
  if (vals_) glDeleteTextures(1, &vals_);
  if (mask_) glDeleteTextures(1, &mask_);
  vals_ = t[0];
  mask_ = t[1];
}

void HeatTexture::put(int x, int y, int w, int h, const float* values, const uint8_t* mask, int stride,
                      UploadStats& stats) {
  if (w <= 0 || h <= 0) return;
  const size_t n = size_t(w) * h;
  // R8 is normalised: 255 reads as 1.0 in the shader.
  bytes_.resize(n);
  if (mask) {
    for (int r = 0; r < h; ++r)
      for (int c = 0; c < w; ++c) bytes_[size_t(r) * w + c] = mask[size_t(r) * stride + c] ? 255 : 0;
  } else {
    std::fill(bytes_.begin(), bytes_.end(), uint8_t(0));
  }
  if (!values) {
    zeros_.assign(n, 0.0f);
    values = zeros_.data();
    stride = w;
  }
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  glActiveTexture(GL_TEXTURE0);
  glBindTexture(GL_TEXTURE_2D, vals_);
  glPixelStorei(GL_UNPACK_ROW_LENGTH, stride);
  glTexSubImage2D(GL_TEXTURE_2D, 0, x, y, w, h, GL_RED, GL_FLOAT, values);
  glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
  glBindTexture(GL_TEXTURE_2D, mask_);
  glTexSubImage2D(GL_TEXTURE_2D, 0, x, y, w, h, GL_RED, GL_UNSIGNED_BYTE, bytes_.data());
  glBindTexture(GL_TEXTURE_2D, 0);
  stats.bytes += n * (sizeof(float) + 1);
}

void HeatTexture::set(int rows, int cols, const float* values, const uint8_t* mask, UploadStats& stats) {
  rows = std::max(rows, 0);
  cols = std::max(cols, 0);
  rows_ = cols_ = 0;  // nothing held is kept
  reserve(std::max(rows, 1), std::max(cols, 1));
  put(0, 0, cols, rows, values, mask, cols, stats);
  rows_ = rows;
  cols_ = cols;
  ++stats.whole;
}

bool HeatTexture::grow(int rows, int cols, const float* values, const uint8_t* mask, UploadStats& stats) {
  if (rows < rows_ || cols < cols_ || rows_ == 0) return false;
  // Outgrown storage: the caller sends the matrix whole into a larger one (set). Copying
  // the cells held on the GPU instead went through a framebuffer read that Mesa's
  // software renderer does on the window's thread: one frame of about 50 ms when a
  // 1,024-position map moved to 1,024 x 1,024.
  if (!fits(rows, cols)) return false;
  // The rows held, in the new columns; then the new rows, whole.
  put(cols_, 0, cols - cols_, rows_, values + cols_, mask + cols_, cols, stats);
  put(0, rows_, cols, rows - rows_, values + size_t(rows_) * cols, mask + size_t(rows_) * cols, cols, stats);
  rows_ = rows;
  cols_ = cols;
  ++stats.appends;
  return true;
}

bool HeatTexture::append_rows(int row0, int n, int cols, const float* values, const uint8_t* mask, UploadStats& stats) {
  if (row0 != rows_ || n < 0 || cols < cols_ || rows_ == 0) return false;
  reserve(row0 + n, cols);                                         // keeps what is held
  put(cols_, 0, cols - cols_, rows_, nullptr, nullptr, 0, stats);  // masked zeros
  put(0, row0, cols, n, values, mask, cols, stats);
  rows_ = row0 + n;
  cols_ = cols;
  ++stats.appends;
  return true;
}

}  // namespace dsgui
