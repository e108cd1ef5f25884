// `--kv-dtype f32|f16|int8|fp8`: what the KV cache stores, spelled the same by `run`, `chat`,
// `bench decode`, `serve` and `bench throughput`; `--kv-eviction streaming --kv-budget N
// [--kv-sink N]` (engine/kv_eviction.h), spelled the same by `run`, `chat`, `serve`,
// `bench throughput` and `eval --stream`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "engine/kv_eviction.h"
#include "engine/loaded_model.h"
#include "kv/kv_store.h"

namespace ferry::cli {

// f16 by default (as llama.cpp and vLLM keep 16-bit caches): half the bytes every decode step
// reads at long contexts, for logits within ~0.02 of an f32 cache (docs/performance.md).
// `ferry eval` defaults to f32, so that it measures the weights alone.
struct KvDTypeOption {
    std::string name = "f16";

    void add_to(CLI::App& cmd);
    quant::KvDType resolved() const;
    // The cache format for a model (int8 calibrates its key scales: a short forward pass).
    kv::KvFormat format(const engine::LoadedModel& lm) const;
};

struct KvEvictionOption {
    std::string kind = "none";
    engine::KvEvictionConfig config;
    CLI::Option *budget_option = nullptr, *sink_option = nullptr, *kind_option = nullptr;

    void add_to(CLI::App& cmd);
    // Any of the three options given.
    bool given() const;
    // The configuration; an ExitError for a budget without eviction or eviction without one.
    engine::KvEvictionConfig resolved() const;
};

}  // namespace ferry::cli
