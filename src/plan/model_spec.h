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
    int64_t norms_per_layer = 2;   // Gemma 3 has four (pre/post attention, pre/post MLP)
    bool qk_norm = false;          // Qwen3 / Gemma 3: an RMSNorm of head_dim on q and on k

    // Mixture of experts; n_experts == 0 is a dense model. A MoE layer holds a router
    // (gate_inp, hidden x n_experts), n_experts gated MLPs of expert_ffn (of which each token
    // runs n_experts_used) and n_shared_experts gated MLPs of shared_expert_ffn that every token
    // runs (Qwen2-MoE's, with its hidden x 1 gate). n_dense_layers of the layers keep a dense
    // MLP of `ffn` instead (Qwen's mlp_only_layers / decoder_sparse_step).
    int64_t n_experts = 0;
    int64_t n_experts_used = 0;  // top-k
    int64_t expert_ffn = 0;      // one expert's intermediate size
    int64_t n_shared_experts = 0;
    int64_t shared_expert_ffn = 0;  // one shared expert's intermediate size
    bool shared_expert_gate = false;
    int64_t n_dense_layers = 0;

    // Layers that attend over a sliding window keep only the last `sliding_window` tokens of
    // KV (Gemma 3: 5 of every 6 layers). 0 sliding layers: every layer keeps the whole context.
    int64_t sliding_window = 0;
    int64_t n_sliding_layers = 0;

    // From a GGUF file only: the real parameter count and bytes of its tensors, and the type
    // holding most of those bytes. Zero / empty when the spec came from a config or preset.
    int64_t gguf_params = 0;
    uint64_t gguf_weight_bytes = 0;
    std::string gguf_weight_type;
    // ... and of those, the routed experts' tensors (ffn_{gate,up,down}_exps, or Mixtral's older
    // per-expert ffn_{gate,up,down}.N).
    int64_t gguf_expert_params = 0;
    uint64_t gguf_expert_bytes = 0;
    // ... and the token embedding's (token_embd.weight).
    uint64_t gguf_embed_bytes = 0;
    // The checkpoint's native precision in bits per weight (16 for HF bf16/fp16 checkpoints).
    double native_bits = 16.0;

    bool is_moe() const { return n_experts > 0; }
    int64_t moe_layers() const { return is_moe() ? n_layers - n_dense_layers : 0; }

    // Parameter count: exact from GGUF tensors when known, otherwise the architecture formula.
    // All experts: what memory holds.
    int64_t params() const;
    // The routed experts' parameters, all layers, all experts (0 for a dense model).
    int64_t routed_expert_params() const;
    // What one token computes with: everything but the routed experts, plus n_experts_used of
    // them per MoE layer (embeddings and head included, like the model cards' "active").
    int64_t active_params() const;
    // The MLP width one token runs through in a layer (sizes activations): ffn for a dense
    // model, top-k x expert_ffn + the shared experts for a MoE one.
    int64_t active_ffn() const;
};

// The llama-family parameter count from hyper-parameters: embeddings, per-layer attention
// (q, k, v, o, optional q/k norms), the MLP (dense: gate, up, down; MoE: router, experts,
// shared experts), the layer norms, final norm, and the output head unless tied.
int64_t param_count_formula(const ModelSpec& m);
// The formula's routed experts alone: moe_layers x n_experts x 3 x hidden x expert_ffn.
int64_t routed_expert_param_formula(const ModelSpec& m);

// Sets what a family implies without saying it, from m.arch (config.json's model_type
// spelling): q/k norms for qwen3, qwen3_moe and gemma3, Gemma 3's four norms per layer.
void set_family_norms(ModelSpec& m);

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
