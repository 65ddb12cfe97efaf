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

}  // namespace ds
