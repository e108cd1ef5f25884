// int4s, ferry's 2:4 sparse int4 (quant/ferry_types.h): on a row pruned 2:4 it holds exactly
// int4's values in 3/4 of the bytes, refuses a row off the pattern, and every kernel level
// gives the reference's bits (and so int4's) from its compressed tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_levels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cpu/reference.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"
#include "quant/quantize.h"

namespace ferry::quant {
namespace {

constexpr DType kSparse[] = {DType::INT4S_G32, DType::INT4S_G64, DType::INT4S_G128};

// Heavy-tailed weights with the 2 smallest of every 4 zeroed, as magnitude pruning leaves them;
// quartet 1 keeps one weight, quartet 2 none, and quartet 3's second weight is tiny, so it rounds
// to the zero point while its position is still stored.
std::vector<float> pruned_row(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::student_t_distribution<float> d(2.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = 0.01f * d(rng);
    for (int64_t q = 0; q + 4 <= n; q += 4) {
        int idx[4] = {0, 1, 2, 3};
        std::sort(idx, idx + 4,
                  [&](int a, int b) { return std::fabs(x[q + a]) < std::fabs(x[q + b]); });
        x[q + idx[0]] = x[q + idx[1]] = 0;
    }
    x[4] = x[5] = x[6] = 0, x[7] = 0.03f;
    x[8] = x[9] = x[10] = x[11] = 0;
    x[12] = 0.05f, x[13] = 1e-7f, x[14] = x[15] = 0;
    return x;
}

std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
    auto q = quantize(t, x.data(), static_cast<int64_t>(x.size()));
    EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().message);
    return q.ok() ? *q : std::vector<uint8_t>{};
}

TEST(Int4S, HoldsInt4sValuesInThreeQuartersOfItsBytes) {
    for (DType t : kSparse) {
        const DType dense = int4s_dense(t);
        for (int64_t n : {int64_t{128}, int64_t{384}, int64_t{2048}}) {
            const auto x = pruned_row(n, static_cast<uint32_t>(n));
            const auto qs = quantized(t, x), qd = quantized(dense, x);
            // Bytes per group: the 4-byte header, then 3/4 of int4's codes.
            EXPECT_EQ(qs.size(), static_cast<size_t>(n / dtype_info(t).block_size *
                                                     (4 + 3 * dtype_info(t).block_size / 8)));
            std::vector<float> ys(static_cast<size_t>(n)), yd(static_cast<size_t>(n));
            ASSERT_TRUE(dequantize_row(t, qs.data(), ys.data(), n).ok());
            ASSERT_TRUE(dequantize_row(dense, qd.data(), yd.data(), n).ok());
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(std::bit_cast<uint32_t>(ys[i]), std::bit_cast<uint32_t>(yd[i]))
                    << dtype_name(t) << " n " << n << " [" << i << "]";
            for (int64_t i = 0; i < n; ++i) {
                if (x[i] != 0) continue;
                ASSERT_EQ(ys[i], 0.0f) << dtype_name(t) << " [" << i << "]";
            }
        }
    }
}

TEST(Int4S, ByteLayoutIsTheDocumentedOne) {
    // One group of 32: quartet m's kept codes in qs[m] (lower position low), positions in
    // idx[m / 2]'s nibble m % 2 as i0 | i1 << 2.
    std::vector<float> x(32, 0.0f);
    x[1] = 1.0f, x[3] = -1.0f;     // quartet 0: positions 1, 3
    x[4] = 0.5f;                   // quartet 1: position 0, then the lowest free one, 1
    x[30] = -0.5f, x[31] = 0.25f;  // quartet 7: positions 2, 3
    const auto q = quantized(DType::INT4S_G32, x);
    ASSERT_EQ(q.size(), 16u);
    const auto dq = quantized(DType::INT4_G32, x);
    const uint8_t z = q[2];
    EXPECT_EQ(z, dq[2]);
    EXPECT_EQ(q[3], 0);
    auto code = [&](int j) {  // int4's code of element j (Q4_0's nibble order)
        return j < 16 ? dq[4 + j] & 0xF : dq[4 + j - 16] >> 4;
    };
    const uint8_t* qs = q.data() + 4;
    const uint8_t* idx = qs + 8;
    EXPECT_EQ(qs[0], code(1) | code(3) << 4);
    EXPECT_EQ(idx[0] & 0xF, 1 | 3 << 2);
    EXPECT_EQ(qs[1], code(4) | z << 4);
    EXPECT_EQ(idx[0] >> 4, 0 | 1 << 2);
    EXPECT_EQ(qs[7], code(30) | code(31) << 4);
    EXPECT_EQ(idx[3] >> 4, 2 | 3 << 2);
    EXPECT_EQ(qs[3], z | z << 4);  // an all-zero quartet: the first two positions, both z
    EXPECT_EQ(idx[1] & 0xF, 0 | 1 << 2);
}

TEST(Int4S, RefusesARowOffThePatternAndSaysWhere) {
    auto x = pruned_row(64, 3);
    x[41] = x[42] = x[43] = 0.1f;  // quartet at 40 now holds 3 or 4
    auto q = quantize(DType::INT4S_G64, x.data(), 64);
    ASSERT_FALSE(q.ok());
    EXPECT_NE(q.error().message.find("columns 40..43"), std::string::npos) << q.error().message;
    EXPECT_NE(q.error().message.find("ferry prune --sparsity 2:4"), std::string::npos);
    // The embedding and the output head stay dense: int4 with the same groups.
    EXPECT_EQ(type_for_tensor(DType::INT4S_G64, "token_embd.weight", 2, 576), DType::INT4_G64);
    EXPECT_EQ(type_for_tensor(DType::INT4S_G64, "blk.0.ffn_up.weight", 2, 576), DType::INT4S_G64);
    EXPECT_EQ(type_for_tensor(DType::INT4S_G128, "blk.0.ffn_up.weight", 2, 576), DType::INT4S_G64);
    EXPECT_TRUE(keeps_zeros(DType::INT4S_G32));
}

struct Matrix {
    kernels::cpu::Weight w;
    std::vector<uint8_t> bytes;
    kernels::cpu::PackedWeight packed;
};

Matrix make_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    Matrix m;
    for (int64_t r = 0; r < rows; ++r) {
        auto x = pruned_row(cols, seed + static_cast<uint32_t>(r));
        if (r == 1) std::fill(x.begin(), x.end(), 0.0f);
        const auto q = quantized(t, x);
        m.bytes.insert(m.bytes.end(), q.begin(), q.end());
    }
    m.w = kernels::cpu::Weight{t, m.bytes.data(), rows, cols, row_bytes(t, cols)};
    m.packed = kernels::cpu::PackedWeight(m.w);
    m.w.packed = m.packed.data();
    return m;
}

