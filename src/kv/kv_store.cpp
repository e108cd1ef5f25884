#include "kv/kv_store.h"

#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace ferry::kv {

size_t KvStore::bytes_per_block(int n_layer, int block_size, int kv_dim, int head_dim,
                                quant::KvDType t) {
    const int hd = head_dim > 0 ? head_dim : kv_dim;
    return static_cast<size_t>(n_layer) *
           (quant::kv_region_bytes(t, true, block_size, kv_dim, kv_dim / hd) +
            quant::kv_region_bytes(t, false, block_size, kv_dim, kv_dim / hd));
}

KvStore::KvStore(kernels::Backend& backend, int n_layer, int64_t n_blocks, int block_size,
                 int kv_dim, int head_dim, KvFormat format, KvWindowPool window)
    : backend_(backend),
      n_layer_(n_layer),
      n_blocks_(n_blocks),
      block_size_(block_size),
      kv_dim_(kv_dim),
      head_dim_(head_dim),
      fmt_(std::move(format)),
      window_(std::move(window)) {
    if (Status s = backend.kv_support(fmt_.dtype); !s)
        throw std::invalid_argument(s.error().message);
    if (head_dim_ <= 0 || kv_dim_ % head_dim_ != 0)
        throw std::invalid_argument("KvStore: kv_dim must be a multiple of head_dim");
    if (fmt_.dtype != quant::KvDType::Int8) fmt_.k_scales.clear();
    if (fmt_.dtype == quant::KvDType::Int8 && fmt_.k_scales.size() != size_t(n_layer) * kv_dim)
        throw std::invalid_argument("KvStore: int8 keys need n_layer x kv_dim channel scales");
    if (window_.on() && window_.layers.size() != static_cast<size_t>(n_layer))
        throw std::invalid_argument("KvStore: a window pool names each layer in or out");
    if (!window_.on()) window_.layers.clear();
    int64_t regions = 0;
    for (int l = 0; l < n_layer; ++l) {
        layer_region_.push_back(regions);
        regions += window_layer(l) ? window_.n_blocks : n_blocks;
    }
    const int64_t k_shape[] = {regions, static_cast<int64_t>(region_bytes(true))};
    const int64_t v_shape[] = {regions, static_cast<int64_t>(region_bytes(false))};
    try {
        k_ = backend_.alloc(DType::I8, k_shape);
        v_ = backend_.alloc(DType::I8, v_shape);
    } catch (const std::bad_alloc&) {
        // "out of memory" alone would not say that the context asked for it.
        const double bytes = double(regions) * double(region_bytes(true) + region_bytes(false));
        throw std::runtime_error(fmt::format(
            "out of memory for the KV cache: {} blocks of {} tokens over {} layers need {:.1f} GiB "
            "({} bytes a token); lower --ctx{}",
            n_blocks, block_size, n_layer, bytes / double(1ull << 30),
            uint64_t(bytes / double(n_blocks) / block_size),
            fmt_.dtype == quant::KvDType::F16 || fmt_.dtype == quant::KvDType::F32
                ? ", or store it in 8 bits (--kv-dtype int8 or fp8)"
                : ""));
    }
    if (!fmt_.k_scales.empty()) {
        const int64_t s_shape[] = {static_cast<int64_t>(fmt_.k_scales.size())};
        k_scales_ = backend_.alloc(DType::F32, s_shape);
        backend_.upload(fmt_.k_scales.data(), k_scales_);
        const int64_t one[] = {1};
        k_clipped_device_ = backend_.alloc(DType::I64, one);  // zeroed
    }
}

int64_t KvStore::k_clipped() const {
    int64_t on_device = 0;
    if (!k_clipped_device_.empty() && k_clipped_device_.device() != Device::CPU)
        backend_.download(k_clipped_device_, &on_device);
    return k_clipped_.load(std::memory_order_relaxed) + on_device;
}

