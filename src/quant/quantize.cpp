// Transcribed from ggml-quants.c (quantize_row_*_ref, make_qkx2_quants, make_qx_quants).
// Bit-compatibility with ggml and gguf-py depends on doing the same float operations in the
// same order, so expressions keep ggml's shape even where a rewrite would read better, and
// this file must not be built with floating-point contraction into FMAs.
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

namespace ferry::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// ggml's nearest_int: round half to even via the float mantissa trick (|f| <= 2^22).
int nearest_int(float fval) {
    const float val = fval + 12582912.f;
    int i;
    std::memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

template <class Block>
void store_block(void* dst, int64_t i, const Block& b) {
    std::memcpy(static_cast<uint8_t*>(dst) + i * sizeof(Block), &b, sizeof(Block));
}

// The block's value of largest magnitude, with its sign (q4_0 and q5_0 map it to their most
// negative level, so the sign picks which end of the range is used fully).
float signed_absmax(const float* x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

void block_min_max(const float* x, float* min, float* max) {
    *min = std::numeric_limits<float>::max(), *max = -std::numeric_limits<float>::max();
    for (int j = 0; j < QK; ++j) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

void quant_q8_0(const float* x, void* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        BlockQ8_0 b;
        b.d = fp32_to_fp16(d);
        for (int j = 0; j < QK; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
        store_block(dst, i, b);
    }
}

void quant_q4_0(const float* x, void* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i, x += QK) {
        const float d = signed_absmax(x) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        BlockQ4_0 b;
        b.d = fp32_to_fp16(d);
        for (int j = 0; j < QK / 2; ++j) {
            const int xi0 =
                std::clamp(static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)), 0, 15);
            const int xi1 =
                std::clamp(static_cast<int>(static_cast<int8_t>(x[QK / 2 + j] * id + 8.5f)), 0, 15);
            b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
        }
        store_block(dst, i, b);
    }
}

void quant_q4_1(const float* x, void* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i, x += QK) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        BlockQ4_1 b;
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(min);
        for (int j = 0; j < QK / 2; ++j) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QK / 2 + j] - min) * id;
            const int xi0 = std::clamp(static_cast<int>(static_cast<int8_t>(x0 + 0.5f)), 0, 15);
            const int xi1 = std::clamp(static_cast<int>(static_cast<int8_t>(x1 + 0.5f)), 0, 15);
            b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
        }
        store_block(dst, i, b);
    }
}

// Element j's and j + 16's 5-bit levels of a Q5_0 / Q5_1 block: low nibbles as Q4_0's, fifth
// bits at bits j and j + 16 of qh (little-endian).
void put_q5_pair(uint8_t* qs, uint32_t& qh, int j, uint8_t xi0, uint8_t xi1) {
    qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
    qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
    qh |= ((xi1 & 0x10u) >> 4) << (j + QK / 2);
}

// Q4_0 on 32 levels: the value of largest magnitude maps to -16.
void quant_q5_0(const float* x, void* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i, x += QK) {
        const float d = signed_absmax(x) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        BlockQ5_0 b;
        b.d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; ++j) {
            const auto xi0 = static_cast<uint8_t>(
                std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
            const auto xi1 = static_cast<uint8_t>(
                std::min(31, static_cast<int>(static_cast<int8_t>(x[QK / 2 + j] * id + 16.5f))));
            put_q5_pair(b.qs, qh, j, xi0, xi1);
        }
        std::memcpy(b.qh, &qh, sizeof(qh));
        store_block(dst, i, b);
    }
}

// Q4_1 on 32 levels.
void quant_q5_1(const float* x, void* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i, x += QK) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        BlockQ5_1 b;
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; ++j) {
            const auto xi0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
            const auto xi1 = static_cast<uint8_t>((x[QK / 2 + j] - min) * id + 0.5f);
            put_q5_pair(b.qs, qh, j, xi0, xi1);
        }
        std::memcpy(b.qh, &qh, sizeof(qh));
        store_block(dst, i, b);
    }
}

