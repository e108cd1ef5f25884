// A view of n-dimensional data: element type, shape, byte strides, the device the memory is on,
// and optionally an owner that keeps the memory alive. Model code names its activations and
// weights as tensors and hands them to a backend (kernels/backend.h), which alone knows how to
// reach the memory; a tensor never copies, converts or moves its data.
//
// Shapes are outermost first ({n_tokens, dim}). The last dimension is dense: consecutive
// elements, or for a block type (Q4_1, ...) consecutive blocks, so a row of a quantized matrix
// is its GGUF row. The other dimensions have byte strides, which lets a tensor view some rows
// of a larger one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>

#include "core/dtype.h"

namespace ferry {

enum class Device : uint8_t { CPU = 0, CUDA = 1 };
const char* device_name(Device d);  // "cpu", "cuda"

class Tensor {
  public:
    static constexpr int kMaxDims = 4;

    Tensor() = default;
    // A contiguous tensor over memory someone else keeps alive.
    Tensor(void* data, DType type, std::span<const int64_t> shape, Device device = Device::CPU);
    Tensor(void* data, DType type, std::initializer_list<int64_t> shape,
           Device device = Device::CPU)
        : Tensor(data, type, std::span<const int64_t>(shape.begin(), shape.size()), device) {}
    Tensor(const void* data, DType type, std::initializer_list<int64_t> shape,
           Device device = Device::CPU)
        : Tensor(const_cast<void*>(data), type, shape, device) {}

    // The same view, now keeping `owner` alive for as long as any copy of it exists.
    Tensor owned_by(std::shared_ptr<const void> owner) const;

    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    int ndim() const { return ndim_; }
    int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
    std::span<const int64_t> shape() const { return {shape_.data(), static_cast<size_t>(ndim_)}; }
    // Bytes between consecutive indices of dimension i (i < ndim - 1; the last one is dense).
    size_t stride(int i) const { return stride_[static_cast<size_t>(i)]; }
    int64_t numel() const;
    int64_t cols() const { return ndim_ ? shape_[static_cast<size_t>(ndim_ - 1)] : 0; }
    int64_t rows() const { return cols() ? numel() / cols() : 0; }  // all but the last dimension
    size_t row_bytes() const { return row_bytes_; }
    // Bytes the data spans (a contiguous tensor's size).
    size_t bytes() const;
    bool contiguous() const;
    bool empty() const { return data_ == nullptr; }
    bool owning() const { return owner_ != nullptr; }

    void* raw() const { return data_; }
    template <class T>
    T* data() const {
        return static_cast<T*>(data_);
    }

    // Rows [r0, r0 + n) along dimension 0, sharing the memory and its owner.
    Tensor slice(int64_t r0, int64_t n) const;
    // The same contiguous memory as another shape with as many elements.
    Tensor reshape(std::initializer_list<int64_t> shape) const;

  private:
    void* data_ = nullptr;
    DType dtype_ = DType::F32;
    Device device_ = Device::CPU;
    int ndim_ = 0;
    std::array<int64_t, kMaxDims> shape_{};
    std::array<size_t, kMaxDims> stride_{};
    size_t row_bytes_ = 0;
    std::shared_ptr<const void> owner_;
};

}  // namespace ferry
