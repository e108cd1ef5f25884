// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and ferry's int4 matrices re-laid for the integer
// kernels, once at model load.
//
// GGUF stores a row's blocks one after another, each with its scale beside its values. An
// integer kernel wants the opposite: 16 rows side by side, so one 64-byte vector holds 4 weights
// of each of 16 rows and one vpdpbusd against 4 broadcast activation bytes adds into 16 per-row
// sums at once (no horizontal reductions), and the 16 rows' scales together, so they are one
// vector load. The bits are the same, only their order changes (a Q4_K tile keeps its 6-bit
// scales as bytes: 2.8 % more than the file).
//
// Tiles (16 rows x 32 columns, or 16 x 256 for the k-quants), groups of 16 rows in order, tiles
// in order within a group. Within a 32-column block the weights are "nibble vectors": vector v
// (0..7) holds, for row i at bytes 4i .. 4i+3, the block's weights (v odd ? 16 : 0) + 4(v/2) + k,
// k = 0..3, as unsigned bytes, the activations they meet being the same 4 of the block's 32:
//   Q4_0, Q4_1 (32 columns): chunk c = 0..3 (64 bytes): row i's qs[4c .. 4c+3] at 4i .. 4i+3,
//              whose low nibbles are vector 2c and high nibbles vector 2c+1;
//              then d[16] (fp16), then for Q4_1 m[16] (fp16).
//   Q8_0 (32 columns): chunk c = 0..7 (64 bytes): row i's qs[4c .. 4c+3] xor 0x80 (w + 128 as
//              u8); chunk c meets activations 4c .. 4c+3; then d[16] (fp16).
//   Q5_0, Q5_1 (32 columns): the low 4 bits in 4 chunks as Q4_0's, then one chunk of the fifth
//              bits (byte 4i + k: bit v = vector v's weight k), then d[16] (fp16), then for Q5_1
//              m[16] (fp16): the file's bytes, 22 or 24 a row.
//   Q4_K (256 columns): 8 blocks of 4 chunks as Q4_0's (q of block b = elements 32b .. 32b+31),
//              then d[16], dmin[16] (fp16), sc[8][16], m[8][16] (the 6-bit scales, bytes).
//   Q5_K (256 columns): 8 blocks of 4 chunks and a fifth-bit chunk as Q5_0's, then Q4_K's scales.
//   Q6_K (256 columns): 8 blocks of 4 chunks of the low 4 bits as Q4_0's, then 2 chunks of the
//              high 2 bits (chunk g, byte 4i + k: bits 2t, 2t+1 = vector 4g + t's weight k),
//              then scales[16][16] (int8, per 16 elements), then d[16] (fp16).
//   int4_g32/64/128 (ferry's, 32 columns whatever the group): 4 chunks as Q4_0's, then d[16]
//              (fp16), then z[16] (the zero points, bytes), 16 bytes of padding; a group of 64
//              or 128 gives each of its 32-column tiles its d and z. int3_g32/64/128 widen their
//              3-bit codes to nibbles and take the same tile (in memory they cost what int4
//              does; the file is 3/4 of int4's).
//   int4s_g32/64/128 (2:4 sparse, 32 columns): 4 chunks of 32 bytes, chunk c's byte 2i + s holding
//              row i's s-th kept code of vector 2c's quartet in its low nibble and of vector
//              2c+1's in its high one; then 8 masks of 8 bytes, mask v's bit 4i + k set where
//              row i keeps weight k of vector v; then d[16] (fp16), z[16]. 240 bytes where int4
//              takes 320: vpexpandb puts the kept codes back in place, z in the others.
//
// A last group with fewer than 16 rows is padded with zero rows (their outputs are not stored).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/huge_buffer.h"
#include "kernels/cpu/ops.h"

