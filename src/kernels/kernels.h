// The kernel interface: the few operations a transformer forward pass is made of. Model code
// calls only these; each has a scalar reference (kernels/cpu/reference.cpp) that tests
// compare the SIMD paths against. The SIMD level is picked once from CPUID (x86) or is NEON
// (aarch64, where it is mandatory), and can be lowered with FERRY_CPU_LEVEL=scalar|avx2|avx512|neon
// for tests and comparisons.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ferry::kernels {

// Levels are ordered within one architecture, and Scalar is below every SIMD level. NEON sits
// below the x86 levels, so a `level > detected_cpu_level()` check skips AVX2 and AVX-512 on ARM.
enum class CpuLevel { Scalar = 0, NEON = 1, AVX2 = 2, AVX512 = 3 };

CpuLevel detected_cpu_level();  // what this CPU supports
CpuLevel cpu_level();           // what is used (FERRY_CPU_LEVEL may lower it)
// For tests; clamped to what the CPU supports (a level of another architecture: scalar).
void set_cpu_level(CpuLevel l);
const char* cpu_level_name(CpuLevel l);

// What Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K / int4 weights meet their activations as
// (docs/performance.md says why the default is Int16):
//  - F32: float activations against weights widened to floats (exact float32 math);
//  - Int16: each block of 32 activations rounded to a 16-bit grid (amax / 16256 steps), in
//    integer dot products (VNNI vpdpbusd / maddubs / sdot) over interleaved weights;
//  - Int8: the same with an 8-bit grid (amax / 127, llama.cpp's Q8 activations): fastest, and
//    coarse enough to move this model's logits by ~1.
// Other weight types ignore it. FERRY_ACTIVATIONS=f32|int16|int8 sets the initial mode.
enum class Activations { F32, Int16, Int8 };
Activations activations();
void set_activations(Activations a);
const char* activations_name(Activations a);
// "f32", "int16" or "int8"; false for anything else.
bool parse_activations(const char* name, Activations* out);

// A weight matrix of `rows` output channels, each a row of `cols` elements stored in `type`
// (quantized formats: cols is a multiple of the block size).
struct Weight {
    DType type = DType::F32;
    const uint8_t* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_stride = 0;  // bytes between rows
    // The same matrix in kernels/packed_weights.h's interleaved layout (Q4_0, Q4_1, Q8_0, Q4_K,
    // Q6_K, int4), which the integer kernels read; null where nobody packed it (the reference then
    // computes the integer product from `data`, slowly but with the same result).
    const uint8_t* packed = nullptr;
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride; }
};

// y[t*rows + r] = dot(W[r], x[t*cols ...]) for t in [0, n_tokens). Multi-threaded over rows;
// the weights are read once for the whole batch, which is what makes prefill compute-bound.
void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Several matrices applied to the same input (q/k/v, gate/up) in one parallel region, so a
// decode step pays one wake-up and barrier for the group. All must have the same cols.
struct MatmulOut {
    Weight w;
    float* y;  // n_tokens x w.rows
};
void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens,
                 ThreadPool& pool);

// out = row r of w as floats (embedding lookup).
void get_row(const Weight& w, int64_t r, float* out);

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);

enum class RopeStyle { Normal, Neox };  // adjacent pairs vs. halves (GPT-NeoX)
// The rotation of position pos: rope_dim / 2 (cos, sin) pairs, pair i at angle
// pos * theta_base^(-2i / rope_dim). One position's angles serve every head of every layer.
void rope_angles(int64_t pos, int rope_dim, float theta_base, float* cos_sin);
// Rotates the first rope_dim dims of each of n_heads vectors of head_dim by rope_angles' pairs.
void rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin, RopeStyle style);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);

void softmax(float* x, int64_t n);

// The index of the largest of x[0, n), the lowest on ties; NaN never wins (0 when nothing but
// NaN is there, or n is 0). Greedy decoding's pick over the vocabulary, every sequence every step.
int64_t argmax(const float* x, int64_t n);

// One query vector against n_kv cached positions (keys and values `stride` floats apart),
// with a streaming softmax so no score vector is ever materialised.
void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out);

}  // namespace ferry::kernels
