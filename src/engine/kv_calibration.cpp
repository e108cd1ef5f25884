#include "engine/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/model_runner.h"

namespace ferry::engine {
namespace {

// Ordinary prose (about 170 tokens): what keys look like on text, not on any benchmark.
constexpr const char* kCalibrationText =
    "The old harbour town wakes early. Before the sun clears the hills, fishing boats slip "
    "out past the breakwater, and the baker on Quay Street has already pulled the first trays "
    "of bread from his oven. By eight o'clock the market square is full: farmers sell "
    "cheese, apples and honey from the back of their vans, children argue over comic books "
    "at the newsagent, and a retired teacher explains to anyone who will listen why the "
    "church clock has been running four minutes fast since 1987. In the afternoon the wind "
    "turns, clouds gather over the lighthouse, and visitors hurry back to their cars. "
    "\"It always rains on Thursdays,\" says the woman who runs the cafe, wiping the tables. "
    "She has kept a record for twelve years, and the numbers, she insists, do not lie.";

}  // namespace

std::vector<float> calibrate_key_scales(const model::LlamaModel& m,
                                        std::shared_ptr<kernels::Backend> backend,
                                        std::span<const int32_t> tokens, float headroom) {
    const int n = static_cast<int>(tokens.size());
    // One block holding the whole text, in an f32 cache: the keys as computed.
    ModelRunner runner(m, std::move(backend), 1, std::max(1, n));
    if (n > 0) {
        const int32_t block = 0;
        const ModelRunner::Work w{tokens, 0, {&block, 1}, 0};
        runner.run({&w, 1});
    }
    return key_scales_from(runner, n, headroom);
}

std::vector<float> key_scales_from(const ModelRunner& runner, int n_tokens, float headroom) {
    const auto& c = runner.model().config();
    const kv::KvStore& store = runner.kv();
    const int kv_dim = store.kv_dim(), n_layer = store.n_layer();
    std::vector<float> amax(static_cast<size_t>(n_layer) * kv_dim, 0.0f);
    std::vector<float> k(kv_dim), v(kv_dim);
    for (int l = 0; l < n_layer; ++l)
        for (int p = 0; p < n_tokens; ++p) {
            store.read(l, 0, p, k.data(), v.data());
            float* a = &amax[static_cast<size_t>(l) * kv_dim];
            for (int i = 0; i < kv_dim; ++i) a[i] = std::max(a[i], std::fabs(k[i]));
        }
    // RoPE pairs: (i, i + 1) or, NeoX style, (i, i + rope_dim / 2) within each head.
    const int hd = store.head_dim(), rd = std::min(c.rope_dim > 0 ? c.rope_dim : hd, hd);
    for (int l = 0; l < n_layer; ++l)
        for (int h = 0; h < kv_dim / hd; ++h) {
            float* a = &amax[static_cast<size_t>(l) * kv_dim + static_cast<size_t>(h) * hd];
            for (int i = 0; i < rd; ++i) {
                const bool neox = c.rope_style == kernels::RopeStyle::Neox;
                const int j = neox ? (i < rd / 2 ? i + rd / 2 : i - rd / 2) : (i ^ 1);
                if (j < rd) a[i] = a[j] = std::max(a[i], a[j]);
            }
        }
    // A channel the text never moved still gets a usable step.
    for (float& a : amax) a = std::max(a * headroom, 1e-4f) / quant::kInt8Max;
    return amax;
}

kv::KvFormat kv_format_for(const LoadedModel& m, quant::KvDType t) {
    kv::KvFormat f;
    f.dtype = t;
    if (t != quant::KvDType::Int8) return f;
    // On a split model the calibration run goes to every rank, and each measures its own.
    const auto tokens = m.tokenizer->encode(kCalibrationText, true, false);
    f.k_scales = calibrate_key_scales(*m.model, m.backend, tokens);
    f.calibration_tokens = static_cast<int>(tokens.size());
    return f;
}

}  // namespace ferry::engine
