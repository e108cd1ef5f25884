// Every SIMD kernel level against the scalar reference: random inputs, odd sizes (rows and
// tokens that do not fill a tile, token counts across the cache block), zero and extreme
// scales, NaN/Inf where the result is defined.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_levels.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cpu/reference.h"
#include "kernels/kernels.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"

namespace {
using namespace ferry;
using kernels::CpuLevel;

using ferry::testing::LevelGuard;
using ferry::testing::simd_levels;

enum class Scales { Normal, Zero, Huge, Tiny };

// Random bytes for a row of `type`, with its fp16 scale fields set according to `sc`.
std::vector<uint8_t> random_row(DType type, int64_t cols, std::mt19937& rng, Scales sc) {
    const auto& info = dtype_info(type);
    std::vector<uint8_t> row(row_bytes(info, cols));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto scale = [&](float typical) {
        switch (sc) {
            case Scales::Zero:
                return quant::fp32_to_fp16(0.0f);
            case Scales::Huge:
                return quant::fp32_to_fp16(30000.0f * (u(rng) > 0 ? 1 : -1));
            case Scales::Tiny:
                return quant::fp32_to_fp16(6.2e-5f * u(rng));
            default:
                return quant::fp32_to_fp16(typical * u(rng));
        }
    };
    const int64_t nb = cols / info.block_size;
    auto put16 = [&](size_t off, uint16_t v) { std::memcpy(row.data() + off, &v, 2); };
    switch (type) {
        case DType::F32:
            for (int64_t i = 0; i < cols; ++i) {
                const float f = u(rng);
                std::memcpy(row.data() + 4 * i, &f, 4);
            }
            break;
        case DType::F16:
            for (int64_t i = 0; i < cols; ++i) put16(2 * i, quant::fp32_to_fp16(u(rng)));
            break;
        case DType::BF16:
            for (int64_t i = 0; i < cols; ++i) put16(2 * i, quant::fp32_to_bf16(u(rng)));
            break;
        case DType::Q4_0:
        case DType::Q8_0:
            for (int64_t b = 0; b < nb; ++b) put16(b * info.block_bytes, scale(0.05f));
            break;
        case DType::Q4_1:
            for (int64_t b = 0; b < nb; ++b) {
                put16(b * info.block_bytes, scale(0.05f));
                put16(b * info.block_bytes + 2, scale(0.3f));
            }
            break;
        case DType::Q4_K:
            for (int64_t b = 0; b < nb; ++b) {
                put16(b * info.block_bytes, scale(0.01f));
                put16(b * info.block_bytes + 2, scale(0.01f));
            }
            break;
        case DType::Q6_K:
            for (int64_t b = 0; b < nb; ++b) put16(b * info.block_bytes + 208, scale(0.01f));
            break;
        default:
            break;
    }
    return row;
}

struct Matrix {
    kernels::Weight w;
    std::vector<uint8_t> bytes;
};

Matrix random_matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng,
                     Scales sc = Scales::Normal) {
    Matrix m;
    const size_t stride = row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) {
        auto row = random_row(type, cols, rng, sc);
        m.bytes.insert(m.bytes.end(), row.begin(), row.end());
    }
    m.w = kernels::Weight{type, m.bytes.data(), rows, cols, stride};
    return m;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto& f : v) f = u(rng);
    return v;
}

bool quantized_activations(DType t) {
    return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0 || t == DType::Q4_K;
}