// Weighted least-squares fit of scale and min for an asymmetric nmax-level grid, trying
// nstep+1 slightly different grid spacings and keeping the best (ggml's make_qkx2_quants).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = std::max(0, std::min(nmax, l));
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                error += weights[i] * diff;
            }
            if (error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// Symmetric fit weighted by x^2 (rmse_type 1, no importance matrix): ggml's make_qx_quants.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = std::max(-nmax, std::min(nmax - 1, l));
        L[i] = static_cast<int8_t>(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = std::max(-nmax, std::min(nmax - 1, l));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q4_K's and Q5_K's shared part: each 32-element sub-block's scale and minimum fitted on an
// nmax-level grid, both stored as 6 bits against the super-block's fp16 d and dmin, and the
// levels L rounded again against the scales as stored. ggml runs the fit with (rmin, nstep)
// -1 / 20 for Q4_K and -0.5 / 15 for Q5_K.
template <class Block>
void fit_k_scales(const float* x, int nmax, float rmin, int nstep, Block& b, uint8_t L[QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;  // mins are subtracted, so scales are never negative
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
        uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
        ls = std::min<uint8_t>(63, ls);
        lm = std::min<uint8_t>(63, lm);
        if (j < 4) {
            b.scales[j] = ls;
            b.scales[j + 4] = lm;
        } else {
            b.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
            b.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
            b.scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
        }
    }
    b.d = fp32_to_fp16(max_scale / 63.f);
    b.dmin = fp32_to_fp16(max_min / 63.f);
    // Requantize against the scales as stored (6-bit, fp16), not the fitted ones.
    uint8_t sc[8], m[8];
    q4_k_scale_mins(b.scales, sc, m);
    for (int j = 0; j < QK_K / 32; ++j) {
        const float d = fp16_to_fp32(b.d) * sc[j];
        if (!d) continue;
        const float dm = fp16_to_fp32(b.dmin) * m[j];
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
        }
    }
}

void quant_q4_k(const float* x, void* dst, int64_t n) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        BlockQ4_K b{};
        fit_k_scales(x, 15, -1.f, 20, b, L);
        uint8_t* q = b.qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l)
                q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
        store_block(dst, i, b);
    }
}

// Q4_K's low nibbles, and each element's fifth bit in qh: the 64 elements from n go to bits
// 2(n/64) (first 32) and 2(n/64) + 1 (next 32) of qh[j].
void quant_q5_k(const float* x, void* dst, int64_t n) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        BlockQ5_K b{};
        fit_k_scales(x, 31, -0.5f, 15, b, L);
        uint8_t* ql = b.qs;
        uint8_t m1 = 1, m2 = 2;
        for (int s = 0; s < QK_K; s += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[s + j], l2 = L[s + j + 32];
                if (l1 > 15) l1 -= 16, b.qh[j] |= m1;
                if (l2 > 15) l2 -= 16, b.qh[j] |= m2;
                ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
            }
            m1 = static_cast<uint8_t>(m1 << 2), m2 = static_cast<uint8_t>(m2 << 2);
        }
        store_block(dst, i, b);
    }
}

void quant_q6_k(const float* x, void* dst, int64_t n) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        BlockQ6_K b{};
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = std::fabs(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < kGroupMaxEps) {  // all zero: a zero block (d = 0)
            store_block(dst, i, b);
            continue;
        }
        const float iscale = -128.f / max_scale;
        b.d = fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib)
            b.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(b.d) * b.scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = std::max(-32, std::min(31, l));
                L[16 * j + ii] = static_cast<int8_t>(l + 32);
            }
        }
        uint8_t* ql = b.ql;
        uint8_t* qh = b.qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
                ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
                qh[l] =
                    static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                         ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
        store_block(dst, i, b);
    }
}

void quant_half(const float* x, void* dst, int64_t n, uint16_t (*conv)(float)) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = conv(x[i]);
        std::memcpy(p + 2 * i, &h, 2);
    }
}

}  // namespace

bool can_quantize(DType type) {
    switch (type) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
        case DType::INT8:
        case DType::FP8:
        case DType::W8A8:
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128:
        case DType::INT4S_G32:
        case DType::INT4S_G64:
        case DType::INT4S_G128:
            return true;
        default:
            return false;
    }
}

