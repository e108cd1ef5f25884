#include "kernels/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/quantize_activations.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

namespace ferry::kernels::cpu::ref {
using namespace ferry::quant;

namespace {

float dot_q4_0(const BlockQ4_0* b, const float* x, int64_t nb) {
    float sum = 0;
    for (int64_t i = 0; i < nb; ++i, x += QK) {
        float acc = 0;
        for (int j = 0; j < QK / 2; ++j) {
            acc += static_cast<float>((b[i].qs[j] & 0x0F) - 8) * x[j];
            acc += static_cast<float>((b[i].qs[j] >> 4) - 8) * x[j + QK / 2];
        }
        sum += fp16_to_fp32(b[i].d) * acc;
    }
    return sum;
}

// Q4_1 is d*q + m, so a block's dot is d*sum(q*x) + m*sum(x).
float dot_q4_1(const BlockQ4_1* b, const float* x, int64_t nb) {
    float sum = 0;
    for (int64_t i = 0; i < nb; ++i, x += QK) {
        float acc = 0, xs = 0;
        for (int j = 0; j < QK / 2; ++j) {
            acc += static_cast<float>(b[i].qs[j] & 0x0F) * x[j];
            acc += static_cast<float>(b[i].qs[j] >> 4) * x[j + QK / 2];
            xs += x[j] + x[j + QK / 2];
        }
        sum += fp16_to_fp32(b[i].d) * acc + fp16_to_fp32(b[i].m) * xs;
    }
    return sum;
}

float dot_q8_0(const BlockQ8_0* b, const float* x, int64_t nb) {
    float sum = 0;
    for (int64_t i = 0; i < nb; ++i, x += QK) {
        float acc = 0;
        for (int j = 0; j < QK; ++j) acc += static_cast<float>(b[i].qs[j]) * x[j];
        sum += fp16_to_fp32(b[i].d) * acc;
    }
    return sum;
}

float dot_f32(const float* w, const float* x, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i];
    return sum;
}

float row_scale(const uint8_t* row) {
    float s;
    std::memcpy(&s, row, sizeof(s));
    return s;
}

// int8 and fp8: one scale for the whole row, applied once after the sum.
float dot_int8(const uint8_t* row, const float* x, int64_t n) {
    const auto* q = reinterpret_cast<const int8_t*>(row + kRowScaleBytes);
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<float>(q[i]) * x[i];
    return row_scale(row) * acc;
}

float dot_fp8(const uint8_t* row, const float* x, int64_t n) {
    const uint8_t* q = row + kRowScaleBytes;
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += fp8_e4m3_to_fp32(q[i]) * x[i];
    return row_scale(row) * acc;
}

// w8a8: the activations are quantized per token as the SIMD paths do, then one integer sum.
float dot_w8a8(const uint8_t* row, const float* x, int64_t n) {
    std::vector<int8_t> xq(static_cast<size_t>(n));
    const float dx = quantize_token_q8(x, n, xq.data());
    const auto* q = reinterpret_cast<const int8_t*>(row + kW8A8HeaderBytes);
    int64_t acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += int64_t{q[i]} * xq[static_cast<size_t>(i)];
    return static_cast<float>(acc) * (row_scale(row) * dx);
}

template <int G>
float dot_int4(const uint8_t* row, const float* x, int64_t n) {
    float sum = 0;
    for (int64_t g = 0; g < n / G; ++g, x += G) {
        BlockInt4<G> b;
        std::memcpy(&b, row + g * sizeof(b), sizeof(b));
        float acc = 0;
        for (int c = 0; c < G / 32; ++c)
            for (int j = 0; j < 16; ++j) {
                const uint8_t q = b.qs[16 * c + j];
                acc += static_cast<float>((q & 0x0F) - b.z) * x[32 * c + j];
                acc += static_cast<float>((q >> 4) - b.z) * x[32 * c + j + 16];
            }
        sum += fp16_to_fp32(b.d) * acc;
    }
    return sum;
}

// Formats without a fused loop: dequantize one block-aligned chunk at a time.
float dot_via_dequant(DType type, const uint8_t* row, const float* x, int64_t n) {
    const auto& info = dtype_info(type);
    constexpr int64_t kChunk = 256;  // a multiple of every block size
    float buf[kChunk];
    float sum = 0;
    for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t len = std::min(kChunk, n - i);
        (void)dequantize_row(type, row + row_bytes(info, i), buf, len);
        for (int64_t j = 0; j < len; ++j) sum += buf[j] * x[i + j];
    }
    return sum;
}

}  // namespace

