// Quantizers for ferry's own types (layouts in ferry_types.h) and the E4M3 conversions.
#include "quant/ferry_types.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

#include "quant/dequantize.h"
#include "quant/group_grid.h"

namespace ferry::quant {
namespace {

float fp8_decode(uint8_t e) {
    const int exp = (e >> 3) & 0xF, man = e & 7;
    float v;
    if (exp == 0xF && man == 7)
        v = std::numeric_limits<float>::quiet_NaN();
    else if (exp == 0)
        v = std::ldexp(static_cast<float>(man), -9);  // subnormal: m * 2^-9
    else
        v = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + m/8) * 2^(exp-7)
    return (e & 0x80) ? -v : v;
}

// All 256 codes decoded once: the scalar kernels look values up instead of rebuilding them.
const std::array<float, 256> kFp8Table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = fp8_decode(static_cast<uint8_t>(i));
    return t;
}();

// amax over a row; a NaN is skipped (it is written as NaN or 0 and must not poison the scale).
float row_amax(const float* x, int64_t n) {
    float amax = 0;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    return amax;
}

void put_scale(void* dst, float s) {
    std::memcpy(dst, &s, sizeof(s));
}

}  // namespace

float fp8_e4m3_to_fp32(uint8_t e) {
    return kFp8Table[e];
}

uint8_t fp32_to_fp8_e4m3(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const auto sign = static_cast<uint8_t>((u >> 24) & 0x80);
    const uint32_t a = u & 0x7FFFFFFF;
    if (a > 0x7F800000) return sign | kFp8NaN;
    if (a >= std::bit_cast<uint32_t>(kFp8Max)) return sign | 0x7E;  // saturate (infinity included)
    if (a < 0x3C800000) {  // below 2^-6: the subnormal grid m * 2^-9
        // Exact scaling, then round half to even; m == 8 is code 8, the smallest normal.
        const auto m = static_cast<uint8_t>(std::nearbyint(std::bit_cast<float>(a) * 512.0f));
        return sign | m;
    }
    // Round the 20 mantissa bits E4M3 drops to nearest even; a carry bumps the exponent. Then
    // rebias the exponent from 127 to 7 (120 << 3 in code units).
    const uint32_t r = (a + 0x7FFFF + ((a >> 20) & 1)) >> 20;
    return sign | static_cast<uint8_t>(std::min<uint32_t>(r - (120u << 3), 0x7E));
}

void quantize_row_int8(const float* x, void* dst, int64_t n) {
    const float amax = row_amax(x, n);
    float s = amax / 127.0f;
    if (!(s > 0) || !std::isfinite(s)) s = 0;
    put_scale(dst, s);
    auto* q = static_cast<int8_t*>(dst) + kRowScaleBytes;
    for (int64_t i = 0; i < n; ++i) {
        float v = s > 0 ? std::nearbyint(x[i] / s) : 0.0f;
        v = v >= -127.0f ? std::min(v, 127.0f) : (v < 0 ? -127.0f : 0.0f);  // NaN -> 0
        q[i] = static_cast<int8_t>(v);
    }
}

void quantize_row_w8a8(const float* x, void* dst, int64_t n) {
    // The int8 row, moved 4 bytes on to make room for the sum.
    auto* p = static_cast<uint8_t*>(dst);
    quantize_row_int8(x, p + (kW8A8HeaderBytes - kRowScaleBytes), n);
    std::memmove(p, p + (kW8A8HeaderBytes - kRowScaleBytes), kRowScaleBytes);
    const auto* q = reinterpret_cast<const int8_t*>(p + kW8A8HeaderBytes);
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += q[i];
    const auto s32 = static_cast<int32_t>(sum);  // |sum| <= 127 n: fits for any real row
    std::memcpy(p + kRowScaleBytes, &s32, sizeof(s32));
}

void quantize_row_fp8(const float* x, void* dst, int64_t n) {
    const float amax = row_amax(x, n);
    float s = amax / kFp8Max;
    if (!(s > 0) || !std::isfinite(s)) s = 0;
    put_scale(dst, s);
    auto* q = static_cast<uint8_t*>(dst) + kRowScaleBytes;
    for (int64_t i = 0; i < n; ++i) q[i] = s > 0 ? fp32_to_fp8_e4m3(x[i] / s) : 0;
}

