// Every SIMD kernel level against the scalar reference: random inputs, odd sizes (rows and
// tokens that do not fill a tile or a packed group, token counts across the cache block), zero
// and extreme scales, NaN/Inf where the result is defined, under every activation mode. The
// integer paths must give the reference's bits; float paths its value to float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_levels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cpu/reference.h"
#include "kernels/cpu/simd.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"

namespace {
using namespace ferry;
using kernels::cpu::CpuLevel;

using ferry::testing::ActivationsGuard;
using ferry::testing::kAllActivations;
using ferry::testing::LevelGuard;
using ferry::testing::simd_levels;
using kernels::Activations;

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
        case DType::Q5_0:
        case DType::Q8_0:
            for (int64_t b = 0; b < nb; ++b) put16(b * info.block_bytes, scale(0.05f));
            break;
        case DType::Q4_1:
        case DType::Q5_1:
            for (int64_t b = 0; b < nb; ++b) {
                put16(b * info.block_bytes, scale(0.05f));
                put16(b * info.block_bytes + 2, scale(0.3f));
            }
            break;
        case DType::Q4_K:
        case DType::Q5_K:
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
    kernels::cpu::Weight w;
    std::vector<uint8_t> bytes;
    kernels::cpu::PackedWeight packed;  // as the model packs it, for Q4_0 / Q4_1 / Q8_0
};

Matrix random_matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng,
                     Scales sc = Scales::Normal) {
    Matrix m;
    const size_t stride = row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) {
        auto row = random_row(type, cols, rng, sc);
        m.bytes.insert(m.bytes.end(), row.begin(), row.end());
    }
    m.w = kernels::cpu::Weight{type, m.bytes.data(), rows, cols, stride};
    if (kernels::cpu::packable(type)) {
        m.packed = kernels::cpu::PackedWeight(m.w);
        m.w.packed = m.packed.data();
    }
    return m;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto& f : v) f = u(rng);
    return v;
}

// Every SIMD level under every activation mode (the caller sets them for the loop body).
std::vector<std::pair<CpuLevel, Activations>> levels_and_modes() {
    std::vector<std::pair<CpuLevel, Activations>> out;
    for (CpuLevel l : simd_levels())
        for (Activations a : kAllActivations) out.emplace_back(l, a);
    return out;
}

// Whether matmul takes the integer path for this type in the current activation mode.
bool integer_path(DType t) {
    return kernels::cpu::packable(t) && kernels::cpu::activations() != Activations::F32;
}

bool same_float(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || a == b;
}

// The reference's integer product of every row and token: what the integer paths must give.
std::vector<float> reference_integer(const kernels::cpu::Weight& w, const std::vector<float>& x,
                                     int64_t nt) {
    const int64_t nb = w.cols / 32;
    std::vector<kernels::cpu::ActBlock> xa(nb * nt);
    kernels::cpu::ref::quantize_act(x.data(), xa.data(), nt * w.cols, kernels::cpu::activations());
    std::vector<float> y(nt * w.rows);
    for (int64_t r = 0; r < w.rows; ++r)
        for (int64_t t = 0; t < nt; ++t)
            y[t * w.rows + r] = kernels::cpu::ref::dot_act(w.type, w.row(r), xa.data() + t * nb, nb,
                                                           kernels::cpu::activations());
    return y;
}

// Checks one level's matmul against the reference: the integer paths bit for bit against
// ref::dot_act, the float paths against ref::vec_dot within float rounding.
void check_matmul(const Matrix& m, const std::vector<float>& x, int64_t nt, ThreadPool& pool,
                  const std::string& what) {
    const auto& w = m.w;
    std::vector<float> y(nt * w.rows, -1.0f);
    kernels::cpu::matmul(w, x.data(), nt, y.data(), pool);
    const std::string mode =
        std::string(" act ") + kernels::activations_name(kernels::cpu::activations());
    if (integer_path(w.type)) {
        const auto want = reference_integer(w, x, nt);
        for (int64_t i = 0; i < nt * w.rows; ++i)
            ASSERT_TRUE(same_float(y[i], want[i]))
                << what << mode << " row " << i % w.rows << " token " << i / w.rows << ": " << y[i]
                << " vs " << want[i];
        return;
    }
    for (int64_t r = 0; r < w.rows; ++r) {
        for (int64_t t = 0; t < nt; ++t) {
            const float* xt = x.data() + t * w.cols;
            const float want = kernels::cpu::ref::vec_dot(w.type, w.row(r), xt, w.cols);
            std::vector<float> deq(w.cols);
            ASSERT_TRUE(quant::dequantize_row(w.type, w.row(r), deq.data(), w.cols));
            double mag = 0;
            for (int64_t j = 0; j < w.cols; ++j) mag += std::fabs(deq[j] * xt[j]);
            const float got = y[t * w.rows + r];
            ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30)
                << what << mode << " row " << r << " token " << t;
        }
    }
}

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};
// The block types the integer kernels read (packed_weights.h), every tile format once.
const DType kPackedTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                              DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

