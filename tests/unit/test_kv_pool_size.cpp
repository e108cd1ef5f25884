// The KV pool's size when no --kv-cache-memory fixes it: vLLM's --gpu-memory-utilization rule on
// a GPU (the arithmetic, which needs no GPU), the CPU's share of free RAM, and the engine
// refusing the GPU's option where it would mean nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/engine.h"
#include "engine/kv_pool_size.h"
#include "engine_test_util.h"

namespace ferry::engine {
namespace {

constexpr uint64_t kGiB = 1ull << 30, kMiB = 1ull << 20;

TEST(KvPoolSize, AGpuPoolIsUtilizationLessWhatIsTakenAndTheWorkspace) {
    const DeviceMemory h100{"H100", 80 * kGiB, 75 * kGiB};  // 5 GiB of weights and context
    auto pool = gpu_pool_bytes(h100, 0.9, 1 * kGiB, 64 * kMiB);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    // 0.9 x 80 = 72 GiB in all; 5 in use, 1 of working memory: 66 for the cache.
    EXPECT_NEAR(static_cast<double>(*pool), 66.0 * kGiB, 1.0);
    // A lower share leaves that much less, byte for byte.
    auto half = gpu_pool_bytes(h100, 0.5, 1 * kGiB, 64 * kMiB);
    ASSERT_TRUE(half.ok());
    EXPECT_NEAR(static_cast<double>(*pool - *half), 0.4 * 80 * kGiB, 1.0);
}

TEST(KvPoolSize, AnotherProcessOnTheCardComesOffTheShare) {
    // 60 GiB held by someone else: 72 - 65 - 1 = 6 GiB, though 14 are free.
    auto pool = gpu_pool_bytes({"H100", 80 * kGiB, 15 * kGiB}, 0.9, 1 * kGiB, 64 * kMiB);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    EXPECT_EQ(static_cast<uint64_t>(*pool), 6 * kGiB);
    // Never more than is free, whatever the share says.
    auto all = gpu_pool_bytes({"H100", 80 * kGiB, 3 * kGiB}, 1.0, 1 * kGiB, 64 * kMiB);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(static_cast<uint64_t>(*all), 2 * kGiB);
}

TEST(KvPoolSize, TooLittleMemoryIsOneErrorWithEveryFigure) {
    auto pool = gpu_pool_bytes({"NVIDIA L4", 24 * kGiB, 2 * kGiB}, 0.9, 512 * kMiB, 300 * kMiB);
    ASSERT_FALSE(pool.ok());
    const std::string& m = pool.error().message;
    for (const char* part : {"NVIDIA L4", "0.90", "24.0 GiB", "21.60 GiB", "22.00 GiB are in use",
                             "512 MiB", "needs 300 MiB", "--gpu-memory-utilization"})
        EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
    // Room for less than one step's cache is the same refusal.
    auto short_of_step = gpu_pool_bytes({"H100", 80 * kGiB, 80 * kGiB}, 0.9, 70 * kGiB, 3 * kGiB);
    ASSERT_FALSE(short_of_step.ok());
    EXPECT_NE(short_of_step.error().message.find("leaving 2048 MiB"), std::string::npos)
        << short_of_step.error().message;
}

TEST(KvPoolSize, UtilizationOutsideZeroToOneIsRefused) {
    for (double u : {0.0, -0.5, 1.5, std::nan("")}) {
        auto pool = gpu_pool_bytes({"H100", 80 * kGiB, 75 * kGiB}, u, kGiB, kMiB);
        ASSERT_FALSE(pool.ok()) << u;
        EXPECT_NE(pool.error().message.find("not in (0, 1]"), std::string::npos);
    }
}

TEST(KvPoolSize, WorkspaceGrowsWithTheStepsTokensAndLogitRows) {
    model::LlamaConfig c;
    c.n_embd = 2048, c.n_head = 32, c.n_head_kv = 4, c.head_dim = 64, c.n_ff = 5632;
    c.n_vocab = 32000, c.rope_dim = 64;
    const uint64_t base = step_workspace_bytes(c, 512, 16);
    // Per token: 3 x 2048 + 2 x 2048 + 2 x 256 + 2 x 5632 + 64 floats.
    EXPECT_EQ(step_workspace_bytes(c, 513, 16) - base,
              (3 * 2048 + 2 * 2048 + 2 * 256 + 2 * 5632 + 64) * 4u);
    EXPECT_EQ(step_workspace_bytes(c, 512, 17) - base, 32000 * 4u);  // a row of logits
    // A mixture's experts: the widest of the active experts' sum, the shared one, the dense FFN.
    model::LlamaConfig moe = c;
    moe.n_ff = 0, moe.n_expert = 8, moe.n_expert_used = 2, moe.n_ff_expert = 14336;
    EXPECT_GT(step_workspace_bytes(moe, 512, 16), base);
}

TEST(KvPoolSize, TheCpuTakesAQuarterOfFreeRamAtMostTwoGiB) {
    EXPECT_EQ(cpu_pool_bytes(4 * kGiB), static_cast<int64_t>(kGiB));
    EXPECT_EQ(cpu_pool_bytes(100 * kGiB), static_cast<int64_t>(2 * kGiB));
    EXPECT_EQ(cpu_pool_bytes(0), static_cast<int64_t>(kGiB));  // unknown: 1 GiB
}

TEST(KvPoolSize, TheGpuShareIsRefusedOnTheCpu) {
    auto cfg = testing::small_config();
    cfg.gpu_memory_utilization = 0.8;
    auto e = Engine::create(testing::model(), cfg);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("on the CPU give the pool's bytes with --kv-cache-memory"),
              std::string::npos)
        << e.error().message;
    cfg.gpu_memory_utilization.reset();
    EXPECT_TRUE(Engine::create(testing::model(), cfg).ok());
}

}  // namespace
}  // namespace ferry::engine