float vec_dot(DType type, const uint8_t* row, const float* x, int64_t n) {
    switch (type) {
        case DType::F32:
            return dot_f32(reinterpret_cast<const float*>(row), x, n);
        case DType::Q4_0:
            return dot_q4_0(reinterpret_cast<const BlockQ4_0*>(row), x, n / QK);
        case DType::Q4_1:
            return dot_q4_1(reinterpret_cast<const BlockQ4_1*>(row), x, n / QK);
        case DType::Q8_0:
            return dot_q8_0(reinterpret_cast<const BlockQ8_0*>(row), x, n / QK);
        // ferry's own types have fused loops: a row header cannot be cut into chunks.
        case DType::INT8:
            return dot_int8(row, x, n);
        case DType::FP8:
            return dot_fp8(row, x, n);
        case DType::W8A8:
            return dot_w8a8(row, x, n);
        case DType::INT4_G32:
            return dot_int4<32>(row, x, n);
        case DType::INT4_G64:
            return dot_int4<64>(row, x, n);
        case DType::INT4_G128:
            return dot_int4<128>(row, x, n);
        default:
            return dot_via_dequant(type, row, x, n);
    }
}

namespace {
// The k-quants' integer products (dot_act's definition for them): per 32-element sub-block of
// Q4_K and Q5_K (per 16 of Q6_K) the exact integer sum, then its float step, in element order.
template <class Block, void (*ints)(const Block&, uint8_t*, uint8_t*, uint8_t*)>
float dot_act_k_min(const uint8_t* row, const ActBlock* x, int64_t nb, bool wide) {
    float facc = 0, macc = 0;
    uint8_t q[QK_K], sc[8], m[8];
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        Block b;
        std::memcpy(&b, row + sb * sizeof(b), sizeof(b));
        ints(b, q, sc, m);
        const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
        for (int k = 0; k < 8; ++k) {
            const ActBlock& a = x[8 * sb + k];
            int32_t p = 0;
            for (int j = 0; j < 32; ++j)
                p += int32_t{q[32 * k + j]} * (wide ? 128 * a.hi[j] + a.lo[j] : a.hi[j]);
            facc = std::fma(static_cast<float>(p), (d * static_cast<float>(sc[k])) * a.d, facc);
            macc = std::fma(dmin * static_cast<float>(m[k]), a.sx, macc);
        }
    }
    return facc - macc;
}

float dot_act_q6_k(const uint8_t* row, const ActBlock* x, int64_t nb, bool wide) {
    float facc = 0;
    uint8_t q[QK_K];
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        BlockQ6_K b;
        std::memcpy(&b, row + sb * sizeof(b), sizeof(b));
        q6_k_ints(b, q);
        const float d = fp16_to_fp32(b.d);
        for (int k = 0; k < 16; ++k) {
            const ActBlock& a = x[8 * sb + k / 2];
            const int j0 = 16 * (k % 2);
            int32_t p = 0;
            for (int j = j0; j < j0 + 16; ++j)
                p += int32_t{q[16 * k + j - j0]} * (wide ? 128 * a.hi[j] + a.lo[j] : a.hi[j]);
            p -= 32 * (k % 2 ? a.s - a.s_lo : a.s_lo);  // q - 32
            facc =
                std::fma(static_cast<float>(p), (d * static_cast<float>(b.scales[k])) * a.d, facc);
        }
    }
    return facc;
}
}  // namespace

