// `--kv-dtype f32|f16|int8|fp8`: what the KV cache stores, spelled the same by `run`, `chat`,
// `bench decode`, `serve` and `bench throughput`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "engine/loaded_model.h"
#include "kv/kv_store.h"

namespace ferry::cli {

struct KvDTypeOption {
    std::string name = "f32";

    void add_to(CLI::App& cmd);
    kv::KvDType resolved() const;
    // The cache format for a model (int8 calibrates its key scales: a short forward pass).
    kv::KvFormat format(const engine::LoadedModel& lm) const;
};

}  // namespace ferry::cli
