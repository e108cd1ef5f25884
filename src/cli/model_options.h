// Options every model-running subcommand shares (-m, -t, --ctx, sampling), so `run`, `chat`
// and `bench` spell them the same way.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "engine/loaded_model.h"
#include "engine/sampler.h"

namespace ferry::cli {

struct ModelOptions {
    std::string model = "default";
    int threads = 0;  // 0: physical cores
    int ctx = 0;      // 0: min(training context, 4096)

    void add_to(CLI::App& cmd);
    int resolved_threads() const;
    int resolved_ctx(const engine::LoadedModel& lm) const;
    engine::LoadedModel load(bool progress) const;  // exits with a message on failure
};

struct SamplingOptions {
    engine::SamplingParams params;
    int64_t seed = -1;

    void add_to(CLI::App& cmd);
    engine::SamplingParams resolved() const;
};

}  // namespace ferry::cli
