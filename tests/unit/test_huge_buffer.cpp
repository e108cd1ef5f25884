#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "core/huge_buffer.h"

namespace ferry {
namespace {

bool all_zero(const HugeBuffer& b) {
    for (size_t i = 0; i < b.size(); ++i)
        if (b.data()[i] != std::byte{0}) return false;
    return true;
}

TEST(HugeBuffer, SmallAndLargeBuffersAreZeroedAlignedAndWritable) {
    for (size_t n : {size_t{1}, size_t{4097}, (size_t{2} << 20) - 1, (size_t{5} << 20) + 123}) {
        HugeBuffer b(n);
        ASSERT_NE(b.data(), nullptr) << n;
        EXPECT_EQ(b.size(), n);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << n;
        // A buffer of at least one huge page starts on one, so all of it can be huge pages.
        if (HugeBuffer::maps_huge_pages() && n >= (size_t{2} << 20)) {
            EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20), 0u) << n;
        }
        EXPECT_TRUE(all_zero(b)) << n;
        b.data()[0] = std::byte{1};
        b.data()[n - 1] = std::byte{2};  // the last byte asked for is there
        EXPECT_EQ(b.data()[n - 1], std::byte{2});
    }
}

TEST(HugeBuffer, MovesOwnership) {
    HugeBuffer a(3u << 20);
    a.data()[7] = std::byte{9};
    std::byte* p = a.data();
    HugeBuffer b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.data()[7], std::byte{9});
    HugeBuffer c(100);
    c = std::move(b);  // frees c's own memory, takes b's
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(c.size(), 3u << 20);
    EXPECT_EQ(b.data(), nullptr);
    HugeBuffer empty(0);
    EXPECT_EQ(empty.data(), nullptr);
    EXPECT_EQ(empty.size(), 0u);
}

}  // namespace
}  // namespace ferry
