#include "core/huge_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

// Under AddressSanitizer the buffers are ordinary allocations, so an access past their end is
// still caught (ASan does not watch anonymous mappings).
#if defined(__SANITIZE_ADDRESS__)
#define FERRY_HUGE_MAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_HUGE_MAP 0
#endif
#endif
#if !defined(FERRY_HUGE_MAP)
#if defined(__linux__)
#define FERRY_HUGE_MAP 1
#else
#define FERRY_HUGE_MAP 0
#endif
#endif

#if FERRY_HUGE_MAP
#include <sys/mman.h>
#endif

namespace ferry {

namespace {
[[maybe_unused]] constexpr size_t kHugePage = size_t{2} << 20;
}

HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
#if FERRY_HUGE_MAP
    // Below one huge page the alignment would only waste memory; such buffers are not where
    // the TLB misses are.
    const bool huge = bytes >= kHugePage;
    const size_t len = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
    const size_t over = huge ? len + kHugePage : len;
    void* p = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    auto* base = static_cast<std::byte*>(p);
    if (huge) {
        // Trim the mapping to a 2 MiB-aligned start so every page can be a huge one.
        const auto addr = reinterpret_cast<uintptr_t>(base);
        const size_t head = (kHugePage - addr % kHugePage) % kHugePage;
        if (head) munmap(base, head);
        if (kHugePage - head) munmap(base + head + len, kHugePage - head);
        base += head;
        (void)madvise(base, len, MADV_HUGEPAGE);  // a hint: refused or off, 4 KiB pages serve
    }
    data_ = base;
    mapped_ = len;
#else
    const size_t len = (bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of it
    data_ = static_cast<std::byte*>(std::aligned_alloc(64, len));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, len);
#endif
}

bool HugeBuffer::maps_huge_pages() {
    return FERRY_HUGE_MAP;
}

HugeBuffer::~HugeBuffer() {
    release();
}

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_(std::exchange(o.mapped_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
    if (this != &o) {
        release();
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        mapped_ = std::exchange(o.mapped_, 0);
    }
    return *this;
}

void HugeBuffer::release() {
    if (!data_) return;
#if FERRY_HUGE_MAP
    munmap(data_, mapped_);
#else
    std::free(data_);
#endif
    data_ = nullptr;
    size_ = mapped_ = 0;
}

}  // namespace ferry
