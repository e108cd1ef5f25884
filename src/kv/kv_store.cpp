#include "kv/kv_store.h"

#include <cstring>
#include <stdexcept>

namespace ferry::kv {

namespace {
HugeBuffer alloc_resident(size_t n) {
    HugeBuffer b(n);
    // Touch the whole pool now: a reservation that only becomes resident when traffic comes
    // would make memory use look smaller than it is (and `ferry plan` disagree with it), and
    // would move page faults onto the first requests.
    if (n) std::memset(b.data(), 0, n);
    return b;
}
}  // namespace

size_t KvStore::bytes_per_block(int n_layer, int block_size, int kv_dim, int head_dim,
                                quant::KvDType t) {
    const int hd = head_dim > 0 ? head_dim : kv_dim;
    return static_cast<size_t>(n_layer) *
           (quant::kv_region_bytes(t, true, block_size, kv_dim, kv_dim / hd) +
            quant::kv_region_bytes(t, false, block_size, kv_dim, kv_dim / hd));
}

KvStore::KvStore(int n_layer, int64_t n_blocks, int block_size, int kv_dim, int head_dim,
                 KvFormat format)
    : n_layer_(n_layer),
      n_blocks_(n_blocks),
      block_size_(block_size),
      kv_dim_(kv_dim),
      head_dim_(head_dim),
      fmt_(std::move(format)) {
    if (head_dim_ <= 0 || kv_dim_ % head_dim_ != 0)
        throw std::invalid_argument("KvStore: kv_dim must be a multiple of head_dim");
    if (fmt_.dtype != quant::KvDType::Int8) fmt_.k_scales.clear();
    if (fmt_.dtype == quant::KvDType::Int8 && fmt_.k_scales.size() != size_t(n_layer) * kv_dim)
        throw std::invalid_argument("KvStore: int8 keys need n_layer x kv_dim channel scales");
    const size_t per_layer_blocks = static_cast<size_t>(n_layer) * n_blocks;
    k_ = alloc_resident(per_layer_blocks * region_bytes(true));
    v_ = alloc_resident(per_layer_blocks * region_bytes(false));
}

void KvStore::write(int layer, int64_t block, int slot, const float* k, const float* v) {
    const quant::KvDType t = fmt_.dtype;
    const size_t eb = quant::kv_elem_bytes(t);
    const quant::KvBlockLayout lay = layout();
    const size_t scale_off = lay.scale_offset;
    const int n_heads = kv_dim_ / head_dim_;
    const float* cs = k_channel_scales(layer);
    for (int key = 0; key < 2; ++key) {
        std::byte* base = mut(layer, block, key);
        const float* x = key ? k : v;
        auto* scales = reinterpret_cast<float*>(base + scale_off) + size_t(slot) * n_heads;
        for (int h = 0; h < n_heads; ++h) {
            const size_t at = h * lay.head_stride + slot * lay.pos_stride;
            float s = 0;
            const int64_t clipped =
                quant::quantize_kv_row(t, x + size_t(h) * head_dim_, head_dim_, base + at * eb, &s,
                                       key && cs ? cs + size_t(h) * head_dim_ : nullptr);
            if (key && clipped) k_clipped_.fetch_add(clipped, std::memory_order_relaxed);
            if (quant::kv_token_scales(t, key)) scales[h] = s;
        }
    }
}

void KvStore::read(int layer, int64_t block, int slot, float* k, float* v) const {
    const quant::KvDType t = fmt_.dtype;
    const size_t eb = quant::kv_elem_bytes(t);
    const quant::KvBlockLayout lay = layout();
    const size_t scale_off = lay.scale_offset;
    const int n_heads = kv_dim_ / head_dim_;
    const float* cs = k_channel_scales(layer);
    for (int key = 0; key < 2; ++key) {
        const std::byte* base = key ? this->k(layer, block) : this->v(layer, block);
        const auto* scales =
            reinterpret_cast<const float*>(base + scale_off) + size_t(slot) * n_heads;
        for (int h = 0; h < n_heads; ++h) {
            const size_t at = h * lay.head_stride + slot * lay.pos_stride;
            quant::dequantize_kv_row(t, base + at * eb, head_dim_,
                                     quant::kv_token_scales(t, key) ? scales[h] : 0.0f,
                                     key && cs ? cs + size_t(h) * head_dim_ : nullptr,
                                     (key ? k : v) + size_t(h) * head_dim_);
        }
    }
}

void KvStore::copy_block(int64_t src, int64_t dst) {
    for (int l = 0; l < n_layer_; ++l)
        for (int key = 0; key < 2; ++key)
            std::memcpy(mut(l, dst, key), mut(l, src, key), region_bytes(key));
}

}  // namespace ferry::kv
