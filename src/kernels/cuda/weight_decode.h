// How each weight type's bytes become floats, 8 consecutive weights of a row at a time: the one
// definition the GPU's kernels (matmul, embed) read the file's own blocks with. It compiles for
// the host as well as the device, so the CPU tests hold it to quant::dequantize_row bit for bit
// on every type; the device side differs only in exact operations (the f16 conversion
// instruction, products rounded as written rather than contracted into FMAs).
//
// A row is the file's row: its header (ferry's per-row scales) then its blocks, row_bytes long.
// Chunk c is the row's weights 8c .. 8c + 7; every type here has blocks of a multiple of 8.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/host_device.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace ferry::kernels::cuda::decode {

FERRY_HD uint16_t u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | p[1] << 8);
}
FERRY_HD uint32_t u32(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
FERRY_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
#endif
}
FERRY_HD float f32_at(const uint8_t* p) {
    return bits_to_float(u32(p));
}

// Exact conversions, so both sides get the same float for every code (NaNs keep their payload).
FERRY_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = uint32_t{h & 0x8000u} << 16;
    const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0) {  // zero or subnormal: m * 2^-24, exact in f32
        const float f = static_cast<float>(m) * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (e == 31) return bits_to_float(sign | 0x7F800000u | m << 13);
    return bits_to_float(sign | (e + 112) << 23 | m << 13);
#endif
}
FERRY_HD float bf16_to_float(uint16_t h) {
    return bits_to_float(uint32_t{h} << 16);
}
// OCP E4M3: bias 7, no infinities, S.1111.111 the only NaN.
FERRY_HD float e4m3_to_float(uint8_t v) {
    const uint32_t sign = uint32_t{v & 0x80u} << 24;
    const uint32_t e = (v >> 3) & 0xF, m = v & 7;
    if (e == 15 && m == 7) return bits_to_float(sign | 0x7FC00000u);
    if (e == 0) {  // subnormal: m * 2^-9
        const float f = static_cast<float>(m) * 0.001953125f;
        return sign ? -f : f;
    }
    return bits_to_float(sign | (e + 120) << 23 | m << 20);
}

// a * b and a - b rounded once each, as the CPU's reference computes them: nvcc would otherwise
// fuse d * q - m into one FMA and the GPU's weights would differ from the CPU's in the last bit.
using exact::add;
using exact::mul;

// Nibble j (0..31) of a 32-weight chunk packed as Q4_0: weight j in the low nibble of byte j,
// weight j + 16 in the high nibble of byte j.
FERRY_HD int nibble32(const uint8_t* qs, int j) {
    return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
}

// Q4_K / Q5_K's sub-block s scale and minimum (6 bits each, packed into 12 bytes).
FERRY_HD void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// One type's layout: its block (elements, bytes), the row header before the blocks, and
// chunk(row, c, w) writing the row's weights 8c .. 8c + 7 into w.
template <DType T>
struct Layout;

