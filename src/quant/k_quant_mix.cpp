#include "quant/k_quant_mix.h"

#include <algorithm>
#include <charconv>

#include "quant/quantize.h"

namespace ferry::quant {
namespace {

// The layer of "blk.N....", or -1.
int layer_of(const std::string& name) {
    if (!name.starts_with("blk.")) return -1;
    int l = -1;
    const char* b = name.data() + 4;
    const auto [end, ec] = std::from_chars(b, name.data() + name.size(), l);
    return ec == std::errc() && end < name.data() + name.size() && *end == '.' ? l : -1;
}

bool contains(const std::string& name, const char* what) {
    return name.find(what) != std::string::npos;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

}  // namespace

KMixModel k_mix_model(const std::vector<KMixTensor>& tensors) {
    KMixModel m;
    int64_t q_rows = 0, k_rows = 0;
    for (const auto& t : tensors) {
        m.n_layers = std::max(m.n_layers, layer_of(t.name) + 1);
        if (t.name == "output.weight") m.tied_output = false;
        if (t.shape.size() == 3 && contains(t.name, "_exps."))
            m.n_experts = std::max(m.n_experts, t.shape[2]);
        if (t.shape.size() >= 2 && layer_of(t.name) == 0) {
            if (t.name.ends_with("attn_q.weight")) q_rows = t.shape[1];
            if (t.name.ends_with("attn_k.weight")) k_rows = t.shape[1];
        }
    }
    // Older mixtures store one tensor per expert: blk.N.ffn_down.E.weight.
    if (m.n_experts == 0)
        for (const auto& t : tensors)
            if (layer_of(t.name) == 0 && contains(t.name, ".ffn_down.") &&
                !t.name.ends_with(".ffn_down.weight"))
                ++m.n_experts;
    m.llama_70b = m.n_layers == 80 && k_rows > 0 && k_rows < q_rows;
    return m;
}

DType k_mix_base(KMix mix) {
    return mix == KMix::Q4_K_M ? DType::Q4_K : DType::Q5_K;
}

uint32_t k_mix_file_type(KMix mix) {
    return mix == KMix::Q4_K_M ? 15 : 17;
}

DType k_mix_type(KMix mix, const KMixModel& model, const std::string& name, size_t n_dims,
                 int64_t row) {
    const DType base = k_mix_base(mix);
    if (const DType t = type_for_tensor(base, name, n_dims, row); t == DType::F32) return t;
    const int layer = layer_of(name), n = model.n_layers;
    const bool eight_experts = model.n_experts == 8;
    DType t = base;
    if (name == "output.weight" || (model.tied_output && name == "token_embd.weight")) {
        // The head: Q6_K, or Q8_0 where its rows do not split into the base's blocks. An untied
        // token embedding keeps the base type.
        t = row % dtype_info(base).block_size != 0 ? DType::Q8_0 : DType::Q6_K;
    } else if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") ||
               contains(name, "attn_v.weight")) {
        // attn_v and the fused tensors that hold it: a share of the layers get Q6_K.
        if (use_more_bits(layer, n)) t = DType::Q6_K;
        if (model.llama_70b && t == DType::Q4_K) t = DType::Q5_K;
        if (eight_experts) t = DType::Q8_0;
    } else if (contains(name, "attn_k.weight")) {
        if (eight_experts) t = DType::Q8_0;
    } else if (contains(name, "attn_output.weight")) {
        if (eight_experts) t = DType::Q5_K;
    } else if (contains(name, "ffn_down")) {
        if (use_more_bits(layer, n)) t = DType::Q6_K;
    }
    return fallback_for(t, row);
}

}  // namespace ferry::quant
