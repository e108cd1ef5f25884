#include "kernels/kernels.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/reference.h"
#include "quant/dequantize.h"

namespace ferry::kernels {
namespace {

CpuLevel detect() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return CpuLevel::AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuLevel::AVX2;
#endif
    return CpuLevel::Scalar;
}

CpuLevel initial_level() {
    CpuLevel level = detect();
    if (const char* env = std::getenv("FERRY_CPU_LEVEL")) {
        CpuLevel want = level;
        if (!std::strcmp(env, "scalar")) want = CpuLevel::Scalar;
        if (!std::strcmp(env, "avx2")) want = CpuLevel::AVX2;
        if (!std::strcmp(env, "avx512")) want = CpuLevel::AVX512;
        if (want < level) level = want;
    }
    return level;
}

CpuLevel g_level = initial_level();

}  // namespace

CpuLevel detected_cpu_level() {
    static const CpuLevel l = detect();
    return l;
}
CpuLevel cpu_level() {
    return g_level;
}
void set_cpu_level(CpuLevel l) {
    g_level = l < detected_cpu_level() ? l : detected_cpu_level();
}

const char* cpu_level_name(CpuLevel l) {
    switch (l) {
        case CpuLevel::AVX512:
            return "avx512";
        case CpuLevel::AVX2:
            return "avx2";
        default:
            return "scalar";
    }
}

void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    pool.parallel_for(
        w.rows,
        [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const uint8_t* row = w.row(r);
                for (int64_t t = 0; t < n_tokens; ++t)
                    y[t * w.rows + r] = ref::vec_dot(w.type, row, x + t * w.cols, w.cols);
            }
        },
        16);
}

void get_row(const Weight& w, int64_t r, float* out) {
    (void)quant::dequantize_row(w.type, w.row(r), out, w.cols);
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
    ref::rmsnorm(x, weight, out, n, eps);
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, int64_t pos, float theta_base,
          RopeStyle style) {
    // theta_i = pos * base^(-2i/rope_dim); computed in double so long positions stay exact.
    for (int i = 0; i < rope_dim / 2; ++i) {
        const double theta = static_cast<double>(pos) *
                             std::pow(static_cast<double>(theta_base), -2.0 * i / rope_dim);
        const float c = static_cast<float>(std::cos(theta));
        const float s = static_cast<float>(std::sin(theta));
        for (int h = 0; h < n_heads; ++h) {
            float* v = x + static_cast<int64_t>(h) * head_dim;
            const int a = style == RopeStyle::Normal ? 2 * i : i;
            const int b = style == RopeStyle::Normal ? 2 * i + 1 : i + rope_dim / 2;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void silu_mul(float* gate, const float* up, int64_t n) {
    ref::silu_mul(gate, up, n);
}

void softmax(float* x, int64_t n) {
    ref::softmax(x, n);
}

void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out) {
    ref::attend(q, k, v, stride, n_kv, head_dim, scale, out);
}

}  // namespace ferry::kernels
