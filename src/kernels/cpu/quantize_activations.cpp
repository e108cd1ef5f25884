#include "kernels/cpu/quantize_activations.h"

#include <cmath>
#include <limits>

namespace ferry::kernels::cpu::ref {

void quantize_act(const float* x, ActBlock* out, int64_t n, Activations a) {
    const bool wide = a == Activations::Int16;
    const float vmax = wide ? static_cast<float>(kActMax16) : static_cast<float>(kActMax8);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        ActBlock& o = out[b];
        float amax = 0;
        bool finite = true;
        for (int j = 0; j < 32; ++j) {
            finite &= std::isfinite(x[j]);
            amax = std::fmax(amax, std::fabs(x[j]));
        }
        // A NaN or infinity makes the block's products NaN (the float product would be NaN or
        // infinite); its integers are zero so nothing overflows on the way.
        const float d = finite ? amax / vmax : std::numeric_limits<float>::quiet_NaN();
        // A step so small that 1 / d overflows (amax below ~5e-35) rounds the block to zero.
        float id = finite && d > 0 ? 1.0f / d : 0.0f;
        if (!(id <= std::numeric_limits<float>::max())) id = 0;
        int32_t s = 0, s_lo = 0;
        for (int j = 0; j < 32; ++j) {
            const int v = finite ? static_cast<int>(std::nearbyint(x[j] * id)) : 0;
            const int hi = wide ? (v + 64) >> 7 : v;  // >> of a negative int is floor (C++20)
            o.hi[j] = static_cast<int8_t>(hi);
            o.lo[j] = static_cast<int8_t>(wide ? v - 128 * hi : 0);
            s += v;
            if (j < 16) s_lo += v;
        }
        o.d = d;
        o.s = s;
        o.s_lo = s_lo;
        o.sx = d * static_cast<float>(s);
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

}  // namespace ferry::kernels::cpu::ref
