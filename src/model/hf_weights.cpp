#include "model/hf_weights.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace ferry::model {
namespace {

// GGUF's per-layer names against transformers' (llama, mistral, qwen2 and qwen3 share them).
// Phi-3 fuses q/k/v and gate/up: GGUF's attn_qkv and ffn_up (twice n_ff rows) hold them. Gemma
// normalises before and after each block: its MLP's input norm is pre_feedforward_layernorm
// (listed first, so it wins where both exist) and post_attention_layernorm is the attention's
// output norm.
// Mixtral's experts are block_sparse_moe's (w1 gate, w3 up, w2 down), the Qwens' mlp's; Qwen2-MoE
// adds a shared expert with its one-row gate.
constexpr std::array<std::pair<std::string_view, std::string_view>, 26> kLayer = {{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
    {"ffn_up.weight", "mlp.gate_up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
}};

// One expert's matrices, GGUF's (older) per-expert names "ffn_gate.E.weight".
constexpr std::array<std::array<std::string_view, 3>, 3> kExpert = {{
    {"ffn_gate", "block_sparse_moe.experts.{}.w1.weight", "mlp.experts.{}.gate_proj.weight"},
    {"ffn_up", "block_sparse_moe.experts.{}.w3.weight", "mlp.experts.{}.up_proj.weight"},
    {"ffn_down", "block_sparse_moe.experts.{}.w2.weight", "mlp.experts.{}.down_proj.weight"},
}};

}  // namespace

std::vector<std::string> HfWeights::hf_names(const std::string& g) {
    if (g == "token_embd.weight") return {"model.embed_tokens.weight"};
    if (g == "output_norm.weight") return {"model.norm.weight"};
    if (g == "output.weight") return {"lm_head.weight"};
    if (g.rfind("blk.", 0) != 0) return {};
    const size_t dot = g.find('.', 4);
    if (dot == std::string::npos) return {};
    const std::string layer = g.substr(4, dot - 4), rest = g.substr(dot + 1);
    std::vector<std::string> out;
    const std::string prefix = "model.layers." + layer + ".";
    for (const auto& [what, mixtral, qwen] : kExpert) {
        if (!rest.starts_with(std::string(what) + ".") || !rest.ends_with(".weight")) continue;
        const std::string e = rest.substr(what.size() + 1, rest.size() - what.size() - 8);
        if (e.empty() || !std::all_of(e.begin(), e.end(), ::isdigit)) continue;
        for (std::string_view f : {mixtral, qwen}) {
            std::string name(f);
            name.replace(name.find("{}"), 2, e);
            out.push_back(prefix + name);
        }
    }
    for (const auto& [gg, hf] : kLayer)
        if (rest == gg) out.push_back(prefix + std::string(hf));
    return out;
}

std::string HfWeights::hf_name(const std::string& g) {
    auto names = hf_names(g);
    return names.empty() ? std::string() : names[0];
}

const hf::SafeTensor* HfWeights::stored(const hf::ModelDir& dir, const std::string& gguf_name) {
    for (const std::string& hn : hf_names(gguf_name))
        if (const hf::SafeTensor* t = dir.tensor(hn)) return t;
    return nullptr;
}

Expected<std::optional<Tensor>> HfWeights::find(const std::string& name) const {
    const hf::SafeTensor* t = stored(*dir_, name);
    if (!t) return std::optional<Tensor>();
    const std::string& hn = t->name;
    if (t->type != DType::F32 && t->type != DType::F16 && t->type != DType::BF16)
        return make_error("{}: tensor '{}' is {}; ferry reads F32, F16 and BF16 weights",
                          dir_->path(), hn, t->dtype);
    if (t->shape.size() == 1) return std::optional<Tensor>(Tensor(t->data, t->type, {t->shape[0]}));
    if (t->shape.size() == 2)
        return std::optional<Tensor>(Tensor(t->data, t->type, {t->shape[0], t->shape[1]}));
    if (t->shape.size() == 3)
        return std::optional<Tensor>(
            Tensor(t->data, t->type, {t->shape[0], t->shape[1], t->shape[2]}));
    return make_error("{}: tensor '{}' has {} dimensions", dir_->path(), hn, t->shape.size());
}

std::string HfWeights::display_name(const std::string& name) const {
    const hf::SafeTensor* t = stored(*dir_, name);
    const std::string hf = t ? t->name : hf_name(name);
    return hf.empty() ? name : hf + "' ('" + name;
}

int64_t HfWeights::parameter_count() const {
    int64_t n = 0;
    for (const hf::SafeTensor* t : dir_->tensors()) n += t->n_elements;
    return n;
}

std::string HfWeights::tensor_past_layer(int n_layer) const {
    for (const hf::SafeTensor* t : dir_->tensors())
        if (layer_of(t->name, "model.layers.") >= n_layer) return t->name;
    return {};
}

std::map<std::string, WeightFile::TypeTotal> HfWeights::stored_types() const {
    std::map<std::string, TypeTotal> out;
    for (const hf::SafeTensor* t : dir_->tensors()) {
        std::string name = t->dtype;
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        auto& e = out[name];
        ++e.tensors;
        e.bytes += t->n_bytes;
    }
    return out;
}

}  // namespace ferry::model
