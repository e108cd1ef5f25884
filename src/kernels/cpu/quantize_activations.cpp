#include "kernels/cpu/quantize_activations.h"

#include <cmath>
#include <limits>

namespace ferry::kernels::ref {

void quantize_q8a(const float* x, BlockQ8A* out, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d > 0 ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            // nearbyint (ties to even) is what the SIMD paths' cvtps rounding does.
            const int q = static_cast<int>(std::nearbyint(x[j] * id));
            out[b].qs[j] = static_cast<int8_t>(q);
            sum += q;
        }
        out[b].d = d;
        out[b].s = d * static_cast<float>(sum);
    }
}

float quantize_token_q8(const float* x, int64_t n, int8_t* q) {
    float amax = 0;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
        amax = std::fmax(amax, std::fabs(x[i]));
        nan |= std::isnan(x[i]);
    }
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < n; ++i)
        q[i] = std::isnan(x[i]) ? int8_t{0} : static_cast<int8_t>(std::nearbyint(x[i] * id));
    return nan ? std::numeric_limits<float>::quiet_NaN() : d;
}

}  // namespace ferry::kernels::ref
