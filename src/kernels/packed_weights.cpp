#include "kernels/packed_weights.h"

#include <cstring>

#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

namespace ferry::kernels {
using namespace ferry::quant;

namespace {

static_assert(packed_tile_bytes(DType::Q4_0) == kPackRows * sizeof(BlockQ4_0));
static_assert(packed_tile_bytes(DType::Q4_1) == kPackRows * sizeof(BlockQ4_1));
static_assert(packed_tile_bytes(DType::Q8_0) == kPackRows * sizeof(BlockQ8_0));
static_assert(packed_tile_bytes(DType::Q6_K) == kPackRows * sizeof(BlockQ6_K));

void put16(uint8_t* dst, int i, uint16_t v) {
    std::memcpy(dst + 2 * i, &v, 2);
}

// Row i's part of a 32-element block of 4-bit values q[0..32) in the Q4_0 chunk layout.
void put_nibbles(uint8_t* chunks, int i, const uint8_t* q) {
    for (int c = 0; c < 4; ++c)
        for (int k = 0; k < 4; ++k)
            chunks[64 * c + 4 * i + k] =
                static_cast<uint8_t>((q[4 * c + k] & 0xF) | (q[16 + 4 * c + k] & 0xF) << 4);
}

// One row's block or super-block into its tile at row i.
void pack_block(DType type, const uint8_t* src, uint8_t* t, int i) {
    switch (type) {
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q8_0: {
            const int chunks = type == DType::Q8_0 ? 8 : 4;
            const int qs_off = type == DType::Q4_1 ? 4 : 2;
            for (int c = 0; c < chunks; ++c)
                for (int k = 0; k < 4; ++k) {
                    const uint8_t q = src[qs_off + 4 * c + k];
                    t[64 * c + 4 * i + k] = type == DType::Q8_0 ? q ^ 0x80 : q;
                }
            uint8_t* scales = t + 64 * chunks;
            std::memcpy(scales + 2 * i, src, 2);                                    // d
            if (type == DType::Q4_1) std::memcpy(scales + 32 + 2 * i, src + 2, 2);  // m
            break;
        }
        case DType::Q4_K: {
            BlockQ4_K b;
            std::memcpy(&b, src, sizeof(b));
            uint8_t q[QK_K], sc[8], m[8];
            q4_k_ints(b, q, sc, m);
            for (int blk = 0; blk < 8; ++blk)
                put_nibbles(t + packed_block_bytes(type) * blk, i, q + 32 * blk);
            put16(t + PackedQ4K::d, i, b.d);
            put16(t + PackedQ4K::dmin, i, b.dmin);
            for (int s = 0; s < 8; ++s) {
                t[PackedQ4K::sc + 16 * s + i] = sc[s];
                t[PackedQ4K::m + 16 * s + i] = m[s];
            }
            break;
        }
        case DType::Q6_K: {
            BlockQ6_K b;
            std::memcpy(&b, src, sizeof(b));
            uint8_t q[QK_K];
            q6_k_ints(b, q);
            for (int blk = 0; blk < 8; ++blk) {
                uint8_t* bt = t + packed_block_bytes(type) * blk;
                const uint8_t* qb = q + 32 * blk;
                put_nibbles(bt, i, qb);
                for (int g = 0; g < 2; ++g)
                    for (int k = 0; k < 4; ++k) {
                        uint8_t h = 0;
                        for (int tt = 0; tt < 4; ++tt) {
                            const int e = packed_act_offset(type, 4 * g + tt) + k;
                            h |= static_cast<uint8_t>((qb[e] >> 4) << (2 * tt));
                        }
                        bt[kPackedQ6High + 64 * g + 4 * i + k] = h;
                    }
            }
            for (int s = 0; s < 16; ++s)
                t[PackedQ6K::scales + 16 * s + i] = static_cast<uint8_t>(b.scales[s]);
            put16(t + PackedQ6K::d, i, b.d);
            break;
        }
        default:
            break;
    }
}

// Row i's 32 columns from c0 of an int4 row (groups of G) into its tile.
template <int G>
void pack_int4(const uint8_t* row, int64_t c0, uint8_t* t, int i) {
    BlockInt4<G> blk;
    std::memcpy(&blk, row + (c0 / G) * sizeof(blk), sizeof(blk));
    const uint8_t* qs = blk.qs + (c0 % G) / 2;  // this 32-column chunk's 16 bytes
    for (int c = 0; c < 4; ++c)
        for (int k = 0; k < 4; ++k) t[64 * c + 4 * i + k] = qs[4 * c + k];
    put16(t + 256, i, blk.d);
    t[kPackedInt4Zero + i] = blk.z;
}

}  // namespace

bool packable(DType t) {
    return packed_tile_bytes(t) > 0;
}

size_t packed_bytes(const Weight& w) {
    const int64_t groups = (w.rows + kPackRows - 1) / kPackRows;
    return static_cast<size_t>(groups * (w.cols / packed_tile_cols(w.type))) *
           packed_tile_bytes(w.type);
}

void pack_weight(const Weight& w, uint8_t* dst) {
    const int64_t nt = w.cols / packed_tile_cols(w.type);
    const size_t tile = packed_tile_bytes(w.type);
    if (packed_int4(w.type)) {
        for (int64_t r = 0; r < w.rows; ++r)
            for (int64_t b = 0; b < nt; ++b) {
                uint8_t* t = dst + static_cast<size_t>(r / kPackRows * nt + b) * tile;
                const int i = static_cast<int>(r % kPackRows);
                if (w.type == DType::INT4_G32) pack_int4<32>(w.row(r), 32 * b, t, i);
                if (w.type == DType::INT4_G64) pack_int4<64>(w.row(r), 32 * b, t, i);
                if (w.type == DType::INT4_G128) pack_int4<128>(w.row(r), 32 * b, t, i);
            }
        return;
    }
    const size_t block_bytes = dtype_info(w.type).block_bytes;
    for (int64_t r = 0; r < w.rows; ++r) {
        const int64_t g = r / kPackRows;
        const uint8_t* row = w.row(r);
        for (int64_t b = 0; b < nt; ++b)
            pack_block(w.type, row + b * block_bytes, dst + static_cast<size_t>(g * nt + b) * tile,
                       static_cast<int>(r % kPackRows));
    }
}

PackedWeight::PackedWeight(const Weight& w) {
    if (!packable(w.type) || w.cols % packed_tile_cols(w.type) != 0) return;
    const size_t n = packed_bytes(w);
    if (n == 0) return;
    buf_ = HugeBuffer(n);
    pack_weight(w, reinterpret_cast<uint8_t*>(buf_.data()));
}

}  // namespace ferry::kernels
