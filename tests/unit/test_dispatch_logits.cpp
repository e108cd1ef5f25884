// End to end under every CPU level: the last position's logits for a few prompts stay within a
// stated tolerance of the scalar level, and greedy continuations agree, under every activation
// mode. The integer matmuls give the same bits on every level; what differs between levels is
// the float rounding of the other ops (norms, softmax, attention, silu), which an integer grid
// can turn into a one-step difference in a rounded activation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "kernel_levels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"
#include "test_util.h"

namespace {
using namespace ferry;
using kernels::Activations;
using kernels::cpu::CpuLevel;

// Float activations: every level matches scalar to ~2e-5. 16-bit activations: a float-rounding
// difference flips an activation by one step of amax / 16256 now and then; measured on
// SmolLM2-135M Q4_1: max |dlogit| 0.008, rms 0.003. 8-bit activations: each flip is 128 times
// larger and they compound over 30 layers, max |dlogit| 0.4-1.1, rms 0.1-0.5 against logits
// spanning about ±20. A broken kernel moves logits by several units and scrambles the argmax.
struct Bound {
    float max_abs, rms;
    size_t greedy_prefix;  // greedy tokens that must agree (beyond, near-ties may part)
};
Bound bound(Activations a) {
    switch (a) {
        case Activations::F32:
            return {1e-3f, 1e-4f, 16};
        case Activations::Int16:
            return {0.05f, 0.01f, 16};
        default:
            return {1.5f, 0.6f, 1};
    }
}

struct Outputs {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> greedy;
};

Outputs run_level(const engine::LoadedModel& m, CpuLevel level,
                  const std::vector<std::vector<int32_t>>& prompts) {
    kernels::cpu::set_cpu_level(level);
    Outputs out;
    for (const auto& p : prompts) {
        for (int threads : {1, 2}) {
            engine::Generator gen(*m.model, ferry::testing::cpu_backend(threads), 256);
            auto lg = gen.logits_for(p);
            EXPECT_TRUE(lg.ok());
            if (threads == 1) {
                out.logits.push_back(*lg);
            } else if (!out.logits.empty()) {
                // Thread count must not change results at a fixed level.
                EXPECT_EQ(*lg, out.logits.back()) << kernels::cpu::cpu_level_name(level);
            }
        }
        engine::Generator gen(*m.model, ferry::testing::cpu_backend(2), 256);
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

class DispatchLogits : public ::testing::TestWithParam<Activations> {};

TEST_P(DispatchLogits, EveryLevelMatchesScalar) {
    const ferry::testing::ActivationsGuard act(GetParam());
    const Bound bnd = bound(GetParam());
    const float max_abs = bnd.max_abs, max_rms = bnd.rms;
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
    auto m = engine::LoadedModel::load(path, false);
    ASSERT_TRUE(m.ok());
    std::vector<std::vector<int32_t>> prompts;
    for (const char* text : {"The capital of France is", "def fibonacci(n):",
                             "Once upon a time, in a small village by the sea, there lived"})
        prompts.push_back(m->tokenizer->encode(text));

    const CpuLevel saved = kernels::cpu::cpu_level();
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
            EXPECT_LT(max_diff, max_abs) << kernels::cpu::cpu_level_name(level) << " prompt " << i;
            EXPECT_LT(rms, max_rms) << kernels::cpu::cpu_level_name(level) << " prompt " << i;
            EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(),
                      std::max_element(b.begin(), b.end()) - b.begin());
            const size_t agree = std::min(bnd.greedy_prefix, ref.greedy[i].size());
            EXPECT_EQ(std::vector<int32_t>(ref.greedy[i].begin(), ref.greedy[i].begin() + agree),
                      std::vector<int32_t>(got.greedy[i].begin(), got.greedy[i].begin() + agree))
                << kernels::cpu::cpu_level_name(level) << " prompt " << i;
            std::printf("[ %s prompt %zu ] max |dlogit| %.4f rms %.4f\n",
                        kernels::cpu::cpu_level_name(level), i, max_diff, rms);
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
            EXPECT_LT(max_diff, max_abs) << "prompt " << i;
        }
    }
    kernels::cpu::set_cpu_level(saved);
}

INSTANTIATE_TEST_SUITE_P(Activations, DispatchLogits,
                         ::testing::Values(Activations::F32, Activations::Int16, Activations::Int8),
                         [](const auto& info) {
                             return std::string(kernels::activations_name(info.param));
                         });

}  // namespace