namespace ferry::kernels::cpu {

constexpr int kPackRows = 16;

// Whether matrices of this type have a packed layout (cols must be a multiple of its tile's).
bool packable(DType t);
// Columns of one tile: 32, or 256 for the k-quants.
constexpr int packed_tile_cols(DType t) {
    return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ? 256 : 32;
}
// Bytes of one tile of 16 rows: Q4_0 288, Q4_1, int4 and int3 320, int4s 240, Q5_0 352, Q5_1 384,
// Q8_0 544 (as in the file), Q4_K 2368, Q5_K 2880, Q6_K 3360; 0 for other types. constexpr so the
// kernels' tile strides are constants.
constexpr size_t packed_tile_bytes(DType t) {
    switch (t) {
        case DType::Q4_0:
            return 16 * 18;
        case DType::Q4_1:
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128:
            return 16 * 20;
        case DType::Q5_0:
            return 16 * 22;
        case DType::Q5_1:
            return 16 * 24;
        case DType::Q8_0:
            return 16 * 34;
        case DType::INT4S_G32:
        case DType::INT4S_G64:
        case DType::INT4S_G128:
            return 128 + 64 + 32 + 16;
        case DType::Q4_K:
            return 8 * 256 + 64 + 256;
        case DType::Q5_K:
            return 8 * 320 + 64 + 256;
        case DType::Q6_K:
            return 8 * 384 + 256 + 32;
        default:
            return 0;
    }
}
// Whether this matrix can be packed: its type has a layout and its columns fill whole tiles.
bool packable(const Weight& w);
size_t packed_bytes(const Weight& w);

// Where things are inside a tile, for the packer and every level's kernel (bytes).
// Whether a type's tile adds a chunk of fifth bits to each block's nibbles.
constexpr bool packed_q5(DType t) {
    return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q5_K;
}
// The 8 weight vectors of a 32-element block: 4 nibble chunks (+1 fifth-bit chunk for the Q5s, +2
// high-bit chunks for Q6_K), or Q8_0's 8 byte chunks.
constexpr int packed_block_bytes(DType t) {
    return t == DType::Q8_0 ? 512 : t == DType::Q6_K ? 384 : packed_q5(t) ? 320 : 256;
}
// The activation bytes (of the block's 32) that weight vector v meets.
constexpr int packed_act_offset(DType t, int v) {
    return t == DType::Q8_0 ? 4 * v : (v % 2 ? 16 : 0) + 4 * (v / 2);
}
constexpr int kPackedQ6High = 256;  // a Q6_K block's high-bit chunks, from the block's start
constexpr int kPackedQ5High = 256;  // a Q5 block's fifth-bit chunk, from the block's start
// The int4 and int3 types share one tile format (the kernels instantiate INT4_G32 for all six):
// an int3 code is a nibble whose top bit is 0.
constexpr bool packed_int4(DType t) {
    return t == DType::INT4_G32 || t == DType::INT4_G64 || t == DType::INT4_G128 ||
           t == DType::INT3_G32 || t == DType::INT3_G64 || t == DType::INT3_G128;
}
constexpr int kPackedInt4Zero = 256 + 32;  // an int4 tile's z[16], from its start
constexpr bool packed_int4s(DType t) {
    return t == DType::INT4S_G32 || t == DType::INT4S_G64 || t == DType::INT4S_G128;
}
struct PackedInt4S {  // an int4s tile: kept codes, masks, d[16] (fp16), z[16]
    static constexpr int masks = 128, d = 192, z = 224;
};
// The scales, from the tile's start: d[16] (fp16) and, for Q4_1 and Q5_1, m[16] right after.
constexpr int packed_scales_offset(DType t) {
    return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ? 8 * packed_block_bytes(t)
           : packed_int4s(t)                                        ? PackedInt4S::d
                                                                    : packed_block_bytes(t);
}
// Q4_K's and Q5_K's scales, after their 8 blocks: d[16], dmin[16] (fp16), sc[8][16], m[8][16]
// (bytes).
template <int kBlockBytes>
struct PackedKScales {
    static constexpr int d = 8 * kBlockBytes, dmin = d + 32, sc = d + 64, m = sc + 128;
};
using PackedQ4K = PackedKScales<256>;
struct PackedQ6K {  // after the 8 blocks: scales[16][16] (int8), d[16] (fp16)
    static constexpr int scales = 8 * 384, d = scales + 256;
};

// Writes w in the packed layout to dst: packed_bytes(w) bytes, zero-filled beforehand (the
// padding rows of a short last group are left as they are).
void pack_weight(const Weight& w, uint8_t* dst);

// An owning, 64-byte aligned copy of w in the packed layout (huge pages where it is big enough;
// the model packs all its weights into one buffer instead).
class PackedWeight {
  public:
    PackedWeight() = default;
    explicit PackedWeight(const Weight& w);
    const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(buf_.data()); }
    size_t size() const { return buf_.size(); }

  private:
    HugeBuffer buf_;
};

}  // namespace ferry::kernels::cpu
