#include "model/gemma3.h"

#include <cmath>

namespace ferry::model {
namespace {

void common(LlamaConfig& c) {
    c.ffn = LlamaConfig::Ffn::GeGLU;
    c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.post_norms = true;
}

// Layer l slides unless it closes a period (transformers' (l + 1) % period, llama.cpp's
// l % period < period - 1: the same layers).
std::vector<bool> periodic(int n_layer, int period) {
    std::vector<bool> out(static_cast<size_t>(n_layer));
    for (int l = 0; l < n_layer; ++l) out[static_cast<size_t>(l)] = (l + 1) % period != 0;
    return out;
}

}  // namespace

Status read_gemma3(const gguf::File& file, LlamaConfig& c) {
    common(c);
    const std::string p = c.arch + ".";
    const std::string pattern_key = p + "attention.sliding_window_pattern";
    if (const auto* arr = file.get_array(pattern_key)) {
        if (static_cast<int>(arr->items.size()) != c.n_layer)
            return make_error("{}: {} has {} entries for {} layers", file.path(), pattern_key,
                              arr->items.size(), c.n_layer);
        c.swa_layers.clear();
        for (const auto& v : arr->items) c.swa_layers.push_back(v.as_int() != 0);
    } else {
        const int64_t period = file.get_int(pattern_key).value_or(6);
        if (period < 0 || period > (1 << 20))
            return make_error("{}: invalid {} {}", file.path(), pattern_key, period);
        // 0 (llama.cpp): every layer slides.
        c.swa_layers =
            period == 0 ? std::vector<bool>() : periodic(c.n_layer, static_cast<int>(period));
    }
    const double theta_swa = file.get_float(p + "rope.freq_base_swa").value_or(10000.0);
    if (Status s = positive_finite(theta_swa, file.path(), p + "rope.freq_base_swa"); !s) return s;
    c.rope_theta_swa = static_cast<float>(theta_swa);
    const int q_scalar = c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim;
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(q_scalar));
    c.final_softcap =
        static_cast<float>(file.get_float(p + "final_logit_softcapping").value_or(0.0));
    if (!(c.final_softcap >= 0))
        return make_error("{}: invalid {}final_logit_softcapping", file.path(), p);
    if (file.get_float(p + "attn_logit_softcapping").value_or(0.0) != 0.0)
        return make_error("{}: attention logit soft-capping (Gemma 2's) is not supported yet",
                          file.path());
    return Status::Ok();
}

Status read_gemma3(const nlohmann::json& j, const std::string& where, LlamaConfig& c) {
    common(c);
    c.norm_plus_one = true;
    auto num = [&](const char* key) -> std::optional<double> {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return std::nullopt;
        if (!it->is_number()) return std::nullopt;
        return it->get<double>();
    };
    // Typed reads: json::value throws on a field of the wrong type (found by the fuzzer).
    const auto field = [&](const char* key) -> const nlohmann::json* {
        auto it = j.find(key);
        return it == j.end() || it->is_null() ? nullptr : &*it;
    };
    std::string act = "gelu_pytorch_tanh";
    if (const auto* v = field("hidden_activation")) {
        if (!v->is_string()) return make_error("{}: hidden_activation is not a string", where);
        act = v->get<std::string>();
    }
    if (act != "gelu_pytorch_tanh")
        return make_error(
            "{}: hidden_activation '{}' is not supported (ferry runs "
            "gelu_pytorch_tanh)",
            where, act);
    const auto* bidirectional = field("use_bidirectional_attention");
    if (bidirectional && !bidirectional->is_boolean())
        return make_error("{}: use_bidirectional_attention is not a boolean", where);
    if (bidirectional && bidirectional->get<bool>())
        return make_error("{}: bidirectional attention (an embedding model) is not supported",
                          where);
    if (num("attn_logit_softcapping"))
        return make_error("{}: attn_logit_softcapping is not supported yet", where);
    if (auto cap = num("final_logit_softcapping")) {
        if (!(*cap > 0)) return make_error("{}: invalid final_logit_softcapping", where);
        c.final_softcap = static_cast<float>(*cap);
    }
    const double q_scalar = num("query_pre_attn_scalar").value_or(256.0);
    if (!(q_scalar > 0)) return make_error("{}: invalid query_pre_attn_scalar", where);
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(q_scalar));

    // Which layers slide: layer_types (the generic reader filled swa_layers from it), else the
    // period transformers 4 wrote.
    if (!j.contains("layer_types")) {
        const auto* p = field("sliding_window_pattern");
        if (!p) p = field("_sliding_window_pattern");
        if (p && !p->is_number_integer())
            return make_error("{}: sliding_window_pattern is not an integer", where);
        const int64_t period = p ? p->get<int64_t>() : 6;
        if (period <= 0 || period > (int64_t{1} << 20))
            return make_error("{}: invalid sliding_window_pattern {}", where, period);
        c.swa_layers = periodic(c.n_layer, static_cast<int>(period));
    }
    // The local base: transformers 4's rope_local_base_freq, 5's
    // rope_parameters.sliding_attention.rope_theta; the global layers' base and scaling were
    // read as any model's (rope_parameters.full_attention in 5, see llama_config.cpp).
    c.rope_theta_swa = static_cast<float>(num("rope_local_base_freq").value_or(10000.0));
    if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
        if (auto s = rp->find("sliding_attention"); s != rp->end() && s->is_object()) {
            if (s->value("rope_type", std::string("default")) != "default")
                return make_error("{}: rope scaling on the sliding layers is not supported", where);
            if (auto t = s->find("rope_theta"); t != s->end() && t->is_number())
                c.rope_theta_swa = t->get<float>();
        }
    }
    if (Status s = positive_finite(c.rope_theta_swa, where, "the local RoPE base"); !s) return s;
    return Status::Ok();
}

}  // namespace ferry::model
