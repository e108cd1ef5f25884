// End to end under every CPU level: the last position's logits for a few prompts stay within a
// stated tolerance of the scalar level, and greedy continuations agree. The SIMD levels quantize
// activations to 8 bits for Q4/Q8 weights (as llama.cpp does) where the scalar level does not,
// which is what the tolerance covers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "kernel_levels.h"
#include "kernels/cpu/simd.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace {
using namespace ferry;
using kernels::CpuLevel;

// With float activations (FERRY_ACT_QUANT=0 path) every level matches scalar to ~2e-5. With
// 8-bit activations (the default, as llama.cpp) measured on SmolLM2-135M Q4_1: max |dlogit|
// 0.4-1.1, rms 0.1-0.5 against logits spanning about ±20 — rounding flips at the quantization
// grid compound over 30 layers, and AVX2 and AVX-512 (different float summation order) land on
// different flips, so they differ from each other by as much. A broken kernel moves logits by
// several units and scrambles the argmax.
constexpr float kMaxAbsDiffFloat = 1e-3f, kMaxRmsDiffFloat = 1e-4f;
constexpr float kMaxAbsDiffQ8 = 1.5f, kMaxRmsDiffQ8 = 0.6f;
// Greedy continuations agree in full with float activations; with 8-bit ones the first tokens
// must agree (a near-tie later may legitimately flip, as it does between llama.cpp builds).
constexpr size_t kGreedyPrefixQ8 = 1;  // 8-bit activations: beyond the first pick, greedy texts may
                                       // part at near-ties (see docs/performance.md)

struct Outputs {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> greedy;
};

Outputs run_level(const engine::LoadedModel& m, CpuLevel level,
                  const std::vector<std::vector<int32_t>>& prompts) {
    kernels::set_cpu_level(level);
    Outputs out;
    for (const auto& p : prompts) {
        for (int threads : {1, 2}) {
            engine::Generator gen(*m.model, threads, 256);
            auto lg = gen.logits_for(p);
            EXPECT_TRUE(lg.ok());
            if (threads == 1) {
                out.logits.push_back(*lg);
            } else if (!out.logits.empty()) {
                // Thread count must not change results at a fixed level.
                EXPECT_EQ(*lg, out.logits.back()) << kernels::cpu_level_name(level);
            }
        }
        engine::Generator gen(*m.model, 2, 256);
        engine::SamplingParams sp;
        sp.temperature = 0;
        std::vector<int32_t> toks;
        auto st = gen.generate(
            p, sp, 16,
            [&](int32_t t) {
                toks.push_back(t);
                return true;
            },
            [](int32_t) { return false; });
        EXPECT_TRUE(st.ok());
        out.greedy.push_back(toks);
    }
    return out;
}

class DispatchLogits : public ::testing::TestWithParam<bool> {};

TEST_P(DispatchLogits, EveryLevelMatchesScalar) {
    const bool q8 = GetParam();
    const bool saved_q8 = kernels::activation_quantization_enabled();
    kernels::set_activation_quantization(q8);
    const float max_abs = q8 ? kMaxAbsDiffQ8 : kMaxAbsDiffFloat;
    const float max_rms = q8 ? kMaxRmsDiffQ8 : kMaxRmsDiffFloat;
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
    auto m = engine::LoadedModel::load(path, false);
    ASSERT_TRUE(m.ok());
    std::vector<std::vector<int32_t>> prompts;
    for (const char* text : {"The capital of France is", "def fibonacci(n):",
                             "Once upon a time, in a small village by the sea, there lived"})
        prompts.push_back(m->tokenizer->encode(text));

    const CpuLevel saved = kernels::cpu_level();
    const Outputs ref = run_level(*m, CpuLevel::Scalar, prompts);
    std::vector<Outputs> simd;
    for (CpuLevel level : ferry::testing::simd_levels()) {
        const Outputs got = run_level(*m, level, prompts);
        simd.push_back(got);
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto& a = ref.logits[i];
            const auto& b = got.logits[i];
            ASSERT_EQ(a.size(), b.size());
            double max_diff = 0, sq = 0;
            for (size_t j = 0; j < a.size(); ++j) {
                const double d = std::fabs(a[j] - b[j]);
                max_diff = std::max(max_diff, d);
                sq += d * d;
            }
            const double rms = std::sqrt(sq / a.size());
            EXPECT_LT(max_diff, max_abs) << kernels::cpu_level_name(level) << " prompt " << i;
            EXPECT_LT(rms, max_rms) << kernels::cpu_level_name(level) << " prompt " << i;
            EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(),
                      std::max_element(b.begin(), b.end()) - b.begin());
            const size_t agree =
                q8 ? std::min(kGreedyPrefixQ8, ref.greedy[i].size()) : ref.greedy[i].size();
            EXPECT_EQ(std::vector<int32_t>(ref.greedy[i].begin(), ref.greedy[i].begin() + agree),
                      std::vector<int32_t>(got.greedy[i].begin(), got.greedy[i].begin() + agree))
                << kernels::cpu_level_name(level) << " prompt " << i;
            std::printf("[ %s prompt %zu ] max |dlogit| %.4f rms %.4f\n",
                        kernels::cpu_level_name(level), i, max_diff, rms);
        }
    }
    // The two SIMD levels against each other: the same bound as against scalar.
    if (simd.size() == 2) {
        for (size_t i = 0; i < prompts.size(); ++i) {
            double max_diff = 0;
            for (size_t j = 0; j < simd[0].logits[i].size(); ++j)
                max_diff = std::max<double>(max_diff,
                                            std::fabs(simd[0].logits[i][j] - simd[1].logits[i][j]));
            std::printf("[ avx2 vs avx512 prompt %zu ] max |dlogit| %.5f\n", i, max_diff);
            EXPECT_LT(max_diff, q8 ? kMaxAbsDiffQ8 : kMaxAbsDiffFloat) << "prompt " << i;
        }
    }
    kernels::set_cpu_level(saved);
    kernels::set_activation_quantization(saved_q8);
}

INSTANTIATE_TEST_SUITE_P(Activations, DispatchLogits, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Q8" : "Float"; });

}  // namespace