TEST(Kernels, MatmulMatchesReferenceOnOddShapes) {
    LevelGuard guard;
    std::mt19937 rng(1);
    ThreadPool pool1(1), pool2(2);
    for (const auto& [level, act] : levels_and_modes()) {
        kernels::cpu::set_cpu_level(level);
        ActivationsGuard ag(act);
        for (DType type : kAllTypes) {
            const bool k = dtype_info(type).block_size == 256;
            for (int64_t cols :
                 k ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576}) {
                // Under, at and over a packed group of 16 rows, and a group and a bit.
                for (int64_t rows : {1, 3, 6, 16, 17, 35}) {
                    const Matrix m = random_matrix(type, rows, cols, rng);
                    for (int64_t nt : {1, 2, 3, 5, 7, 9}) {  // every remainder of the 4-token tile
                        const auto x = random_floats(nt * cols, rng);
                        const std::string what = std::string(kernels::cpu::cpu_level_name(level)) +
                                                 " " + std::string(dtype_name(type)) + " " +
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
    for (const auto& [level, act] : levels_and_modes()) {
        kernels::cpu::set_cpu_level(level);
        ActivationsGuard ag(act);
        for (DType type : kAllTypes) {
            if (type == DType::F32 || type == DType::BF16) continue;
            const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 160;
            const Matrix m = random_matrix(type, 37, cols, rng);
            const auto x = random_floats(70 * cols, rng);
            check_matmul(m, x, 70, pool,
                         std::string(kernels::cpu::cpu_level_name(level)) + " " +
                             std::string(dtype_name(type)));
        }
    }
}

TEST(Kernels, MatmulResultOfATokenDoesNotDependOnTheBatch) {
    // Short batches and long ones take different loops (in-register unpacking vs a buffer,
    // token tiles of different widths); a token's output must be bit-identical either way, or
    // speculative verification and batching would change greedy outputs.
    LevelGuard guard;
    std::mt19937 rng(5);
    ThreadPool pool(2);
    for (const auto& [level, act] : levels_and_modes()) {
        kernels::cpu::set_cpu_level(level);
        ActivationsGuard ag(act);
        for (DType type : kAllTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 512 : 576;
            const Matrix m = random_matrix(type, 43, cols, rng);
            const int64_t nt = 70;
            const auto x = random_floats(nt * cols, rng);
            std::vector<float> all(nt * m.w.rows);
            kernels::cpu::matmul(m.w, x.data(), nt, all.data(), pool);
            for (int64_t t0 : {0, 3, 66}) {
                for (int64_t len : {1, 2, 4, 5}) {
                    if (t0 + len > nt) continue;
                    std::vector<float> part(len * m.w.rows);
                    kernels::cpu::matmul(m.w, x.data() + t0 * cols, len, part.data(), pool);
                    for (int64_t i = 0; i < len * m.w.rows; ++i)
                        ASSERT_EQ(part[i], all[t0 * m.w.rows + i])
                            << kernels::cpu::cpu_level_name(level) << " " << dtype_name(type)
                            << " tokens " << t0 << "+" << len;
                }
            }
        }
    }
}

TEST(Kernels, PairedAndSingleRowGroupsBothGiveTheReferenceBits) {
    // A short batch runs two 16-row groups side by side or one at a time, by the widths the
    // CPU's vendor gains at; each way must give the reference's bits, whichever this CPU uses.
    LevelGuard guard;
    std::mt19937 rng(9);
    ThreadPool pool(2);
    for (const auto& [level, act] : levels_and_modes()) {
        if (act == Activations::F32) continue;
        kernels::cpu::set_cpu_level(level);
        ActivationsGuard ag(act);
        for (DType type : kPackedTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 512 : 576;
            const Matrix m = random_matrix(type, 75, cols, rng);  // 4 groups and 11 rows
            for (int64_t nt : {2, 3, 4, 5, 8, 70}) {
                const auto x = random_floats(nt * cols, rng);
                for (auto p :
                     {kernels::cpu::GroupPairing::Always, kernels::cpu::GroupPairing::Never}) {
                    ferry::testing::GroupPairingGuard pg(p);
                    check_matmul(
                        m, x, nt, pool,
                        std::string(kernels::cpu::cpu_level_name(level)) + " " +
                            std::string(dtype_name(type)) + " tokens " + std::to_string(nt) +
                            (p == kernels::cpu::GroupPairing::Always ? " paired" : " single"));
                }
            }
        }
    }
}

TEST(Kernels, MatmulZeroAndExtremeScales) {
    LevelGuard guard;
    std::mt19937 rng(3);
    ThreadPool pool(2);
    for (const auto& [level, act] : levels_and_modes()) {
        kernels::cpu::set_cpu_level(level);
        ActivationsGuard ag(act);
        for (DType type : kPackedTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 64;
            for (Scales sc : {Scales::Zero, Scales::Huge, Scales::Tiny}) {
                const Matrix m = random_matrix(type, 9, cols, rng, sc);
                const auto x = random_floats(3 * cols, rng);
                check_matmul(m, x, 3, pool,
                             std::string(kernels::cpu::cpu_level_name(level)) + " " +
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
    for (const auto& [level, act] : levels_and_modes()) {
        kernels::cpu::set_cpu_level(level);
        ActivationsGuard ag(act);
        for (DType type : kAllTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 64;
            const Matrix m = random_matrix(type, 5, cols, rng);
            std::vector<float> x(2 * cols, 0.0f);
            std::vector<float> y(2 * 5, 1.0f);
            kernels::cpu::matmul(m.w, x.data(), 2, y.data(), pool);
            for (float v : y) EXPECT_EQ(v, 0.0f) << dtype_name(type);
            // A NaN or Inf activation poisons every output that reads it, as in the reference.
            x[cols / 2] = std::numeric_limits<float>::quiet_NaN();
            x[cols + 7] = std::numeric_limits<float>::infinity();
            kernels::cpu::matmul(m.w, x.data(), 2, y.data(), pool);
            for (int64_t r = 0; r < 5; ++r) {
                EXPECT_TRUE(std::isnan(y[r]))
                    << dtype_name(type) << " " << kernels::cpu::cpu_level_name(level);
                const float want =
                    kernels::cpu::ref::vec_dot(m.w.type, m.w.row(r), x.data() + cols, cols);
                if (!std::isfinite(want)) {
                    EXPECT_FALSE(std::isfinite(y[5 + r]))
                        << dtype_name(type) << " " << kernels::cpu::cpu_level_name(level);
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
    for (Activations act : kAllActivations) {
        ActivationsGuard ag(act);
        for (int64_t nt : {1, 6}) {
            const auto x = random_floats(nt * 128, rng);
            std::vector<float> ya(nt * 21), yb(nt * 7), yc(nt * 13), za(ya), zb(yb), zc(yc);
            kernels::cpu::matmul(a.w, x.data(), nt, ya.data(), pool);
            kernels::cpu::matmul(b.w, x.data(), nt, yb.data(), pool);
            kernels::cpu::matmul(c.w, x.data(), nt, yc.data(), pool);
            const kernels::cpu::MatmulTarget outs[] = {
                {a.w, za.data()}, {b.w, zb.data()}, {c.w, zc.data()}};
            kernels::cpu::matmul_many(outs, x.data(), nt, pool, act);
            EXPECT_EQ(ya, za);
            EXPECT_EQ(yb, zb);
            EXPECT_EQ(yc, zc);
        }
    }
}

TEST(Kernels, ElementwiseOpsMatchReference) {
    LevelGuard guard;
    std::mt19937 rng(6);
    for (CpuLevel level : simd_levels()) {
        kernels::cpu::set_cpu_level(level);
        for (int64_t n : {1, 7, 16, 33, 576, 1537}) {
            const auto x = random_floats(n, rng, 4.0f);
            const auto wt = random_floats(n, rng);
            std::vector<float> a(n), b(n);
            kernels::cpu::rmsnorm(x.data(), wt.data(), a.data(), n, 1e-5f);
            kernels::cpu::ref::rmsnorm(x.data(), wt.data(), b.data(), n, 1e-5f);
            for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i])));

            auto g = random_floats(n, rng, 12.0f);
            g[0] = 95.0f;  // beyond the exp clamp: silu(x) == x
            if (n > 1) g[1] = -1e4f;
            const auto up = random_floats(n, rng);
            a = g, b = g;
            kernels::cpu::silu_mul(a.data(), up.data(), n);
            kernels::cpu::ref::silu_mul(b.data(), up.data(), n);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i]))) << i;

            a = g, b = g;
            kernels::cpu::gelu_mul(a.data(), up.data(), n);
            kernels::cpu::ref::gelu_mul(b.data(), up.data(), n);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i]))) << "gelu " << i;

            auto s = random_floats(n, rng, 30.0f);
            if (n > 2) s[2] = -std::numeric_limits<float>::infinity();  // a masked score
            a = s, b = s;
            kernels::cpu::softmax(a.data(), n);
            kernels::cpu::ref::softmax(b.data(), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-5f * b[i]) << i;
        }
        // NaN stays NaN.
        std::vector<float> g = {std::nanf(""), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        std::vector<float> up(16, 1.0f);
        kernels::cpu::silu_mul(g.data(), up.data(), 16);
        EXPECT_TRUE(std::isnan(g[0]));
    }
}

// RoPE on every level equals the reference bit for bit (both pair layouts, partial rotary
// dims, vector tails), and the reference is a rotation: norms of each pair are kept and
// position 0 changes nothing.
TEST(Kernels, RopeMatchesReferenceBitForBit) {
    LevelGuard guard;
    std::mt19937 rng(12);
    struct Shape {
        int n_heads, head_dim, rope_dim;
    };
    const Shape shapes[] = {{9, 64, 64}, {3, 64, 64}, {2, 64, 32}, {1, 128, 128},
                            {4, 80, 80}, {2, 24, 24}, {1, 6, 6},   {3, 10, 4}};
    for (const Shape& sh : shapes)
        for (auto style : {kernels::RopeStyle::Normal, kernels::RopeStyle::Neox})
            for (int64_t pos : {0L, 1L, 77L, 4095L, 100000L}) {
                std::vector<float> cs(sh.rope_dim);
                std::vector<double> inv(size_t(sh.rope_dim / 2));
                for (size_t i = 0; i < inv.size(); ++i)
                    inv[i] = std::pow(10000.0, -2.0 * double(i) / sh.rope_dim);
                kernels::cpu::rope_angles(pos, inv, 1.0f, cs.data());
                const auto x = random_floats(int64_t(sh.n_heads) * sh.head_dim, rng, 30.0f);
                auto want = x;
                kernels::cpu::ref::rope(want.data(), sh.n_heads, sh.head_dim, sh.rope_dim,
                                        cs.data(), style);
                if (pos == 0) {
                    EXPECT_EQ(want, x);
                }
                const int half = sh.rope_dim / 2;
                for (int h = 0; h < sh.n_heads; ++h)
                    for (int i = 0; i < half; ++i) {
                        const int a = style == kernels::RopeStyle::Normal ? 2 * i : i;
                        const int b = style == kernels::RopeStyle::Normal ? 2 * i + 1 : i + half;
                        const float* o = &x[size_t(h) * sh.head_dim];
                        const float* r = &want[size_t(h) * sh.head_dim];
                        const double n0 = double(o[a]) * o[a] + double(o[b]) * o[b];
                        const double n1 = double(r[a]) * r[a] + double(r[b]) * r[b];
                        ASSERT_NEAR(n1, n0, 1e-5 * (1 + n0));
                    }
                for (int h = 0; h < sh.n_heads; ++h)  // dims past rope_dim are left alone
                    for (int d = sh.rope_dim; d < sh.head_dim; ++d)
                        ASSERT_EQ(want[size_t(h) * sh.head_dim + d],
                                  x[size_t(h) * sh.head_dim + d]);
                for (CpuLevel level : simd_levels()) {
                    kernels::cpu::set_cpu_level(level);
                    auto got = x;
                    kernels::cpu::rope(got.data(), sh.n_heads, sh.head_dim, sh.rope_dim, cs.data(),
                                       style);
                    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                        << "level " << int(level) << " head_dim " << sh.head_dim << " rope_dim "
                        << sh.rope_dim << " style " << int(style) << " pos " << pos;
                }
            }
}

// The sampler's masses: every level's double sum of the values at or above a floor is the
// element-order sum's to a double's rounding, never counts NaN, and takes the tail past the
// last whole vector.
TEST(Kernels, SumDoubleCountsWhatReachesTheFloor) {
    LevelGuard guard;
    std::mt19937 rng(15);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (CpuLevel level : simd_levels(true)) {
        kernels::cpu::set_cpu_level(level);
        for (int64_t n : {0, 1, 7, 16, 31, 32, 33, 100, 49152}) {
            auto x = random_floats(n, rng, 1.0f);
            for (auto& v : x) v = v * v * 1e-3f;  // probabilities, some tiny
            // NaN in a vector and in the tail; a value exactly at a floor (it counts), values
            // below zero; the last element a plain one.
            if (n > 3) x[n / 2] = nan, x[n - 2] = nan;
            if (n > 5) x[1] = 2.5e-4f, x[2] = -3e-4f, x[3] = -1.0f;
            for (float floor : {-std::numeric_limits<float>::infinity(), 0.0f, 2.5e-4f, 1.0f}) {
                double want = 0, mag = 0;
                for (float v : x)
                    if (v >= floor) want += v, mag += std::fabs(v);
                const double got = kernels::cpu::sum_double(x.data(), n, floor);
                ASSERT_NEAR(got, want, 1e-14 * mag + 1e-300)
                    << kernels::cpu::cpu_level_name(level) << " n " << n << " floor " << floor;
                ASSERT_FALSE(std::isnan(got));
            }
        }
    }
}

// Greedy decoding's pick: the first index of the largest value, NaN never chosen, on every
// level and every tail length; the reference is checked against the definition itself.
TEST(Kernels, ArgmaxIsTheFirstLargestIgnoringNaN) {
    LevelGuard guard;
    std::mt19937 rng(11);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    auto first_largest = [](const std::vector<float>& x) {
        int64_t best = 0;
        bool found = false;
        for (size_t i = 0; i < x.size(); ++i)
            if (!std::isnan(x[i]) && (!found || x[i] > x[best])) best = int64_t(i), found = true;
        return best;
    };
    std::vector<std::vector<float>> cases;
    for (int64_t n : {1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 100, 49152}) {
        auto x = random_floats(n, rng, 10.0f);
        cases.push_back(x);
        // Ties: the maximum copied later (and earlier) must give its first position.
        const int64_t at = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
        x[at] = 50.0f;
        x[n - 1] = 50.0f;
        cases.push_back(x);
        // NaN at the front, in the maximum's place and in the tail.
        auto y = x;
        y[0] = nan;
        y[at] = nan;
        y[n - 1] = nan;
        cases.push_back(y);
        cases.push_back(std::vector<float>(n, nan));
        cases.push_back(std::vector<float>(n, -inf));
        auto z = std::vector<float>(n, -1.0f);
        z[n / 2] = -0.0f;
        z[n - 1] = 0.0f;  // -0 == +0: the first of them
        cases.push_back(z);
        auto w = random_floats(n, rng);
        w[n - 1] = inf;
        cases.push_back(w);
    }
    for (const auto& x : cases) {
        const int64_t want = first_largest(x);
        EXPECT_EQ(kernels::cpu::ref::argmax(x.data(), int64_t(x.size())), want) << x.size();
        for (CpuLevel level : simd_levels()) {
            kernels::cpu::set_cpu_level(level);
            EXPECT_EQ(kernels::cpu::argmax(x.data(), int64_t(x.size())), want)
                << "level " << int(level) << " n " << x.size();
        }
    }
    EXPECT_EQ(kernels::cpu::argmax(nullptr, 0), 0);
}

TEST(Kernels, AttendMatchesReference) {
    LevelGuard guard;
    std::mt19937 rng(7);
    for (CpuLevel level : simd_levels()) {
        kernels::cpu::set_cpu_level(level);
        for (int hd : {32, 48, 64, 128}) {
            for (int64_t n_kv : {1, 15, 16, 17, 100}) {
                const size_t stride = static_cast<size_t>(hd) * 3 + 8;  // kv heads interleaved
                const auto q = random_floats(hd, rng, 2.0f);
                const auto k = random_floats(n_kv * stride, rng, 2.0f);
                const auto v = random_floats(n_kv * stride, rng);
                std::vector<float> a(hd), b(hd);
                const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
                kernels::cpu::attend(q.data(), k.data(), v.data(), stride, n_kv, hd, scale,
                                     a.data());
                kernels::cpu::ref::attend(q.data(), k.data(), v.data(), stride, n_kv, hd, scale,
                                          b.data());
                for (int d = 0; d < hd; ++d) ASSERT_NEAR(a[d], b[d], 1e-5f) << hd << " " << n_kv;
            }
        }
    }
}

// The levels' tables, for the ops the public interface only reaches through matmul.
std::vector<std::pair<CpuLevel, const kernels::cpu::LevelKernels*>> level_tables() {
    std::vector<std::pair<CpuLevel, const kernels::cpu::LevelKernels*>> out;
    for (CpuLevel level : simd_levels()) {
        const kernels::cpu::LevelKernels* t =
            level == CpuLevel::AMX      ? kernels::cpu::amx_kernels()
            : level == CpuLevel::AVX512 ? kernels::cpu::avx512_kernels()
            : level == CpuLevel::AVX2   ? kernels::cpu::avx2_kernels()
                                        : kernels::cpu::neon_kernels();
        if (t) out.emplace_back(level, t);
    }
    return out;
}

TEST(Kernels, QuantizeActivationsFollowsTheGrid) {
    std::mt19937 rng(8);
    auto x = random_floats(32 * 7, rng, 3.0f);
    x[5] = 0;
    x[40] = 2000.0f;                                                  // an outlier in block 1
    for (int j = 64; j < 96; ++j) x[j] = 0;                           // an all-zero block
    for (int j = 96; j < 128; ++j) x[j] = 1e-30f * (j % 2 ? 1 : -1);  // tiny values
    x[130] = std::numeric_limits<float>::quiet_NaN();                 // block 4 poisoned
    x[170] = -std::numeric_limits<float>::infinity();                 // block 5 too
    for (int j = 192; j < 224; ++j) x[j] = 1e-36f * (j % 3);  // a step whose inverse overflows
    for (Activations act : {Activations::Int16, Activations::Int8}) {
        const bool wide = act == Activations::Int16;
        const float vmax = wide ? kernels::cpu::kActMax16 : kernels::cpu::kActMax8;
        std::vector<kernels::cpu::ActBlock> q(7);
        kernels::cpu::ref::quantize_act(x.data(), q.data(), 32 * 7, act);
        for (int b = 0; b < 4; ++b) {
            float amax = 0;
            for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
            EXPECT_EQ(q[b].d, amax / vmax) << b;
            int32_t sum = 0;
            for (int j = 0; j < 32; ++j) {
                const int v = wide ? 128 * q[b].hi[j] + q[b].lo[j] : q[b].hi[j];
                EXPECT_GE(q[b].hi[j], -127);
                EXPECT_LE(q[b].hi[j], 127);
                EXPECT_GE(q[b].lo[j], wide ? -64 : 0);
                EXPECT_LE(q[b].lo[j], wide ? 63 : 0);
                EXPECT_LE(std::abs(v), wide ? kernels::cpu::kActMax16 : kernels::cpu::kActMax8);
                EXPECT_LE(std::fabs(v * q[b].d - x[32 * b + j]), q[b].d * 0.5001f + 1e-37f)
                    << b << " " << j;
                sum += v;
            }
            EXPECT_EQ(q[b].s, sum);
            EXPECT_EQ(q[b].sx, q[b].d * static_cast<float>(sum));
        }
        EXPECT_EQ(q[2].d, 0.0f);
        EXPECT_TRUE(std::isnan(q[4].d));
        EXPECT_TRUE(std::isnan(q[5].d));
        EXPECT_EQ(q[4].s, 0);
        if (wide) {  // 2e-36 / 16256 is denormal: the block rounds to zero, not to garbage
            for (int j = 0; j < 32; ++j) EXPECT_EQ(q[6].hi[j], 0);
        }

        // Every level's quantizer writes the reference's bytes.
        for (auto [level, table] : level_tables()) {
            std::vector<kernels::cpu::ActBlock> got(7);
            table->quantize_act(x.data(), got.data(), 32 * 7, act);
            for (int b = 0; b < 7; ++b) {
                EXPECT_EQ(0, std::memcmp(got[b].hi, q[b].hi, 64))
                    << kernels::cpu::cpu_level_name(level) << " " << b;
                EXPECT_TRUE(same_float(got[b].d, q[b].d))
                    << kernels::cpu::cpu_level_name(level) << " " << b;
                EXPECT_TRUE(same_float(got[b].sx, q[b].sx))
                    << kernels::cpu::cpu_level_name(level) << " " << b;
                EXPECT_EQ(got[b].s, q[b].s) << kernels::cpu::cpu_level_name(level) << " " << b;
            }
        }
    }
}

// The integer product is the float product up to the activations' rounding: each value moves
// by at most half a step (amax / 2 kActMax), so |error| <= sum |w| * step / 2. A reference
// that was self-consistent but wrong (a nibble order, a sign, a missing offset) fails here.
TEST(Kernels, IntegerProductIsWithinTheActivationGrid) {
    std::mt19937 rng(10);
    ThreadPool pool(2);
    for (Activations act : {Activations::Int16, Activations::Int8}) {
        ActivationsGuard ag(act);
        const double vmax =
            act == Activations::Int16 ? kernels::cpu::kActMax16 : kernels::cpu::kActMax8;
        for (DType type : kPackedTypes) {
            const int64_t cols = dtype_info(type).block_size == 256 ? 768 : 576;
            const Matrix m = random_matrix(type, 33, cols, rng);
            auto x = random_floats(3 * cols, rng);
            for (size_t i = 0; i < x.size(); i += 97) x[i] *= 300.0f;  // outliers
            std::vector<float> y(3 * 33);
            kernels::cpu::matmul(m.w, x.data(), 3, y.data(), pool);
            std::vector<float> deq(cols);
            for (int64_t r = 0; r < 33; ++r) {
                ASSERT_TRUE(quant::dequantize_row(type, m.w.row(r), deq.data(), cols));
                for (int64_t t = 0; t < 3; ++t) {
                    const float* xt = x.data() + t * cols;
                    double bound = 0, mag = 0;
                    for (int64_t b = 0; b < cols; b += 32) {
                        double amax = 0;
                        for (int j = 0; j < 32; ++j)
                            amax = std::max<double>(amax, std::fabs(xt[b + j]));
                        for (int j = 0; j < 32; ++j) {
                            bound += std::fabs(deq[b + j]) * amax / (2 * vmax);
                            mag += std::fabs(deq[b + j] * xt[b + j]);
                        }
                    }
                    const float want = kernels::cpu::ref::vec_dot(type, m.w.row(r), xt, cols);
                    EXPECT_NEAR(y[t * 33 + r], want, bound * 1.01 + 1e-5 * mag)
                        << dtype_name(type) << " " << kernels::activations_name(act);
                }
            }
        }
    }
}

// The packed layout is the one kernels/cpu/packed_weights.h documents, byte for byte, including
// the zero rows that pad the last group.
TEST(Kernels, PackedLayoutIsAsDocumented) {
    std::mt19937 rng(11);
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
        const Matrix m = random_matrix(type, 19, 96, rng);
        const size_t tile = kernels::cpu::packed_tile_bytes(type);
        ASSERT_EQ(tile, 16 * dtype_info(type).block_bytes);
        ASSERT_EQ(m.packed.size(), 2 * 3 * tile);
        const int chunks = type == DType::Q8_0 ? 8 : 4;
        for (int64_t r = 0; r < 32; ++r) {
            for (int64_t b = 0; b < 3; ++b) {
                const uint8_t* t = m.packed.data() + ((r / 16) * 3 + b) * tile;
                const int i = static_cast<int>(r % 16);
                const uint8_t* blk =
                    r < 19 ? m.w.row(r) + b * dtype_info(type).block_bytes : nullptr;
                const int qs_off = type == DType::Q4_1 ? 4 : 2;
                for (int c = 0; c < chunks; ++c)
                    for (int k = 0; k < 4; ++k) {
                        uint8_t want = blk ? blk[qs_off + 4 * c + k] : 0;
                        if (blk && type == DType::Q8_0) want ^= 0x80;
                        ASSERT_EQ(t[64 * c + 4 * i + k], want) << dtype_name(type) << " r" << r;
                    }
                const uint8_t* sc = t + 64 * chunks;
                ASSERT_EQ(sc[2 * i], blk ? blk[0] : 0);
                ASSERT_EQ(sc[2 * i + 1], blk ? blk[1] : 0);
                if (type == DType::Q4_1) {
                    ASSERT_EQ(sc[32 + 2 * i], blk ? blk[2] : 0);
                    ASSERT_EQ(sc[33 + 2 * i], blk ? blk[3] : 0);
                }
            }
        }
    }
}

