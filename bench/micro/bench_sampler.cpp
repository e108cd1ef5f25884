// The host sampler's cost per draw over a 49,152-token vocabulary (the default model's), for the
// settings that take different paths: top-k (a partial sort of k), top-p alone (a floor search
// over the probabilities, then a sort of what is above it), untruncated (one pass by id).
// Logits are N(0, sigma): 2.5 is a spread like a small model's, 6 a peaked one.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {
using namespace ferry;

void BM_SamplerDraw(benchmark::State& st, float temperature, int top_k, float top_p, float sigma) {
    constexpr int kRows = 64, kVocab = 49152;
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0.0f, sigma);
    std::vector<float> logits(static_cast<size_t>(kRows) * kVocab);
    for (auto& v : logits) v = n(rng);
    engine::SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = 0;
    p.seed = 1;
    p.has_seed = true;
    engine::Sampler s(p);
    int row = 0;
    for (auto _ : st) {
        const std::span<const float> l(logits.data() + static_cast<size_t>(row) * kVocab, kVocab);
        benchmark::DoNotOptimize(s.sample(l, {}));
        row = (row + 1) % kRows;
    }
}
BENCHMARK_CAPTURE(BM_SamplerDraw, top_p_0_9, 0.7f, 0, 0.9f, 2.5f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SamplerDraw, top_p_0_95_peaked, 1.0f, 0, 0.95f, 6.0f)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SamplerDraw, top_k_40_top_p_0_95, 0.8f, 40, 0.95f, 2.5f)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SamplerDraw, untruncated, 1.0f, 0, 1.0f, 2.5f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SamplerDraw, untruncated_flat, 1.0f, 0, 1.0f, 1.0f)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
