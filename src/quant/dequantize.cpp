// Scalar reference dequantizers, transcribed from ggml-quants.c (dequantize_row_*). They must
// stay bit-exact with ggml and gguf-py: every product is formed in the same order, in float,
// and this file must not be built with floating-point contraction into FMAs (which would
// change the rounding of `d * q + m`); the default x86-64 / ISO C++ flags do not contract.
#include "quant/dequantize.h"

#include <bit>
#include <cstring>

#include "quant/block_formats.h"
#include "quant/ferry_types.h"

namespace ferry::quant {
namespace {

// Blocks are read by memcpy: the source (a mapped file) carries no alignment guarantee.
template <class Block>
Block load_block(const void* src, int64_t i) {
    Block b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + i * sizeof(Block), sizeof(Block));
    return b;
}

void dequant_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequant_f16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
    }
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
    }
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) {
        const auto b = load_block<BlockQ4_0>(src, i);
        const float d = fp16_to_fp32(b.d);
        float* y = dst + i * QK;
        for (int j = 0; j < QK / 2; ++j) {
            y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
            y[j + QK / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_q4_1(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) {
        const auto b = load_block<BlockQ4_1>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float m = fp16_to_fp32(b.m);
        float* y = dst + i * QK;
        for (int j = 0; j < QK / 2; ++j) {
            y[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
            y[j + QK / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
        }
    }
}

// Element j's five bits: its nibble and bit j of qh.
template <class Block>
int q5_value(const Block& b, int j) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    const int nib = j < QK / 2 ? b.qs[j] & 0x0F : b.qs[j - QK / 2] >> 4;
    return nib | static_cast<int>(((qh >> j) & 1u) << 4);
}

void dequant_q5_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) {
        const auto b = load_block<BlockQ5_0>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int j = 0; j < QK; ++j) dst[i * QK + j] = static_cast<float>(q5_value(b, j) - 16) * d;
    }
}

void dequant_q5_1(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) {
        const auto b = load_block<BlockQ5_1>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float m = fp16_to_fp32(b.m);
        for (int j = 0; j < QK; ++j) dst[i * QK + j] = static_cast<float>(q5_value(b, j)) * d + m;
    }
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) {
        const auto b = load_block<BlockQ8_0>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int j = 0; j < QK; ++j) dst[i * QK + j] = static_cast<float>(b.qs[j]) * d;
    }
}

void dequant_q4_k(const void* src, float* dst, int64_t n) {
    uint8_t q[QK_K], sc[8], m[8];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const auto b = load_block<BlockQ4_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float dmin = fp16_to_fp32(b.dmin);
        q4_k_ints(b, q, sc, m);
        for (int s = 0; s < 8; ++s) {
            const float ds = d * sc[s], ms = dmin * m[s];
            for (int l = 0; l < 32; ++l)
                dst[i * QK_K + 32 * s + l] = ds * static_cast<float>(q[32 * s + l]) - ms;
        }
    }
}

void dequant_q5_k(const void* src, float* dst, int64_t n) {
    uint8_t q[QK_K], sc[8], m[8];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const auto b = load_block<BlockQ5_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float dmin = fp16_to_fp32(b.dmin);
        q5_k_ints(b, q, sc, m);
        for (int s = 0; s < 8; ++s) {
            const float ds = d * sc[s], ms = dmin * m[s];
            for (int l = 0; l < 32; ++l)
                dst[i * QK_K + 32 * s + l] = ds * static_cast<float>(q[32 * s + l]) - ms;
        }
    }
}

void dequant_q6_k(const void* src, float* dst, int64_t n) {
    uint8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const auto b = load_block<BlockQ6_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        q6_k_ints(b, q);
        for (int l = 0; l < QK_K; ++l)
            dst[i * QK_K + l] = d * b.scales[l / 16] * static_cast<float>(int{q[l]} - 32);
    }
}

float row_scale(const void* src) {
    float s;
    std::memcpy(&s, src, sizeof(s));
    return s;
}

void dequant_int8(const void* src, float* dst, int64_t n) {
    const float s = row_scale(src);
    const auto* q = static_cast<const int8_t*>(src) + kRowScaleBytes;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]) * s;
}

void dequant_w8a8(const void* src, float* dst, int64_t n) {
    const float s = row_scale(src);
    const auto* q = static_cast<const int8_t*>(src) + kW8A8HeaderBytes;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]) * s;
}

void dequant_fp8(const void* src, float* dst, int64_t n) {
    const float s = row_scale(src);
    const auto* q = static_cast<const uint8_t*>(src) + kRowScaleBytes;
    for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_fp32(q[i]) * s;
}

// (q - z) is formed in integers, so d * (q - z) is one rounding and a SIMD path can match it
// bit for bit. int3, int4 and int4s alike, 32 columns at a time as the kernels read them.
void dequant_int_group(DType t, const void* src, float* dst, int64_t n) {
    const auto* row = static_cast<const uint8_t*>(src);
    for (int64_t c0 = 0; c0 < n; c0 += 32) {
        const GroupChunk c = group_chunk(t, row, c0);
        const float d = fp16_to_fp32(c.d);
        float* y = dst + c0;
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>((c.qs[j] & 0x0F) - c.z);
            y[j + 16] = d * static_cast<float>((c.qs[j] >> 4) - c.z);
        }
    }
}

}  // namespace

