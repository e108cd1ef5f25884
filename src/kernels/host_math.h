// Math on host memory for the work around the model: the sampler's softmax and greedy pick,
// logprobs, the evaluator's agreement counts, calibration's products. Logits and calibration
// statistics reach the host whatever the backend, and this runs there at the CPU's best SIMD
// level.
#pragma once

#include <cstdint>
#include <span>

namespace ferry {
class ThreadPool;
}

namespace ferry::kernels {

void softmax(float* x, int64_t n);
// The index of the largest of x[0, n), the lowest on ties; NaN never wins (0 when nothing but
// NaN is there, or n is 0).
int64_t argmax(const float* x, int64_t n);
// The sum in double of the values of x[0, n) that are >= floor (NaN never counts): a
// probability vector's mass, and top-p's mass above a threshold. Its order is the level's, so
// only the last bits of the double depend on it.
double sum_double(const float* x, int64_t n, float floor = -__builtin_inff());
// cos_sin[2i], cos_sin[2i + 1] = scale * cos / sin(pos * inv_freq[i]), in double so long
// positions stay exact: the rotation a backend's rope_angles puts on its device.
void rope_angles(int64_t pos, std::span<const double> inv_freq, float scale, float* cos_sin);
// y[t * rows + r] = dot(row r of w, row t of x) for row-major f32 w {rows, cols} and x
// {n_tokens, cols}, in exact float math over the pool.
void matmul_f32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
                float* y, ThreadPool& pool);

}  // namespace ferry::kernels
