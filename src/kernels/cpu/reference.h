// Scalar reference kernels: straightforward loops, the ground truth for every SIMD path.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ferry::kernels::ref {

// dot(row of n elements stored in type, x); n is a multiple of the block size.
float vec_dot(DType type, const uint8_t* row, const float* x, int64_t n);

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);
void silu_mul(float* gate, const float* up, int64_t n);
void softmax(float* x, int64_t n);
void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out);

}  // namespace ferry::kernels::ref
