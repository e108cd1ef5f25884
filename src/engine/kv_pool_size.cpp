#include "engine/kv_pool_size.h"

#include <algorithm>

namespace ferry::engine {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

double gib(uint64_t b) {
    return static_cast<double>(b) / (1ull << 30);
}

}  // namespace

Expected<int64_t> gpu_pool_bytes(const DeviceMemory& m, double utilization, uint64_t workspace,
                                 uint64_t needed) {
    if (!(utilization > 0 && utilization <= 1))
        return make_error("--gpu-memory-utilization {} is not in (0, 1]", utilization);
    const auto mine = static_cast<uint64_t>(utilization * static_cast<double>(m.total));
    const uint64_t used = m.total - std::min(m.free, m.total);
    const uint64_t taken = used + workspace;
    const uint64_t left = mine > taken ? mine - taken : 0;
    // Never more than is free now: another process may hold more than utilization allows for.
    const uint64_t pool = std::min(left, m.free > workspace ? m.free - workspace : 0);
    if (pool < needed || pool == 0)
        return make_error(
            "the KV cache does not fit on {}: --gpu-memory-utilization {:.2f} of its {:.1f} GiB is "
            "{:.2f} GiB; {:.2f} GiB are in use already (this model's weights, the CUDA "
            "runtime, any other process) and ~{} MiB go to a step's working memory, leaving "
            "{} MiB, and one step's cache needs {} MiB. Raise --gpu-memory-utilization, lower "
            "--max-num-batched-tokens, or use a smaller --kv-dtype or --weights (`ferry plan "
            "--device cuda` shows the budget)",
            m.name, utilization, gib(m.total), gib(mine), gib(used), workspace / kMiB, pool / kMiB,
            (needed + kMiB - 1) / kMiB);
    return static_cast<int64_t>(pool);
}

uint64_t step_workspace_bytes(const model::LlamaConfig& c, int64_t batched_tokens,
                              int64_t logit_rows) {
    const int64_t ffn = std::max<int64_t>(
        {c.n_ff, int64_t{c.n_ff_expert} * std::max(1, c.n_expert_used), c.n_ff_shared});
    // x, its norm and the layer's output; q, the attention's output, k, v; the gate and up
    // projections; the rotation angles.
    const int64_t per_token =
        3 * int64_t{c.n_embd} + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * ffn + c.rope_dim;
    const auto values =
        static_cast<uint64_t>(batched_tokens * per_token + logit_rows * int64_t{c.n_vocab});
    return values * sizeof(float) + 64 * kMiB;
}

int64_t cpu_pool_bytes(uint64_t available) {
    if (available == 0) return int64_t{1} << 30;
    return std::min<int64_t>(static_cast<int64_t>(available / 4), int64_t{2} << 30);
}

}  // namespace ferry::engine
