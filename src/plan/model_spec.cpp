// Reading model hyper-parameters from GGUF metadata and HF config.json, and the parameter-count
// formula used when no tensors are at hand.
#include "plan/model_spec.h"

#include <filesystem>
#include <fstream>
#include <map>

#include "core/paths.h"
#include "gguf/gguf_file.h"

namespace ferry::plan {

int64_t ModelSpec::params() const {
    return gguf_params > 0 ? gguf_params : param_count_formula(*this);
}

int64_t param_count_formula(const ModelSpec& m) {
    const int64_t q_dim = m.n_heads * m.head_dim;
    const int64_t kv_dim = m.n_kv_heads * m.head_dim;
    int64_t per_layer = m.hidden * q_dim         // q
                        + 2 * m.hidden * kv_dim  // k, v
                        + q_dim * m.hidden       // o
                        + 3 * m.hidden * m.ffn   // gate, up, down
                        + 2 * m.hidden;          // attention and MLP norms
    if (m.qkv_bias) per_layer += q_dim + 2 * kv_dim;
    const int64_t embed = m.vocab * m.hidden;
    return embed + m.n_layers * per_layer + m.hidden + (m.tied_embeddings ? 0 : embed);
}

Status validate(ModelSpec& m) {
    if (m.head_dim <= 0 && m.n_heads > 0) m.head_dim = m.hidden / m.n_heads;
    if (m.n_kv_heads <= 0) m.n_kv_heads = m.n_heads;  // no GQA key means plain MHA
    const std::pair<const char*, int64_t> required[] = {
        {"layer count", m.n_layers}, {"hidden size", m.hidden}, {"attention heads", m.n_heads},
        {"head dim", m.head_dim},    {"ffn size", m.ffn},       {"vocab size", m.vocab}};
    for (const auto& [what, v] : required)
        if (v <= 0) return make_error("model '{}': missing or invalid {}", m.name, what);
    if (m.n_heads % m.n_kv_heads != 0)
        return make_error("model '{}': {} attention heads not a multiple of {} KV heads", m.name,
                          m.n_heads, m.n_kv_heads);
    if (m.max_ctx <= 0) m.max_ctx = 4096;  // a conservative default when the source omits it
    return Status::Ok();
}

Expected<ModelSpec> spec_from_hf_config(const nlohmann::json& c, std::string name) {
    auto get = [&](const char* key, int64_t fallback) -> int64_t {
        auto it = c.find(key);
        return it != c.end() && it->is_number() ? it->get<int64_t>() : fallback;
    };
    ModelSpec m;
    m.name = std::move(name);
    m.source = "config.json";
    if (auto it = c.find("model_type"); it != c.end() && it->is_string()) m.arch = *it;
    m.n_layers = get("num_hidden_layers", 0);
    m.hidden = get("hidden_size", 0);
    m.n_heads = get("num_attention_heads", 0);
    m.n_kv_heads = get("num_key_value_heads", m.n_heads);
    m.head_dim = get("head_dim", 0);
    m.ffn = get("intermediate_size", 0);
    m.vocab = get("vocab_size", 0);
    m.max_ctx = get("max_position_embeddings", 0);
    if (auto it = c.find("tie_word_embeddings"); it != c.end() && it->is_boolean())
        m.tied_embeddings = *it;
    if (auto it = c.find("rope_theta"); it != c.end() && it->is_number()) m.rope_theta = *it;
    if (auto it = c.find("rms_norm_eps"); it != c.end() && it->is_number()) m.rms_eps = *it;
    // Qwen2 configs do not spell the bias out; the architecture implies it.
    m.qkv_bias = m.arch == "qwen2" || c.value("attention_bias", false);
    if (auto it = c.find("torch_dtype"); it != c.end() && it->is_string())
        m.native_bits = *it == "float32" ? 32.0 : 16.0;
    if (Status s = validate(m); !s) return s.error();
    return m;
}

Expected<ModelSpec> spec_from_hf_config_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return make_error("cannot open config '{}'", path);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return make_error("'{}' is not a JSON object", path);
    return spec_from_hf_config(j, path);
}

Expected<ModelSpec> spec_from_gguf(const std::string& path) {
    auto opened = gguf::File::open(path);
    if (!opened) return opened.error();
    const gguf::File& f = **opened;

    ModelSpec m;
    m.source = "gguf";
    m.arch = f.get_string("general.architecture").value_or("llama");
    m.name = f.get_string("general.name").value_or(std::filesystem::path(path).filename());
    auto key = [&](const char* suffix) { return f.get_int(m.arch + "." + suffix); };
    m.n_layers = key("block_count").value_or(0);
    m.hidden = key("embedding_length").value_or(0);
    m.n_heads = key("attention.head_count").value_or(0);
    m.n_kv_heads = key("attention.head_count_kv").value_or(m.n_heads);
    m.head_dim = key("attention.key_length").value_or(0);
    m.ffn = key("feed_forward_length").value_or(0);
    m.max_ctx = key("context_length").value_or(0);
    m.vocab = key("vocab_size").value_or(0);
    if (m.vocab == 0) {
        if (const gguf::Array* toks = f.get_array("tokenizer.ggml.tokens"))
            m.vocab = static_cast<int64_t>(toks->items.size());
        else if (const gguf::TensorInfo* emb = f.tensor("token_embd.weight");
                 emb && emb->shape.size() == 2)
            m.vocab = emb->shape[1];
    }
    m.tied_embeddings = f.tensor("output.weight") == nullptr;
    m.qkv_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
    if (auto v = f.get_float(m.arch + ".rope.freq_base")) m.rope_theta = *v;
    if (auto v = f.get_float(m.arch + ".attention.layer_norm_rms_epsilon")) m.rms_eps = *v;

    // The real weights: every tensor's elements and bytes, and the type that holds most bytes
    // (norms stay f32 in every quantized file, so a plain majority would mislead).
    std::map<std::string, uint64_t> bytes_by_type;
    for (const auto& t : f.tensors()) {
        m.gguf_params += t.n_elements;
        m.gguf_weight_bytes += t.n_bytes;
        bytes_by_type[std::string(dtype_name(t.type))] += t.n_bytes;
    }
    uint64_t best = 0;
    for (const auto& [type, bytes] : bytes_by_type)
        if (bytes > best) best = bytes, m.gguf_weight_type = type;
    if (m.gguf_params > 0)
        m.native_bits = 8.0 * static_cast<double>(m.gguf_weight_bytes) / m.gguf_params;

    if (Status s = validate(m); !s) return make_error("{}: {}", path, s.error().message);
    return m;
}

Expected<ModelSpec> load_model_spec(const std::string& model) {
    namespace fs = std::filesystem;
    if (model.empty() || model == "default") {
        auto path = resolve_model_path(model);  // names the fetch script when absent
        if (!path) return path.error();
        return spec_from_gguf(*path);
    }
    if (model.ends_with(".gguf")) return spec_from_gguf(model);
    std::error_code ec;
    if (fs::is_directory(model, ec)) return spec_from_hf_config_file(model + "/config.json");
    if (model.ends_with(".json")) return spec_from_hf_config_file(model);
    return spec_from_preset(model);
}

}  // namespace ferry::plan