// The k-quants' packed tiles hold each element's integer where the header says, and the
// scales beside them: read back from the tile, they are q4_k_ints' / q6_k_ints' values.
TEST(Kernels, PackedKQuantLayoutIsAsDocumented) {
    std::mt19937 rng(13);
    for (DType type : {DType::Q4_K, DType::Q6_K}) {
        const Matrix m = random_matrix(type, 17, 512, rng);
        const size_t tile = kernels::cpu::packed_tile_bytes(type);
        ASSERT_EQ(m.packed.size(), 2 * 2 * tile);
        for (int64_t r = 0; r < 17; ++r)
            for (int64_t sb = 0; sb < 2; ++sb) {
                const uint8_t* t = m.packed.data() + ((r / 16) * 2 + sb) * tile;
                const int i = static_cast<int>(r % 16);
                const uint8_t* src = m.w.row(r) + sb * dtype_info(type).block_bytes;
                uint8_t q[256], sc[8], mn[8];
                uint16_t d, dmin = 0;
                if (type == DType::Q4_K) {
                    quant::BlockQ4_K b;
                    std::memcpy(&b, src, sizeof(b));
                    quant::q4_k_ints(b, q, sc, mn);
                    d = b.d, dmin = b.dmin;
                } else {
                    quant::BlockQ6_K b;
                    std::memcpy(&b, src, sizeof(b));
                    quant::q6_k_ints(b, q);
                    d = b.d;
                    for (int s = 0; s < 16; ++s)
                        ASSERT_EQ(static_cast<int8_t>(t[3072 + 16 * s + i]), b.scales[s]);
                }
                for (int e = 0; e < 256; ++e) {
                    const int blk = e / 32, w = e % 32, c = (w % 16) / 4, k = w % 4, nib = w / 16;
                    const int bb = type == DType::Q4_K ? 256 : 384;
                    const uint8_t byte = t[bb * blk + 64 * c + 4 * i + k];
                    int got = nib ? byte >> 4 : byte & 0xF;
                    if (type == DType::Q6_K) {
                        const int v = 2 * c + nib;
                        got |= ((t[bb * blk + 256 + 64 * (v / 4) + 4 * i + k] >> (2 * (v % 4))) & 3)
                               << 4;
                    }
                    ASSERT_EQ(got, q[e]) << dtype_name(type) << " row " << r << " element " << e;
                }
                const size_t so = type == DType::Q4_K ? 2048 : 3072 + 256;
                uint16_t td;
                std::memcpy(&td, t + so + 2 * i, 2);
                ASSERT_EQ(td, d);
                if (type == DType::Q4_K) {
                    std::memcpy(&td, t + so + 32 + 2 * i, 2);
                    ASSERT_EQ(td, dmin);
                    for (int s = 0; s < 8; ++s) {
                        ASSERT_EQ(t[2048 + 64 + 16 * s + i], sc[s]);
                        ASSERT_EQ(t[2048 + 64 + 128 + 16 * s + i], mn[s]);
                    }
                }
            }
    }
}

