#include "model/llama_config.h"

#include "model/gemma3.h"
#include "model/moe.h"

#include <array>
#include <cmath>
#include <string_view>

namespace ferry::model {
namespace {

// Architectures whose forward pass is the plain Llama block (pre-norm attention with RoPE and
// a SwiGLU MLP). They differ in rotation style, optional q/k/v biases (qwen2), per-head q/k
// RMSNorms (qwen3, which requires them), fused q/k/v and gate/up matrices (phi3) and a mixture
// of experts for the MLP (qwen2moe, qwen3moe; a llama file with experts is Mixtral).
struct ArchTraits {
    std::string_view arch;
    kernels::RopeStyle rope;
    bool qk_norms = false;
    bool moe = false;            // its MLP is always a mixture of experts
    std::string_view hf_type{};  // config.json's model_type, where not the arch's own name
};
constexpr std::array kArchs = {
    ArchTraits{"llama", kernels::RopeStyle::Normal},
    ArchTraits{"mistral", kernels::RopeStyle::Normal},
    ArchTraits{"qwen2", kernels::RopeStyle::Neox},
    ArchTraits{"qwen3", kernels::RopeStyle::Neox, true},
    ArchTraits{"phi3", kernels::RopeStyle::Neox},
    ArchTraits{"gemma3", kernels::RopeStyle::Neox, true, false, "gemma3_text"},  // model/gemma3
    ArchTraits{"qwen2moe", kernels::RopeStyle::Neox, false, true, "qwen2_moe"},  // model/moe
    ArchTraits{"qwen3moe", kernels::RopeStyle::Neox, true, true, "qwen3_moe"},
};
constexpr const char* kArchList = "llama, mistral, qwen2, qwen3, phi3, gemma3, qwen2moe, qwen3moe";
constexpr const char* kModelTypeList =
    "llama, mistral, mixtral, qwen2, qwen3, phi3, gemma3_text, qwen2_moe, qwen3_moe";

const ArchTraits* traits_of(std::string_view arch) {
    for (const auto& a : kArchs)
        if (a.arch == arch) return &a;
    return nullptr;
}

// A config.json model_type's arch: Mixtral is GGUF's llama with experts; the others'
// model_types name their arch.
const ArchTraits* traits_of_model_type(std::string_view type) {
    if (type == "mixtral") return traits_of("llama");
    for (const auto& a : kArchs)
        if (!a.hf_type.empty() ? a.hf_type == type : a.arch == type) return &a;
    return nullptr;
}

}  // namespace

Status positive_finite(double v, std::string_view where, std::string_view key) {
    if (std::isfinite(v) && v > 0 && std::isfinite(static_cast<float>(v))) return Status::Ok();
    return make_error("{}: {} is {}; it must be a positive finite number", where, key, v);
}

std::string gguf_arch_name(std::string_view arch) {
    return arch == "mistral" ? "llama" : std::string(arch);
}

std::optional<ModelTypeArch> arch_of_model_type(std::string_view name) {
    const ArchTraits* t = traits_of_model_type(name);
    if (!t) t = traits_of(name);
    if (!t) return std::nullopt;
    return ModelTypeArch{gguf_arch_name(t->arch), t->qk_norms};
}

Expected<LlamaConfig> read_llama_config(const gguf::File& file) {
    LlamaConfig c;
    auto arch = file.get_string("general.architecture");
    if (!arch) return make_error("{}: missing general.architecture", file.path());
    c.arch = *arch;
    const ArchTraits* traits = traits_of(c.arch);
    if (!traits)
        return make_error("{}: unsupported architecture '{}' (ferry runs {})", file.path(), c.arch,
                          kArchList);
    c.rope_style = traits->rope;
    c.qk_norms = traits->qk_norms;
    c.name = file.get_string("general.name").value_or(c.arch);

    auto need = [&](std::string_view suffix, int& out) -> Status {
        const std::string key = c.arch + "." + std::string(suffix);
        auto v = file.get_int(key);
        if (!v || *v <= 0 || *v > (1 << 30))
            return make_error("{}: missing or invalid {}", file.path(), key);
        out = static_cast<int>(*v);
        return Status::Ok();
    };
    for (auto [key, field] :
         {std::pair{"block_count", &c.n_layer}, std::pair{"embedding_length", &c.n_embd},
          std::pair{"attention.head_count", &c.n_head}, std::pair{"feed_forward_length", &c.n_ff},
          std::pair{"context_length", &c.n_ctx_train}}) {
        if (auto s = need(key, *field); !s) return s.error();
    }
    const std::string p = c.arch + ".";
    c.n_head_kv = static_cast<int>(file.get_int(p + "attention.head_count_kv").value_or(c.n_head));
    if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
        return make_error("{}: {} heads cannot be grouped over {} KV heads", file.path(), c.n_head,
                          c.n_head_kv);
    c.head_dim =
        static_cast<int>(file.get_int(p + "attention.key_length").value_or(c.n_embd / c.n_head));
    c.rope_dim = static_cast<int>(file.get_int(p + "rope.dimension_count").value_or(c.head_dim));
    if (c.head_dim <= 0 || c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2)
        return make_error("{}: invalid head or rope dimension", file.path());
    const double theta = file.get_float(p + "rope.freq_base").value_or(10000.0);
    const double eps = file.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    for (Status s : {positive_finite(theta, file.path(), p + "rope.freq_base"),
                     positive_finite(eps, file.path(), p + "attention.layer_norm_rms_epsilon")})
        if (!s) return s.error();
    c.rope_theta = static_cast<float>(theta);
    c.rms_eps = static_cast<float>(eps);
    // llama.cpp's keys: rope.scaling.type with rope.scaling.factor (older files:
    // rope.scale_linear); as there, a factor without a type is linear.
    const auto type_key = file.get_string(p + "rope.scaling.type");
    const std::string scaling = type_key.value_or("linear");
    const double factor = file.get_float(p + "rope.scaling.factor")
                              .value_or(file.get_float(p + "rope.scale_linear").value_or(1.0));
    if (scaling == "linear" && factor == 1.0) {
    } else if (scaling == "linear") {
        if (!(factor > 0))
            return make_error("{}: invalid {}rope.scaling.factor {}", file.path(), p, factor);
        c.rope_scaling.type = RopeScaling::Type::Linear;
        c.rope_scaling.factor = factor;
    } else if (scaling == "yarn" && factor != 1.0) {
        RopeScaling& s = c.rope_scaling;
        s.type = RopeScaling::Type::Yarn;
        s.factor = factor;
        s.original_ctx = static_cast<int>(
            file.get_int(p + "rope.scaling.original_context_length").value_or(c.n_ctx_train));
        s.beta_fast = file.get_float(p + "rope.scaling.yarn_beta_fast").value_or(32.0);
        s.beta_slow = file.get_float(p + "rope.scaling.yarn_beta_slow").value_or(1.0);
        // llama.cpp's attention factor multiplies the derived one.
        const double attn = file.get_float(p + "rope.scaling.yarn_attn_factor").value_or(1.0);
        s.attention_factor = attn * yarn_default_attention(factor);
        if (file.get_float(p + "rope.scaling.yarn_log_multiplier").value_or(0.0) != 0.0 ||
            file.get_float(p + "rope.scaling.yarn_ext_factor").value_or(1.0) != 1.0)
            return make_error(
                "{}: YaRN with a log multiplier or ext_factor (DeepSeek's) is not "
                "supported yet",
                file.path());
        if (!(factor > 0) || s.original_ctx <= 0)
            return make_error("{}: invalid YaRN rope scaling", file.path());
    } else if (scaling != "none" && scaling != "yarn") {
        return make_error(
            "{}: rope scaling '{}' is not supported yet (ferry applies linear, yarn and Llama "
            "3.1's rope_freqs.weight)",
            file.path(), scaling);
    }
    if (auto w = file.get_int(p + "attention.sliding_window"); w && *w > 0 && *w < c.n_ctx_train)
        c.sliding_window = static_cast<int>(*w);
    if (auto v = file.get_int(p + "vocab_size"))
        c.n_vocab = static_cast<int>(*v);
    else if (const auto* toks = file.get_array("tokenizer.ggml.tokens"))
        c.n_vocab = static_cast<int>(toks->items.size());
    if (c.n_vocab <= 0) return make_error("{}: vocabulary size unknown", file.path());
    if (c.arch == "gemma3")
        if (Status s = read_gemma3(file, c); !s) return s.error();
    if (Status s = read_moe(file, c); !s) return s.error();
    if (traits->moe && !c.is_moe())
        return make_error("{}: a {} file without {}expert_count", file.path(), c.arch, p);
    return c;
}

// A string member of a JSON object, or `fallback` when absent or of another type.
static std::string str_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

Expected<LlamaConfig> read_llama_config(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) return make_error("{}: not a JSON object", where);
    LlamaConfig c;
    c.arch = str_or(j, "model_type", "");
    if (c.arch == "gemma3")
        return make_error(
            "{}: a multimodal Gemma 3 checkpoint (model_type gemma3, weights under "
            "language_model.*) is not supported yet; its text-only sizes (gemma3_text) are",
            where);
    const ArchTraits* traits = traits_of_model_type(c.arch);
    if (!traits)
        return make_error("{}: unsupported model_type '{}' (ferry runs {})", where, c.arch,
                          kModelTypeList);
    const bool mixtral = c.arch == "mixtral";
    c.arch = std::string(traits->arch);
    c.qk_norms = traits->qk_norms;
    c.rope_style = kernels::RopeStyle::Neox;
    c.name = str_or(j, "_name_or_path", where);
    // Every family here gates its MLP with SiLU but Gemma, whose hidden_activation gemma3.cpp
    // reads (transformers ignores a Gemma 3 config's hidden_act). Another activation would be
    // run as SiLU and answer wrongly without a word.
    if (auto act = j.find("hidden_act"); c.arch != "gemma3" && act != j.end() && !act->is_null())
        if (!act->is_string() || (*act != "silu" && *act != "swish"))
            return make_error("{}: hidden_act {} is not supported (ferry runs {} with silu)", where,
                              act->dump(), c.arch);
    auto need = [&](const char* key, int& out) -> Status {
        auto it = j.find(key);
        if (it == j.end() || !it->is_number_integer() || *it <= 0 || *it > (1 << 30))
            return make_error("{}: missing or invalid {}", where, key);
        out = it->get<int>();
        return Status::Ok();
    };
    for (auto [key, field] :
         {std::pair{"num_hidden_layers", &c.n_layer}, std::pair{"hidden_size", &c.n_embd},
          std::pair{"num_attention_heads", &c.n_head}, std::pair{"intermediate_size", &c.n_ff},
          std::pair{"vocab_size", &c.n_vocab}}) {
        if (auto s = need(key, *field); !s) return s.error();
    }
    auto int_or = [&](const char* key, int fallback) {
        auto it = j.find(key);
        return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
    };
    c.n_head_kv = int_or("num_key_value_heads", c.n_head);
    if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
        return make_error("{}: {} heads cannot be grouped over {} KV heads", where, c.n_head,
                          c.n_head_kv);
    c.head_dim = int_or("head_dim", c.n_embd / c.n_head);
    if (c.head_dim <= 0 || c.head_dim % 2)
        return make_error("{}: invalid head dimension {}", where, c.head_dim);
    // partial_rotary_factor: top level (transformers 4) or in rope_parameters (5).
    double partial = 1.0;
    for (const nlohmann::json* o :
         {&j, j.contains("rope_parameters") && j["rope_parameters"].is_object()
                  ? &j["rope_parameters"]
                  : nullptr})
        if (o && o->contains("partial_rotary_factor") && (*o)["partial_rotary_factor"].is_number())
            partial = (*o)["partial_rotary_factor"].get<double>();
    c.rope_dim = static_cast<int>(c.head_dim * partial);
    if (!(partial > 0 && partial <= 1) || c.rope_dim <= 0 || c.rope_dim % 2)
        return make_error("{}: partial_rotary_factor {} leaves {} of {} dims to rotate", where,
                          partial, c.rope_dim, c.head_dim);
    c.n_ctx_train = int_or("max_position_embeddings", 4096);
    auto num_or = [&](const char* key, double fallback) {
        auto it = j.find(key);
        return it != j.end() && it->is_number() ? it->get<double>() : fallback;
    };
    c.rope_theta = static_cast<float>(num_or("rope_theta", 10000.0));
    c.rms_eps = static_cast<float>(num_or("rms_norm_eps", 1e-6));
    // transformers 5 writes rope_parameters {rope_theta, rope_type, ...} where 4 wrote
    // rope_theta and rope_scaling {rope_type | type, ...}; both are read.
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
        auto rs = j.find(key);
        if (rs == j.end() || rs->is_null()) continue;
        if (!rs->is_object()) return make_error("{}: {} is not an object", where, key);
        // transformers 5's Gemma 3 keys them by layer type; the global layers' are the model's
        // (gemma3.cpp reads the sliding ones).
        if (auto full = rs->find("full_attention"); full != rs->end() && full->is_object())
            rs = full;
        if (auto t = rs->find("rope_theta"); t != rs->end() && t->is_number())
            c.rope_theta = t->get<float>();
        const std::string type = str_or(*rs, "rope_type", str_or(*rs, "type", "default"));
        if (type == "default") continue;
        auto param = [&](const char* k, double& out) -> Status {
            auto it = rs->find(k);
            if (it == rs->end() || !it->is_number() || !(it->get<double>() > 0))
                return make_error("{}: rope_scaling '{}' needs a positive {}", where, type, k);
            out = it->get<double>();
            return Status::Ok();
        };
        RopeScaling& s = c.rope_scaling;
        if (Status st = param("factor", s.factor); !st) return st.error();
        if (type == "linear") {
            s.type = RopeScaling::Type::Linear;
        } else if (type == "llama3") {
            s.type = RopeScaling::Type::Llama3;
            double ctx = 0;
            for (auto [k, out] : {std::pair{"low_freq_factor", &s.low_freq_factor},
                                  std::pair{"high_freq_factor", &s.high_freq_factor},
                                  std::pair{"original_max_position_embeddings", &ctx}})
                if (Status st = param(k, *out); !st) return st.error();
            s.original_ctx = static_cast<int>(ctx);
            if (!(s.high_freq_factor > s.low_freq_factor))
                return make_error(
                    "{}: rope_scaling 'llama3' needs high_freq_factor above "
                    "low_freq_factor",
                    where);
        } else if (type == "yarn") {
            s.type = RopeScaling::Type::Yarn;
            auto num = [&](const char* k, double fallback) {
                auto it = rs->find(k);
                return it != rs->end() && it->is_number() ? it->get<double>() : fallback;
            };
            // transformers 4 fell back to max_position_embeddings; 5 requires it.
            s.original_ctx = static_cast<int>(
                num("original_max_position_embeddings", int_or("max_position_embeddings", 4096)));
            s.beta_fast = num("beta_fast", 32);
            s.beta_slow = num("beta_slow", 1);
            s.attention_factor = num("attention_factor", 0);
            if (rs->contains("truncate") && (*rs)["truncate"].is_boolean())
                s.truncate = (*rs)["truncate"].get<bool>();
            if (rs->contains("mscale") || rs->contains("mscale_all_dim"))
                return make_error(
                    "{}: rope_scaling 'yarn' with mscale (DeepSeek's) is not "
                    "supported yet",
                    where);
            if (s.original_ctx <= 0 || !(s.beta_fast > 0) || !(s.beta_slow > 0))
                return make_error("{}: invalid rope_scaling 'yarn' parameters", where);
        } else {
            return make_error(
                "{}: rope_scaling '{}' is not supported yet (ferry applies linear, llama3 and "
                "yarn)",
                where, type);
        }
    }
    for (Status s : {positive_finite(c.rope_theta, where, "rope_theta"),
                     positive_finite(c.rms_eps, where, "rms_norm_eps")})
        if (!s) return s.error();
    // The sliding window, where every layer has it: layer_types (transformers 5) says which
    // layers slide; Qwen2's use_sliding_window / max_window_layers said it before; Mistral's
    // and Phi-3's sliding_window alone means every layer.
    const int window = int_or("sliding_window", 0);
    int n_sliding = 0;
    if (auto lt = j.find("layer_types"); lt != j.end() && lt->is_array()) {
        if (static_cast<int>(lt->size()) != c.n_layer)
            return make_error("{}: layer_types has {} entries for {} layers", where, lt->size(),
                              c.n_layer);
        for (const auto& t : *lt) {
            if (t != "sliding_attention" && t != "full_attention")
                return make_error("{}: layer type {} is not supported", where, t.dump());
            c.swa_layers.push_back(t == "sliding_attention");
            n_sliding += t == "sliding_attention";
        }
    } else if (j.contains("use_sliding_window")) {
        const auto& u = j["use_sliding_window"];
        const int first = int_or("max_window_layers", 0);
        if (u.is_boolean() && u.get<bool>()) n_sliding = std::max(0, c.n_layer - first);
    } else {
        n_sliding = c.n_layer;
    }
    if (window > 0 && n_sliding > 0 && window < c.n_ctx_train) {
        c.sliding_window = window;
        // Qwen2's max_window_layers: the layers from it on slide.
        if (c.swa_layers.empty() && n_sliding != c.n_layer)
            for (int l = 0; l < c.n_layer; ++l) c.swa_layers.push_back(l >= c.n_layer - n_sliding);
    }
    if (c.swa_layers.size() && c.all_layers_slide()) c.swa_layers.clear();
    if (c.arch == "gemma3")
        if (Status s = read_gemma3(j, where, c); !s) return s.error();
    if (traits->moe || mixtral)
        if (Status s = read_moe(j, where, mixtral, c); !s) return s.error();
    if (c.sliding_window == 0) c.swa_layers.clear();
    return c;
}

}  // namespace ferry::model
