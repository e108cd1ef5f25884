// A large, zero-filled, 64-byte aligned buffer for the data the hot loops stream through every
// step (packed weights, the KV pool). On Linux it is an anonymous mapping aligned to 2 MiB and
// marked for transparent huge pages: a decode step reads ~90 MiB of weights, which is ~23,000
// 4 KiB pages and as many TLB misses, against ~46 with 2 MiB pages (measured A / B: q4_1 decode
// 197-242 -> 234-256 tok/s on two threads, f16 85-90 -> 107-108; docs/performance.md). Where
// huge pages are unavailable it is an ordinary allocation and behaves the same, only slower.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

class HugeBuffer {
  public:
    HugeBuffer() = default;
    // Throws std::bad_alloc when the memory cannot be had. Pages become resident when touched.
    explicit HugeBuffer(size_t bytes);
    ~HugeBuffer();
    HugeBuffer(HugeBuffer&& o) noexcept;
    HugeBuffer& operator=(HugeBuffer&& o) noexcept;
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;

    // Whether buffers of >= 2 MiB are 2 MiB-aligned mappings marked for huge pages (Linux,
    // outside AddressSanitizer builds); otherwise they are plain allocations.
    static bool maps_huge_pages();

    std::byte* data() const { return data_; }
    size_t size() const { return size_; }

  private:
    void release();
    std::byte* data_ = nullptr;
    size_t size_ = 0;    // what was asked for
    size_t mapped_ = 0;  // what is mapped (0: not a mapping)
};

}  // namespace ferry
