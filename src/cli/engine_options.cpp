#include "cli/engine_options.h"

#include <cstdio>

#include "cli/model_options.h"

namespace ferry::cli {

void EngineOptions::add_to(CLI::App& cmd) {
    auto& e = config;
    cmd.add_option("--max-num-seqs", e.max_num_seqs, "sequences in one step at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    cmd.add_option("--max-num-batched-tokens", e.max_num_batched_tokens,
                   "tokens in one step at most (prefill chunks + decodes)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    cmd.add_option("--prefill-chunk-while-decoding", e.prefill_chunk_while_decoding,
                   "prefill tokens per step at most while other sequences decode (0: no limit "
                   "but the token budget)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    cmd.add_option("--max-tpot-ms", e.max_tpot_ms,
                   "latency target: while requests decode, each step carries only the prefill "
                   "tokens that keep its measured time within this (replaces "
                   "--prefill-chunk-while-decoding once step times are known; 0: off)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1e6));
    cmd.add_option("--kv-cache-memory", e.kv_cache_memory,
                   "bytes for the KV block pool (0: on the CPU 25% of available RAM, at most "
                   "2 GiB; on a GPU what --gpu-memory-utilization leaves)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
    cmd.add_option("--gpu-memory-utilization", e.gpu_memory_utilization,
                   "GPU: the share of the device's memory this server may hold in all (weights, "
                   "KV cache, working memory); the KV pool gets what the rest leaves (default "
                   "0.9; refused on the CPU)")
        ->check(kFinite)
        ->check(CLI::Range(0.0, 1.0));
    sample_on.add_to(cmd);
    cmd.add_option("--block-size", e.block_size, "token slots per KV block")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    cmd.add_option("--prefix-cache", prefix_cache, "reuse KV blocks of shared prompt prefixes")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    cmd.add_option("--batching", batching, "continuous (token-level) or static batching")
        ->capture_default_str()
        ->check(CLI::IsMember({"continuous", "static"}));
    cmd.add_option("--batch-wait-ms", e.batch_wait_ms,
                   "static batching: how long to wait for company")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    cmd.add_option("--kv", kv, "KV cache layout: paged blocks, or max length reserved up front")
        ->capture_default_str()
        ->check(CLI::IsMember({"paged", "contiguous"}));
    cmd.add_option("--kv-window-pool", kv_window_pool,
                   "a model with both sliding-window and global layers (Gemma 3) keeps the "
                   "sliding layers' blocks in a pool of their own, sized for windows (paged only; "
                   "off: one pool for every layer)")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    kv_dtype.add_to(cmd);
    kv_eviction.add_to(cmd);
    spec.add_to(cmd, true);
}

engine::EngineConfig EngineOptions::resolved(int max_model_len,
                                             const engine::LoadedModel* draft) const {
    engine::EngineConfig c = config;
    c.spec = spec.resolved();
    c.draft_model = draft;
    c.max_model_len = max_model_len;
    c.prefix_cache = prefix_cache == "on";
    c.sample_on = sample_on.resolved();
    c.kv_window_pool = kv_window_pool == "on";
    c.kv_dtype = kv_dtype.resolved();
    c.batching = batching == "static" ? engine::EngineConfig::Batching::Static
                                      : engine::EngineConfig::Batching::Continuous;
    c.kv_layout = kv == "contiguous" ? engine::EngineConfig::KvLayout::Contiguous
                                     : engine::EngineConfig::KvLayout::Paged;
    c.kv_eviction = kv_eviction.resolved();
    return c;
}

void note_kv_capped_context(const engine::Engine& e, const char* who) {
    if (e.context_before_kv_cap() == 0) return;
    std::fprintf(stderr,
                 "%s: note: the KV cache holds %d tokens (%lld blocks of %d), fewer than the "
                 "context of %d; a request is limited to %d tokens (raise --kv-cache-memory)\n",
                 who, e.max_model_len(), static_cast<long long>(e.kv_blocks()),
                 e.config().block_size, e.context_before_kv_cap(), e.max_model_len());
}

}  // namespace ferry::cli