template <>
struct Layout<DType::F32> {
    static constexpr int kElems = 1, kBytes = 4, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        for (int j = 0; j < 8; ++j) w[j] = f32_at(row + (8 * c + j) * 4);
    }
};
template <>
struct Layout<DType::F16> {
    static constexpr int kElems = 1, kBytes = 2, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        for (int j = 0; j < 8; ++j) w[j] = half_to_float(u16(row + (8 * c + j) * 2));
    }
};
template <>
struct Layout<DType::BF16> {
    static constexpr int kElems = 1, kBytes = 2, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        for (int j = 0; j < 8; ++j) w[j] = bf16_to_float(u16(row + (8 * c + j) * 2));
    }
};
template <>
struct Layout<DType::Q4_0> {
    static constexpr int kElems = 32, kBytes = 18, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 4) * kBytes;
        const float d = half_to_float(u16(b));
        const int j0 = static_cast<int>(c % 4) * 8;
        for (int j = 0; j < 8; ++j) w[j] = mul(static_cast<float>(nibble32(b + 2, j0 + j) - 8), d);
    }
};
template <>
struct Layout<DType::Q4_1> {
    static constexpr int kElems = 32, kBytes = 20, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 4) * kBytes;
        const float d = half_to_float(u16(b)), m = half_to_float(u16(b + 2));
        const int j0 = static_cast<int>(c % 4) * 8;
        for (int j = 0; j < 8; ++j)
            w[j] = add(mul(static_cast<float>(nibble32(b + 4, j0 + j)), d), m);
    }
};
template <>
struct Layout<DType::Q5_0> {
    static constexpr int kElems = 32, kBytes = 22, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 4) * kBytes;
        const float d = half_to_float(u16(b));
        const uint32_t qh = u32(b + 2);
        const int j0 = static_cast<int>(c % 4) * 8;
        for (int j = j0; j < j0 + 8; ++j) {
            const int q = nibble32(b + 6, j) | static_cast<int>((qh >> j) & 1u) << 4;
            w[j - j0] = mul(static_cast<float>(q - 16), d);
        }
    }
};
template <>
struct Layout<DType::Q5_1> {
    static constexpr int kElems = 32, kBytes = 24, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 4) * kBytes;
        const float d = half_to_float(u16(b)), m = half_to_float(u16(b + 2));
        const uint32_t qh = u32(b + 4);
        const int j0 = static_cast<int>(c % 4) * 8;
        for (int j = j0; j < j0 + 8; ++j) {
            const int q = nibble32(b + 8, j) | static_cast<int>((qh >> j) & 1u) << 4;
            w[j - j0] = add(mul(static_cast<float>(q), d), m);
        }
    }
};
template <>
struct Layout<DType::Q8_0> {
    static constexpr int kElems = 32, kBytes = 34, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 4) * kBytes;
        const float d = half_to_float(u16(b));
        const auto* q = reinterpret_cast<const int8_t*>(b + 2) + (c % 4) * 8;
        for (int j = 0; j < 8; ++j) w[j] = mul(static_cast<float>(q[j]), d);
    }
};
template <>
struct Layout<DType::Q4_K> {
    static constexpr int kElems = 256, kBytes = 144, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 32) * kBytes;
        const int e0 = static_cast<int>(c % 32) * 8, s = e0 / 32, l0 = e0 % 32;
        int sc, m;
        k_scale_min(b + 4, s, sc, m);
        const float ds = mul(half_to_float(u16(b)), static_cast<float>(sc));
        const float ms = mul(half_to_float(u16(b + 2)), static_cast<float>(m));
        const uint8_t* q = b + 16 + 32 * (s / 2) + l0;
        for (int j = 0; j < 8; ++j) {
            const int v = s % 2 ? q[j] >> 4 : q[j] & 0x0F;
            w[j] = add(mul(ds, static_cast<float>(v)), -ms);
        }
    }
};
template <>
struct Layout<DType::Q5_K> {
    static constexpr int kElems = 256, kBytes = 176, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 32) * kBytes;
        const int e0 = static_cast<int>(c % 32) * 8, s = e0 / 32, l0 = e0 % 32;
        int sc, m;
        k_scale_min(b + 4, s, sc, m);
        const float ds = mul(half_to_float(u16(b)), static_cast<float>(sc));
        const float ms = mul(half_to_float(u16(b + 2)), static_cast<float>(m));
        const uint8_t* qh = b + 16 + l0;
        const uint8_t* q = b + 48 + 32 * (s / 2) + l0;
        for (int j = 0; j < 8; ++j) {
            const int v = (s % 2 ? q[j] >> 4 : q[j] & 0x0F) + ((qh[j] >> s) & 1) * 16;
            w[j] = add(mul(ds, static_cast<float>(v)), -ms);
        }
    }
};
template <>
struct Layout<DType::Q6_K> {
    static constexpr int kElems = 256, kBytes = 210, kHeader = 0;
    // Two halves of 128; in each, weight l + 32k takes its low 4 bits from nibble k / 2 of
    // ql[l + 32 (k % 2)] and its high 2 from bits 2k, 2k + 1 of qh[l]; one int8 scale per 16.
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c / 32) * kBytes;
        const int e0 = static_cast<int>(c % 32) * 8;
        const int half = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
        const uint8_t* ql = b + 64 * half + 32 * (k % 2) + l0;
        const uint8_t* qh = b + 128 + 32 * half + l0;
        const auto sc = static_cast<float>(static_cast<int8_t>(b[192 + e0 / 16]));
        const float ds = mul(half_to_float(u16(b + 208)), sc);
        for (int j = 0; j < 8; ++j) {
            const int lo = k / 2 ? ql[j] >> 4 : ql[j] & 0x0F;
            const int q = lo | ((qh[j] >> (2 * k)) & 3) << 4;
            w[j] = mul(ds, static_cast<float>(q - 32));
        }
    }
};

// ferry's per-row types: a scale (and for w8a8 the sum of the codes) in the row's header.
template <int Header>
struct RowInt8 {
    static constexpr int kElems = 1, kBytes = 1, kHeader = Header;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const float s = f32_at(row);
        const auto* q = reinterpret_cast<const int8_t*>(row + Header) + 8 * c;
        for (int j = 0; j < 8; ++j) w[j] = mul(static_cast<float>(q[j]), s);
    }
};
template <>
struct Layout<DType::INT8> : RowInt8<4> {};
template <>
struct Layout<DType::W8A8> : RowInt8<8> {};
template <>
struct Layout<DType::FP8> {
    static constexpr int kElems = 1, kBytes = 1, kHeader = 4;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const float s = f32_at(row);
        const uint8_t* q = row + kHeader + 8 * c;
        for (int j = 0; j < 8; ++j) w[j] = mul(e4m3_to_float(q[j]), s);
    }
};