// Checks one level's matmul against the float reference. Where activations are quantized, the
// allowed error is the exact bound that rounding each activation to its block's grid implies
// (|x - x_q| <= amax/254 per element), plus float rounding; elsewhere float rounding only.
void check_matmul(const Matrix& m, const std::vector<float>& x, int64_t nt, ThreadPool& pool,
                  const std::string& what) {
    const auto& w = m.w;
    std::vector<float> y(nt * w.rows, -1.0f);
    kernels::matmul(w, x.data(), nt, y.data(), pool);
    std::vector<float> deq(w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
        ASSERT_TRUE(quant::dequantize_row(w.type, w.row(r), deq.data(), w.cols));
        for (int64_t t = 0; t < nt; ++t) {
            const float* xt = x.data() + t * w.cols;
            const float want = kernels::ref::vec_dot(w.type, w.row(r), xt, w.cols);
            double mag = 0, qbound = 0;
            for (int64_t b = 0; b < w.cols; b += 32) {
                float amax = 0;
                for (int j = 0; j < 32 && b + j < w.cols; ++j)
                    amax = std::fmax(amax, std::fabs(xt[b + j]));
                for (int j = 0; j < 32 && b + j < w.cols; ++j) {
                    mag += std::fabs(deq[b + j] * xt[b + j]);
                    qbound += std::fabs(deq[b + j]) * amax / 254.0;
                }
            }
            double tol = 1e-5 * mag + 1e-30;
            if (quantized_activations(w.type)) tol += qbound * 1.01;
            const float got = y[t * w.rows + r];
            ASSERT_NEAR(got, want, tol) << what << " row " << r << " token " << t;
        }
    }
}

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                           DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};

TEST(Kernels, MatmulMatchesReferenceOnOddShapes) {
    LevelGuard guard;
    std::mt19937 rng(1);
    ThreadPool pool1(1), pool2(2);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (DType type : kAllTypes) {
            const bool k = dtype_info(type).block_size == 256;
            for (int64_t cols :
                 k ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576}) {
                for (int64_t rows : {1, 3, 6, 17}) {
                    const Matrix m = random_matrix(type, rows, cols, rng);
                    for (int64_t nt : {1, 2, 5, 7, 9}) {
                        const auto x = random_floats(nt * cols, rng);
                        const std::string what = std::string(kernels::cpu_level_name(level)) + " " +
                                                 std::string(dtype_name(type)) + " " +
                                                 std::to_string(rows) + "x" + std::to_string(cols) +
                                                 " t" + std::to_string(nt);
                        check_matmul(m, x, nt, pool1, what + " 1 thread");
                        check_matmul(m, x, nt, pool2, what + " 2 threads");
                    }
                }
            }
        }
    }
}

TEST(Kernels, MatmulPrefillAcrossTokenBlocks) {
    // 70 tokens cross the 64-token cache block; 37 rows leave a partial row tile per thread.
    LevelGuard guard;
    std::mt19937 rng(2);
    ThreadPool pool(2);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (DType type : {DType::Q4_1, DType::Q8_0, DType::F16, DType::Q4_K}) {
            const int64_t cols = type == DType::Q4_K ? 256 : 160;
            const Matrix m = random_matrix(type, 37, cols, rng);
            const auto x = random_floats(70 * cols, rng);
            check_matmul(
                m, x, 70, pool,
                std::string(kernels::cpu_level_name(level)) + " " + std::string(dtype_name(type)));
        }
    }
}

TEST(Kernels, MatmulResultOfATokenDoesNotDependOnTheBatch) {
    // Short batches and long ones take different loops (in-register unpacking vs a buffer);
    // a token's output must be bit-identical either way, or speculative verification and
    // batching would change greedy outputs.
    LevelGuard guard;
    std::mt19937 rng(5);
    ThreadPool pool(2);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (DType type : kAllTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 512 : 576;
            const Matrix m = random_matrix(type, 43, cols, rng);
            const int64_t nt = 70;
            const auto x = random_floats(nt * cols, rng);
            std::vector<float> all(nt * m.w.rows);
            kernels::matmul(m.w, x.data(), nt, all.data(), pool);
            for (int64_t t0 : {0, 3, 66}) {
                for (int64_t len : {1, 2, 4, 5}) {
                    if (t0 + len > nt) continue;
                    std::vector<float> part(len * m.w.rows);
                    kernels::matmul(m.w, x.data() + t0 * cols, len, part.data(), pool);
                    for (int64_t i = 0; i < len * m.w.rows; ++i)
                        ASSERT_EQ(part[i], all[t0 * m.w.rows + i])
                            << kernels::cpu_level_name(level) << " " << dtype_name(type)
                            << " tokens " << t0 << "+" << len;
                }
            }
        }
    }
}

