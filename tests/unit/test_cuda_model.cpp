// The whole model on the CUDA backend. The GPU computes in float32 over the file's exactly
// dequantized weights, as the CPU's Activations::F32 path does, so it is held to that path's
// bounds: against the exact float64 reference's golden logits and greedy texts (tests/golden/,
// as test_golden_model.cpp reads them) max 0.01 and the same tokens; against the CPU's float
// path on any model (FERRY_CUDA_TEST_MODEL, e.g. a `ferry synth` model carried to a GPU
// machine that lacks the default one) the same logits within float rounding and the same
// greedy text. Skipped where no GPU is (or the build has no CUDA backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "kernels/backend.h"
#include "test_util.h"

namespace {

using namespace ferry;

// The GPU's backend, or null with the reason; FERRY_REQUIRE_CUDA (the GPU machine's check)
// turns a missing GPU into a failure instead of a skip.
std::shared_ptr<kernels::Backend> gpu_or_skip(std::string* why) {
    auto b = kernels::make_backend({.device = Device::CUDA, .threads = 2, .activations = {}});
    if (!b.ok()) {
        *why = b.error().message;
        if (std::getenv("FERRY_REQUIRE_CUDA")) ADD_FAILURE() << "FERRY_REQUIRE_CUDA: " << *why;
        return nullptr;
    }
    return *b;
}

nlohmann::json golden_json(const std::string& rel) {
    std::ifstream in(ferry::testing::golden_dir() + "/" + rel);
    if (!in) throw std::runtime_error("golden file missing: " + rel);
    return nlohmann::json::parse(in);
}

TEST(CudaModel, LogitsAndGreedyTextsAreTheExactReferences) {
    std::string why;
    const auto be = gpu_or_skip(&why);
    if (!be) GTEST_SKIP() << why;
    if (!std::ifstream(ferry::testing::default_model_path()))
        GTEST_SKIP() << "the default model is not on this machine";
    auto lm = engine::LoadedModel::load(ferry::testing::default_model_path(), false, be);
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    engine::Generator gen(*lm->model, be, 1024);

    const auto index = golden_json("logits/index.json");
    const size_t n_vocab = index["n_vocab"];
    for (const auto& p : index["prompts"]) {
        const std::string name = p["name"];
        auto logits = gen.logits_for(p["ids"].get<std::vector<int32_t>>());
        ASSERT_TRUE(logits.ok()) << logits.error().message;
        std::ifstream in(
            ferry::testing::golden_dir() + "/logits/" + p["numpy_file"].get<std::string>(),
            std::ios::binary);
        std::vector<float> exact(n_vocab);
        in.read(reinterpret_cast<char*>(exact.data()),
                static_cast<std::streamsize>(n_vocab * sizeof(float)));
        ASSERT_TRUE(in) << name;
        float max_abs = 0;
        for (size_t i = 0; i < n_vocab; ++i)
            max_abs = std::max(max_abs, std::fabs((*logits)[i] - exact[i]));
        EXPECT_LE(max_abs, 0.01f) << name;
        std::printf("[ cuda logits ] %-16s max |diff| vs exact %.5f\n", name.c_str(), max_abs);
    }

    const auto golden = golden_json("greedy.json");
    engine::SamplingParams greedy;
    greedy.temperature = 0;
    for (const auto& c : golden["cases"]) {
        if (!c.contains("numpy_ids")) continue;
        const auto want = c["numpy_ids"].get<std::vector<int32_t>>();
        std::vector<int32_t> got;
        gen.reset();
        ASSERT_TRUE(gen.generate(
                           c["prompt_ids"].get<std::vector<int32_t>>(), greedy,
                           static_cast<int>(want.size()),
                           [&](int32_t t) {
                               got.push_back(t);
                               return true;
                           },
                           [&](int32_t t) {
                               if (lm->tokenizer->is_eog(t)) got.push_back(t);
                               return lm->tokenizer->is_eog(t);
                           })
                        .ok());
        EXPECT_EQ(got, want) << c["name"].get<std::string>();
    }
}

TEST(CudaModel, LogitsAndGreedyTextEqualTheCpuFloatPath) {
    std::string why;
    const auto gpu = gpu_or_skip(&why);
    if (!gpu) GTEST_SKIP() << why;
    const char* env = std::getenv("FERRY_CUDA_TEST_MODEL");
    const std::string path = env && *env ? env : ferry::testing::default_model_path();
    if (!std::ifstream(path)) GTEST_SKIP() << path << " is not on this machine";
    auto cpu = kernels::make_backend(
        {.device = Device::CPU, .threads = 2, .activations = kernels::Activations::F32});
    ASSERT_TRUE(cpu.ok());
    auto on_gpu = engine::LoadedModel::load(path, false, gpu);
    auto on_cpu = engine::LoadedModel::load(path, false, *cpu);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.error().message;
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.error().message;
    engine::Generator g(*on_gpu->model, gpu, 512), c(*on_cpu->model, *cpu, 512);
    // A prompt of plain ids (any vocabulary has them), long enough for several KV blocks.
    std::vector<int32_t> ids;
    const int n_vocab = on_cpu->model->config().n_vocab;
    for (int i = 0; i < 70; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 13) % n_vocab));
    auto lg = g.logits_for(ids), lc = c.logits_for(ids);
    ASSERT_TRUE(lg.ok() && lc.ok());
    float max_abs = 0, scale = 0;
    for (size_t i = 0; i < lc->size(); ++i) {
        max_abs = std::max(max_abs, std::fabs((*lg)[i] - (*lc)[i]));
        scale = std::max(scale, std::fabs((*lc)[i]));
    }
    EXPECT_LE(max_abs, 1e-3f * (1 + scale));
    std::printf("[ cuda vs cpu f32 ] %s: max |diff| %.6f (largest logit %.2f)\n", path.c_str(),
                max_abs, scale);
    engine::SamplingParams greedy;
    greedy.temperature = 0;
    std::vector<int32_t> tg, tc;
    auto run = [&](engine::Generator& gen, std::vector<int32_t>& out) {
        gen.reset();
        return gen.generate(
            ids, greedy, 48,
            [&](int32_t t) {
                out.push_back(t);
                return true;
            },
            [](int32_t) { return false; });
    };
    ASSERT_TRUE(run(g, tg).ok());
    ASSERT_TRUE(run(c, tc).ok());
    EXPECT_EQ(tg, tc);
}

}  // namespace
