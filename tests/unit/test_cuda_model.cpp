// The whole model on the CUDA backend. The GPU computes in float32 over the file's exactly
// dequantized weights, as the CPU's Activations::F32 path does, so it is held to that path's
// bounds: against the exact float64 reference's golden logits and greedy texts (tests/golden/,
// as test_golden_model.cpp reads them) max 0.01 and the same tokens; against the CPU's float
// path on any model (FERRY_CUDA_TEST_MODEL, e.g. a `ferry synth` model carried to a GPU
// machine that lacks the default one) the same logits within float rounding and the same
// greedy text. Skipped where no GPU is (or the build has no CUDA backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "engine_test_util.h"
#include "kernels/backend.h"
#include "test_util.h"

namespace {

using namespace ferry;

// The GPU's backend, or null with the reason; FERRY_REQUIRE_CUDA (the GPU machine's check)
// turns a missing GPU into a failure instead of a skip.
std::shared_ptr<kernels::Backend> gpu_or_skip(std::string* why, bool graphs = true) {
    auto b = kernels::make_backend(
        {.device = Device::CUDA, .threads = 2, .activations = {}, .cuda_graphs = graphs});
    if (!b.ok()) {
        *why = b.error().message;
        if (std::getenv("FERRY_REQUIRE_CUDA")) ADD_FAILURE() << "FERRY_REQUIRE_CUDA: " << *why;
        return nullptr;
    }
    return *b;
}

// The model the GPU-against-CPU tests run: FERRY_CUDA_TEST_MODEL (the device check's cut default
// model), else the default model.
std::string test_model_path() {
    const char* env = std::getenv("FERRY_CUDA_TEST_MODEL");
    return env && *env ? env : ferry::testing::default_model_path();
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
    const std::string path = test_model_path();
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

// CUDA graphs replay the launches they captured, so a greedy text, a seeded draw on the device and
// the logits of a repeated prefill are the eager run's bit for bit: a replay that read a stale
// argument (a token, a position, a block table, a sampling row) or skipped a launch shows here.
// The texts are long enough to cross KV blocks and the staged tables' size classes, and each runs
// twice, the second time on graphs from the first.
TEST(CudaModel, GraphReplaysGiveTheEagerRunsTokensAndLogits) {
    std::string why;
    const auto eager = gpu_or_skip(&why, false);
    if (!eager) GTEST_SKIP() << why;
    const auto graphs = gpu_or_skip(&why, true);
    ASSERT_TRUE(graphs) << why;
    const std::string path = test_model_path();
    if (!std::ifstream(path)) GTEST_SKIP() << path << " is not on this machine";
    auto me = engine::LoadedModel::load(path, false, eager);
    auto mg = engine::LoadedModel::load(path, false, graphs);
    ASSERT_TRUE(me.ok() && mg.ok());
    engine::Generator ge(*me->model, eager, 1024), gg(*mg->model, graphs, 1024);
    ge.set_sample_on(engine::SampleOn::Device);
    gg.set_sample_on(engine::SampleOn::Device);
    std::vector<int32_t> ids;
    const int n_vocab = me->model->config().n_vocab;
    for (int i = 0; i < 20; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 13) % n_vocab));
    auto run = [&](engine::Generator& gen, const engine::SamplingParams& p) {
        std::vector<int32_t> out;
        gen.reset();
        EXPECT_TRUE(gen.generate(
                           ids, p, 300,
                           [&](int32_t t) {
                               out.push_back(t);
                               return true;
                           },
                           [](int32_t) { return false; })
                        .ok());
        return out;
    };
    engine::SamplingParams greedy;
    greedy.temperature = 0;
    engine::SamplingParams drawn;
    drawn.temperature = 0.9f, drawn.top_k = 40, drawn.top_p = 0.95f;
    drawn.seed = 11, drawn.has_seed = true;
    for (const auto* p : {&greedy, &drawn}) {
        const auto want = run(ge, *p);
        EXPECT_EQ(run(gg, *p), want);
        EXPECT_EQ(run(gg, *p), want);
    }
    // A prefill of the same length again, three times (replayed by now); every logit the eager
    // run's.
    ge.reset();
    auto want = ge.logits_for(ids);
    ASSERT_TRUE(want.ok());
    for (int i = 0; i < 3; ++i) {
        gg.reset();
        auto got = gg.logits_for(ids);
        ASSERT_TRUE(got.ok());
        EXPECT_EQ(*got, *want) << "run " << i;
    }
    const std::string report = kernels::backend_property(*graphs, "cuda_graphs");
    std::printf("[ cuda graphs ] %s\n", report.c_str());
    EXPECT_EQ(report.rfind("on (", 0), 0u) << report;
    EXPECT_EQ(report.find(" 0 replays"), std::string::npos) << report;
    EXPECT_EQ(report.find("(0 captured"), std::string::npos) << report;
    EXPECT_EQ(kernels::backend_property(*eager, "cuda_graphs"), "off");
}

