// Helpers shared by the unit tests: where the default model and the golden files live.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/loaded_model.h"

namespace ferry::testing {

inline std::string source_dir() {
    const char* env = std::getenv("FERRY_SOURCE_DIR");
#ifdef FERRY_SOURCE_DIR
    return env ? env : FERRY_SOURCE_DIR;
#else
    return env ? env : ".";
#endif
}

inline std::string golden_dir() {
    return source_dir() + "/tests/golden";
}

// A CPU backend with the default options, for tests that need one without a model.
inline const std::shared_ptr<kernels::Backend>& cpu_backend() {
    static const std::shared_ptr<kernels::Backend> b = [] {
        auto r = kernels::make_backend();
        if (!r) throw std::runtime_error(r.error().message);
        return std::move(r).value();
    }();
    return b;
}

// A new CPU backend of `threads` threads, running as the process's activation mode is set now.
inline std::shared_ptr<kernels::Backend> cpu_backend(int threads) {
    auto r = kernels::make_backend({.threads = threads, .activations = {}});
    if (!r) throw std::runtime_error(r.error().message);
    return std::move(r).value();
}

// The default model as scripts/get-model.sh caches it; FERRY_MODEL overrides.
inline std::string default_model_path() {
    if (const char* m = std::getenv("FERRY_MODEL")) return m;
    std::string home;
    if (const char* h = std::getenv("FERRY_HOME"))
        home = h;
    else
        home = std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") + "/.cache/ferry";
    return home + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The default model, loaded once per test binary and shared by the tests that only read it.
inline const engine::LoadedModel& default_model() {
    static engine::LoadedModel lm = [] {
        auto r = engine::LoadedModel::load(default_model_path(), false);
        if (!r) throw std::runtime_error(r.error().message);
        return std::move(r).value();
    }();
    return lm;
}

}  // namespace ferry::testing
