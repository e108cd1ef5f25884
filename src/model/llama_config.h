// Hyper-parameters of a Llama-family model, read from a GGUF file's `<arch>.*` metadata or from
// a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include "core/status.h"

#include "gguf/gguf_file.h"
#include "kernels/backend.h"
#include "model/rope.h"

namespace ferry::model {

struct LlamaConfig {
    std::string arch;  // "llama", "qwen2", ...
    std::string name;  // general.name
    int n_layer = 0;
    int n_embd = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    int n_ff = 0;
    int n_vocab = 0;
    int n_ctx_train = 0;
    int rope_dim = 0;
    float rope_theta = 10000.0f;
    float rms_eps = 1e-5f;
    kernels::RopeStyle rope_style = kernels::RopeStyle::Normal;
    // A GGUF's Llama 3.1 scaling is its rope_freqs.weight tensor instead (LlamaModel reads it).
    RopeScaling rope_scaling;
    // > 0: the sliding layers attend to the last sliding_window positions only: every layer
    // (Mistral, Phi-3) unless swa_layers says which (Gemma 3 interleaves them with global ones).
    int sliding_window = 0;
    std::vector<bool> swa_layers;  // per layer; empty: all
    // > 0: sliding layers rotate with this base and without the rope scaling (Gemma 3's local
    // base); 0: every layer rotates alike.
    float rope_theta_swa = 0;

    // The few places the families' blocks differ (model/families.cpp reads them).
    enum class Ffn { SwiGLU, GeGLU };  // silu(gate) * up, or gelu_tanh(gate) * up (Gemma)
    Ffn ffn = Ffn::SwiGLU;
    float embed_scale = 1;  // the token embedding times this (Gemma: sqrt(n_embd))
    // Gemma's sandwich: each block's output normalised again before the residual add
    // (post_attention_norm, post_ffw_norm).
    bool post_norms = false;
    // transformers' Gemma stores RMSNorm weights w and scales by 1 + w; GGUF stores 1 + w.
    bool norm_plus_one = false;
    float attn_scale = 0;     // q.k scale; 0: 1 / sqrt(head_dim)
    float final_softcap = 0;  // > 0: logits = cap * tanh(logits / cap)
    bool qk_norms = false;    // per-head RMSNorms of q and k before the rotation (Qwen3, Gemma 3)

    // Mixture of experts (model/moe.h; n_expert 0: every layer's MLP is dense): each token's MLP
    // is the weighted sum of the n_expert_used of n_expert SwiGLU experts (of n_ff_expert) its
    // router scores highest, weighted by the softmax of the router's logits, renormalised over
    // the chosen ones where expert_norm (Mixtral, Qwen3-MoE), times expert_scale; plus, where
    // n_ff_shared > 0, a shared expert every token goes through, scaled by the sigmoid of its
    // own gate (Qwen2-MoE).
    int n_expert = 0;
    int n_expert_used = 0;
    int n_ff_expert = 0;
    int n_ff_shared = 0;
    bool expert_norm = true;
    float expert_scale = 1;
    bool is_moe() const { return n_expert > 0; }

    // The window layer `l` attends within (0: the whole context).
    int window(int l) const {
        return swa_layers.empty() || swa_layers[static_cast<size_t>(l)] ? sliding_window : 0;
    }
    // The smallest window any layer has (0: every layer sees the whole context).
    int smallest_window() const {
        int w = 0;
        for (int l = 0; l < n_layer; ++l)
            if (const int x = window(l); x > 0 && (w == 0 || x < w)) w = x;
        return w;
    }
    // Layers [begin, end) that attend within a window.
    int window_layers(int begin, int end) const {
        int n = 0;
        for (int l = begin; l < end; ++l) n += window(l) > 0;
        return n;
    }
    bool all_layers_slide() const {
        if (sliding_window <= 0) return false;
        for (bool s : swa_layers)
            if (!s) return false;
        return true;
    }

    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
    // Bytes of K and V one token occupies in the cache for a given element size.
    size_t kv_bytes_per_token(size_t elem_bytes) const {
        return 2ull * n_layer * kv_dim() * elem_bytes;
    }
};

// The GGUF general.architecture an arch is written as: "llama" for mistral (as llama.cpp's
// converter writes it), the arch's own name otherwise.
std::string gguf_arch_name(std::string_view arch);
// A config.json model_type (or a GGUF architecture) as ferry runs it: the GGUF architecture it
// is written as (Mistral and Mixtral are llama files) and whether that architecture has
// per-head q/k norms; nullopt for one ferry does not run.
struct ModelTypeArch {
    std::string gguf_arch;
    bool qk_norms = false;
};
std::optional<ModelTypeArch> arch_of_model_type(std::string_view name);

// A RoPE base or an RMSNorm epsilon read from a file (`key` at `where`): they only ever divide
// or sit under a root, so a zero, negative or non-finite one turns every activation into NaN
// and the model would answer with nothing. Also refused: one a float cannot hold.
Status positive_finite(double v, std::string_view where, std::string_view key);

// Fails with a message naming the missing key or the unsupported architecture.
Expected<LlamaConfig> read_llama_config(const gguf::File& file);
// From config.json (`where` names it in messages). Weights from such a directory keep
// transformers' rotate-half order for q and k, so every architecture rotates NeoX style here
// (GGUF's llama files are permuted to adjacent pairs by the converter). A rope scaling it does
// not implement is refused, as are sliding windows on some layers only. Rope scaling: linear and
// llama3; others are refused by name.
Expected<LlamaConfig> read_llama_config(const nlohmann::json& config, const std::string& where);

}  // namespace ferry::model
