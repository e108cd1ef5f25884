// The memory the KV cache lives in, allocated on a backend's device: n_blocks blocks of
// block_size token slots, for every layer, keys and values apart. Layout [layer][block] of
// regions, each [KV head][slot][head_dim] elements of the store's KvDType followed by the
// block's per-token scales (quant/kv_format.h), so one KV head's keys (or values) of one block
// are a contiguous run the attention kernel streams through: a head's attention reads whole
// cache lines and nothing of the other heads. The backend writes and reads it (view()); which
// block belongs to whom is the block manager's business, not this class's.
// A hybrid store (KvWindowPool) gives the sliding-window layers of a model that also has
// global ones their own, smaller, set of blocks: a sequence holds only its window there, while
// the global layers' blocks hold its whole context.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "quant/kv_format.h"

namespace ferry::kv {

// What a store holds: the element type and, for int8, the keys' per-(layer, channel) scales
// (n_layer x kv_dim floats; calibrated by engine::kv_format_for).
struct KvFormat {
    quant::KvDType dtype = quant::KvDType::F32;
    std::vector<float> k_scales;
    // int8: the tokens of text the scales were measured on, in a one-block cache of that many
    // slots (engine/kv_calibration.h); the ranks of a split model measure their own channels on
    // that same run.
    int calibration_tokens = 0;
};

// The layers (by index in the store) that keep blocks of their own, and how many.
struct KvWindowPool {
    std::vector<uint8_t> layers;
    int64_t n_blocks = 0;
    bool on() const { return n_blocks > 0; }
};

class KvStore {
  public:
    // kv_dim = KV heads x head_dim: the model's, since the layout and the per-token scales go
    // by KV head. The memory is resident on `backend` from the start.
    KvStore(kernels::Backend& backend, int n_layer, int64_t n_blocks, int block_size, int kv_dim,
            int head_dim, KvFormat format = {}, KvWindowPool window = {});

    // Bytes of one block over every layer, keys and values, scales included.
    static size_t bytes_per_block(int n_layer, int block_size, int kv_dim, int head_dim,
                                  quant::KvDType t);

    // Where everything is, as the backend's kv_write and attention take it.
    kernels::KvCacheView view();
    // Where a head's rows sit in a region.
    quant::KvBlockLayout layout() const {
        return {static_cast<size_t>(head_dim_), static_cast<size_t>(block_size_) * head_dim_,
                quant::kv_scale_offset(fmt_.dtype, block_size_, kv_dim_)};
    }

    // One token's keys and values (kv_dim host floats each) stored at a slot of a block, as the
    // backend's kv_write stores a batch's (tests and tools; the forward pass writes its own).
    void write(int layer, int64_t block, int slot, const float* k, const float* v);
    // ... and read back, through the scalar dequantization (tests and calibration).
    void read(int layer, int64_t block, int slot, float* k, float* v) const;
    // Copies every layer's keys and values of each (src, dst) block pair, scales included
    // (copy-on-write); in a hybrid store, those of the window pool's layers (window) or of the
    // others.
    void copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs, bool window = false);

    int n_layer() const { return n_layer_; }
    int64_t n_blocks() const { return n_blocks_; }
    // A hybrid store's window pool: its blocks, and whether layer l (of the store) is in it.
    int64_t n_window_blocks() const { return window_.n_blocks; }
    bool window_layer(int l) const { return window_.on() && window_.layers[size_t(l)]; }
    int block_size() const { return block_size_; }
    int kv_dim() const { return kv_dim_; }
    int head_dim() const { return head_dim_; }
    quant::KvDType dtype() const { return fmt_.dtype; }
    size_t bytes_per_block() const {
        return bytes_per_block(n_layer_, block_size_, kv_dim_, head_dim_, fmt_.dtype);
    }
    // int8 key elements clipped at 127 steps of their channel's scale so far: how often the
    // calibration's headroom was not enough.
    // (The CPU counts on the host, a GPU in device memory: this reads and adds both.)
    int64_t k_clipped() const;

  private:
    size_t region_bytes(bool key) const {
        return quant::kv_region_bytes(fmt_.dtype, key, block_size_, kv_dim_, kv_dim_ / head_dim_);
    }
    kernels::Backend& backend_;
    int n_layer_;
    int64_t n_blocks_;
    int block_size_;
    int kv_dim_;
    int head_dim_;
    KvFormat fmt_;
    KvWindowPool window_;
    std::vector<int64_t> layer_region_;  // per layer: the region of its block 0
    Tensor k_, v_;                       // device memory: attention streams through them every step
    Tensor k_scales_;                    // int8 keys' channel scales on the device
    Tensor staging_;                     // write()'s keys and values on the device
    std::atomic<int64_t> k_clipped_{0};  // kv_write runs for several slots at once
    Tensor k_clipped_device_;            // int8: the device backends' count
};

}  // namespace ferry::kv
