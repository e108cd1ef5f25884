#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ferry::model {
namespace {

Status check(const LlamaConfig& c, const std::string& where) {
    if (c.n_expert <= 0 || c.n_expert > 4096 || c.n_expert_used <= 0 ||
        c.n_expert_used > c.n_expert)
        return make_error("{}: {} experts used of {} is not a mixture of experts", where,
                          c.n_expert_used, c.n_expert);
    if (c.n_ff_expert <= 0 || c.n_ff_expert > (1 << 30) || c.n_ff_shared < 0 ||
        c.n_ff_shared > (1 << 30))
        return make_error("{}: invalid expert feed-forward length {} (shared {})", where,
                          c.n_ff_expert, c.n_ff_shared);
    if (!(c.expert_scale > 0) || !std::isfinite(c.expert_scale))
        return make_error("{}: invalid expert weights scale {}", where, c.expert_scale);
    if (c.post_norms)
        return make_error("{}: experts with Gemma's post-block norms are not supported", where);
    return Status::Ok();
}

}  // namespace

Status read_moe(const gguf::File& file, LlamaConfig& c) {
    const std::string p = c.arch + ".";
    const auto n = file.get_int(p + "expert_count");
    if (!n || *n == 0) return Status::Ok();
    auto num = [&](const char* key, int64_t fallback) {
        const int64_t v = file.get_int(p + key).value_or(fallback);
        return v < 0 || v > (1 << 30) ? -1 : static_cast<int>(v);
    };
    c.n_expert = static_cast<int>(std::clamp<int64_t>(*n, -1, 1 << 20));
    if (!file.get_int(p + "expert_used_count"))
        return make_error("{}: {} experts but no {}expert_used_count", file.path(), *n, p);
    c.n_expert_used = num("expert_used_count", 0);
    c.n_ff_expert = num("expert_feed_forward_length", c.n_ff);
    c.n_ff_shared = num("expert_shared_feed_forward_length", 0);
    c.expert_norm = file.get_bool(p + "expert_weights_norm").value_or(c.arch != "qwen2moe");
    c.expert_scale = static_cast<float>(file.get_float(p + "expert_weights_scale").value_or(1.0));
    if (c.expert_scale == 0) c.expert_scale = 1;  // llama.cpp writes 0 for "none"
    // llama.cpp's gating functions: 1 softmax, 2 sigmoid (DeepSeek V3's), 3 softmax-weighted.
    if (auto g = file.get_int(p + "expert_gating_func"); g && *g != 1)
        return make_error(
            "{}: expert gating function {} is not supported (ferry routes by softmax)", file.path(),
            *g);
    if (file.get_int(p + "expert_group_count").value_or(0) > 1)
        return make_error("{}: grouped expert routing (DeepSeek's) is not supported", file.path());
    if (file.get_int(p + "expert_shared_count").value_or(c.n_ff_shared > 0) > 1)
        return make_error("{}: more than one shared expert is not supported", file.path());
    return check(c, file.path());
}

Status read_moe(const nlohmann::json& j, const std::string& where, bool mixtral, LlamaConfig& c) {
    auto int_or = [&](const char* key, int fallback) {
        auto it = j.find(key);
        return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
    };
    // Mixtral's name; the Qwens' num_experts (transformers 5 writes num_local_experts too).
    c.n_expert = int_or("num_local_experts", int_or("num_experts", 0));
    c.n_expert_used = int_or("num_experts_per_tok", 0);
    // Mixtral's intermediate_size is each expert's; Qwen's is the dense layers'.
    c.n_ff_expert = mixtral ? c.n_ff : int_or("moe_intermediate_size", 0);
    c.n_ff_shared = int_or("shared_expert_intermediate_size", 0);
    auto b = j.find("norm_topk_prob");
    c.expert_norm = mixtral || (b != j.end() && b->is_boolean() && b->get<bool>());
    if (int_or("decoder_sparse_step", 1) != 1)
        return make_error(
            "{}: decoder_sparse_step {} mixes dense and sparse layers, which is not "
            "supported yet",
            where, int_or("decoder_sparse_step", 1));
    if (auto m = j.find("mlp_only_layers"); m != j.end() && m->is_array() && !m->empty())
        return make_error(
            "{}: mlp_only_layers (dense layers among the experts) are not supported "
            "yet",
            where);
    if (c.n_expert == 0) return make_error("{}: a mixture of experts without experts", where);
    return check(c, where);
}

void route(const LlamaConfig& c, std::span<const float> logits, int64_t n_tokens, Routing& out) {
    const int E = c.n_expert, k = c.n_expert_used;
    out.tokens.resize(static_cast<size_t>(E));
    out.weights.resize(static_cast<size_t>(E));
    for (auto& v : out.tokens) v.clear();
    for (auto& v : out.weights) v.clear();
    std::vector<int>& order = out.order;
    std::vector<float>& p = out.prob;
    order.resize(static_cast<size_t>(E));
    p.resize(static_cast<size_t>(E));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* l = logits.data() + t * E;
        const float mx = *std::max_element(l, l + E);
        double sum = 0;
        for (int e = 0; e < E; ++e) sum += p[static_cast<size_t>(e)] = std::exp(l[e] - mx);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        double chosen = 0;
        for (int i = 0; i < k; ++i) chosen += p[static_cast<size_t>(order[static_cast<size_t>(i)])];
        const double denom = c.expert_norm ? chosen : sum;
        for (int i = 0; i < k; ++i) {
            const auto e = static_cast<size_t>(order[static_cast<size_t>(i)]);
            out.tokens[e].push_back(static_cast<int32_t>(t));
            out.weights[e].push_back(static_cast<float>(p[e] / denom * c.expert_scale));
        }
    }
}

ExpertLoad expert_load(const LlamaConfig& c, std::span<const int64_t> tokens) {
    ExpertLoad l;
    if (!c.is_moe() || tokens.size() != static_cast<size_t>(c.n_layer) * c.n_expert) return l;
    l.n_expert = c.n_expert;
    l.n_used = c.n_expert_used;
    l.per_expert.assign(static_cast<size_t>(c.n_expert), 0);
    for (int layer = 0; layer < c.n_layer; ++layer) {
        const int64_t* row = tokens.data() + static_cast<size_t>(layer) * c.n_expert;
        const int64_t sum = std::accumulate(row, row + c.n_expert, int64_t{0});
        const int64_t mx = *std::max_element(row, row + c.n_expert);
        if (sum > 0)
            l.worst_layer_imbalance =
                std::max(l.worst_layer_imbalance, static_cast<double>(mx) * c.n_expert / sum);
        for (int e = 0; e < c.n_expert; ++e) l.per_expert[static_cast<size_t>(e)] += row[e];
    }
    const int64_t total = std::accumulate(l.per_expert.begin(), l.per_expert.end(), int64_t{0});
    l.mean = static_cast<double>(total) / c.n_expert;
    l.min = *std::min_element(l.per_expert.begin(), l.per_expert.end());
    l.max = *std::max_element(l.per_expert.begin(), l.per_expert.end());
    l.imbalance = l.mean > 0 ? static_cast<double>(l.max) / l.mean : 0;
    return l;
}

nlohmann::json ExpertLoad::to_json() const {
    return {{"n_expert", n_expert},
            {"n_expert_used", n_used},
            {"tokens_per_expert", per_expert},
            {"mean", mean},
            {"min", min},
            {"max", max},
            {"imbalance", imbalance},
            {"worst_layer_imbalance", worst_layer_imbalance}};
}

}  // namespace ferry::model