TEST(Int4S, EveryLevelGivesTheReferencesBitsAndInt4s) {
    ferry::testing::LevelGuard guard;
    ThreadPool pool1(1), pool2(2);
    uint32_t seed = 40;
    EXPECT_EQ(kernels::cpu::packed_tile_bytes(DType::INT4S_G64) * 4,
              kernels::cpu::packed_tile_bytes(DType::INT4_G64) * 3);
    for (auto level : ferry::testing::simd_levels(true)) {
        kernels::cpu::set_cpu_level(level);
        for (DType t : kSparse) {
            const int64_t g = dtype_info(t).block_size;
            for (int64_t cols : {g, 3 * g})
                for (int64_t rows : {1, 3, 17, 40}) {
                    const Matrix m = make_matrix(t, rows, cols, ++seed);
                    const Matrix d = make_matrix(int4s_dense(t), rows, cols, seed);
                    for (int64_t nt : {1, 2, 3, 5, 13, 70}) {
                        std::mt19937 rng(++seed);
                        std::uniform_real_distribution<float> u(-1, 1);
                        std::vector<float> x(static_cast<size_t>(nt * cols));
                        for (auto& v : x) v = u(rng);
                        for (kernels::Activations a : ferry::testing::kAllActivations) {
                            ferry::testing::ActivationsGuard ag(a);
                            const std::string what =
                                std::string(kernels::cpu::cpu_level_name(level)) + " " +
                                std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " t" + std::to_string(nt) + " " +
                                kernels::activations_name(a);
                            std::vector<float> y(static_cast<size_t>(nt * rows)), y1 = y, yd = y;
                            kernels::cpu::matmul(m.w, x.data(), nt, y.data(), pool2);
                            kernels::cpu::matmul(m.w, x.data(), nt, y1.data(), pool1);
                            kernels::cpu::matmul(d.w, x.data(), nt, yd.data(), pool1);
                            if (a != kernels::Activations::F32) {
                                const int64_t nb = cols / 32;
                                std::vector<kernels::cpu::ActBlock> xa(
                                    static_cast<size_t>(nb * nt));
                                kernels::cpu::ref::quantize_act(x.data(), xa.data(), nt * cols, a);
                                for (int64_t r = 0; r < rows; ++r)
                                    for (int64_t tk = 0; tk < nt; ++tk)
                                        ASSERT_EQ(y[tk * rows + r],
                                                  kernels::cpu::ref::dot_act(t, m.w.row(r),
                                                                             &xa[tk * nb], nb, a))
                                            << what << " row " << r << " token " << tk;
                            }
                            // The same values as int4's, so the same bits whatever the path.
                            for (size_t i = 0; i < y.size(); ++i) {
                                ASSERT_EQ(y[i], y1[i]) << what << " [" << i << "]";
                                if (a != kernels::Activations::F32) {
                                    ASSERT_EQ(y[i], yd[i]) << what << " int4 [" << i << "]";
                                }
                            }
                        }
                    }
                }
        }
    }
}

