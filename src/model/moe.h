// Mixture-of-experts: the MoE block's hyper-parameters as GGUF and config.json spell them, and
// the router's choice for a batch. The block itself (model/llama.cpp) is the Llama MLP's
// SwiGLU per expert, each expert's tokens gathered and multiplied together.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/llama_config.h"

namespace ferry::model {

// GGUF `<arch>.expert_count`, `expert_used_count`, `expert_feed_forward_length` (else
// feed_forward_length, as Mixtral's llama files have it), `expert_shared_feed_forward_length`,
// `expert_weights_norm` (default: on but for qwen2moe, as llama.cpp runs them),
// `expert_weights_scale`; a gating function other than softmax and expert groups are refused.
// No expert_count: a dense model, left as it is.
Status read_moe(const gguf::File& file, LlamaConfig& c);
// config.json of Mixtral (num_local_experts, intermediate_size per expert), Qwen2-MoE and
// Qwen3-MoE (num_experts, moe_intermediate_size, norm_topk_prob, shared_expert_intermediate_size).
// Dense layers among the sparse ones (decoder_sparse_step > 1, mlp_only_layers) are refused.
Status read_moe(const nlohmann::json& j, const std::string& where, bool mixtral, LlamaConfig& c);

// Which tokens each expert takes, and with what weight: per expert, token indices in increasing
// order and their weights, so one gather and one product per expert serve the batch.
struct Routing {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> weights;
    // route()'s working space, kept with its result so a step reuses what the last allocated.
    std::vector<int> order;
    std::vector<float> prob;
};
// From the router's logits ({n_tokens, n_expert} row-major, on the host): each token's
// n_expert_used highest-scoring experts (the lower index first on a tie, as torch.topk), weighted
// by the softmax over all experts, renormalised over the chosen ones where c.expert_norm, times
// c.expert_scale.
void route(const LlamaConfig& c, std::span<const float> logits, int64_t n_tokens, Routing& out);

// How evenly the router spread tokens (`bench`): per expert, tokens routed to it summed over the
// layers; imbalance is the busiest expert's share over the mean (1: even), also per layer.
struct ExpertLoad {
    int n_expert = 0, n_used = 0;  // n_expert 0: a dense model
    std::vector<int64_t> per_expert;
    double mean = 0;
    int64_t min = 0, max = 0;
    double imbalance = 0, worst_layer_imbalance = 0;
    nlohmann::json to_json() const;
};
// From LlamaModel::expert_tokens() ([layer * n_expert + expert]).
ExpertLoad expert_load(const LlamaConfig& c, std::span<const int64_t> tokens);

}  // namespace ferry::model
