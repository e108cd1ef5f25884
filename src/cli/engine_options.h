// The serving engine's switches, spelled the same by `ferry serve` and `ferry bench
// throughput`, so a configuration measured offline is the one served.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/kv_options.h"
#include "cli/model_options.h"
#include "cli/spec_options.h"
#include "engine/engine.h"

namespace ferry::cli {

struct EngineOptions {
    engine::EngineConfig config;
    std::string prefix_cache = "on";
    SampleOnOption sample_on;
    std::string batching = "continuous";
    std::string kv = "paged";
    std::string kv_window_pool = "on";
    KvEvictionOption kv_eviction;
    SpecOptions spec;
    KvDTypeOption kv_dtype;

    void add_to(CLI::App& cmd);
    // draft: the loaded --draft-model, if any (it must outlive the engine).
    engine::EngineConfig resolved(int max_model_len,
                                  const engine::LoadedModel* draft = nullptr) const;
};

// Tells stderr when the KV pool is smaller than the context, so requests are limited to the
// pool's tokens (who: "ferry serve", "bench throughput").
void note_kv_capped_context(const engine::Engine& e, const char* who);

}  // namespace ferry::cli
