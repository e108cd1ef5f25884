// The CPU's kernels on host memory: the operations the CPU backend (cpu_backend.h) is made
// of, at the SIMD level dispatch.h chose. Each has a scalar reference (reference.cpp) that tests
// compare the SIMD paths against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"

namespace ferry::kernels::cpu {

// A weight matrix of `rows` output channels, each a row of `cols` elements stored in `type`
// (quantized formats: cols is a multiple of the block size).
struct Weight {
    DType type = DType::F32;
    const uint8_t* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_stride = 0;  // bytes between rows
    // The same matrix in kernels/cpu/packed_weights.h's interleaved layout (the Q4s, Q5s, Q8_0, the
    // k-quants, int4), which the integer kernels read; null where nobody packed it (the reference
    // then computes the integer product from `data`, slowly but with the same result).
    const uint8_t* packed = nullptr;
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride; }
};

// y[t*rows + r] = dot(W[r], x[t*cols ...]) for t in [0, n_tokens). Multi-threaded over rows;
// the weights are read once for the whole batch, which is what makes prefill compute-bound.
// Quantized weights meet activations as `act` (dispatch.h's default when not given).
void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            Activations act);

// Several matrices applied to the same input (q/k/v, gate/up) in one parallel region, so a
// decode step pays one wake-up and barrier for the group. All must have the same cols.
struct MatmulTarget {
    Weight w;
    float* y;  // n_tokens x w.rows
};
void matmul_many(std::span<const MatmulTarget> outs, const float* x, int64_t n_tokens,
                 ThreadPool& pool, Activations act);

// out = row r of w as floats (embedding lookup).
void get_row(const Weight& w, int64_t r, float* out);

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);

// The rotation of position pos: inv_freq.size() (cos, sin) pairs, pair i at angle
// pos * inv_freq[i], scaled by `scale`. One position's angles serve every head of every layer.
void rope_angles(int64_t pos, std::span<const double> inv_freq, float scale, float* cos_sin);
// Rotates the first rope_dim dims of each of n_heads vectors of head_dim by rope_angles' pairs.
void rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin, RopeStyle style);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// gate[i] = gelu_tanh(gate[i]) * up[i] (ref::gelu_mul's form)
void gelu_mul(float* gate, const float* up, int64_t n);

void softmax(float* x, int64_t n);

// The index of the largest of x[0, n), the lowest on ties; NaN never wins (0 when nothing but
// NaN is there, or n is 0). Greedy decoding's pick over the vocabulary, every sequence every step.
int64_t argmax(const float* x, int64_t n);
// The sum in double of x[i] >= floor (kernels/host_math.h's sum_double).
double sum_double(const float* x, int64_t n, float floor);

// n floats to IEEE halves, rounded to nearest even as quant::f32_to_f16 does, bit for bit (an
// f16 KV cache's every row).
void f32_to_f16_row(const float* x, int64_t n, uint16_t* out);

// One query vector against n_kv cached positions (keys and values `stride` floats apart),
// with a streaming softmax so no score vector is ever materialised.
void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out);

}  // namespace ferry::kernels::cpu