TEST(Kernels, MatmulZeroAndExtremeScales) {
    LevelGuard guard;
    std::mt19937 rng(3);
    ThreadPool pool(2);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 64;
            for (Scales sc : {Scales::Zero, Scales::Huge, Scales::Tiny}) {
                const Matrix m = random_matrix(type, 9, cols, rng, sc);
                const auto x = random_floats(3 * cols, rng);
                check_matmul(m, x, 3, pool,
                             std::string(kernels::cpu_level_name(level)) + " " +
                                 std::string(dtype_name(type)) + " scales " +
                                 std::to_string(static_cast<int>(sc)));
            }
        }
    }
}

TEST(Kernels, MatmulZeroActivationsAndNonFinite) {
    LevelGuard guard;
    std::mt19937 rng(4);
    ThreadPool pool(2);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (DType type : kAllTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 64;
            const Matrix m = random_matrix(type, 5, cols, rng);
            std::vector<float> x(2 * cols, 0.0f);
            std::vector<float> y(2 * 5, 1.0f);
            kernels::matmul(m.w, x.data(), 2, y.data(), pool);
            for (float v : y) EXPECT_EQ(v, 0.0f) << dtype_name(type);
            // A NaN or Inf activation poisons every output that reads it, as in the reference.
            x[cols / 2] = std::numeric_limits<float>::quiet_NaN();
            x[cols + 7] = std::numeric_limits<float>::infinity();
            kernels::matmul(m.w, x.data(), 2, y.data(), pool);
            for (int64_t r = 0; r < 5; ++r) {
                EXPECT_TRUE(std::isnan(y[r]))
                    << dtype_name(type) << " " << kernels::cpu_level_name(level);
                const float want =
                    kernels::ref::vec_dot(m.w.type, m.w.row(r), x.data() + cols, cols);
                if (!std::isfinite(want)) {
                    EXPECT_FALSE(std::isfinite(y[5 + r]))
                        << dtype_name(type) << " " << kernels::cpu_level_name(level);
                }
            }
        }
    }
}

TEST(Kernels, MatmulManyEqualsSeparateMatmuls) {
    LevelGuard guard;
    std::mt19937 rng(5);
    ThreadPool pool(2);
    const Matrix a = random_matrix(DType::Q4_1, 21, 128, rng);
    const Matrix b = random_matrix(DType::Q8_0, 7, 128, rng);
    const Matrix c = random_matrix(DType::F16, 13, 128, rng);
    for (int64_t nt : {1, 6}) {
        const auto x = random_floats(nt * 128, rng);
        std::vector<float> ya(nt * 21), yb(nt * 7), yc(nt * 13), za(ya), zb(yb), zc(yc);
        kernels::matmul(a.w, x.data(), nt, ya.data(), pool);
        kernels::matmul(b.w, x.data(), nt, yb.data(), pool);
        kernels::matmul(c.w, x.data(), nt, yc.data(), pool);
        const kernels::MatmulOut outs[] = {{a.w, za.data()}, {b.w, zb.data()}, {c.w, zc.data()}};
        kernels::matmul_many(outs, x.data(), nt, pool);
        EXPECT_EQ(ya, za);
        EXPECT_EQ(yb, zb);
        EXPECT_EQ(yc, zc);
    }
}

TEST(Kernels, ElementwiseOpsMatchReference) {
    LevelGuard guard;
    std::mt19937 rng(6);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (int64_t n : {1, 7, 16, 33, 576, 1537}) {
            const auto x = random_floats(n, rng, 4.0f);
            const auto wt = random_floats(n, rng);
            std::vector<float> a(n), b(n);
            kernels::rmsnorm(x.data(), wt.data(), a.data(), n, 1e-5f);
            kernels::ref::rmsnorm(x.data(), wt.data(), b.data(), n, 1e-5f);
            for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i])));

            auto g = random_floats(n, rng, 12.0f);
            g[0] = 95.0f;  // beyond the exp clamp: silu(x) == x
            if (n > 1) g[1] = -1e4f;
            const auto up = random_floats(n, rng);
            a = g, b = g;
            kernels::silu_mul(a.data(), up.data(), n);
            kernels::ref::silu_mul(b.data(), up.data(), n);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i]))) << i;

            auto s = random_floats(n, rng, 30.0f);
            if (n > 2) s[2] = -std::numeric_limits<float>::infinity();  // a masked score
            a = s, b = s;
            kernels::softmax(a.data(), n);
            kernels::ref::softmax(b.data(), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-5f * b[i]) << i;
        }
        // NaN stays NaN.
        std::vector<float> g = {std::nanf(""), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        std::vector<float> up(16, 1.0f);
        kernels::silu_mul(g.data(), up.data(), 16);
        EXPECT_TRUE(std::isnan(g[0]));
    }
}

