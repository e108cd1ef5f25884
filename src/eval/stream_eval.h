// Perplexity of a text read as one sequence through the serving engine: each token scored with
// what the sequence's cache holds when it runs (all of the text before it, or under KV eviction
// the attention sinks and the recent window), chunk by chunk as a long document or chat is
// served. The same engine path `serve` runs, so `ferry eval --stream` measures what an eviction
// policy costs, and how much cache it holds, where the windowed evaluator (evaluator.h) cannot:
// its windows start from an empty cache.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/status.h"
#include "engine/engine_config.h"
#include "engine/loaded_model.h"

namespace ferry::eval {

struct StreamEvalResult {
    int64_t n_tokens = 0;
    int64_t n_scored = 0;  // all but the first
    double nll = 0;        // mean negative log-likelihood per scored token, nats
    double perplexity = 0;
    int64_t peak_kv_blocks = 0;  // the most blocks the sequence held at once
    size_t kv_bytes_per_block = 0;
    int block_size = 0;
    uint64_t evicted_tokens = 0;
    double seconds = 0;
};

// `config` says the engine's chunk (max_num_batched_tokens), context, KV type and eviction.
// on_progress(tokens scored, total).
Expected<StreamEvalResult> evaluate_stream(
    const engine::LoadedModel& lm, std::span<const int32_t> tokens,
    const engine::EngineConfig& config,
    const std::function<void(int64_t, int64_t)>& on_progress = nullptr);

}  // namespace ferry::eval