// The serving engine on the GPU: 32 greedy requests of mixed lengths, batched continuously (a new
// batch size, so a new graph signature, almost every step), each get the text it gets alone, and
// every KV block comes back.
TEST(CudaModel, ConcurrentRequestsGiveTheirSoloTexts) {
    std::string why;
    const auto gpu = gpu_or_skip(&why);
    if (!gpu) GTEST_SKIP() << why;
    const std::string path = test_model_path();
    if (!std::ifstream(path)) GTEST_SKIP() << path << " is not on this machine";
    auto lm = engine::LoadedModel::load(path, false, gpu);
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    const std::vector<std::string> texts = {
        "The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,",
        "1, 2, 3, 4, 5,", "Water boils at"};
    std::vector<std::vector<int32_t>> prompts;
    std::vector<engine::RequestParams> params;
    for (int i = 0; i < 32; ++i) {
        std::string t;
        for (int k = 0; k <= i % 4; ++k) t += texts[(i + 3 * k) % texts.size()] + " ";
        prompts.push_back(lm->tokenizer->encode(t, true, false));
        params.push_back(ferry::testing::greedy(4 + i % 9 * 3));
    }
    const auto make = [&](int max_seqs) {
        engine::EngineConfig c = ferry::testing::small_config();
        c.max_num_seqs = max_seqs;
        c.prefix_cache = max_seqs > 1;
        auto e = engine::Engine::create(*lm, c);
        if (!e) throw std::runtime_error(e.error().message);
        return std::move(e).value();
    };
    auto together = make(64);
    const auto batched = ferry::testing::run_all(*together, prompts, params);
    ferry::testing::expect_all_free(*together);
    auto alone = make(1);
    // The GPU's products are not batch invariant (a warp per row up to 8 tokens, tiles above:
    // another summation order), so a text may part from its solo run, but only where the solo
    // run's two best logits are within rounding of each other.
    engine::Generator probe(*lm->model, gpu, 512);
    int parted = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto single = ferry::testing::run_all(*alone, {prompts[i]}, {params[i]});
        const auto& a = single[0].tokens.at(0);
        const auto& b = batched[i].tokens.at(0);
        ASSERT_EQ(a.size(), b.size()) << "request " << i;
        const auto at = std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
        if (at == static_cast<ptrdiff_t>(a.size())) continue;
        ++parted;
        std::vector<int32_t> ctx = prompts[i];
        ctx.insert(ctx.end(), a.begin(), a.begin() + at);
        auto logits = probe.logits_for(ctx);
        ASSERT_TRUE(logits.ok());
        std::vector<float> top(logits->begin(), logits->end());
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
        EXPECT_LT(top[0] - top[1], 1e-3f * (1 + std::fabs(top[0])))
            << "request " << i << " parts from its solo text at token " << at;
    }
    EXPECT_LE(parted, 2) << "more near-ties than 32 short texts should meet";
    ferry::testing::expect_all_free(*alone);
    std::printf(
        "[ cuda engine ] 32 requests batched: %d parted from their solo texts at a tie; %s\n",
        parted, kernels::backend_property(*gpu, "cuda_graphs").c_str());
}

}  // namespace