// ferry's groups (quant/ferry_types.h): [f16 scale d][u8 zero point z][pad] then per 32 weights
// 16 bytes of nibbles (int4), 12 of 3-bit codes (int3) or 12 of 2:4 codes and positions (int4s);
// x = d * (q - z) with q - z formed in integers.
enum class Codes { Int4, Int3, Int4S };
template <int G, Codes K>
struct Group {
    static constexpr int kChunkBytes = K == Codes::Int4 ? 16 : 12;
    static constexpr int kElems = G, kBytes = 4 + G / 32 * kChunkBytes, kHeader = 0;
    static FERRY_HD void chunk(const uint8_t* row, int64_t c, float* w) {
        const uint8_t* b = row + (c * 8 / G) * kBytes;
        const float d = half_to_float(u16(b));
        const int z = b[2];
        const int e0 = static_cast<int>(c * 8 % G);
        const uint8_t* q = b + 4 + (e0 / 32) * kChunkBytes;
        const int j0 = e0 % 32;
        int code[8];
        if constexpr (K == Codes::Int4) {
            for (int j = 0; j < 8; ++j) code[j] = nibble32(q, j0 + j);
        } else if constexpr (K == Codes::Int3) {
            for (int j = 0; j < 8; ++j) {
                const int i = j0 + j;
                code[j] = ((q[i % 8] >> (2 * (i / 8))) & 3) | ((q[8 + i / 8] >> (i % 8)) & 1) << 2;
            }
        } else {
            // Quartets m: two kept codes in q[m] (the lower position's in the low nibble), their
            // positions in nibble m % 2 of q[8 + m / 2]; the other two hold z.
            for (int h = 0; h < 2; ++h) {
                const int m = j0 / 4 + h;
                const int pos = (q[8 + m / 2] >> (4 * (m % 2))) & 0xF;
                int* out = code + 4 * h;
                out[0] = out[1] = out[2] = out[3] = z;
                out[pos & 3] = q[m] & 0x0F;
                out[pos >> 2] = q[m] >> 4;
            }
        }
        for (int j = 0; j < 8; ++j) w[j] = mul(d, static_cast<float>(code[j] - z));
    }
};
template <>
struct Layout<DType::INT4_G32> : Group<32, Codes::Int4> {};
template <>
struct Layout<DType::INT4_G64> : Group<64, Codes::Int4> {};
template <>
struct Layout<DType::INT4_G128> : Group<128, Codes::Int4> {};
template <>
struct Layout<DType::INT3_G32> : Group<32, Codes::Int3> {};
template <>
struct Layout<DType::INT3_G64> : Group<64, Codes::Int3> {};
template <>
struct Layout<DType::INT3_G128> : Group<128, Codes::Int3> {};
template <>
struct Layout<DType::INT4S_G32> : Group<32, Codes::Int4S> {};
template <>
struct Layout<DType::INT4S_G64> : Group<64, Codes::Int4S> {};
template <>
struct Layout<DType::INT4S_G128> : Group<128, Codes::Int4S> {};

// Calls f(std::integral_constant<DType, T>{}) for the type t and returns true, or returns false
// where the GPU has no kernel reading t's own blocks (the backend then widens it to f32).
template <class F>
bool visit(DType t, F&& f) {
    switch (t) {
#define FERRY_DECODE_CASE(T)                          \
    case DType::T:                                    \
        f(std::integral_constant<DType, DType::T>{}); \
        return true;
        FERRY_DECODE_CASE(F32)
        FERRY_DECODE_CASE(F16)
        FERRY_DECODE_CASE(BF16)
        FERRY_DECODE_CASE(Q4_0)
        FERRY_DECODE_CASE(Q4_1)
        FERRY_DECODE_CASE(Q5_0)
        FERRY_DECODE_CASE(Q5_1)
        FERRY_DECODE_CASE(Q8_0)
        FERRY_DECODE_CASE(Q4_K)
        FERRY_DECODE_CASE(Q5_K)
        FERRY_DECODE_CASE(Q6_K)
        FERRY_DECODE_CASE(INT8)
        FERRY_DECODE_CASE(W8A8)
        FERRY_DECODE_CASE(FP8)
        FERRY_DECODE_CASE(INT4_G32)
        FERRY_DECODE_CASE(INT4_G64)
        FERRY_DECODE_CASE(INT4_G128)
        FERRY_DECODE_CASE(INT3_G32)
        FERRY_DECODE_CASE(INT3_G64)
        FERRY_DECODE_CASE(INT3_G128)
        FERRY_DECODE_CASE(INT4S_G32)
        FERRY_DECODE_CASE(INT4S_G64)
        FERRY_DECODE_CASE(INT4S_G128)
#undef FERRY_DECODE_CASE
        default:
            return false;
    }
}

// Whether the GPU reads a {rows, cols} matrix of type t as the file's own blocks: a type above
// whose rows split into whole chunks of 8.
inline bool native(DType t, int64_t cols) {
    return cols % 8 == 0 && visit(t, [](auto) {});
}

}  // namespace ferry::kernels::cuda::decode
