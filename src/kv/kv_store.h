// The memory the KV cache lives in: n_blocks blocks of block_size token slots, for every layer,
// keys and values apart. Layout [layer][block] of regions, each [KV head][slot][head_dim]
// elements of the store's KvDType followed by the block's per-token scales (kv_dtype.h), so
// one KV head's keys (or values) of one block are a contiguous run the attention kernel
// streams through: a head's attention reads whole cache lines and nothing of the other heads. Which
// block belongs to whom is the BlockPool's business, not this class's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/huge_buffer.h"
#include "quant/kv_format.h"

namespace ferry::kv {

// What a store holds: the element type and, for int8, the keys' per-(layer, channel) scales
// (n_layer x kv_dim floats; calibrated by engine::kv_format_for).
struct KvFormat {
    quant::KvDType dtype = quant::KvDType::F32;
    std::vector<float> k_scales;
};

class KvStore {
  public:
    // kv_dim = KV heads x head_dim: the model's, since the layout and the per-token scales go
    // by KV head.
    KvStore(int n_layer, int64_t n_blocks, int block_size, int kv_dim, int head_dim,
            KvFormat format = {});

    // Bytes of one block over every layer, keys and values, scales included.
    static size_t bytes_per_block(int n_layer, int block_size, int kv_dim, int head_dim,
                                  quant::KvDType t);

    // Region base addresses, as the attention kernels take them.
    const std::byte* k(int layer, int64_t block) const {
        return k_.data() + offset(layer, block, true);
    }
    const std::byte* v(int layer, int64_t block) const {
        return v_.data() + offset(layer, block, false);
    }
    // Where a head's rows sit in a region (attention kernels walk it).
    quant::KvBlockLayout layout() const {
        return {static_cast<size_t>(head_dim_), static_cast<size_t>(block_size_) * head_dim_,
                quant::kv_scale_offset(fmt_.dtype, block_size_, kv_dim_)};
    }
    // int8 keys' per-channel scales of a layer (kv_dim floats), else nullptr.
    const float* k_channel_scales(int layer) const {
        return fmt_.k_scales.empty() ? nullptr : fmt_.k_scales.data() + size_t(layer) * kv_dim_;
    }

    // Stores one token's keys and values (kv_dim floats each) at a slot of a block. Writes to
    // different slots may run concurrently.
    void write(int layer, int64_t block, int slot, const float* k, const float* v);
    // Reads them back as floats (the scalar dequantization; tests and calibration).
    void read(int layer, int64_t block, int slot, float* k, float* v) const;

    int n_layer() const { return n_layer_; }
    int64_t n_blocks() const { return n_blocks_; }
    int block_size() const { return block_size_; }
    int kv_dim() const { return kv_dim_; }
    int head_dim() const { return head_dim_; }
    quant::KvDType dtype() const { return fmt_.dtype; }
    size_t bytes_per_block() const {
        return bytes_per_block(n_layer_, block_size_, kv_dim_, head_dim_, fmt_.dtype);
    }
    // int8 key elements clipped at 127 steps of their channel's scale so far: how often the
    // calibration's headroom was not enough.
    int64_t k_clipped() const { return k_clipped_.load(std::memory_order_relaxed); }

    // Copies every layer's keys and values of block src into dst, scales included
    // (copy-on-write).
    void copy_block(int64_t src, int64_t dst);

  private:
    size_t region_bytes(bool key) const {
        return quant::kv_region_bytes(fmt_.dtype, key, block_size_, kv_dim_, kv_dim_ / head_dim_);
    }
    size_t offset(int layer, int64_t block, bool key) const {
        return (static_cast<size_t>(layer) * n_blocks_ + block) * region_bytes(key);
    }
    std::byte* mut(int layer, int64_t block, bool key) {
        return (key ? k_ : v_).data() + offset(layer, block, key);
    }
    int n_layer_;
    int64_t n_blocks_;
    int block_size_;
    int kv_dim_;
    int head_dim_;
    KvFormat fmt_;
    HugeBuffer k_, v_;                   // huge pages: attention streams through them every step
    std::atomic<int64_t> k_clipped_{0};  // write() runs for several slots at once
};

// One sequence's view of the store: its block table, in position order.
struct SeqKv {
    const int32_t* blocks = nullptr;
    int64_t n_blocks = 0;
};

}  // namespace ferry::kv
