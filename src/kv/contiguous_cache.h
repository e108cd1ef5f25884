// One sequence's keys and values in one contiguous reservation of n_ctx positions per layer:
// the simple layout `ferry run` uses, and the `--kv contiguous` baseline the paged cache is
// measured against. Memory is reserved but only touched (made resident) as positions fill.
#pragma once

#include <cstdint>
#include <memory>

namespace ferry::kv {

class ContiguousCache {
  public:
    ContiguousCache(int n_layer, int64_t n_ctx, int kv_dim);

    float* k(int layer, int64_t pos) { return k_.get() + offset(layer, pos); }
    float* v(int layer, int64_t pos) { return v_.get() + offset(layer, pos); }
    int64_t n_ctx() const { return n_ctx_; }
    int kv_dim() const { return kv_dim_; }
    size_t reserved_bytes() const {
        return 2 * sizeof(float) * size_t(n_layer_) * n_ctx_ * kv_dim_;
    }

  private:
    size_t offset(int layer, int64_t pos) const {
        return (static_cast<size_t>(layer) * n_ctx_ + pos) * kv_dim_;
    }
    int n_layer_;
    int64_t n_ctx_;
    int kv_dim_;
    std::unique_ptr<float[]> k_, v_;  // default-initialised: untouched pages stay virtual
};

}  // namespace ferry::kv
