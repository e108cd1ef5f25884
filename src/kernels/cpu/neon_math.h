// Vector math shared by the aarch64 NEON kernels (neon_kernels.cpp, attention_neon.cpp). NEON is
// the aarch64 baseline, so unlike the x86 bodies these need no target pragma and can be ordinary
// inline functions; include only under __aarch64__.
#pragma once

#include <arm_neon.h>

namespace ferry::kernels::cpu::neon {

// exp with a Cephes polynomial after range reduction by ln 2 (about 2 ulp), as the x86 levels,
// and exactly 0 below the float range so that padding lanes set to -inf weigh nothing. NEON's
// min and max return NaN when either operand is, so NaN reaches the result.
inline float32x4_t vexp(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.3365478515625f);
    const float32x4_t xc = vminq_f32(vdupq_n_f32(88.3762626647949f), vmaxq_f32(lo, x));
    const float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(1.44269504088896341f)));
    // vfmaq_f32(c, a, b) = c + a * b
    float32x4_t r = vfmaq_f32(xc, n, vdupq_n_f32(-0.693359375f));
    r = vfmaq_f32(r, n, vdupq_n_f32(2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vbslq_f32(vcltq_f32(x, lo), vdupq_n_f32(0.0f), y);
}

}  // namespace ferry::kernels::cpu::neon