Status quantize_row(DType type, const float* src, void* dst, int64_t n) {
    const DTypeInfo& info = dtype_info(type);
    if (!can_quantize(type)) return make_error("ferry cannot quantize to {}", info.name);
    if (n < 0 || n % info.block_size != 0)
        return make_error("quantize {}: {} elements is not a multiple of the block size {}",
                          info.name, n, info.block_size);
    switch (type) {
        case DType::F32:
            std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            break;
        case DType::F16:
            quant_half(src, dst, n, fp32_to_fp16);
            break;
        case DType::BF16:
            quant_half(src, dst, n, fp32_to_bf16);
            break;
        case DType::Q8_0:
            quant_q8_0(src, dst, n);
            break;
        case DType::Q4_0:
            quant_q4_0(src, dst, n);
            break;
        case DType::Q4_1:
            quant_q4_1(src, dst, n);
            break;
        case DType::Q5_0:
            quant_q5_0(src, dst, n);
            break;
        case DType::Q5_1:
            quant_q5_1(src, dst, n);
            break;
        case DType::Q4_K:
            quant_q4_k(src, dst, n);
            break;
        case DType::Q5_K:
            quant_q5_k(src, dst, n);
            break;
        case DType::Q6_K:
            quant_q6_k(src, dst, n);
            break;
        case DType::INT8:
            quantize_row_int8(src, dst, n);
            break;
        case DType::FP8:
            quantize_row_fp8(src, dst, n);
            break;
        case DType::W8A8:
            quantize_row_w8a8(src, dst, n);
            break;
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128:
            quantize_row_int_group(type, src, dst, n);
            break;
        case DType::INT4S_G32:
        case DType::INT4S_G64:
        case DType::INT4S_G128:
            // Zeros round to z exactly, so a row on the pattern keeps it through the grid.
            if (const int64_t c = first_dense_quartet(src, n); c >= 0)
                return make_error(
                    "{} stores rows pruned 2:4, and columns {}..{} hold more than 2 weights that "
                    "are not zero (prune it first: ferry prune --sparsity 2:4)",
                    info.name, c, c + 3);
            quantize_row_int_group(type, src, dst, n);
            break;
        default:
            break;
    }
    return Status::Ok();
}

Expected<std::vector<uint8_t>> quantize(DType type, const float* src, int64_t n) {
    if (!can_quantize(type)) return make_error("ferry cannot quantize to {}", dtype_name(type));
    const DTypeInfo& info = dtype_info(type);
    if (n % info.block_size != 0)
        return make_error("quantize {}: {} elements is not a multiple of the block size {}",
                          info.name, n, info.block_size);
    std::vector<uint8_t> out(row_bytes(info, n));
    if (Status s = quantize_row(type, src, out.data(), n); !s) return s.error();
    return out;
}

bool keeps_zeros(DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
           t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q6_K || t == DType::INT8 ||
           t == DType::FP8 || t == DType::W8A8 || is_int_group(t);
}

DType fallback_for(DType target, int64_t row) {
    if (row % dtype_info(target).block_size == 0) return target;
    // llama.cpp's tensor_type_fallback for the k-quants, so a Q4_K_M file is the same bytes.
    if (target == DType::Q4_K || target == DType::Q5_K) {
        const DType t = target == DType::Q4_K ? DType::Q5_0 : DType::Q5_1;
        return row % dtype_info(t).block_size == 0 ? t : DType::F16;
    }
    if (is_int_group(target)) {
        const DType g64 = is_int3(target)    ? DType::INT3_G64
                          : is_int4s(target) ? DType::INT4S_G64
                                             : DType::INT4_G64;
        const DType g32 = is_int3(target)    ? DType::INT3_G32
                          : is_int4s(target) ? DType::INT4S_G32
                                             : DType::INT4_G32;
        for (DType t : {g64, g32})
            if (dtype_info(t).block_size < dtype_info(target).block_size &&
                row % dtype_info(t).block_size == 0)
                return t;
        return DType::INT8;
    }
    if (target != DType::F32 && target != DType::F16 && target != DType::BF16 &&
        row % dtype_info(DType::Q8_0).block_size == 0)
        return DType::Q8_0;
    return DType::F16;
}

DType type_for_tensor(DType target, const std::string& name, size_t n_dims, int64_t row) {
    if (n_dims == 1 || name.ends_with("ffn_gate_inp.weight") ||
        name.ends_with("ffn_gate_inp_shexp.weight"))
        return DType::F32;
    if (target == DType::W8A8 && name.rfind("blk.", 0) != 0) return DType::INT8;
    // ferry prune leaves the embedding and the output head dense.
    if (is_int4s(target) && name.rfind("blk.", 0) != 0) target = int4s_dense(target);
    return fallback_for(target, row);
}

}  // namespace ferry::quant
