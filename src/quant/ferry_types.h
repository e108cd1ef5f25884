// ferry's own weight types (docs/quantization.md, "ferry's own types"): the byte layouts, the
// E4M3 conversions, and the quantizers. GGUF has no per-output-channel formats, so these live
// under ferry-specific type ids (core/dtype.h) and only ferry reads the files.
//
//   int8        row = [f32 scale s][cols x int8 q]            x = s * q, |q| <= 127
//   fp8         row = [f32 scale s][cols x E4M3 byte e]        x = s * e4m3(e), |e4m3| <= 448
//   int4_gG     row = cols/G x BlockInt4<G>                    x = d * (q - z), 0 <= q, z <= 15
//   int3_gG     row = cols/G x BlockInt3<G>                    x = d * (q - z), 0 <= q, z <= 7
//   int4s_gG    row = cols/G x BlockInt4S<G>                   int4's values on a 2:4 pattern
//   w8a8        row = [f32 scale s][i32 sum of q][cols x int8 q]   x = s * q, |q| <= 127
//
// w8a8 stores its weights as int8 does; what differs is the product: activations are
// quantized per token to int8 as well (dynamic, SmoothQuant's W8A8), so a row's dot product is
// one integer sum times two scales. The sum of q lets a kernel feed activations as unsigned
// bytes (q + 128) to u8 x s8 instructions (VNNI) and subtract 128 * sum(q) afterwards.
//
// The per-row scale sits in a 4-byte row header (DTypeInfo::row_header), so a matrix is still
// rows x row_bytes and every row-wise consumer (Weight::row, get_row, the GGUF size check)
// works unchanged; only code that would cut a row in the middle must know about it.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ferry::quant {

constexpr int kRowScaleBytes = 4;    // the f32 scale heading an int8 / fp8 row
constexpr int kW8A8HeaderBytes = 8;  // w8a8: the f32 scale, then the i32 sum of the row's q
constexpr float kFp8Max = 448.0f;    // largest finite E4M3 value (OCP FP8; no infinities)
constexpr uint8_t kFp8NaN = 0x7F;    // S.1111.111, the only NaN pattern (with either sign)

#pragma pack(push, 1)
// One group of G weights. Nibbles go as in Q4_0, per 32 elements: byte j of a 32-element
// chunk holds element j in its low nibble and element j + 16 in its high nibble, so the SIMD
// unpacking of the legacy formats serves here too.
template <int G>
struct BlockInt4 {
    uint16_t d;        // fp16 scale
    uint8_t z;         // zero point: the code that stands for 0.0, exact by construction
    uint8_t reserved;  // 0; keeps the block an even size and d 2-byte aligned within a row
    uint8_t qs[G / 2];
};

// The same with 3-bit codes, 12 bytes per 32 elements: bytes 0..7 hold element j's low two bits
// in byte j % 8 at bits 2 (j / 8), bytes 8..11 its high bit in byte 8 + j / 8 at bit j % 8. A
// row takes 3/4 of int4's bytes (3.5 bits per weight at G = 64 against 4.5): the step down that
// lets per-layer mixed precision (quantize --auto-mixed) pay for its more precise matrices.
template <int G>
struct BlockInt3 {
    uint16_t d;
    uint8_t z;
    uint8_t reserved;
    uint8_t qs[3 * G / 8];
};

// 2:4 sparse int4 (a row pruned by `ferry prune --sparsity 2:4`): of every 4 consecutive weights
// at most 2 are not zero, so only 2 codes and their 2-bit positions are stored. Per 32 elements,
// 12 bytes: qs[m] (m = 0..7) holds the two kept codes of elements 4m .. 4m+3, the lower position's
// in the low nibble; idx[j] (j = 0..3) holds quartet 2j's positions (i0 | i1 << 2, i0 < i1) in its
// low nibble and quartet 2j+1's in its high one. A position not stored holds the zero point z,
// so the values are exactly int4's for the same scale and zero point, at 3/4 of its bytes
// (3.5 bits per weight at G = 64 against 4.5).
template <int G>
struct BlockInt4S {
    uint16_t d;
    uint8_t z;
    uint8_t reserved;
    uint8_t qs[3 * G / 8];  // per 32 elements: 8 bytes of kept codes, then 4 of positions
};
#pragma pack(pop)

