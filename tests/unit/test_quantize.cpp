#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/dequantize.h"
#include "test_util.h"

namespace ferry::quant {
namespace {

const std::vector<DType> kAll = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                                 DType::Q6_K, DType::F16,  DType::BF16, DType::F32};

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
    auto q = quantize(t, x.data(), static_cast<int64_t>(x.size()));
    EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().message);
    std::vector<float> y(x.size());
    EXPECT_TRUE(dequantize_row(t, q->data(), y.data(), static_cast<int64_t>(x.size())).ok());
    return y;
}

// Per-block worst case of round to nearest on the format's grid (half a step, plus the fp16
// rounding of the stored scale), as a multiple of the block's largest magnitude. Q4_0 is the
// exception: the largest value maps to -8, so the other end only reaches +7 steps.
double legacy_bound(DType t) {
    switch (t) {
        case DType::Q8_0:
            return 0.5 / 127 * 1.01 + 1e-3;
        case DType::Q4_0:
            return 1.0 / 8 * 1.01 + 1e-3;
        case DType::Q4_1:
            return 1.0 / 15 * 1.01 + 2e-3;  // range <= 2 amax, half a step of range/15
        default:
            return 0;
    }
}

// RMS error relative to the RMS of the data, for Gaussian inputs (measured values about
// half of these).
double rms_bound(DType t) {
    switch (t) {
        case DType::Q8_0:
            return 0.01;
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q4_K:
            return 0.15;
        case DType::Q6_K:
            return 0.04;
        case DType::F16:
            return 1e-3;
        case DType::BF16:
            return 5e-3;
        default:
            return 0;
    }
}

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0, sigma);
    std::vector<float> x(n);
    for (auto& v : x) v = d(rng);
    return x;
}

std::vector<float> heavy_tailed(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::student_t_distribution<float> d(2.0f);
    std::vector<float> x(n);
    for (auto& v : x) v = 0.01f * d(rng);
    return x;
}

void check_bounds(DType t, const std::vector<float>& x, const std::string& what) {
    const auto y = round_trip(t, x);
    const size_t bs = static_cast<size_t>(dtype_info(t).block_size);
    double err2 = 0, x2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << what << " " << dtype_name(t) << " [" << i << "]";
        err2 += double(y[i] - x[i]) * (y[i] - x[i]);
        x2 += double(x[i]) * x[i];
    }
    if (legacy_bound(t) > 0) {
        for (size_t b = 0; b < x.size() / bs; ++b) {
            float amax = 0;
            for (size_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(x[b * bs + j]));
            for (size_t j = 0; j < bs; ++j) {
                const size_t i = b * bs + j;
                ASSERT_LE(std::fabs(y[i] - x[i]), legacy_bound(t) * amax + 1e-30)
                    << what << " " << dtype_name(t) << " [" << i << "] x=" << x[i];
            }
        }
    }
    if (t == DType::F32) {
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * 4));
    } else if (x2 > 0) {
        EXPECT_LE(std::sqrt(err2 / x2), rms_bound(t) * (what == "gaussian" ? 1.0 : 2.0))
            << what << " " << dtype_name(t);
    }
}

TEST(Quantize, RoundTripGaussianWithinBounds) {
    const auto x = gaussian(4096, 1, 0.02f);
    for (DType t : kAll) check_bounds(t, x, "gaussian");
}

TEST(Quantize, RoundTripHeavyTailedWithinBounds) {
    const auto x = heavy_tailed(4096, 2);
    for (DType t : kAll) check_bounds(t, x, "heavy");
}

TEST(Quantize, AllZeroGroupsStayZero) {
    std::vector<float> x = gaussian(1024, 3, 0.02f);
    std::fill(x.begin(), x.begin() + 256, 0.0f);        // a whole super-block
    std::fill(x.begin() + 512, x.begin() + 544, 0.0f);  // one 32-element group
    for (DType t : kAll) {
        const auto y = round_trip(t, x);
        for (size_t i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t) << " " << i;
        for (size_t i = 512; i < 544; ++i)
            if (dtype_info(t).block_size == 32 || dtype_info(t).block_size == 1)
                ASSERT_EQ(y[i], 0.0f) << dtype_name(t) << " " << i;
            else  // a k-quant shares the super-block's min: zeros come back near zero
                ASSERT_LE(std::fabs(y[i]), 0.01f) << dtype_name(t) << " " << i;
        std::vector<float> zeros(512, 0.0f);
        for (float v : round_trip(t, zeros)) ASSERT_EQ(v, 0.0f) << dtype_name(t);
    }
}

TEST(Quantize, SingleOutlierIsKeptAndOthersDoNotBlowUp) {
    for (DType t : kAll) {
        std::vector<float> x = gaussian(512, 4, 0.01f);
        x[37] = 25.0f;
        const auto y = round_trip(t, x);
        EXPECT_NEAR(y[37], 25.0f, 25.0f * 0.02f) << dtype_name(t);
        for (size_t i = 0; i < x.size(); ++i) {
            if (i == 37) continue;
            // The outlier's block may lose its small values to a coarse grid, but never gain
            // more than a grid step of error.
            const size_t bs = dtype_info(t).block_size == 256 ? 256 : 32;
            const bool same_block = i / bs == 37 / bs;
            ASSERT_LE(std::fabs(y[i] - x[i]), same_block ? 25.0f / 7 : 0.05f)
                << dtype_name(t) << " [" << i << "]";
        }
    }
}

TEST(Quantize, RejectsPartialBlocks) {
    std::vector<float> x(100, 1.0f);
    EXPECT_FALSE(quantize(DType::Q8_0, x.data(), 100).ok());
    EXPECT_FALSE(quantize(DType::Q4_K, x.data(), 96).ok());
    EXPECT_FALSE(quantize(DType::Q5_0, x.data(), 100).ok());  // not a whole block
    EXPECT_FALSE(quantize(DType::Q3_K, x.data(), 256).ok());  // read, never written
    EXPECT_TRUE(quantize(DType::F16, x.data(), 100).ok());
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Byte equality with gguf-py's quantizers and with ggml's own quantize_row_*_ref (the golden
// files come from scripts/gen-golden-quant.py), which is what makes llama.cpp read ferry's
// files the way it reads its own.
TEST(Quantize, MatchesGgufPyAndGgmlBytes) {
    const std::filesystem::path dir = ferry::testing::golden_dir() + "/quant";
    std::ifstream in(dir / "index.json");
    ASSERT_TRUE(in) << "missing " << dir / "index.json";
    const auto index = nlohmann::json::parse(in);
    int checked = 0;
    for (const auto& c : index["cases"]) {
        const auto raw = read_bytes(dir / c["input"].get<std::string>());
        std::vector<float> x(raw.size() / 4);
        std::memcpy(x.data(), raw.data(), raw.size());
        const auto want = read_bytes(dir / c["file"].get<std::string>());
        const auto type = dtype_from_name(c["type"].get<std::string>());
        ASSERT_TRUE(type);
        auto got = quantize(*type, x.data(), static_cast<int64_t>(x.size()));
        ASSERT_TRUE(got.ok());
        ASSERT_EQ(got->size(), want.size()) << c["file"];
        size_t first_diff = want.size();
        for (size_t i = 0; i < want.size(); ++i)
            if (want[i] != (*got)[i]) {
                first_diff = i;
                break;
            }
        EXPECT_EQ(first_diff, want.size()) << c["file"] << ": first differing byte";
        ++checked;
    }
    EXPECT_GE(checked, 15);
}

}  // namespace
}  // namespace ferry::quant
