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

// The experts of a mixture-of-experts preset: count, top-k, one expert's intermediate size,
// shared experts and their size. Zero for a dense model.
struct Moe {
    int64_t experts = 0, used = 0, expert_ffn = 0, shared = 0, shared_ffn = 0;
};

struct Preset {
    const char* name;
    const char* arch;
    int64_t n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab, max_ctx;
    bool tied, qkv_bias;
    double rope_theta, rms_eps;
    Moe moe = {};
    int64_t window = 0, pattern = 0;  // sliding window; every pattern-th layer global (0: none)
};

// Sources: the config.json of each model on huggingface.co (meta-llama/Llama-2-*-hf,
// meta-llama/Meta-Llama-3-*, meta-llama/Llama-3.1-8B / 70B, meta-llama/Llama-3.2-1B/3B,
// mistralai/Mistral-7B-v0.1, mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2.5-*-Instruct,
// Qwen/Qwen3-8B, Qwen/Qwen3-30B-A3B, Qwen/Qwen1.5-MoE-A2.7B, google/gemma-3-27b-it (its
// text_config, with Gemma3TextConfig's defaults for what it leaves out), google/gemma-3-270m,
// microsoft/Phi-3-mini-4k-instruct, TinyLlama/TinyLlama-1.1B-Chat-v1.0,
// HuggingFaceTB/SmolLM2-135M-Instruct). Llama 3.1 / 3.2 also declare llama3 rope scaling,
// which the shapes here do not need. head_dim 0 = hidden / heads.
// clang-format off
constexpr std::array kPresets = {
    //     name              arch         layers hidden heads kv  hd   ffn    vocab   ctx     tied   qkv_bias theta eps
    Preset{"llama-2-7b",     "llama",     32,    4096,  32,   32, 0,   11008, 32000,  4096,   false, false,   1e4,  1e-5},
    Preset{"llama-2-13b",    "llama",     40,    5120,  40,   40, 0,   13824, 32000,  4096,   false, false,   1e4,  1e-5},
    Preset{"llama-2-70b",    "llama",     80,    8192,  64,   8,  0,   28672, 32000,  4096,   false, false,   1e4,  1e-5},
    Preset{"llama-3-8b",     "llama",     32,    4096,  32,   8,  0,   14336, 128256, 8192,   false, false,   5e5,  1e-5},
    Preset{"llama-3-70b",    "llama",     80,    8192,  64,   8,  0,   28672, 128256, 8192,   false, false,   5e5,  1e-5},
    Preset{"llama-3.1-8b",   "llama",     32,    4096,  32,   8,  0,   14336, 128256, 131072, false, false,   5e5,  1e-5},
    Preset{"llama-3.1-70b",  "llama",     80,    8192,  64,   8,  0,   28672, 128256, 131072, false, false,   5e5,  1e-5},
    Preset{"llama-3.2-1b",   "llama",     16,    2048,  32,   8,  0,   8192,  128256, 131072, true,  false,   5e5,  1e-5},
    Preset{"llama-3.2-3b",   "llama",     28,    3072,  24,   8,  0,   8192,  128256, 131072, true,  false,   5e5,  1e-5},
    Preset{"mistral-7b",     "mistral",   32,    4096,  32,   8,  0,   14336, 32000,  32768,  false, false,   1e4,  1e-5, {}, 4096},
    Preset{"qwen2.5-0.5b",   "qwen2",     24,    896,   14,   2,  0,   4864,  151936, 32768,  true,  true,    1e6,  1e-6},
    Preset{"qwen2.5-1.5b",   "qwen2",     28,    1536,  12,   2,  0,   8960,  151936, 32768,  true,  true,    1e6,  1e-6},
    Preset{"qwen2.5-3b",     "qwen2",     36,    2048,  16,   2,  0,   11008, 151936, 32768,  true,  true,    1e6,  1e-6},
    Preset{"qwen2.5-7b",     "qwen2",     28,    3584,  28,   4,  0,   18944, 152064, 32768,  false, true,    1e6,  1e-6},
    Preset{"qwen2.5-72b",    "qwen2",     80,    8192,  64,   8,  0,   29568, 152064, 32768,  false, true,    1e6,  1e-6},
    Preset{"qwen3-8b",       "qwen3",     36,    4096,  32,   8,  128, 12288, 151936, 40960,  false, false,   1e6,  1e-6},
    Preset{"phi-3-mini",     "phi3",      32,    3072,  32,   32, 0,   8192,  32064,  4096,   false, false,   1e4,  1e-5, {}, 2047},
    Preset{"tinyllama-1.1b", "llama",     22,    2048,  32,   4,  0,   5632,  32000,  2048,   false, false,   1e4,  1e-5},
    Preset{"smollm2-135m",   "llama",     30,    576,   9,    3,  0,   1536,  49152,  8192,   true,  false,   1e5,  1e-5},
    // Mixture of experts                                                                                                 experts, top-k, expert_ffn
    Preset{"mixtral-8x7b",   "mixtral",   32,    4096,  32,   8,  0,   14336, 32000,  32768,  false, false,   1e6,  1e-5, {8,   2, 14336}},
    Preset{"qwen3-30b-a3b",  "qwen3_moe", 48,    2048,  32,   4,  128, 6144,  151936, 40960,  false, false,   1e6,  1e-6, {128, 8, 768}},
    // ... with a shared expert (behind its sigmoid gate) beside 60 routed ones         experts, top-k, expert_ffn, shared, shared_ffn
    Preset{"qwen1.5-moe-a2.7b", "qwen2_moe", 24, 2048,  16,   16, 0,   5632,  151936, 8192,   false, true,    1e6,  1e-6, {60,  4, 1408, 1, 5632}},
    // Gemma 3: 5 of every 6 layers slide                                                                                     window, pattern
    Preset{"gemma-3-27b",    "gemma3",    62,    5376,  32,   16, 128, 21504, 262208, 131072, true,  false,   1e6,  1e-6, {}, 1024, 6},
    Preset{"gemma-3-270m",   "gemma3",    18,    640,   4,    1,  256, 2048,  262144, 32768,  true,  false,   1e6,  1e-6, {}, 512,  6},
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
        m.arch = p.arch;
        m.n_layers = p.n_layers;
        m.hidden = p.hidden;
        m.n_heads = p.n_heads;
        m.n_kv_heads = p.n_kv_heads;
        m.head_dim = p.head_dim > 0 ? p.head_dim : p.hidden / p.n_heads;
        m.ffn = p.ffn;
        m.vocab = p.vocab;
        m.max_ctx = p.max_ctx;
        m.tied_embeddings = p.tied;
        m.qkv_bias = p.qkv_bias;
        m.rope_theta = p.rope_theta;
        m.rms_eps = p.rms_eps;
        set_family_norms(m);
        m.n_experts = p.moe.experts;
        m.n_experts_used = p.moe.used;
        m.expert_ffn = p.moe.expert_ffn;
        m.n_shared_experts = p.moe.shared;
        m.shared_expert_ffn = p.moe.shared_ffn;
        m.shared_expert_gate = p.moe.shared > 0 && m.arch == "qwen2_moe";
        if (p.window > 0) {
            m.sliding_window = p.window;
            m.n_sliding_layers = p.pattern > 0 ? p.n_layers - p.n_layers / p.pattern : p.n_layers;
        }
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
