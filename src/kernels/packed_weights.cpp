#include "kernels/packed_weights.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "quant/block_formats.h"

namespace ferry::kernels {
using namespace ferry::quant;

bool packable(DType t) {
    return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0;
}

static_assert(packed_tile_bytes(DType::Q4_0) == kPackRows * sizeof(BlockQ4_0));
static_assert(packed_tile_bytes(DType::Q4_1) == kPackRows * sizeof(BlockQ4_1));
static_assert(packed_tile_bytes(DType::Q8_0) == kPackRows * sizeof(BlockQ8_0));

size_t packed_bytes(const Weight& w) {
    const int64_t groups = (w.rows + kPackRows - 1) / kPackRows;
    return static_cast<size_t>(groups * (w.cols / QK)) * packed_tile_bytes(w.type);
}

void PackedWeight::Free::operator()(uint8_t* p) const {
    std::free(p);
}

PackedWeight::PackedWeight(const Weight& w) : size_(packed_bytes(w)) {
    if (!packable(w.type) || w.cols % QK != 0 || size_ == 0) return;
    // aligned_alloc wants a multiple of the alignment; every tile size is a multiple of 32.
    const size_t alloc = (size_ + 63) / 64 * 64;
    data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, alloc)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, alloc);
    const int64_t nb = w.cols / QK;
    const size_t tile = packed_tile_bytes(w.type);
    const int chunks = w.type == DType::Q8_0 ? 8 : 4;
    for (int64_t r = 0; r < w.rows; ++r) {
        const int64_t g = r / kPackRows;
        const int i = static_cast<int>(r % kPackRows);
        const uint8_t* row = w.row(r);
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* t = data_.get() + static_cast<size_t>(g * nb + b) * tile;
            const uint8_t* qs;
            uint16_t d, m = 0;
            if (w.type == DType::Q4_0) {
                const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
                qs = blk.qs, d = blk.d;
            } else if (w.type == DType::Q4_1) {
                const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
                qs = blk.qs, d = blk.d, m = blk.m;
            } else {
                const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
                qs = reinterpret_cast<const uint8_t*>(blk.qs), d = blk.d;
            }
            for (int c = 0; c < chunks; ++c)
                for (int k = 0; k < 4; ++k) {
                    const uint8_t q = qs[4 * c + k];
                    t[64 * c + 4 * i + k] = w.type == DType::Q8_0 ? q ^ 0x80 : q;
                }
            uint8_t* scales = t + 64 * chunks;
            std::memcpy(scales + 2 * i, &d, 2);
            if (w.type == DType::Q4_1) std::memcpy(scales + 2 * kPackRows + 2 * i, &m, 2);
        }
    }
}

}  // namespace ferry::kernels
