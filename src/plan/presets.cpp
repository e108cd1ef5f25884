// Built-in model presets: the public config.json values of well-known checkpoints, so that
// `ferry plan --model llama-3-70b` works without downloading anything. The architecture
// formula applied to these must reproduce the official parameter counts (tests check it).
#include <algorithm>
#include <array>
#include <cctype>

#include "core/strings.h"
#include "plan/model_spec.h"

namespace ferry::plan {
namespace {

struct Preset {
    const char* name;
    int64_t n_layers, hidden, n_heads, n_kv_heads, ffn, vocab, max_ctx;
    bool tied, qkv_bias;
    double rope_theta, rms_eps;
};

// Sources: the config.json of each model on huggingface.co (meta-llama/Llama-2-*-hf,
// meta-llama/Meta-Llama-3-*, meta-llama/Llama-3.1-8B, meta-llama/Llama-3.2-1B/3B,
// mistralai/Mistral-7B-v0.1, Qwen/Qwen2.5-*-Instruct, TinyLlama/TinyLlama-1.1B-Chat-v1.0,
// HuggingFaceTB/SmolLM2-135M-Instruct). Llama 3.1 / 3.2 also declare llama3 rope scaling,
// which the shapes here do not need.
// clang-format off
constexpr std::array kPresets = {
    //      name             layers hidden heads kv   ffn    vocab   ctx     tied   qkv_bias theta  eps
    Preset{"llama-2-7b",     32,    4096,  32,   32,  11008, 32000,  4096,   false, false, 1e4,   1e-5},
    Preset{"llama-2-13b",    40,    5120,  40,   40,  13824, 32000,  4096,   false, false, 1e4,   1e-5},
    Preset{"llama-2-70b",    80,    8192,  64,   8,   28672, 32000,  4096,   false, false, 1e4,   1e-5},
    Preset{"llama-3-8b",     32,    4096,  32,   8,   14336, 128256, 8192,   false, false, 5e5,   1e-5},
    Preset{"llama-3-70b",    80,    8192,  64,   8,   28672, 128256, 8192,   false, false, 5e5,   1e-5},
    Preset{"llama-3.1-8b",   32,    4096,  32,   8,   14336, 128256, 131072, false, false, 5e5,   1e-5},
    Preset{"llama-3.2-1b",   16,    2048,  32,   8,   8192,  128256, 131072, true,  false, 5e5,   1e-5},
    Preset{"llama-3.2-3b",   28,    3072,  24,   8,   8192,  128256, 131072, true,  false, 5e5,   1e-5},
    Preset{"mistral-7b",     32,    4096,  32,   8,   14336, 32000,  32768,  false, false, 1e4,   1e-5},
    Preset{"qwen2.5-0.5b",   24,    896,   14,   2,   4864,  151936, 32768,  true,  true,  1e6,   1e-6},
    Preset{"qwen2.5-1.5b",   28,    1536,  12,   2,   8960,  151936, 32768,  true,  true,  1e6,   1e-6},
    Preset{"qwen2.5-3b",     36,    2048,  16,   2,   11008, 151936, 32768,  true,  true,  1e6,   1e-6},
    Preset{"qwen2.5-7b",     28,    3584,  28,   4,   18944, 152064, 32768,  false, true,  1e6,   1e-6},
    Preset{"qwen2.5-72b",    80,    8192,  64,   8,   29568, 152064, 32768,  false, true,  1e6,   1e-6},
    Preset{"tinyllama-1.1b", 22,    2048,  32,   4,   5632,  32000,  2048,   false, false, 1e4,   1e-5},
    Preset{"smollm2-135m",   30,    576,   9,    3,   1536,  49152,  8192,   true,  false, 1e5,   1e-5},
};
// clang-format on

}  // namespace

std::vector<std::string> preset_names() {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    return names;
}

Expected<ModelSpec> spec_from_preset(std::string_view name) {
    const std::string key = ascii_lower(name);
    for (const auto& p : kPresets) {
        if (key != p.name) continue;
        ModelSpec m;
        m.name = p.name;
        m.source = "preset";
        m.arch = key.starts_with("qwen") ? "qwen2" : "llama";
        m.n_layers = p.n_layers;
        m.hidden = p.hidden;
        m.n_heads = p.n_heads;
        m.n_kv_heads = p.n_kv_heads;
        m.head_dim = p.hidden / p.n_heads;
        m.ffn = p.ffn;
        m.vocab = p.vocab;
        m.max_ctx = p.max_ctx;
        m.tied_embeddings = p.tied;
        m.qkv_bias = p.qkv_bias;
        m.rope_theta = p.rope_theta;
        m.rms_eps = p.rms_eps;
        m.native_bits = 16.0;  // all published as bf16/fp16 checkpoints
        return m;
    }
    std::string known;
    for (const auto& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
    return make_error(
        "unknown model preset '{}'; known presets: {} (or give a .gguf file or a "
        "config.json)",
        name, known);
}

}  // namespace ferry::plan