// A file is not trusted to hold two different positions, lower first: whatever its nibbles say,
// the kernels read what the reference reads (group_chunk: the first code at i0, the second at
// i1, the second winning where they are the same).
TEST(Int4S, PositionsOutOfOrderOrEqualReadAsTheReferenceReadsThem) {
    ferry::testing::LevelGuard guard;
    ThreadPool pool(2);
    Matrix m = make_matrix(DType::INT4S_G32, 17, 64, 7);
    for (int64_t r = 0; r < 17; ++r) {
        uint8_t* idx = m.bytes.data() + static_cast<size_t>(r) * m.w.row_stride + 4 + 8;
        idx[0] = static_cast<uint8_t>((2 | 2 << 2) | (3 | 1 << 2) << 4);  // equal; reversed
        idx[3] = static_cast<uint8_t>((r % 16) | (15 - r % 16) << 4);
    }
    m.packed = kernels::cpu::PackedWeight(m.w);
    m.w.packed = m.packed.data();
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto level : ferry::testing::simd_levels(true)) {
        kernels::cpu::set_cpu_level(level);
        for (int64_t nt : {1, 5}) {
            std::vector<float> x(static_cast<size_t>(nt * 64)), y(static_cast<size_t>(nt * 17));
            for (auto& v : x) v = u(rng);
            kernels::cpu::matmul(m.w, x.data(), nt, y.data(), pool);
            const auto a = kernels::cpu::activations();
            if (a == kernels::Activations::F32) continue;
            std::vector<kernels::cpu::ActBlock> xa(static_cast<size_t>(2 * nt));
            kernels::cpu::ref::quantize_act(x.data(), xa.data(), nt * 64, a);
            for (int64_t r = 0; r < 17; ++r)
                for (int64_t t = 0; t < nt; ++t)
                    ASSERT_EQ(y[t * 17 + r], kernels::cpu::ref::dot_act(
                                                 DType::INT4S_G32, m.w.row(r), &xa[t * 2], 2, a))
                        << kernels::cpu::cpu_level_name(level) << " row " << r << " t " << t;
        }
    }
}

}  // namespace
}  // namespace ferry::quant
