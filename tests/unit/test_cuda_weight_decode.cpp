// The GPU's weight decoding (kernels/cuda/weight_decode.h) compiled for the host: every type it
// reads gives, chunk by chunk, exactly the floats the CPU's reference (quant::dequantize_row)
// gives for the same bytes, on random bytes (every bit pattern, NaN scales included) and on
// rows the quantizers wrote. The GPU kernels run this same code, so a machine without a GPU
// checks the part of them that knows the formats; the device check runs the kernels themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/weight_decode.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"
#include "quant/quantize.h"

namespace ferry {
namespace {

namespace dec = kernels::cuda::decode;

// Bit for bit, except that two NaNs are equal whatever their payloads.
::testing::AssertionResult same_float(float got, float want) {
    if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
    uint32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    if (a == b) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << got << " (0x" << std::hex << a << ") against " << want << " (0x" << b << ")";
}

// Decodes every chunk of `rows` rows with the GPU's layout and compares with the CPU's.
template <DType T>
void expect_rows_match(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
    const size_t rb = row_bytes(T, cols);
    ASSERT_EQ(bytes.size(), rb * rows);
    std::vector<float> want(cols), got(cols);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = bytes.data() + r * rb;
        ASSERT_TRUE(quant::dequantize_row(T, row, want.data(), cols).ok());
        for (int64_t c = 0; c < cols / 8; ++c) dec::Layout<T>::chunk(row, c, got.data() + 8 * c);
        for (int64_t i = 0; i < cols; ++i)
            ASSERT_TRUE(same_float(got[i], want[i]))
                << dtype_name(T) << " row " << r << " weight " << i;
    }
}

constexpr int64_t kCols = 512;  // whole super-blocks and groups of every type

TEST(CudaWeightDecode, LayoutsAgreeWithTheTypeTable) {
    int covered = 0;
    for (int id = 0; id < 2048; ++id) {
        const auto known = dtype_info(static_cast<uint32_t>(id));
        if (!known) continue;
        const DType t = known->type;
        const bool visited = dec::visit(t, [&](auto tag) {
            using L = dec::Layout<decltype(tag)::value>;
            const DTypeInfo& info = dtype_info(t);
            EXPECT_EQ(L::kElems, info.block_size) << info.name;
            EXPECT_EQ(L::kBytes, static_cast<int>(info.block_bytes)) << info.name;
            EXPECT_EQ(L::kHeader, info.row_header) << info.name;
            EXPECT_EQ(L::kElems % 8 == 0 || L::kElems == 1, true) << info.name;
        });
        covered += visited;
        if (visited) {
            EXPECT_TRUE(dec::native(t, kCols)) << dtype_name(t);
            EXPECT_FALSE(dec::native(t, 12)) << dtype_name(t) << ": 12 is not whole chunks";
        }
    }
    EXPECT_EQ(covered, 23);
    // Types the GPU has no kernel for are widened to f32 by the backend, not guessed at.
    EXPECT_FALSE(dec::native(DType::Q8_1, kCols));
    EXPECT_FALSE(dec::native(DType::I32, kCols));
}

TEST(CudaWeightDecode, ScalarConversionsAreExactForEveryCode) {
    for (uint32_t h = 0; h < 65536; ++h) {
        ASSERT_TRUE(same_float(dec::half_to_float(static_cast<uint16_t>(h)),
                               quant::fp16_to_fp32(static_cast<uint16_t>(h))))
            << "f16 0x" << std::hex << h;
        ASSERT_TRUE(same_float(dec::bf16_to_float(static_cast<uint16_t>(h)),
                               quant::bf16_to_fp32(static_cast<uint16_t>(h))))
            << "bf16 0x" << std::hex << h;
    }
    for (uint32_t e = 0; e < 256; ++e)
        ASSERT_TRUE(same_float(dec::e4m3_to_float(static_cast<uint8_t>(e)),
                               quant::fp8_e4m3_to_fp32(static_cast<uint8_t>(e))))
            << "e4m3 0x" << std::hex << e;
}

// Random bytes reach every code, scale and position pattern, including the ones no quantizer
// writes (NaN and infinite scales, 2:4 positions out of order).
TEST(CudaWeightDecode, EveryTypeDecodesRandomBytesAsTheCpuDoes) {
    std::mt19937 rng(7);
    int checked = 0;
    for (int id = 0; id < 2048; ++id) {
        const auto known = dtype_info(static_cast<uint32_t>(id));
        if (!known) continue;
        const DType t = known->type;
        dec::visit(t, [&](auto tag) {
            constexpr DType T = decltype(tag)::value;
            const int64_t rows = 6;
            std::vector<uint8_t> bytes(row_bytes(T, kCols) * rows);
            for (auto& b : bytes) b = static_cast<uint8_t>(rng());
            // A group's zero point is a 4-bit code (ferry_types.h: z <= 15); the CPU packs
            // int4s's unstored positions as nibbles of z, so a larger one has no meaning to match.
            if (quant::is_int_group(T))
                for (size_t o = 2; o < bytes.size(); o += dec::Layout<T>::kBytes) bytes[o] &= 0x0F;
            expect_rows_match<T>(bytes, rows, kCols);
            ++checked;
        });
    }
    EXPECT_EQ(checked, 23);
}

// And rows as the quantizers write them, values of a plausible weight's size.
TEST(CudaWeightDecode, EveryTypeDecodesQuantizedRowsAsTheCpuDoes) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    const int64_t rows = 4;
    std::vector<float> w(rows * kCols);
    for (float& v : w) v = nd(rng);
    w[3] = 0.5f;  // an outlier in the first block
    // Pruned 2:4 (the first two of every four kept) for the sparse types, which store only that.
    std::vector<float> pruned = w;
    for (size_t i = 0; i < pruned.size(); ++i)
        if (i % 4 >= 2) pruned[i] = 0.0f;
    int checked = 0;
    for (int id = 0; id < 2048; ++id) {
        const auto known = dtype_info(static_cast<uint32_t>(id));
        if (!known || !quant::can_quantize(known->type)) continue;
        const DType t = known->type;
        dec::visit(t, [&](auto tag) {
            constexpr DType T = decltype(tag)::value;
            const float* src = quant::is_int4s(T) ? pruned.data() : w.data();
            auto q = quant::quantize(T, src, rows * kCols);
            ASSERT_TRUE(q.ok()) << dtype_name(T) << ": " << q.error().message;
            // A per-row type's quantizer takes one row at a time.
            if (q->size() != row_bytes(T, kCols) * rows) {
                q->clear();
                for (int64_t r = 0; r < rows; ++r) {
                    auto one = quant::quantize(T, src + r * kCols, kCols);
                    ASSERT_TRUE(one.ok()) << dtype_name(T);
                    q->insert(q->end(), one->begin(), one->end());
                }
            }
            expect_rows_match<T>(*q, rows, kCols);
            ++checked;
        });
    }
    EXPECT_GE(checked, 15);
}

}  // namespace
}  // namespace ferry
