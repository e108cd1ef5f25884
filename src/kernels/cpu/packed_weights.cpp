#include "kernels/cpu/packed_weights.h"

#include <cstring>

#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

namespace ferry::kernels::cpu {
using namespace ferry::quant;

namespace {

static_assert(packed_tile_bytes(DType::Q4_0) == kPackRows * sizeof(BlockQ4_0));
static_assert(packed_tile_bytes(DType::Q4_1) == kPackRows * sizeof(BlockQ4_1));
static_assert(packed_tile_bytes(DType::Q8_0) == kPackRows * sizeof(BlockQ8_0));
static_assert(packed_tile_bytes(DType::Q6_K) == kPackRows * sizeof(BlockQ6_K));
static_assert(packed_tile_bytes(DType::Q5_0) == kPackRows * sizeof(BlockQ5_0));
static_assert(packed_tile_bytes(DType::Q5_1) == kPackRows * sizeof(BlockQ5_1));

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

// Row i's part of a block of 5-bit values q[0..32) in the Q5 layout: nibbles as Q4_0's, then
// the fifth bits, bit v of byte 4i + k for weight vector v's weight k.
void put_q5(DType type, uint8_t* block, int i, const uint8_t* q) {
    put_nibbles(block, i, q);
    for (int k = 0; k < 4; ++k) {
        uint8_t h = 0;
        for (int v = 0; v < 8; ++v)
            h |= static_cast<uint8_t>((q[packed_act_offset(type, v) + k] >> 4 & 1) << v);
        block[kPackedQ5High + 4 * i + k] = h;
    }
}

// Row i's bytes qs[0 .. 4 * chunks) as its part of chunks 64-byte chunks (xor: Q8_0's + 128).
void put_chunks(uint8_t* t, int i, const uint8_t* qs, int chunks, uint8_t xor_mask) {
    for (int c = 0; c < chunks; ++c)
        for (int k = 0; k < 4; ++k) t[64 * c + 4 * i + k] = qs[4 * c + k] ^ xor_mask;
}

// Row i's Q4_K or Q5_K super-block: its levels block by block (nibbles, and the Q5s' fifth bits),
// then d, dmin and the 6-bit sc[8], m[8] as bytes.
template <DType T, class Block, void (*ints)(const Block&, uint8_t*, uint8_t*, uint8_t*)>
void pack_k_min(const uint8_t* src, uint8_t* t, int i) {
    using KScales = PackedKScales<packed_block_bytes(T)>;
    Block b;
    std::memcpy(&b, src, sizeof(b));
    uint8_t q[QK_K], sc[8], m[8];
    ints(b, q, sc, m);
    for (int blk = 0; blk < 8; ++blk) {
        uint8_t* bt = t + packed_block_bytes(T) * blk;
        if constexpr (packed_q5(T))
            put_q5(T, bt, i, q + 32 * blk);
        else
            put_nibbles(bt, i, q + 32 * blk);
    }
    put16(t + KScales::d, i, b.d);
    put16(t + KScales::dmin, i, b.dmin);
    for (int s = 0; s < 8; ++s) {
        t[KScales::sc + 16 * s + i] = sc[s];
        t[KScales::m + 16 * s + i] = m[s];
    }
}

// Row i's tile-th tile (its block or super-block; an int4 or int3 row's 32 columns) into t.
void pack_block(DType type, const uint8_t* row, int64_t tile, uint8_t* t, int i) {
    const uint8_t* src = row + tile * dtype_info(type).block_bytes;
    switch (type) {
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q8_0: {
            const bool has_min = type == DType::Q4_1 || type == DType::Q5_1;
            if (packed_q5(type)) {
                uint8_t q[32];
                q5_ints(type, src, q);
                put_q5(type, t, i, q);
            } else {
                put_chunks(t, i, src + (has_min ? 4 : 2), type == DType::Q8_0 ? 8 : 4,
                           type == DType::Q8_0 ? 0x80 : 0);
            }
            uint8_t* scales = t + packed_scales_offset(type);
            std::memcpy(scales + 2 * i, src, 2);                        // d
            if (has_min) std::memcpy(scales + 32 + 2 * i, src + 2, 2);  // m
            break;
        }
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128: {
            const GroupChunk c = group_chunk(type, row, 32 * tile);
            put_chunks(t, i, c.qs, 4, 0);
            put16(t + packed_scales_offset(type), i, c.d);
            t[kPackedInt4Zero + i] = c.z;
            break;
        }
        case DType::INT4S_G32:
        case DType::INT4S_G64:
        case DType::INT4S_G128: {
            // The file's 12 bytes of these 32 columns: kept codes of quartets 0..7, positions.
            const DTypeInfo& info = dtype_info(type);
            const int64_t c0 = 32 * tile;
            const uint8_t* blk = row + (c0 / info.block_size) * info.block_bytes;
            const uint8_t* q = blk + 4 + 12 * ((c0 % info.block_size) / 32);
            const uint8_t z = blk[2];
            for (int m = 0; m < 8; ++m) {
                // The quartet as group_chunk (the reference) reads it, then its two stored
                // positions as the quantizer picks them, so that a file whose positions are not
                // two different ones, lower first, still gives the reference's values.
                uint8_t w[4];
                int4s_quartet(q, m, z, w);
                int p[2];
                int4s_positions(w, z, p);
                const int v = m < 4 ? 2 * m : 2 * (m - 4) + 1;  // the weight vector of quartet m
                for (int s = 0; s < 2; ++s) {
                    uint8_t& b = t[32 * (v / 2) + 2 * i + s];
                    b = static_cast<uint8_t>(b | (w[p[s]] & 0xF) << (4 * (v % 2)));
                    const int bit = 4 * i + p[s];
                    t[PackedInt4S::masks + 8 * v + bit / 8] |=
                        static_cast<uint8_t>(1u << (bit % 8));
                }
            }
            put16(t + PackedInt4S::d, i, static_cast<uint16_t>(blk[0] | blk[1] << 8));
            t[PackedInt4S::z + i] = z;
            break;
        }
        case DType::Q4_K:
            pack_k_min<DType::Q4_K, BlockQ4_K, q4_k_ints>(src, t, i);
            break;
        case DType::Q5_K:
            pack_k_min<DType::Q5_K, BlockQ5_K, q5_k_ints>(src, t, i);
            break;
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
    for (int64_t r = 0; r < w.rows; ++r) {
        const int64_t g = r / kPackRows;
        for (int64_t b = 0; b < nt; ++b)
            pack_block(w.type, w.row(r), b, dst + static_cast<size_t>(g * nt + b) * tile,
                       static_cast<int>(r % kPackRows));
    }
}

bool packable(const Weight& w) {
    return packable(w.type) && w.cols % packed_tile_cols(w.type) == 0;
}

PackedWeight::PackedWeight(const Weight& w) {
    if (!packable(w)) return;
    const size_t n = packed_bytes(w);
    if (n == 0) return;
    buf_ = HugeBuffer(n);
    pack_weight(w, reinterpret_cast<uint8_t*>(buf_.data()));
}

}  // namespace ferry::kernels::cpu
