#version 330 core
// Colours a matrix of cells (queries down, keys across) drawn into u_rect.
// Masked cells (mask 0: the model may not look there) are hatched in the two mask
// colours, which no colormap produces, so they never look like a weight of 0.
uniform sampler2D u_values;  // R32F, width = cols, height = rows
uniform sampler2D u_mask;    // R8, 1 = allowed, 0 = masked
uniform ivec2 u_cells;       // cols, rows drawn
uniform ivec2 u_origin;      // the matrix's col, row drawn first (a window of a larger matrix)
uniform vec4 u_rect;         // x, y (bottom-left, framebuffer pixels), width, height
// CMAP: 0 viridis-like, 1 magma-like, 2 greys; LOG_SCALE: 0 linear, 1 log. The program
// defines both after the #version line (one program each: a software renderer runs both
// sides of every branch).
#ifndef CMAP
#define CMAP 0
#endif
#ifndef LOG_SCALE
#define LOG_SCALE 0
#endif
uniform int u_mode;          // 0 values, 1 the mask alone
uniform vec2 u_range;        // value mapped to the bottom and the top of the colormap
uniform vec3 u_mask_a;       // hatch stripe colours
uniform vec3 u_mask_b;
uniform vec3 u_allowed;      // allowed cells when showing the mask alone
uniform vec3 u_gap;          // lines between cells
uniform float u_gap_px;      // width of those lines (0: none)
out vec4 frag;

// Ten evenly spaced stops of each colormap, linearly interpolated.
const vec3 VIRIDIS[10] = vec3[10](
  vec3(0.267, 0.004, 0.329), vec3(0.282, 0.157, 0.471), vec3(0.243, 0.286, 0.537),
  vec3(0.192, 0.408, 0.557), vec3(0.149, 0.510, 0.557), vec3(0.122, 0.620, 0.537),
  vec3(0.208, 0.718, 0.475), vec3(0.431, 0.808, 0.345), vec3(0.710, 0.871, 0.169),
  vec3(0.992, 0.906, 0.145));
const vec3 MAGMA[10] = vec3[10](
  vec3(0.000, 0.000, 0.016), vec3(0.094, 0.059, 0.239), vec3(0.267, 0.059, 0.463),
  vec3(0.447, 0.122, 0.506), vec3(0.620, 0.184, 0.498), vec3(0.804, 0.251, 0.443),
  vec3(0.945, 0.376, 0.365), vec3(0.992, 0.588, 0.408), vec3(0.996, 0.792, 0.553),
  vec3(0.988, 0.992, 0.749));

vec3 colormap(float t) {
  t = clamp(t, 0.0, 1.0);
#if CMAP == 2
  return vec3(mix(0.06, 1.0, t));
#else
  float x = t * 9.0;
  int i = min(int(floor(x)), 8);
  float f = x - float(i);
#if CMAP == 1
  return mix(MAGMA[i], MAGMA[i + 1], f);
#else
  return mix(VIRIDIS[i], VIRIDIS[i + 1], f);
#endif
#endif
}

void main() {
  vec2 local = gl_FragCoord.xy - u_rect.xy;
  float from_top = u_rect.w - local.y;
  vec2 cell = u_rect.zw / vec2(u_cells);
  int col = clamp(int(floor(local.x / cell.x)), 0, u_cells.x - 1);
  int row = clamp(int(floor(from_top / cell.y)), 0, u_cells.y - 1);
  float fx = local.x - float(col) * cell.x;
  float fy = from_top - float(row) * cell.y;
  if (u_gap_px > 0.0 && (fx >= cell.x - u_gap_px || fy >= cell.y - u_gap_px)) {
    frag = vec4(u_gap, 1.0);
    return;
  }
  float m = texelFetch(u_mask, ivec2(col, row) + u_origin, 0).r;
  if (m < 0.5) {
    int stripe = ((int(gl_FragCoord.x) + int(gl_FragCoord.y)) / 4) % 2;
    frag = vec4(stripe == 0 ? u_mask_a : u_mask_b, 1.0);
    return;
  }
  if (u_mode == 1) {
    frag = vec4(u_allowed, 1.0);
    return;
  }
  float v = texelFetch(u_values, ivec2(col, row) + u_origin, 0).r;
  float t;
  if (isnan(v) || isinf(v)) {
    t = 0.0;
  } else {
#if LOG_SCALE == 1
    float eps = 1e-4;
    float lo = log(max(u_range.x, eps));
    float hi = log(max(u_range.y, eps * 1.01));
    t = (log(max(v, eps)) - lo) / max(hi - lo, 1e-6);
#else
    t = (v - u_range.x) / max(u_range.y - u_range.x, 1e-12);
#endif
  }
  frag = vec4(colormap(t), 1.0);
}