float dot_act(DType type, const uint8_t* row, const ActBlock* x, int64_t nb, Activations act) {
    const bool wide = act == Activations::Int16;
    if (type == DType::Q4_K) return dot_act_k_min<BlockQ4_K, q4_k_ints>(row, x, nb, wide);
    if (type == DType::Q5_K) return dot_act_k_min<BlockQ5_K, q5_k_ints>(row, x, nb, wide);
    if (type == DType::Q6_K) return dot_act_q6_k(row, x, nb, wide);
    float facc = 0, macc = 0;
    for (int64_t b = 0; b < nb; ++b) {
        const ActBlock& a = x[b];
        auto v = [&](int j) { return wide ? 128 * int32_t{a.hi[j]} + a.lo[j] : int32_t{a.hi[j]}; };
        int32_t p = 0;
        float dw = 0;
        if (type == DType::Q8_0) {
            const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
            for (int j = 0; j < QK; ++j) p += int32_t{blk.qs[j]} * v(j);
            dw = fp16_to_fp32(blk.d);
        } else if (type == DType::Q5_0 || type == DType::Q5_1) {
            // As Q4_0 / Q4_1 with five-bit levels: Q5_0's offset 16 comes off as 16 * s.
            const bool q50 = type == DType::Q5_0;
            const uint8_t* blk = row + b * (q50 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1));
            uint8_t q[QK];
            q5_ints(type, blk, q);
            for (int j = 0; j < QK; ++j) p += int32_t{q[j]} * v(j);
            uint16_t d, m;
            std::memcpy(&d, blk, 2);
            dw = fp16_to_fp32(d);
            if (q50) {
                p -= 16 * a.s;
            } else {
                std::memcpy(&m, blk + 2, 2);
                macc = std::fma(fp16_to_fp32(m), a.sx, macc);
            }
        } else {
            // Q4_0, Q4_1 and int4 / int3 share the nibble layout (int3's codes widened);
            // Q4_0's offset and the zero point come off in integers.
            const bool grp = is_int_group(type);
            const GroupChunk c = grp ? group_chunk(type, row, 32 * b) : GroupChunk{};
            const uint8_t* qs = grp ? c.qs
                                : type == DType::Q4_0
                                    ? reinterpret_cast<const BlockQ4_0*>(row)[b].qs
                                    : reinterpret_cast<const BlockQ4_1*>(row)[b].qs;
            for (int j = 0; j < QK / 2; ++j)
                p += int32_t{qs[j] & 0x0F} * v(j) + int32_t{qs[j] >> 4} * v(j + QK / 2);
            if (grp) {
                p -= int32_t{c.z} * a.s;
                dw = fp16_to_fp32(c.d);
            } else if (type == DType::Q4_0) {
                p -= 8 * a.s;
                dw = fp16_to_fp32(reinterpret_cast<const BlockQ4_0*>(row)[b].d);
            } else {
                const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
                dw = fp16_to_fp32(blk.d);
                macc = std::fma(fp16_to_fp32(blk.m), a.sx, macc);
            }
        }
        facc = std::fma(static_cast<float>(p), dw * a.d, facc);
    }
    return type == DType::Q4_1 || type == DType::Q5_1 ? facc + macc : facc;
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
          RopeStyle style) {
    for (int i = 0; i < rope_dim / 2; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
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
    for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_mul(float* gate, const float* up, int64_t n) {
    constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        const float u2 = 2.0f * k * (x + 0.044715f * x * x * x);
        gate[i] = x / (1.0f + std::exp(-u2)) * up[i];
    }
}

void softcap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void softmax(float* x, int64_t n) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

double sum_double(const float* x, int64_t n, float floor) {
    // Eight running sums, so the adds do not wait on each other (NEON and the scalar level use
    // this; the order only moves the last bits of a double).
    double s[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j)
            if (x[i + j] >= floor) s[j] += x[i + j];
    for (; i < n; ++i)
        if (x[i] >= floor) s[0] += x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

int64_t argmax(const float* x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out) {
    // Online softmax (running max m, running denominator l): one pass over the cache.
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    for (int d = 0; d < head_dim; ++d) out[d] = 0;
    for (int64_t p = 0; p < n_kv; ++p) {
        const float* kp = k + p * stride;
        float s = 0;
        for (int d = 0; d < head_dim; ++d) s += q[d] * kp[d];
        s *= scale;
        const float m_new = std::max(m, s);
        const float correction = std::exp(m - m_new);
        const float w = std::exp(s - m_new);
        l = l * correction + w;
        const float* vp = v + p * stride;
        for (int d = 0; d < head_dim; ++d) out[d] = out[d] * correction + w * vp[d];
        m = m_new;
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace ferry::kernels::cpu::ref