TEST(Kernels, AttendMatchesReference) {
    LevelGuard guard;
    std::mt19937 rng(7);
    for (CpuLevel level : simd_levels()) {
        kernels::set_cpu_level(level);
        for (int hd : {32, 48, 64, 128}) {
            for (int64_t n_kv : {1, 15, 16, 17, 100}) {
                const size_t stride = static_cast<size_t>(hd) * 3 + 8;  // kv heads interleaved
                const auto q = random_floats(hd, rng, 2.0f);
                const auto k = random_floats(n_kv * stride, rng, 2.0f);
                const auto v = random_floats(n_kv * stride, rng);
                std::vector<float> a(hd), b(hd);
                const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
                kernels::attend(q.data(), k.data(), v.data(), stride, n_kv, hd, scale, a.data());
                kernels::ref::attend(q.data(), k.data(), v.data(), stride, n_kv, hd, scale,
                                     b.data());
                for (int d = 0; d < hd; ++d) ASSERT_NEAR(a[d], b[d], 1e-5f) << hd << " " << n_kv;
            }
        }
    }
}

TEST(Kernels, QuantizeActivationsMatchesReference) {
    LevelGuard guard;
    std::mt19937 rng(8);
    ThreadPool pool(1);
    // Through the public matmul on a Q8_0 identity-like row: compare the level's quantization
    // with the reference quantizer by the dot products they produce against unit blocks.
    auto x = random_floats(128, rng, 3.0f);
    x[5] = 0;
    std::vector<kernels::BlockQ8A> ref(4);
    kernels::ref::quantize_q8a(x.data(), ref.data(), 128);
    for (int b = 0; b < 4; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
        EXPECT_FLOAT_EQ(ref[b].d, amax / 127.0f);
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            EXPECT_LE(std::fabs(ref[b].qs[j] * ref[b].d - x[32 * b + j]), ref[b].d * 0.5001f);
            sum += ref[b].qs[j];
        }
        EXPECT_FLOAT_EQ(ref[b].s, ref[b].d * sum);
    }
}

}  // namespace

namespace {
// The integer paths of AVX2 and AVX-512 compute the same exact integer block dots from the
// same quantized activations, so they must agree to float rounding, far tighter than the
// quantization bound above.
TEST(Kernels, SimdLevelsAgreeWithEachOther) {
    if (kernels::detected_cpu_level() < CpuLevel::AVX512) GTEST_SKIP() << "needs AVX-512";
    LevelGuard guard;
    std::mt19937 rng(9);
    ThreadPool pool(2);
    for (DType type : kAllTypes) {
        const int64_t cols = dtype_info(type).block_size == 256 ? 1536 : 1536;
        const Matrix m = random_matrix(type, 67, cols, rng);
        for (int64_t nt : {1, 5, 9}) {
            auto x = random_floats(nt * cols, rng);
            for (size_t i = 0; i < x.size(); i += 37) x[i] *= 100.0f;  // activation outliers
            std::vector<float> a(nt * 67), b(nt * 67);
            kernels::set_cpu_level(CpuLevel::AVX2);
            kernels::matmul(m.w, x.data(), nt, a.data(), pool);
            kernels::set_cpu_level(CpuLevel::AVX512);
            kernels::matmul(m.w, x.data(), nt, b.data(), pool);
            for (size_t i = 0; i < a.size(); ++i)
                ASSERT_NEAR(a[i], b[i], 2e-4f * (1 + std::fabs(a[i])) + 1e-3f)
                    << dtype_name(type) << " " << i;
        }
    }
}
}  // namespace
