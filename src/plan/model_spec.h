// The hyper-parameters the planner needs to size a model, whatever it was described by: a GGUF
// file, a Hugging Face config.json, or a built-in preset of a well-known public model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ferry::plan {

struct ModelSpec {
    std::string name;            // preset name, GGUF general.name, or the config's path
    std::string source;          // "preset", "gguf" or "config.json"
    std::string arch = "llama";  // decoder family; all supported ones share the llama layout
    int64_t n_layers = 0;
    int64_t hidden = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;  // usually hidden / n_heads, but some models set it explicitly
    int64_t ffn = 0;       // intermediate size of the gated MLP
    int64_t vocab = 0;
    int64_t max_ctx = 0;           // trained context length
    bool tied_embeddings = false;  // output projection shares the token embedding
    bool qkv_bias = false;         // Qwen2 adds biases to the q, k and v projections
    double rope_theta = 10000.0;   // RoPE base frequency
    double rms_eps = 1e-5;         // RMSNorm epsilon

    // From a GGUF file only: the real parameter count and bytes of its tensors, and the type
    // holding most of those bytes. Zero / empty when the spec came from a config or preset.
    int64_t gguf_params = 0;
    uint64_t gguf_weight_bytes = 0;
    std::string gguf_weight_type;
    // The checkpoint's native precision in bits per weight (16 for HF bf16/fp16 checkpoints).
    double native_bits = 16.0;

    // Parameter count: exact from GGUF tensors when known, otherwise the architecture formula.
    int64_t params() const;
};

// The llama-family parameter count from hyper-parameters: embeddings, per-layer attention
// (q, k, v, o), gated MLP (gate, up, down), two RMSNorms per layer, final norm, and the output
// head unless tied.
int64_t param_count_formula(const ModelSpec& m);

// Checks the fields the planner divides by or multiplies with; fills head_dim if missing.
Status validate(ModelSpec& m);

// Built-in presets (public config.json values of the named models).
std::vector<std::string> preset_names();
Expected<ModelSpec> spec_from_preset(std::string_view name);

Expected<ModelSpec> spec_from_hf_config(const nlohmann::json& config, std::string name);
Expected<ModelSpec> spec_from_hf_config_file(const std::string& path);
Expected<ModelSpec> spec_from_gguf(const std::string& path);

// Resolves what the user typed after --model: "" or "default" → the default GGUF
// (core/paths.h: `${FERRY_HOME:-~/.cache/ferry}/models/SmolLM2-135M-Instruct.Q4_1.gguf`); a path
// ending in .gguf → GGUF; a .json file or a directory holding config.json → HF config;
// anything else → a preset name (case-insensitive).
Expected<ModelSpec> load_model_spec(const std::string& model);

}  // namespace ferry::plan
