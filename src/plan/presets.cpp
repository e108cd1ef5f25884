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
};

// Sources: the config.json of each model on huggingface.co (meta-llama/Llama-2-*-hf,
// meta-llama/Meta-Llama-3-*, mistralai/Mistral-7B-v0.1, Qwen/Qwen2.5-*-Instruct,
// HuggingFaceTB/SmolLM2-135M-Instruct).
// clang-format off
constexpr std::array kPresets = {
    //      name            layers hidden heads kv   ffn    vocab   ctx    tied   qkv_bias
    Preset{"llama-2-7b",    32,    4096,  32,   32,  11008, 32000,  4096,  false, false},
    Preset{"llama-2-13b",   40,    5120,  40,   40,  13824, 32000,  4096,  false, false},
    Preset{"llama-2-70b",   80,    8192,  64,   8,   28672, 32000,  4096,  false, false},
    Preset{"llama-3-8b",    32,    4096,  32,   8,   14336, 128256, 8192,  false, false},
    Preset{"llama-3-70b",   80,    8192,  64,   8,   28672, 128256, 8192,  false, false},
    Preset{"mistral-7b",    32,    4096,  32,   8,   14336, 32000,  32768, false, false},
    Preset{"qwen2.5-7b",    28,    3584,  28,   4,   18944, 152064, 32768, false, true},
    Preset{"qwen2.5-72b",   80,    8192,  64,   8,   29568, 152064, 32768, false, true},
    Preset{"smollm2-135m",  30,    576,   9,    3,   1536,  49152,  8192,  true,  false},
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
