// Options every model-running subcommand shares (-m, -t, --ctx, sampling), so `run`, `chat`
// and `bench` spell them the same way.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/tensor_parallel.h"
#include "engine/engine_config.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "kernels/backend.h"

namespace ferry::cli {

// A number option's value must be finite: CLI::Range alone lets NaN through.
extern const CLI::Validator kFinite;

// --activations f32|int16|int8: what the block types' weights (Q4, Q5, Q8_0, Q4_K-Q6_K, int4) meet
// their activations as (kernels::Activations); unset keeps the default (int16, or
// FERRY_ACTIVATIONS).
struct ActivationsOption {
    std::string name;

    void add_to(CLI::App& cmd);
    std::optional<kernels::Activations> resolved() const;
};

// -t as the pools get it: 0 means the physical cores; more than the CPUs this process may run
// on is capped there, with a note on stderr, because the pool's threads spin at every barrier
// and oversubscribed they mostly wait for each other (-t 512 on 2 CPUs ran 50x slower).
int resolve_threads(int requested);

// --device cpu|cuda|auto: where the model runs (auto: a GPU where this build has CUDA and one is
// present, else the CPU). The default stays cpu until the CUDA backend has been checked on a
// GPU (docs/cuda.md).
struct DeviceOption {
    std::string name = "cpu";
    std::string cuda_graphs;  // --cuda-graphs on|off; empty: not given (on)

    void add_to(CLI::App& cmd);
    // The backend for it, `threads` workers; options only the CPU backend has (--activations,
    // --tp / --pp: ranks > 1) are refused on a GPU rather than ignored, and --cuda-graphs on
    // the CPU. Exits with the reason when --device cuda cannot be had.
    std::shared_ptr<kernels::Backend> backend(int threads, const ActivationsOption& activations,
                                              int ranks) const;
};

// --sample-on: where tokens are drawn (engine::SampleOn).
struct SampleOnOption {
    std::string name = "auto";

    void add_to(CLI::App& cmd);
    engine::SampleOn resolved() const;
};

struct ModelOptions {
    std::string model = "default";
    int threads = 0;  // 0: physical cores
    int ctx = 0;      // 0: min(training context, 4096)
    ActivationsOption activations;
    std::string weights;  // --weights: every matrix rounded to this type at load; empty: as stored
    std::string chat_template;       // --chat-template FILE: replaces the model's own
    TensorParallelOptions parallel;  // --tp, --tp-timeout
    DeviceOption device;

    void add_to(CLI::App& cmd);
    int resolved_threads() const;
    int resolved_ctx(const engine::LoadedModel& lm) const;
    // The backend -t and --activations ask for; exits with a message on failure.
    std::shared_ptr<kernels::Backend> backend() const;
    // --weights as a type; nullopt when not given. Exits with a message for an unknown name.
    std::optional<DType> weight_type() const;
    // Loads onto backend(); exits with a message on failure. With --tp, this rank's share; a
    // rank other than 0 never returns (it follows rank 0's steps, then exits).
    engine::LoadedModel load(bool progress) const;
    // What the options change in a model loaded without load(): --chat-template.
    void apply_to(engine::LoadedModel& lm) const;
};

struct SamplingOptions {
    engine::SamplingParams params;
    int64_t seed = -1;
    SampleOnOption sample_on;

    void add_to(CLI::App& cmd);
    engine::SamplingParams resolved() const;
    // With the model's generation_config values for the options not given on the command line.
    engine::SamplingParams resolved(const engine::GenerationDefaults& model) const;

  private:
    CLI::Option *temperature_ = nullptr, *top_k_ = nullptr, *top_p_ = nullptr,
                *repetition_ = nullptr;
};

}  // namespace ferry::cli
