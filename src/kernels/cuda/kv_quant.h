// The KV cache's 8-bit element formats on the GPU (quant/kv_format.h says what each stores): one
// definition of every code and scale, compiled for host and device like weight_decode.h, so the
// CPU tests hold it to quant::quantize_kv_row / dequantize_kv_row bit for bit. A kernel takes a
// (token, KV head) row's absolute maximum with a warp reduction (max is exact in any order) and
// then codes each element alone, which is all these functions need.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/weight_decode.h"

namespace ferry::kernels::cuda::kvq {

constexpr float kInt8Max = 127.0f;  // quant::kInt8Max
constexpr float kE4M3Max = 448.0f;  // quant::kE4M3Max

using exact::div;
FERRY_HD float round_even(float x) {  // std::rint under the default rounding mode
#if defined(__CUDA_ARCH__)
    return rintf(x);
#else
    return std::rint(x);
#endif
}
FERRY_HD float clamp127(float q) {
    return q < -kInt8Max ? -kInt8Max : q > kInt8Max ? kInt8Max : q;
}

// A row's scale from its absolute maximum (NaNs left out of it): x = s * q, |q| <= max; inv is
// what the codes multiply by (0 for an all-zero row).
struct RowScale {
    float s, inv;
};
FERRY_HD RowScale row_scale(float amax, float max) {
    const float s = div(amax, max);
    return {s, s > 0 ? div(1.0f, s) : 0.0f};
}
// max that leaves NaN out, as std::max(amax, |x|) and fmaxf both do.
FERRY_HD float amax_step(float amax, float x) {
    const float a = std::fabs(x);
    return a > amax ? a : amax;
}

// int8 values (and keys without calibration): one scale per (token, KV head); a row holding a
// NaN is all zeros with a NaN scale, so the NaN reaches the output instead of hiding.
FERRY_HD int8_t int8_code(float x, float inv) {
    return static_cast<int8_t>(clamp127(round_even(decode::mul(x, inv))));
}
// int8 keys: the channel's calibrated scale; a NaN becomes 0 (a fixed scale cannot carry it),
// and a code beyond 127 steps is clipped, which *clipped says.
FERRY_HD int8_t int8_channel_code(float x, float s, bool* clipped) {
    float q = s > 0 ? round_even(div(x, s)) : 0.0f;
    if (q != q) q = 0;
    *clipped = std::fabs(q) > kInt8Max;
    return static_cast<int8_t>(clamp127(q));
}

// OCP E4M3, round to nearest even, saturating at +-448; NaN stays NaN.
FERRY_HD uint8_t e4m3_code(float f) {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (f != f) return sign | 0x7F;
    if (a >= kE4M3Max) return sign | 0x7E;
    if (a < 0.015625f)  // below 2^-6: subnormal, steps of 2^-9
        return sign | static_cast<uint8_t>(round_even(a * 512.0f));
    int e;
    const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
    int m = static_cast<int>(round_even((fr * 2.0f - 1.0f) * 8.0f));
    int exp = e - 1 + 7;
    if (m == 8) m = 0, ++exp;
    return sign | static_cast<uint8_t>((exp << 3) | m);
}
FERRY_HD uint8_t fp8_code(float x, float inv) {
    return e4m3_code(decode::mul(x, inv));
}

// An element back: scale (the row's or the channel's) times the code's value.
FERRY_HD float int8_value(int8_t q, float scale) {
    return decode::mul(scale, static_cast<float>(q));
}
FERRY_HD float fp8_value(uint8_t q, float scale) {
    return decode::mul(scale, decode::e4m3_to_float(q));
}

// One (token, KV head) row of hd floats stored as int8 (is_int8) or fp8 codes, the work split
// over `lanes`: lane l codes elements l, l + n, ...; the absolute maximum, the NaN flag and the
// clipped count are combined across lanes by lanes.max / any / sum (a warp's shuffles on the
// GPU, nothing for the host's single lane), so the kernel and the CPU tests run this one
// function. int8 keys take `channel`'s calibrated scales; other rows write their scale to
// *scale (from lane 0). Returns the clipped int8 key codes.
template <class Lanes>
FERRY_HD int store_row_8bit(uint8_t* row, float* scale, const float* channel, const float* x,
                            int hd, bool is_int8, const Lanes& lanes) {
    const int l0 = lanes.lane(), step = lanes.count();
    if (is_int8 && channel) {
        int clipped = 0;
        for (int d = l0; d < hd; d += step) {
            bool c = false;
            row[d] = static_cast<uint8_t>(int8_channel_code(x[d], channel[d], &c));
            clipped += c;
        }
        return lanes.sum(clipped);
    }
    float amax = 0;
    bool nan = false;
    for (int d = l0; d < hd; d += step) amax = amax_step(amax, x[d]), nan |= x[d] != x[d];
    amax = lanes.max(amax);
    nan = lanes.any(nan);
    const RowScale rs = row_scale(amax, is_int8 ? kInt8Max : kE4M3Max);
    for (int d = l0; d < hd; d += step)
        row[d] = is_int8 ? static_cast<uint8_t>(nan ? 0 : int8_code(x[d], rs.inv))
                         : fp8_code(x[d], rs.inv);
    if (l0 == 0) *scale = is_int8 && nan ? decode::bits_to_float(0x7FC00000u) : rs.s;
    return 0;
}

// The host's: one lane does it all.
struct OneLane {
    int lane() const { return 0; }
    int count() const { return 1; }
    float max(float v) const { return v; }
    bool any(bool v) const { return v; }
    int sum(int v) const { return v; }
};

}  // namespace ferry::kernels::cuda::kvq