void quantize_row_int_group(DType type, const float* x, void* dst, int64_t n) {
    // The grid search and rounding GPTQ also uses (group_grid.h), so both write the same bytes.
    const int G = grid_group_size(type);
    uint8_t codes[128];
    for (int64_t g = 0; g < n / G; ++g, x += G) {
        const GroupParams p = fit_group(type, x);
        for (int j = 0; j < G; ++j) codes[j] = round_to_grid(type, p, x[j]);
        pack_group(type, p, codes, static_cast<uint8_t*>(dst) + g * dtype_info(type).block_bytes);
    }
}

GroupChunk group_chunk(DType t, const uint8_t* row, int64_t c0) {
    static_assert(offsetof(BlockInt4<32>, qs) == 4 && offsetof(BlockInt4<128>, qs) == 4);
    static_assert(offsetof(BlockInt3<32>, qs) == 4 && offsetof(BlockInt3<128>, qs) == 4);
    static_assert(offsetof(BlockInt4S<32>, qs) == 4 && offsetof(BlockInt4S<128>, qs) == 4);
    const DTypeInfo& info = dtype_info(t);
    const uint8_t* blk = row + (c0 / info.block_size) * info.block_bytes;
    GroupChunk c;
    std::memcpy(&c.d, blk, 2);
    c.z = blk[2];
    const int k = static_cast<int>(c0 % info.block_size) / 32;  // the chunk within its group
    if (is_int4(t)) {
        std::memcpy(c.qs, blk + 4 + 16 * k, 16);
        return c;
    }
    uint8_t codes[32];
    const uint8_t* q = blk + 4 + 12 * k;
    if (is_int4s(t)) {
        for (int m = 0; m < 8; ++m) int4s_quartet(q, m, c.z, codes + 4 * m);
    } else {
        for (int j = 0; j < 32; ++j)
            codes[j] = static_cast<uint8_t>(((q[j % 8] >> (2 * (j / 8))) & 3) |
                                            (((q[8 + j / 8] >> (j % 8)) & 1) << 2));
    }
    for (int j = 0; j < 16; ++j) c.qs[j] = static_cast<uint8_t>(codes[j] | codes[j + 16] << 4);
    return c;
}

void int4s_quartet(const uint8_t* chunk, int m, uint8_t z, uint8_t w[4]) {
    const int pos = (chunk[8 + m / 2] >> (4 * (m % 2))) & 0xF;
    w[0] = w[1] = w[2] = w[3] = z;
    w[pos & 3] = chunk[m] & 0xF;
    w[pos >> 2] = chunk[m] >> 4;
}

void int4s_positions(const uint8_t w[4], uint8_t z, int pos[2]) {
    int n = 0;
    for (int i = 0; i < 4 && n < 2; ++i)
        if (w[i] != z) pos[n++] = i;
    for (int i = 0; i < 4 && n < 2; ++i)
        if (w[i] == z) pos[n++] = i;
    if (pos[0] > pos[1]) std::swap(pos[0], pos[1]);
}

int64_t first_dense_quartet(const float* x, int64_t n) {
    for (int64_t i = 0; i + 4 <= n; i += 4)
        if ((x[i] != 0) + (x[i + 1] != 0) + (x[i + 2] != 0) + (x[i + 3] != 0) > 2) return i;
    return -1;
}

void pack_int_group(DType t, uint16_t d, uint8_t z, const uint8_t* codes, void* dst) {
    const int G = dtype_info(t).block_size;
    auto* b = static_cast<uint8_t*>(dst);
    std::memcpy(b, &d, 2);
    b[2] = z;
    b[3] = 0;
    uint8_t* qs = b + 4;
    for (int c = 0; c < G / 32; ++c) {
        const uint8_t* q = codes + 32 * c;
        if (is_int4(t)) {
            for (int j = 0; j < 16; ++j)
                qs[16 * c + j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
        } else if (is_int4s(t)) {
            uint8_t* o = qs + 12 * c;
            std::memset(o, 0, 12);
            for (int m = 0; m < 8; ++m) {
                int pos[2];
                int4s_positions(q + 4 * m, z, pos);
                o[m] =
                    static_cast<uint8_t>((q[4 * m + pos[0]] & 15) | (q[4 * m + pos[1]] & 15) << 4);
                o[8 + m / 2] |= static_cast<uint8_t>((pos[0] | pos[1] << 2) << (4 * (m % 2)));
            }
        } else {
            uint8_t* o = qs + 12 * c;
            std::memset(o, 0, 12);
            for (int j = 0; j < 32; ++j) {
                o[j % 8] |= static_cast<uint8_t>((q[j] & 3) << (2 * (j / 8)));
                o[8 + j / 8] |= static_cast<uint8_t>(((q[j] >> 2) & 1) << (j % 8));
            }
        }
    }
}

}  // namespace ferry::quant
