#include "quant/kv_format.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace ferry::quant {

const char* kv_dtype_name(KvDType t) {
    switch (t) {
        case KvDType::F16:
            return "f16";
        case KvDType::Int8:
            return "int8";
        case KvDType::FP8:
            return "fp8";
        default:
            return "f32";
    }
}

std::optional<KvDType> parse_kv_dtype(std::string_view name) {
    for (KvDType t : {KvDType::F32, KvDType::F16, KvDType::Int8, KvDType::FP8})
        if (name == kv_dtype_name(t)) return t;
    return std::nullopt;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const int e = (h >> 10) & 0x1f;
    const uint32_t m = h & 0x3ff;
    if (e == 0) {
        const float a = std::ldexp(static_cast<float>(m), -24);
        return sign ? -a : a;
    }
    if (e == 31)
        return m ? std::numeric_limits<float>::quiet_NaN()
                 : (sign ? -std::numeric_limits<float>::infinity()
                         : std::numeric_limits<float>::infinity());
    return std::bit_cast<float>(sign | (static_cast<uint32_t>(e - 15 + 127) << 23) | (m << 13));
}

uint16_t f32_to_f16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
    x &= 0x7fffffff;
    if (x > 0x7f800000) return sign | 0x7e00;   // NaN
    if (x >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
    if (x < 0x38800000) {                       // below 2^-14: f16 subnormal, steps of 2^-24
        const float a = std::bit_cast<float>(x);
        return sign | static_cast<uint16_t>(std::rint(a * 16777216.0f));
    }
    const uint32_t mant = x & 0x7fffff;
    uint32_t h = (((x >> 23) - 127 + 15) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry moves into the exponent
    return sign | static_cast<uint16_t>(h);
}

float e4m3_to_f32(uint8_t c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float a;
    if (e == 15 && m == 7)
        a = std::numeric_limits<float>::quiet_NaN();
    else if (e == 0)
        a = std::ldexp(static_cast<float>(m), -9);
    else
        a = std::ldexp(static_cast<float>(8 + m), e - 10);
    return (c & 0x80) ? -a : a;
}

uint8_t f32_to_e4m3(float f) {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (std::isnan(f)) return sign | 0x7f;
    if (a >= kE4M3Max) return sign | 0x7e;
    if (a < 0.015625f)  // below 2^-6: subnormal, steps of 2^-9 (8 steps reach the first normal)
        return sign | static_cast<uint8_t>(std::rint(a * 512.0f));
    int e;
    const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
    int m = static_cast<int>(std::rint((fr * 2.0f - 1.0f) * 8.0f));
    int exp = e - 1 + 7;
    if (m == 8) m = 0, ++exp;
    return sign | static_cast<uint8_t>((exp << 3) | m);
}

int64_t quantize_kv_row(KvDType t, const float* x, int n, void* dst, float* scale,
                        const float* channel_scale) {
    switch (t) {
        case KvDType::F32:
            std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
            return 0;
        case KvDType::F16:
            for (int i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(x[i]);
            return 0;
        case KvDType::Int8: {
            auto* o = static_cast<int8_t*>(dst);
            if (channel_scale) {
                // NaN keys become 0 here: a fixed scale has nowhere to carry them.
                int64_t clipped = 0;
                for (int i = 0; i < n; ++i) {
                    const float s = channel_scale[i];
                    float q = s > 0 ? std::rint(x[i] / s) : 0.0f;
                    if (std::isnan(q)) q = 0;
                    if (std::fabs(q) > kInt8Max) ++clipped, q = std::clamp(q, -kInt8Max, kInt8Max);
                    o[i] = static_cast<int8_t>(q);
                }
                return clipped;
            }
            float amax = 0;
            bool nan = false;
            for (int i = 0; i < n; ++i) {
                amax = std::max(amax, std::fabs(x[i]));
                nan |= std::isnan(x[i]);
            }
            const float s = amax / kInt8Max, inv = s > 0 ? 1.0f / s : 0.0f;
            for (int i = 0; i < n; ++i)
                o[i] = nan ? 0
                           : static_cast<int8_t>(
                                 std::clamp(std::rint(x[i] * inv), -kInt8Max, kInt8Max));
            *scale = nan ? std::numeric_limits<float>::quiet_NaN() : s;  // NaN reaches the output
            return 0;
        }
        case KvDType::FP8: {
            auto* o = static_cast<uint8_t*>(dst);
            float amax = 0;
            for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
            const float s = amax / kE4M3Max, inv = s > 0 ? 1.0f / s : 0.0f;
            for (int i = 0; i < n; ++i) o[i] = f32_to_e4m3(x[i] * inv);
            *scale = s;
            return 0;
        }
    }
    return 0;
}

void dequantize_kv_row(KvDType t, const void* src, int n, float scale, const float* channel_scale,
                       float* out) {
    switch (t) {
        case KvDType::F32:
            std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
            return;
        case KvDType::F16:
            for (int i = 0; i < n; ++i) out[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
            return;
        case KvDType::Int8: {
            const auto* q = static_cast<const int8_t*>(src);
            for (int i = 0; i < n; ++i)
                out[i] = (channel_scale ? channel_scale[i] : scale) * static_cast<float>(q[i]);
            return;
        }
        case KvDType::FP8:
            for (int i = 0; i < n; ++i)
                out[i] = scale * e4m3_to_f32(static_cast<const uint8_t*>(src)[i]);
            return;
    }
}

}  // namespace ferry::quant
