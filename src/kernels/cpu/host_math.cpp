#include "kernels/host_math.h"

#include "kernels/cpu/ops.h"

namespace ferry::kernels {

void softmax(float* x, int64_t n) {
    cpu::softmax(x, n);
}

int64_t argmax(const float* x, int64_t n) {
    return cpu::argmax(x, n);
}

double sum_double(const float* x, int64_t n, float floor) {
    return cpu::sum_double(x, n, floor);
}

void rope_angles(int64_t pos, std::span<const double> inv_freq, float scale, float* cos_sin) {
    cpu::rope_angles(pos, inv_freq, scale, cos_sin);
}

void matmul_f32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
                float* y, ThreadPool& pool) {
    const cpu::Weight wt{DType::F32, reinterpret_cast<const uint8_t*>(w), rows, cols,
                         static_cast<size_t>(cols) * sizeof(float)};
    cpu::matmul(wt, x, n_tokens, y, pool, Activations::F32);
}

}  // namespace ferry::kernels
