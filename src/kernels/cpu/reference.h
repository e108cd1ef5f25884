// Scalar reference kernels: straightforward loops, the ground truth for every SIMD path.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/quantize_activations.h"

namespace ferry::kernels::cpu::ref {

// dot(row of n elements stored in type, x); n is a multiple of the block size.
float vec_dot(DType type, const uint8_t* row, const float* x, int64_t n);

// One Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K / int4 row of nb 32-element blocks
// against activations from quantize_act on grid act: the definition every integer kernel reproduces
// bit for bit. Per block the exact integer sum p = sum(q * v) (v = 128 * hi + lo on the 16-bit
// grid, hi on the 8-bit one; Q4_0's q - 8 applied as p - 8 * s, Q5_0's q - 16 as p - 16 * s), then
// facc = fma(p, d_w * d_x, facc) in block order; Q4_1's and Q5_1's minimum accumulates apart, macc
// = fma(m_w, sx, macc), and the result is facc + macc. The k-quants: Q4_K and Q5_K per 32-element
// sub-block with d_w = d * sc, the minimum macc = fma(dmin * m, sx, macc), result facc - macc; Q6_K
// per 16-element sub-block (p less 32 x the activations' half-block sum, d_w = d * scale), result
// facc. int4: as Q4_0 with the group's zero point z in place of 8 (p - z * s) and its d per
// 32-element block.
float dot_act(DType type, const uint8_t* row, const ActBlock* x, int64_t nb, Activations act);

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);
// Each pair's products rounded on their own, then subtracted / added (never fused): the SIMD
// levels reproduce it bit for bit.
void rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin, RopeStyle style);
void silu_mul(float* gate, const float* up, int64_t n);
// gate[i] = gelu_tanh(gate[i]) * up[i], written as x * sigmoid(2u) = x / (1 + exp(-2u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh(u)) is that sigmoid, and the form is the one
// the SIMD paths compute with their exp.
void gelu_mul(float* gate, const float* up, int64_t n);
void softcap(float* x, int64_t n, float cap);  // x = cap * tanh(x / cap)
void softmax(float* x, int64_t n);
int64_t argmax(const float* x, int64_t n);
// In eight running sums.
double sum_double(const float* x, int64_t n, float floor);
void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out);

}  // namespace ferry::kernels::cpu::ref
