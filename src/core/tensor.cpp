#include "core/tensor.h"

#include <stdexcept>

namespace ferry {

const char* device_name(Device d) {
    return d == Device::CUDA ? "cuda" : "cpu";
}

Tensor::Tensor(void* data, DType type, std::span<const int64_t> shape, Device device)
    : data_(data), dtype_(type), device_(device), ndim_(static_cast<int>(shape.size())) {
    if (shape.size() > kMaxDims || shape.empty())
        throw std::invalid_argument("Tensor: 1 to 4 dimensions");
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] < 0) throw std::invalid_argument("Tensor: negative dimension");
        shape_[i] = shape[i];
    }
    const DTypeInfo& info = dtype_info(type);
    const int64_t c = shape_[static_cast<size_t>(ndim_ - 1)];
    if (c % info.block_size != 0)
        throw std::invalid_argument("Tensor: the last dimension is not a whole number of blocks");
    row_bytes_ = ferry::row_bytes(info, c);
    // Within a row: the element size of a plain type; a block type has no per-element stride.
    stride_[static_cast<size_t>(ndim_ - 1)] =
        info.block_size == 1 && info.row_header == 0 ? static_cast<size_t>(info.block_bytes) : 0;
    size_t s = row_bytes_;
    for (int i = ndim_ - 2; i >= 0; --i) {
        stride_[static_cast<size_t>(i)] = s;
        s *= static_cast<size_t>(shape_[static_cast<size_t>(i)]);
    }
}

Tensor Tensor::owned_by(std::shared_ptr<const void> owner) const {
    Tensor t = *this;
    t.owner_ = std::move(owner);
    return t;
}

int64_t Tensor::numel() const {
    if (ndim_ == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= shape_[static_cast<size_t>(i)];
    return n;
}

size_t Tensor::bytes() const {
    if (ndim_ == 0) return 0;
    if (ndim_ == 1) return row_bytes_;
    return stride_[0] * static_cast<size_t>(shape_[0]);
}

bool Tensor::contiguous() const {
    size_t s = row_bytes_;
    for (int i = ndim_ - 2; i >= 0; --i) {
        if (stride_[static_cast<size_t>(i)] != s) return false;
        s *= static_cast<size_t>(shape_[static_cast<size_t>(i)]);
    }
    return true;
}

Tensor Tensor::slice(int64_t r0, int64_t n) const {
    if (r0 < 0 || n < 0 || r0 + n > shape_[0]) throw std::out_of_range("Tensor::slice");
    Tensor t = *this;
    const size_t step = ndim_ == 1 ? (stride_[0] ? stride_[0] : 0) : stride_[0];
    if (ndim_ == 1 && step == 0) throw std::invalid_argument("Tensor::slice: within a block row");
    t.data_ = static_cast<std::byte*>(data_) + static_cast<size_t>(r0) * step;
    t.shape_[0] = n;
    if (ndim_ == 1) t.row_bytes_ = ferry::row_bytes(dtype_, n);
    return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
    if (!contiguous()) throw std::invalid_argument("Tensor::reshape: not contiguous");
    Tensor t(data_, dtype_, std::span<const int64_t>(shape.begin(), shape.size()), device_);
    if (t.numel() != numel()) throw std::invalid_argument("Tensor::reshape: element count");
    t.owner_ = owner_;
    return t;
}

}  // namespace ferry
