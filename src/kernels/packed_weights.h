// Q4_0, Q4_1 and Q8_0 matrices re-laid for the integer kernels, once at model load.
//
// GGUF stores a row's blocks one after another, each with its scale beside its values. An
// integer kernel wants the opposite: 16 rows side by side, so one 64-byte vector holds 4 weights
// of each of 16 rows and one vpdpbusd against 4 broadcast activations adds into 16 per-row sums
// at once (no horizontal reductions), and the 16 rows' scales together, so they are one fp16
// vector load. The bytes are the same, only their order changes:
//
//   tile (group of 16 rows g, block b), groups in order, blocks in order within a group:
//     Q4_0 / Q4_1: chunk c = 0..3 (64 bytes): row i's qs[4c .. 4c+3] at bytes 4i .. 4i+3
//                  (low nibbles: weights 4c..4c+3, high nibbles: 16+4c..16+4c+3)
//     Q8_0:        chunk c = 0..7 (64 bytes): row i's qs[4c .. 4c+3] xor 0x80 (as u8: w + 128)
//     then d[16] (fp16), then for Q4_1 m[16] (fp16)
//
// A last group with fewer than 16 rows is padded with zero rows (their outputs are not stored).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace ferry::kernels {

constexpr int kPackRows = 16;

// Whether matrices of this type have a packed layout (cols must be a multiple of 32).
bool packable(DType t);
// Bytes of one (16 rows x 32 columns) tile: 16 blocks' worth, as in the file (Q4_0 288, Q4_1
// 320, Q8_0 544); 0 for other types. constexpr so the kernels' tile strides are constants.
constexpr size_t packed_tile_bytes(DType t) {
    return t == DType::Q4_0 ? 16 * 18 : t == DType::Q4_1 ? 16 * 20 : t == DType::Q8_0 ? 16 * 34 : 0;
}
size_t packed_bytes(const Weight& w);

// An owning, 64-byte aligned copy of w in the packed layout.
class PackedWeight {
  public:
    PackedWeight() = default;
    explicit PackedWeight(const Weight& w);
    const uint8_t* data() const { return data_.get(); }
    size_t size() const { return size_; }

  private:
    struct Free {
        void operator()(uint8_t* p) const;
    };
    std::unique_ptr<uint8_t[], Free> data_;
    size_t size_ = 0;
};

}  // namespace ferry::kernels
