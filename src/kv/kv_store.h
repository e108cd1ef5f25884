// The memory the KV cache lives in: n_blocks blocks of block_size token slots, for every layer,
// keys and values apart. Layout [layer][block][slot][kv_dim], so one block of one layer is a
// contiguous run the attention kernel streams through. Which block belongs to whom is the
// BlockPool's business, not this class's.
#pragma once

#include <cstdint>
#include <memory>

namespace ferry::kv {

class KvStore {
  public:
    KvStore(int n_layer, int64_t n_blocks, int block_size, int kv_dim);

    float* k(int layer, int64_t block) { return k_.get() + offset(layer, block); }
    float* v(int layer, int64_t block) { return v_.get() + offset(layer, block); }
    const float* k(int layer, int64_t block) const { return k_.get() + offset(layer, block); }
    const float* v(int layer, int64_t block) const { return v_.get() + offset(layer, block); }

    int n_layer() const { return n_layer_; }
    int64_t n_blocks() const { return n_blocks_; }
    int block_size() const { return block_size_; }
    int kv_dim() const { return kv_dim_; }
    size_t bytes_per_block() const {
        return 2 * sizeof(float) * size_t(n_layer_) * block_size_ * kv_dim_;
    }

    // Copies every layer's keys and values of block src into dst (copy-on-write).
    void copy_block(int64_t src, int64_t dst);

  private:
    size_t offset(int layer, int64_t block) const {
        return ((static_cast<size_t>(layer) * n_blocks_ + block) * block_size_) * kv_dim_;
    }
    int n_layer_;
    int64_t n_blocks_;
    int block_size_;
    int kv_dim_;
    std::unique_ptr<float[]> k_, v_;
};

// One sequence's view of the store: its block table, in position order.
struct SeqKv {
    const int32_t* blocks = nullptr;
    int64_t n_blocks = 0;
};

}  // namespace ferry::kv
