// Mirrors quant_q4_0 / quant_q4_1 (quantize.cpp) step by step, and is what ferry's int4 and int3
// quantizers run (ferry_types.cpp); test_gptq_awq.cpp checks that fit + round + pack gives
// quantize_row's bytes.
#include "quant/group_grid.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

namespace ferry::quant {
namespace {

// ggml's `(int8_t)(v)` then clamp to 0..15, without the undefined cast when error feedback
// has pushed v far outside the group's range.
uint8_t trunc_code(float v) {
    if (!(v >= 1.0f)) return 0;  // v < 1 truncates to 0 or below (NaN included)
    if (v >= 15.0f) return 15;
    return static_cast<uint8_t>(static_cast<int>(v));
}

// Clipping ratios tried per int4 / int3 group: 1.0, 0.98, ..., 0.80 of the group's range.
// Shrinking the range trades error on the one or two extreme values for a finer grid for the
// rest, which usually wins on the bell-shaped weights of a trained model; 1.0 comes first so a
// tie keeps the unclipped grid. The range always spans 0, so 0 has an exact code (z) and zero
// padding (or a pruned weight) stays zero.
constexpr int kClipSteps = 11;
constexpr float kClipStep = 0.02f;

GroupParams fit_int(const float* x, int G, int qmax) {
    const auto fq = static_cast<float>(qmax);
    GroupParams best;
    float lo = 0, hi = 0;
    for (int j = 0; j < G; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    float best_err = std::numeric_limits<float>::infinity();
    for (int s = 0; s < kClipSteps && hi > lo; ++s) {
        const float p = 1.0f - kClipStep * static_cast<float>(s);
        const float a = lo * p, c = hi * p;
        const uint16_t dh = fp32_to_fp16(std::min((c - a) / fq, 65504.0f));
        const float d = fp16_to_fp32(dh);  // quantize against the scale as stored
        if (!(d > 0)) continue;            // range below fp16's resolution: a zero block
        const float z = std::clamp(std::nearbyint(-a / d), 0.0f, fq);
        float err = 0;
        for (int j = 0; j < G; ++j) {
            float q = std::nearbyint(x[j] / d) + z;
            q = q >= 0 ? std::min(q, fq) : 0.0f;  // also sends NaN to 0
            const float e = d * (q - z) - x[j];
            if (std::isfinite(e)) err += e * e;  // a NaN weight must not void every trial
        }
        if (err < best_err) {
            best_err = err;
            best.d = dh;
            best.z = static_cast<uint8_t>(z);
            best.ds = d;
        }
    }
    return best;
}

}  // namespace

bool has_group_grid(DType t) {
    return t == DType::Q4_0 || t == DType::Q4_1 || is_int_group(t);
}

int grid_group_size(DType t) {
    return is_int_group(t) ? dtype_info(t).block_size : QK;
}

GroupParams fit_group(DType t, const float* x) {
    GroupParams p;
    if (t == DType::Q4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; ++j)
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        const float d = max / -8;
        p.id = d ? 1.0f / d : 0.0f;
        p.d = fp32_to_fp16(d);
    } else if (t == DType::Q4_1) {
        float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
        for (int j = 0; j < QK; ++j) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        p.id = d ? 1.0f / d : 0.0f;
        p.min = min;
        p.d = fp32_to_fp16(d);
        p.m = fp32_to_fp16(min);
    } else {
        p = fit_int(x, grid_group_size(t), int_group_max(t));
    }
    return p;
}

uint8_t round_to_grid(DType t, const GroupParams& p, float x) {
    if (t == DType::Q4_0) return trunc_code(x * p.id + 8.5f);
    if (t == DType::Q4_1) return trunc_code((x - p.min) * p.id + 0.5f);
    if (!(p.ds > 0)) return 0;  // a group fit_int found no grid for is written as zeros
    const auto fq = static_cast<float>(int_group_max(t));
    float q = std::nearbyint(x / p.ds) + static_cast<float>(p.z);
    q = q >= 0 ? std::min(q, fq) : 0.0f;
    return static_cast<uint8_t>(q);
}

float grid_value(DType t, const GroupParams& p, uint8_t code) {
    if (t == DType::Q4_0) return static_cast<float>(code - 8) * fp16_to_fp32(p.d);
    if (t == DType::Q4_1) return static_cast<float>(code) * fp16_to_fp32(p.d) + fp16_to_fp32(p.m);
    return fp16_to_fp32(p.d) * static_cast<float>(code - p.z);
}

void pack_group(DType t, const GroupParams& p, const uint8_t* codes, void* dst) {
    auto nibbles = [codes](uint8_t* qs, int G) {
        for (int c = 0; c < G / 32; ++c)
            for (int j = 0; j < 16; ++j)
                qs[16 * c + j] =
                    static_cast<uint8_t>(codes[32 * c + j] | (codes[32 * c + j + 16] << 4));
    };
    if (t == DType::Q4_0) {
        BlockQ4_0 b;
        b.d = p.d;
        nibbles(b.qs, QK);
        std::memcpy(dst, &b, sizeof(b));
    } else if (t == DType::Q4_1) {
        BlockQ4_1 b;
        b.d = p.d;
        b.m = p.m;
        nibbles(b.qs, QK);
        std::memcpy(dst, &b, sizeof(b));
    } else {
        pack_int_group(t, p.d, p.z, codes, dst);
    }
}

}  // namespace ferry::quant