// The Q5 tiles: each element's five bits read back from the nibble chunks and the fifth-bit
// chunk where the header says are the file's (q5_ints, q5_k_ints), and the scales beside them.
TEST(Kernels, PackedQ5LayoutIsAsDocumented) {
    std::mt19937 rng(14);
    for (DType type : {DType::Q5_0, DType::Q5_1, DType::Q5_K}) {
        const bool k = type == DType::Q5_K;
        const int64_t cols = k ? 512 : 96;
        const int64_t tiles = cols / kernels::cpu::packed_tile_cols(type);
        const Matrix m = random_matrix(type, 17, cols, rng);
        const size_t tile = kernels::cpu::packed_tile_bytes(type);
        ASSERT_EQ(tile, k ? 2880u : 16 * dtype_info(type).block_bytes);
        ASSERT_EQ(m.packed.size(), 2 * tiles * tile);
        for (int64_t r = 0; r < 32; ++r)
            for (int64_t ti = 0; ti < tiles; ++ti) {
                const uint8_t* t = m.packed.data() + ((r / 16) * tiles + ti) * tile;
                const int i = static_cast<int>(r % 16);
                const uint8_t* src = r < 17 ? m.w.row(r) + ti * dtype_info(type).block_bytes
                                            : nullptr;  // a padding row: zeros
                uint8_t q[256] = {}, sc[8] = {}, mn[8] = {};
                uint16_t d = 0, dmin = 0;
                if (src && k) {
                    quant::BlockQ5_K b;
                    std::memcpy(&b, src, sizeof(b));
                    quant::q5_k_ints(b, q, sc, mn);
                    d = b.d, dmin = b.dmin;
                } else if (src) {
                    quant::q5_ints(type, src, q);
                    std::memcpy(&d, src, 2);
                    if (type == DType::Q5_1) std::memcpy(&dmin, src + 2, 2);
                }
                for (int e = 0; e < (k ? 256 : 32); ++e) {
                    const int blk = e / 32, w = e % 32, c = (w % 16) / 4, kk = w % 4, nib = w / 16;
                    const uint8_t* bt = t + 320 * blk;
                    const uint8_t byte = bt[64 * c + 4 * i + kk];
                    const int v = 2 * c + nib;  // the weight vector of element w
                    const int got =
                        (nib ? byte >> 4 : byte & 0xF) | ((bt[256 + 4 * i + kk] >> v) & 1) << 4;
                    ASSERT_EQ(got, q[e]) << dtype_name(type) << " row " << r << " element " << e;
                }
                const size_t so = k ? 8 * 320 : 320;
                uint16_t td;
                std::memcpy(&td, t + so + 2 * i, 2);
                ASSERT_EQ(td, d) << dtype_name(type);
                if (type != DType::Q5_0) {
                    std::memcpy(&td, t + so + 32 + 2 * i, 2);
                    ASSERT_EQ(td, dmin) << dtype_name(type);
                }
                if (k)
                    for (int s2 = 0; s2 < 8; ++s2) {
                        ASSERT_EQ(t[so + 64 + 16 * s2 + i], sc[s2]);
                        ASSERT_EQ(t[so + 64 + 128 + 16 * s2 + i], mn[s2]);
                    }
            }
    }
}

