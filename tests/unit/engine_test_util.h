// Helpers for tests that drive the serving engine with the default model: one engine stepped
// on the test's thread, outputs collected per request and completion.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generator.h"
#include "test_util.h"

namespace ferry::testing {

using namespace ferry::engine;

inline const LoadedModel& model() {
    return default_model();
}

inline RequestParams greedy(int max_tokens) {
    RequestParams p;
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

struct Collected {
    std::map<int, std::vector<int32_t>> tokens;  // by completion index
    std::map<int, std::string> text;
    std::map<int, FinishReason> reason;
    int finals = 0;
};

// Runs requests through one engine (stepped on this thread) and collects their outputs.
inline std::vector<Collected> run_all(Engine& engine,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<RequestParams>& params) {
    std::vector<Collected> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto id = engine.add_request(prompts[i], params[i], [&out, i](const TokenEvent& e) {
            auto& c = out[i];
            if (e.token >= 0) c.tokens[e.index].push_back(e.token);
            c.text[e.index] += e.text;
            if (e.finished) {
                c.reason[e.index] = e.finish_reason;
                ++c.finals;
            }
        });
        EXPECT_TRUE(id.ok()) << id.error().message;
    }
    while (engine.has_work()) engine.step();
    return out;
}

// One single-stream generation of n tokens from a reset generator (speculating with `spec`),
// its tokens; its stats into *stats.
inline std::vector<int32_t> generate(Generator& g, const std::vector<int32_t>& prompt, int n,
                                     const SpecRun& spec, GenerationStats* stats = nullptr,
                                     SamplingParams sp = greedy(1).sampling) {
    std::vector<int32_t> out;
    g.reset();
    auto st = g.generate(
        prompt, sp, n,
        [&](int32_t t) {
            out.push_back(t);
            return true;
        },
        nullptr, spec);
    EXPECT_TRUE(st.ok());
    if (stats && st.ok()) *stats = *st;
    return out;
}

inline std::vector<std::vector<int32_t>> mixed_prompts(int n, uint32_t seed) {
    const auto& tok = *model().tokenizer;
    const std::vector<std::string> texts = {"The capital of France is",
                                            "def fibonacci(n):",
                                            "Once upon a time, in a land far away,",
                                            "1, 2, 3, 4, 5,",
                                            "The mitochondria is the",
                                            "Translate to French: good morning",
                                            "Water boils at",
                                            "In 1492, Columbus"};
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) {
        std::string t;
        const int parts = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < parts; ++k) t += texts[rng() % texts.size()] + " ";
        prompts.push_back(tok.encode(t, true, false));
    }
    return prompts;
}

// An engine over the default model; a configuration it refuses fails the test.
inline std::unique_ptr<Engine> make_engine(const EngineConfig& c) {
    auto e = Engine::create(model(), c);
    if (!e) throw std::runtime_error(e.error().message);
    return std::move(e).value();
}

inline EngineConfig small_config() {
    EngineConfig c;
    c.max_model_len = 512;
    c.kv_cache_memory = 64ll << 20;
    c.max_num_seqs = 64;
    c.max_num_batched_tokens = 256;
    return c;
}

inline void expect_all_free(const Engine& e) {
    auto m = e.metrics();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.running, 0);
    EXPECT_EQ(m.waiting, 0);
}

}  // namespace ferry::testing
