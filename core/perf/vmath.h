#pragma once
// Element-wise activations over long arrays (the MLP of a 512-token prefill applies
// GELU to 19 million values), vectorised with AVX2 when the build targets it. The
// exponential is evaluated by range reduction to [-ln2/2, ln2/2] and a degree-7
// Taylor polynomial: within 2 ulp of expf over its normal range.
#include <cstdint>

namespace ds {

// x[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written as x * sigmoid(2u).
void gelu_tanh_inplace(float* x, int64_t n);
// a[i] = silu(a[i]) * u[i], silu(v) = v / (1 + exp(-v)) (SwiGLU).
void silu_mul_inplace(float* a, const float* u, int64_t n);
// x[i] = exp(x[i] - shift); returns the sum of the results (a softmax row). -inf gives 0.
float exp_shift_sum(float* x, int64_t n, float shift);

// LayerNorm of one row: y = (x - mean) / sqrt(var + eps) * g + b (b may be null),
// mean and variance accumulated in double.
void layer_norm_row(const float* x, int64_t d, const float* g, const float* b, float eps, float* y);

// Attention over one cached key or value row, for every head at once (decoding).
// The row holds n_kv heads of width dh; query head h reads kv head h / group.
//   scores: out[h * stride] = scale * (q_h . k_{h/group}), h < n_heads
//   mix:    z_h += p[h * stride] * v_{h/group}, skipping heads whose p is 0
void head_dots(const float* q, const float* k, int n_heads, int group, int dh, float scale, float* out, int64_t stride);
void head_axpys(const float* p, int64_t stride, const float* v, int n_heads, int group, int dh, float* z);

// The maximum of x[0..n) (-inf for n == 0, NaNs ignored), and whether any is NaN.
float max_and_nan(const float* x, int64_t n, bool* nan);
// The first i with x[i] == v, or n.
int64_t first_equal(const float* x, int64_t n, float v);
// p[i] = float(w[i] * s).
void scale_to_float(const double* w, int64_t n, double s, float* p);

// Softmax weights in double precision: w[i] = exp((x[i] - xmax) * inv_t), exactly 1
// where x[i] == xmax, 0 for -inf; returns their sum. xmax must be the maximum of x
// and inv_t > 0. The exponential is within 2 ulp of std::exp (AVX2: four lanes, a
// degree-13 polynomial after range reduction; lanes below -708 and an infinite
// maximum use std::exp).
double exp_weights(const float* x, int64_t n, float xmax, double inv_t, double* w);

}  // namespace ds
