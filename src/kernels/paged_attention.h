// Attention of one query over a sequence's keys and values scattered over KV blocks.
// The streaming softmax state carries across blocks, so the kernel never needs the
// positions to be contiguous and never materialises a score vector.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::kernels {

struct PagedKvView {
    const float* const* k_blocks;  // per block: block_size positions, `stride` floats apart
    const float* const* v_blocks;
    int block_size;
    size_t stride;       // floats between consecutive positions (kv_dim)
    size_t head_offset;  // floats from a position's start to this KV head's slice
};

// out = softmax(q·K[0..n_kv) * scale) · V[0..n_kv); q, out: head_dim floats.
void attend_paged(const float* q, const PagedKvView& kv, int64_t n_kv, int head_dim, float scale,
                  float* out);

}  // namespace ferry::kernels