kernels::KvCacheView KvStore::view() {
    kernels::KvCacheView v;
    v.k = static_cast<std::byte*>(k_.raw());
    v.v = static_cast<std::byte*>(v_.raw());
    v.n_layer = n_layer_;
    v.n_blocks = n_blocks_;
    v.block_size = block_size_;
    v.kv_dim = kv_dim_;
    v.head_dim = head_dim_;
    v.dtype = fmt_.dtype;
    v.k_region = region_bytes(true);
    v.v_region = region_bytes(false);
    v.layout = layout();
    v.k_channel_scales = k_scales_.empty() ? nullptr : k_scales_.data<float>();
    v.k_clipped = &k_clipped_;
    v.k_clipped_device = k_clipped_device_.empty() ? nullptr : k_clipped_device_.data<int64_t>();
    v.layer_region = layer_region_.data();
    v.window_layer = window_.on() ? window_.layers.data() : nullptr;
    return v;
}

void KvStore::write(int layer, int64_t block, int slot, const float* k, const float* v) {
    if (staging_.empty()) {
        const int64_t shape[] = {2, kv_dim_};
        staging_ = backend_.alloc(DType::F32, shape);
    }
    const Tensor kt = staging_.slice(0, 1), vt = staging_.slice(1, 1);
    backend_.upload(k, kt);
    backend_.upload(v, vt);
    // A one-token batch at position `slot` of a sequence whose only block is `block`.
    const int32_t tok = 0, seq = 0, blk = static_cast<int32_t>(block);
    const int64_t pos = slot;
    const kernels::BatchSeq s{pos, 1, 0, {&blk, 1}, 0, nullptr, {&blk, 1}};
    const kernels::Batch b{{&tok, 1}, {&pos, 1}, {&seq, 1}, {&s, 1}, {}};
    backend_.kv_write(view(), layer, b, kt, vt);
}

void KvStore::read(int layer, int64_t block, int slot, float* k, float* v) const {
    const quant::KvDType t = fmt_.dtype;
    const size_t eb = quant::kv_elem_bytes(t);
    const quant::KvBlockLayout lay = layout();
    const int n_heads = kv_dim_ / head_dim_;
    const float* cs =
        fmt_.k_scales.empty() ? nullptr : fmt_.k_scales.data() + size_t(layer) * kv_dim_;
    const int64_t region = layer_region_[size_t(layer)] + block;
    for (int key = 0; key < 2; ++key) {
        const Tensor& all = key ? k_ : v_;
        std::vector<std::byte> host(all.row_bytes());
        backend_.download(all.slice(region, 1), host.data());
        const auto* scales =
            reinterpret_cast<const float*>(host.data() + lay.scale_offset) + size_t(slot) * n_heads;
        for (int h = 0; h < n_heads; ++h) {
            const size_t at = h * lay.head_stride + slot * lay.pos_stride;
            quant::dequantize_kv_row(t, host.data() + at * eb, head_dim_,
                                     quant::kv_token_scales(t, key) ? scales[h] : 0.0f,
                                     key && cs ? cs + size_t(h) * head_dim_ : nullptr,
                                     (key ? k : v) + size_t(h) * head_dim_);
        }
    }
}

void KvStore::copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs, bool window) {
    std::vector<kernels::Backend::Copy> copies;
    copies.reserve(pairs.size() * static_cast<size_t>(n_layer_) * 2);
    for (auto [src, dst] : pairs)
        for (int l = 0; l < n_layer_; ++l) {
            if (window_layer(l) != window) continue;
            for (int key = 0; key < 2; ++key) {
                const Tensor& all = key ? k_ : v_;
                const auto* base = static_cast<std::byte*>(all.raw());
                const size_t rb = all.row_bytes();
                const auto layer0 = static_cast<size_t>(layer_region_[size_t(l)]);
                copies.push_back({base + (layer0 + src) * rb,
                                  const_cast<std::byte*>(base) + (layer0 + dst) * rb, rb});
            }
        }
    backend_.copy(copies);
}

}  // namespace ferry::kv