static_assert(sizeof(BlockInt4<32>) == 20);
static_assert(sizeof(BlockInt4<64>) == 36);
static_assert(sizeof(BlockInt4<128>) == 68);
static_assert(sizeof(BlockInt3<32>) == 16);
static_assert(sizeof(BlockInt3<64>) == 28);
static_assert(sizeof(BlockInt3<128>) == 52);
static_assert(sizeof(BlockInt4S<64>) == 28);

constexpr bool is_int4(DType t) {
    return t == DType::INT4_G32 || t == DType::INT4_G64 || t == DType::INT4_G128;
}
constexpr bool is_int3(DType t) {
    return t == DType::INT3_G32 || t == DType::INT3_G64 || t == DType::INT3_G128;
}
constexpr bool is_int4s(DType t) {
    return t == DType::INT4S_G32 || t == DType::INT4S_G64 || t == DType::INT4S_G128;
}
// ferry's integer group types: codes 0..int_group_max(t) under a per-group scale and zero point.
constexpr bool is_int_group(DType t) {
    return is_int4(t) || is_int3(t) || is_int4s(t);
}
// The dense int4 type with int4s type t's groups (the same grid, the same values).
constexpr DType int4s_dense(DType t) {
    return t == DType::INT4S_G32   ? DType::INT4_G32
           : t == DType::INT4S_G64 ? DType::INT4_G64
                                   : DType::INT4_G128;
}
constexpr int int_group_max(DType t) {
    return is_int3(t) ? 7 : 15;
}
// The 32 columns from c0 (a multiple of 32) of an int3, int4 or int4s row: their group's scale and
// zero point, and their codes as 16 bytes of nibbles in Q4_0's order (int3's widened to 4 bits,
// int4s's unstored positions filled with z). For
// the integer kernels, which work in 32-column blocks whatever the group size and read both
// types in one tile format.
struct GroupChunk {
    uint16_t d;  // fp16
    uint8_t z;
    uint8_t qs[16];
};
GroupChunk group_chunk(DType t, const uint8_t* row, int64_t c0);
// int4s, per 32 elements: quartet m's (0..7) four codes from the chunk's 12 bytes, z where nothing
// is stored (the second position wins where a file names one twice); and the two positions the
// format stores for four codes: those not z, then the lowest others, lower first.
void int4s_quartet(const uint8_t* chunk, int m, uint8_t z, uint8_t w[4]);
void int4s_positions(const uint8_t w[4], uint8_t z, int pos[2]);
// Writes one group of an int3, int4 or int4s row from its scale, zero point and G codes. For
// int4s, at most 2 codes of every 4 may differ from z (quantize_row checks the pattern first).
void pack_int_group(DType t, uint16_t d, uint8_t z, const uint8_t* codes, void* dst);

constexpr bool is_ferry_type(DType t) {
    return t == DType::INT8 || t == DType::FP8 || t == DType::W8A8 || is_int_group(t);
}

// OCP E4M3: bias 7, subnormals, no infinities. Decoding is exact; encoding rounds to nearest
// even and saturates at +-448 (NaN stays NaN).
float fp8_e4m3_to_fp32(uint8_t e);
uint8_t fp32_to_fp8_e4m3(float f);

// Quantize one row of n floats into row_bytes(type, n) bytes. int8 and fp8 map the row's
// largest magnitude to the top of their grid (round to nearest); int4 and int3 search a few
// clipping ratios per group for the smallest squared error (quant/group_grid.h).
void quantize_row_int8(const float* x, void* dst, int64_t n);
void quantize_row_fp8(const float* x, void* dst, int64_t n);
void quantize_row_w8a8(const float* x, void* dst, int64_t n);
void quantize_row_int_group(DType type, const float* x, void* dst, int64_t n);
// Where a row breaks the 2:4 pattern int4s stores: the first quartet of 4 elements with more than
// 2 that are not zero, as its first column, or -1 when the row keeps the pattern.
int64_t first_dense_quartet(const float* x, int64_t n);

}  // namespace ferry::quant
