// The GGUF block formats as plain structs, laid out byte for byte as in the file.
#pragma once

#include <cstdint>

namespace ferry::quant {

constexpr int QK = 32;     // elements per block of the legacy formats
constexpr int QK_K = 256;  // elements per super-block of the k-quants
constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct BlockQ4_0 {
    uint16_t d;          // fp16 scale
    uint8_t qs[QK / 2];  // nibbles: element j in low nibble of qs[j], j+16 in the high nibble
};
struct BlockQ4_1 {
    uint16_t d;  // fp16 scale
    uint16_t m;  // fp16 minimum
    uint8_t qs[QK / 2];
};
// Q5: a fifth bit per element in qh (bit j of the little-endian word for element j).
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK / 2];  // low nibbles as Q4_0's
};
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[QK];
};
struct BlockQ4_K {
    uint16_t d;                    // super-block scale for the quantized scales
    uint16_t dmin;                 // super-block scale for the quantized minimums
    uint8_t scales[K_SCALE_SIZE];  // 8 scales and 8 mins, 6 bits each
    uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];  // packed as Q4_K's
    uint8_t qh[QK_K / 8];          // fifth bits: bit 2s / 2s+1 of qh[l] for sub-blocks 2s, 2s+1
    uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
    uint8_t ql[QK_K / 2];      // low 4 bits
    uint8_t qh[QK_K / 4];      // high 2 bits
    int8_t scales[QK_K / 16];  // 8-bit sub-block scales
    uint16_t d;                // fp16 super-block scale
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace ferry::quant