// The 8 sub-block scales and mins of Q4_K are 6 bits each, packed into 12 bytes: the first
// four of each sit in the low 6 bits of bytes 0..7, the last four are split between the low
// and high nibbles of bytes 8..11 and the top 2 bits of bytes 0..7. Each 32-byte chunk of qs
// holds two 32-element sub-blocks: low nibbles, then high.
void q4_k_scale_mins(const uint8_t packed[12], uint8_t sc[8], uint8_t m[8]) {
    const uint8_t* s = packed;
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            sc[j] = s[j] & 63;
            m[j] = s[j + 4] & 63;
        } else {
            sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
            m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
    }
}

void q4_k_ints(const BlockQ4_K& b, uint8_t q[256], uint8_t sc[8], uint8_t m[8]) {
    q4_k_scale_mins(b.scales, sc, m);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = b.qs[32 * c + l] & 0xF;
            q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
        }
}

// Sub-block s's element l: the low nibble (s even) or high nibble of qs[32 (s / 2) + l], and
// bit s of qh[l] as the fifth.
void q5_k_ints(const BlockQ5_K& b, uint8_t q[256], uint8_t sc[8], uint8_t m[8]) {
    q4_k_scale_mins(b.scales, sc, m);
    for (int s = 0; s < 8; ++s)
        for (int l = 0; l < 32; ++l) {
            const uint8_t lo = b.qs[32 * (s / 2) + l] >> (4 * (s % 2)) & 0xF;
            q[32 * s + l] = static_cast<uint8_t>(lo | ((b.qh[l] >> s) & 1) << 4);
        }
}

void q5_ints(DType type, const void* block, uint8_t q[32]) {
    if (type == DType::Q5_0) {
        const auto b = load_block<BlockQ5_0>(block, 0);
        for (int j = 0; j < QK; ++j) q[j] = static_cast<uint8_t>(q5_value(b, j));
    } else {
        const auto b = load_block<BlockQ5_1>(block, 0);
        for (int j = 0; j < QK; ++j) q[j] = static_cast<uint8_t>(q5_value(b, j));
    }
}

// Two halves of 128 elements; in each, element l + 32k takes its low 4 bits from ql (nibble
// k/2 of byte l + 32(k%2)) and its high 2 bits from bits 2k..2k+1 of qh[l].
void q6_k_ints(const BlockQ6_K& b, uint8_t q[256]) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b.ql + 64 * half;
        const uint8_t* qh = b.qh + 32 * half;
        uint8_t* y = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            y[l] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
            y[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
            y[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            y[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
}

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F)  // inf, or NaN made quiet with its payload kept (as F16C hardware does)
        return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13) | (mant ? 0x00400000 : 0));
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: shift the mantissa up until its leading 1 becomes the implicit bit.
    int e = 113;
    while ((mant & 0x400) == 0) {
        mant <<= 1;
        --e;
    }
    return std::bit_cast<float>(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3FF) << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    const uint32_t abs = u & 0x7FFFFFFF;
    if (abs > 0x7F800000)  // NaN: keep the top payload bits, force quiet
        return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x3FF);
    if (abs >= 0x47800000) return sign | 0x7C00;  // >= 65536 rounds to inf; also inf itself
    if (abs >= 0x38800000) {                      // normal in fp16 (>= 2^-14)
        // Rebias the exponent, then round the 13 dropped bits to nearest even; a carry out
        // of the mantissa correctly bumps the exponent (up to inf).
        uint32_t r = abs - 0x38000000;
        r += 0x0FFF + ((r >> 13) & 1);
        return sign | static_cast<uint16_t>(r >> 13);
    }
    if (abs < 0x33000000) return sign;  // below half the smallest subnormal (2^-25): zero
    // Subnormal in fp16: value = m * 2^-24 with m rounded to nearest even.
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14..24 bits to drop
    uint32_t m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1))) ++m;
    return sign | static_cast<uint16_t>(m);
}

float bf16_to_fp32(uint16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t fp32_to_bf16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
    return static_cast<uint16_t>((u + (0x7FFF + ((u >> 16) & 1))) >> 16);
}

Status dequantize_row(DType type, const void* src, float* dst, int64_t n) {
    const DTypeInfo& info = dtype_info(type);
    if (n < 0 || n % info.block_size != 0)
        return make_error("dequantize {}: {} elements is not a multiple of the block size {}",
                          info.name, n, info.block_size);
    switch (type) {
        case DType::F32:
            dequant_f32(src, dst, n);
            break;
        case DType::F16:
            dequant_f16(src, dst, n);
            break;
        case DType::BF16:
            dequant_bf16(src, dst, n);
            break;
        case DType::Q4_0:
            dequant_q4_0(src, dst, n);
            break;
        case DType::Q4_1:
            dequant_q4_1(src, dst, n);
            break;
        case DType::Q5_0:
            dequant_q5_0(src, dst, n);
            break;
        case DType::Q5_1:
            dequant_q5_1(src, dst, n);
            break;
        case DType::Q8_0:
            dequant_q8_0(src, dst, n);
            break;
        case DType::Q5_K:
            dequant_q5_k(src, dst, n);
            break;
        case DType::Q4_K:
            dequant_q4_k(src, dst, n);
            break;
        case DType::Q6_K:
            dequant_q6_k(src, dst, n);
            break;
        case DType::INT8:
            dequant_int8(src, dst, n);
            break;
        case DType::FP8:
            dequant_fp8(src, dst, n);
            break;
        case DType::W8A8:
            dequant_w8a8(src, dst, n);
            break;
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128:
        case DType::INT4S_G32:
        case DType::INT4S_G64:
        case DType::INT4S_G128:
            dequant_int_group(type, src, dst, n);
            break;
        default:
            return make_error("dequantize: type {} (id {}) is not supported", info.name,
                              static_cast<uint32_t>(type));
    }
    return {};
}

}  // namespace ferry::quant