// A Weight nobody packed takes the reference's integer product: the same numbers, only slower.
TEST(Kernels, UnpackedWeightGivesThePackedResult) {
    std::mt19937 rng(12);
    ThreadPool pool(2);
    ActivationsGuard ag(Activations::Int16);
    for (DType type : kPackedTypes) {
        const Matrix m = random_matrix(type, 21, 256, rng);
        kernels::cpu::Weight plain = m.w;
        plain.packed = nullptr;
        const auto x = random_floats(5 * 256, rng);
        std::vector<float> a(5 * 21), b(5 * 21);
        kernels::cpu::matmul(m.w, x.data(), 5, a.data(), pool);
        kernels::cpu::matmul(plain, x.data(), 5, b.data(), pool);
        EXPECT_EQ(a, b) << dtype_name(type);
    }
}

}  // namespace

namespace {
// AVX2 and AVX-512 compute the integer paths' exact sums and the same float steps in the same
// order: their results are identical. Float paths sum in different orders, so they agree to
// float rounding.
TEST(Kernels, SimdLevelsAgreeWithEachOther) {
    if (kernels::cpu::detected_cpu_level() < CpuLevel::AVX512) GTEST_SKIP() << "needs AVX-512";
    LevelGuard guard;
    std::mt19937 rng(9);
    ThreadPool pool(2);
    for (Activations act : kAllActivations) {
        for (DType type : kAllTypes) {
            ActivationsGuard ag(act);
            const int64_t cols = 1536;
            const Matrix m = random_matrix(type, 67, cols, rng);
            for (int64_t nt : {1, 5, 9}) {
                auto x = random_floats(nt * cols, rng);
                for (size_t i = 0; i < x.size(); i += 37) x[i] *= 100.0f;  // activation outliers
                std::vector<float> a(nt * 67), b(nt * 67);
                kernels::cpu::set_cpu_level(CpuLevel::AVX2);
                kernels::cpu::matmul(m.w, x.data(), nt, a.data(), pool);
                kernels::cpu::set_cpu_level(CpuLevel::AVX512);
                kernels::cpu::matmul(m.w, x.data(), nt, b.data(), pool);
                for (size_t i = 0; i < a.size(); ++i) {
                    if (integer_path(type))
                        ASSERT_EQ(a[i], b[i]) << dtype_name(type) << " " << i;
                    else
                        ASSERT_NEAR(a[i], b[i], 2e-4f * (1 + std::fabs(a[i])) + 1e-3f)
                            << dtype_name(type) << " " << i;
                }
            }
        }
    }
}

// The AMX level sums each block on the tile unit (16 tokens at a time, a rest of 12-15 as a
// padded tile) and must give the VNNI kernel's bits: long rows (int32 sums across many blocks),
// activation outliers and a NaN, token counts that leave the VNNI kernel a rest, rows that leave
// a partial group.
TEST(Kernels, AmxTilesEqualTheVnniKernelBitForBit) {
    if (kernels::cpu::detected_cpu_level() < CpuLevel::AMX)
        GTEST_SKIP() << "needs AMX-INT8 (and the OS's grant of the tile state)";
    LevelGuard guard;
    std::mt19937 rng(12);
    ThreadPool pool(2);
    for (Activations act : {Activations::Int16, Activations::Int8}) {
        ActivationsGuard ag(act);
        for (DType type : kPackedTypes) {
            for (int64_t cols : {int64_t{256}, int64_t{4096}}) {
                const Matrix m = random_matrix(type, 35, cols, rng);
                for (int64_t nt : {8, 12, 13, 16, 31, 48, 129}) {
                    auto x = random_floats(nt * cols, rng);
                    for (size_t i = 0; i < x.size(); i += 53) x[i] *= 3000.0f;
                    x[cols + 7] = std::numeric_limits<float>::quiet_NaN();  // token 1, block 0
                    std::vector<float> a(nt * m.w.rows), b(nt * m.w.rows);
                    kernels::cpu::set_cpu_level(CpuLevel::AVX512);
                    kernels::cpu::matmul(m.w, x.data(), nt, a.data(), pool);
                    kernels::cpu::set_cpu_level(CpuLevel::AMX);
                    kernels::cpu::matmul(m.w, x.data(), nt, b.data(), pool);
                    for (size_t i = 0; i < a.size(); ++i)
                        ASSERT_TRUE(same_float(a[i], b[i]))
                            << dtype_name(type) << " " << activations_name(act) << " cols " << cols
                            << " tokens " << nt << " at " << i << ": " << a[i] << " vs " << b[i];
                }
            }
        }
    }
}
}  // namespace
