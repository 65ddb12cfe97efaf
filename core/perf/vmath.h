#pragma once
// Element-wise activations over long arrays (the MLP of a 512-token prefill applies
// GELU to 19 million values), vectorised with AVX2 when the build targets it, and on
// 512-bit lanes with AVX-512 (the same operations per lane, so the same results). The
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

// RMSNorm of one row: y = x / sqrt(mean(x^2) + eps) * g, the sum of squares in float
// (AVX-512: over sixteen lanes, then across them).
void rms_norm_row(const float* x, int64_t d, const float* g, float eps, float* y);
// LayerNorm of one row: y = (x - mean) / sqrt(var + eps) * g + b (b may be null),
// mean and variance accumulated in double.
void layer_norm_row(const float* x, int64_t d, const float* g, const float* b, float eps, float* y);

// Attention of one query row over the cached key or value rows j0 <= j < j1 (decoding).
// Row j is K + j * ld (V + j * ld): n_kv heads of width dh; query head h reads kv head
// h / group. att holds each head's weights at stride S (att[h * S + j]).
//   scores: att[h * S + j] = scale * (q_h . K_j[h / group])
//   mix:    z_h += sum_j att[h * S + j] V_j[h / group], the rows added in order
// With AVX-512 and dh a multiple of 16, each kv head's value rows are read once for up
// to four of its query heads, the sums kept in registers.
void head_dots(const float* q, const float* K, int64_t ld, int j0, int j1, int n_heads, int group, int dh, float scale,
               float* att, int64_t S);
void head_axpys(const float* att, int64_t S, const float* V, int64_t ld, int j0, int j1, int n_heads, int group, int dh,
                float* z);

// The maximum of x[0..n) (-inf for n == 0, NaNs ignored), and whether any is NaN.
float max_and_nan(const float* x, int64_t n, bool* nan);
// The first i with x[i] == v, or n.
int64_t first_equal(const float* x, int64_t n, float v);
// p[i] = float(w[i] * s).
void scale_to_float(const double* w, int64_t n, double s, float* p);

// Softmax weights in double precision: w[i] = exp((x[i] - xmax) * inv_t), exactly 1
// where x[i] == xmax, 0 for -inf; returns their sum. xmax must be the maximum of x
// and inv_t > 0. The exponential is within 2 ulp of std::exp (AVX2: four lanes,
// AVX-512: eight, summed as two fours; a degree-13 polynomial after range reduction;
// lanes below -708 and an infinite maximum use std::exp).
double exp_weights(const float* x, int64_t n, float xmax, double inv_t, double* w);

}  // namespace ds
