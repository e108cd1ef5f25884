// Reading model hyper-parameters from GGUF metadata and HF config.json, and the parameter-count
// formula used when no tensors are at hand.
#include "plan/model_spec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/paths.h"
#include "gguf/gguf_file.h"

namespace ferry::plan {

int64_t ModelSpec::params() const {
    return gguf_params > 0 ? gguf_params : param_count_formula(*this);
}

int64_t ModelSpec::routed_expert_params() const {
    if (!is_moe()) return 0;
    return gguf_expert_params > 0 ? gguf_expert_params : routed_expert_param_formula(*this);
}

int64_t ModelSpec::active_params() const {
    const int64_t routed = routed_expert_params();
    if (routed == 0) return params();
    // Every routed expert of a layer has the same size, so k of E of them is routed x k / E.
    return params() - routed + routed / n_experts * n_experts_used;
}

int64_t ModelSpec::active_ffn() const {
    if (!is_moe()) return ffn;
    const int64_t moe = n_experts_used * expert_ffn + n_shared_experts * shared_expert_ffn;
    return n_dense_layers > 0 ? std::max(ffn, moe) : moe;
}

namespace {

// The formulas in long double: exact below 2^64, so for every shape validate() lets through
// (kMaxParams), and without overflow for the absurd ones it refuses.
using Wide = long double;
constexpr Wide kMaxParams = 1e15L;

Wide routed_params(const ModelSpec& m) {
    return Wide(m.moe_layers()) * m.n_experts * 3 * m.hidden * m.expert_ffn;
}

Wide all_params(const ModelSpec& m) {
    const Wide q_dim = Wide(m.n_heads) * m.head_dim;
    const Wide kv_dim = Wide(m.n_kv_heads) * m.head_dim;
    const Wide hidden = m.hidden;
    Wide per_layer = hidden * q_dim                       // q
                     + 2 * hidden * kv_dim                // k, v
                     + q_dim * hidden                     // o
                     + Wide(m.norms_per_layer) * hidden;  // attention and MLP norms
    if (m.qkv_bias) per_layer += q_dim + 2 * kv_dim;
    if (m.qk_norm) per_layer += 2 * Wide(m.head_dim);
    const Wide dense_mlp = 3 * hidden * m.ffn;  // gate, up, down
    // A MoE layer: the router (gate_inp), its shared experts and their gate; the routed
    // experts are routed_params'.
    const Wide moe_mlp = hidden * m.n_experts +
                         Wide(m.n_shared_experts) * 3 * hidden * m.shared_expert_ffn +
                         (m.shared_expert_gate ? hidden : 0);
    const Wide embed = Wide(m.vocab) * hidden;
    return embed + Wide(m.n_layers) * per_layer + Wide(m.n_layers - m.moe_layers()) * dense_mlp +
           Wide(m.moe_layers()) * moe_mlp + routed_params(m) + hidden +
           (m.tied_embeddings ? 0 : embed);
}

}  // namespace

int64_t routed_expert_param_formula(const ModelSpec& m) {
    return static_cast<int64_t>(routed_params(m));
}

int64_t param_count_formula(const ModelSpec& m) {
    return static_cast<int64_t>(all_params(m));
}

void set_family_norms(ModelSpec& m) {
    const bool gemma = m.arch == "gemma3" || m.arch == "gemma3_text";
    m.qk_norm = m.arch == "qwen3" || m.arch == "qwen3_moe" || gemma;
    m.norms_per_layer = gemma ? 4 : 2;
}

Status validate(ModelSpec& m) {
    if (m.head_dim <= 0 && m.n_heads > 0) m.head_dim = m.hidden / m.n_heads;
    if (m.n_kv_heads <= 0) m.n_kv_heads = m.n_heads;            // no GQA key means plain MHA
    if (m.is_moe() && m.expert_ffn <= 0) m.expert_ffn = m.ffn;  // Mixtral: intermediate_size
    const std::pair<const char*, int64_t> required[] = {{"layer count", m.n_layers},
                                                        {"hidden size", m.hidden},
                                                        {"attention heads", m.n_heads},
                                                        {"head dim", m.head_dim},
                                                        {"vocab size", m.vocab}};
    for (const auto& [what, v] : required)
        if (v <= 0) return make_error("model '{}': missing or invalid {}", m.name, what);
    if (m.n_heads % m.n_kv_heads != 0)
        return make_error("model '{}': {} attention heads not a multiple of {} KV heads", m.name,
                          m.n_heads, m.n_kv_heads);
    if (m.n_experts < 0) return make_error("model '{}': {} experts", m.name, m.n_experts);
    if (m.is_moe()) {
        if (m.n_experts_used < 1 || m.n_experts_used > m.n_experts)
            return make_error("model '{}': {} experts used per token of {} (need 1..{})", m.name,
                              m.n_experts_used, m.n_experts, m.n_experts);
        if (m.expert_ffn <= 0)
            return make_error("model '{}': missing or invalid expert ffn size", m.name);
        if (m.n_shared_experts < 0 || (m.n_shared_experts > 0 && m.shared_expert_ffn <= 0))
            return make_error("model '{}': {} shared experts of ffn size {}", m.name,
                              m.n_shared_experts, m.shared_expert_ffn);
        if (m.n_dense_layers < 0 || m.n_dense_layers >= m.n_layers)
            return make_error("model '{}': {} dense layers of {}", m.name, m.n_dense_layers,
                              m.n_layers);
    }
    if (m.n_layers > m.moe_layers() && m.ffn <= 0)
        return make_error("model '{}': missing or invalid ffn size", m.name);
    if (m.n_sliding_layers < 0 || m.n_sliding_layers > m.n_layers ||
        (m.n_sliding_layers > 0 && m.sliding_window <= 0))
        return make_error("model '{}': {} sliding layers of {} with a window of {}", m.name,
                          m.n_sliding_layers, m.n_layers, m.sliding_window);
    if (m.max_ctx <= 0) m.max_ctx = 4096;  // a conservative default when the source omits it
    // Past this the counts would wrap (a config's sizes are whatever its JSON says); the largest
    // models published are near 2e12.
    if (const Wide p = all_params(m); p > kMaxParams)
        return make_error(
            "model '{}': its sizes give {:.3g} parameters, more than ferry plans for "
            "({:.0e})",
            m.name, double(p), double(kMaxParams));
    return Status::Ok();
}

namespace {

// The config.json model types whose layers the formula describes. Anything else is refused by
// name rather than counted as a llama it is not.
constexpr std::array<std::string_view, 10> kHfTypes = {
    "llama",  "mistral",     "qwen2",   "qwen3",     "phi3",
    "gemma3", "gemma3_text", "mixtral", "qwen2_moe", "qwen3_moe"};

// Keys of MoE designs the planner does not model (DeepSeek's dense-first layers, grouped
// routing, layer frequencies, routed/shared split); refused wherever they appear with a value.
constexpr std::array<const char*, 6> kUnmodeledMoeKeys = {
    "first_k_dense_replace",    "moe_layer_freq", "n_routed_experts", "n_group", "topk_group",
    "interleave_moe_layer_step"};

bool has_value(const nlohmann::json& c, const char* key) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) return false;
    if (it->is_number()) return it->get<double>() != 0;
    if (it->is_array() || it->is_object()) return !it->empty();
    return true;
}

// blk.N.ffn_{gate,up,down}_exps.weight (all experts in one tensor), or the older Mixtral
// GGUFs' blk.N.ffn_{gate,up,down}.E.weight (one tensor per expert).
bool is_routed_expert_tensor(std::string_view name) {
    if (!name.starts_with("blk.")) return false;
    const size_t dot = name.find('.', 4);
    if (dot == std::string_view::npos) return false;
    const std::string_view rest = name.substr(dot + 1);
    for (std::string_view p : {"ffn_gate", "ffn_up", "ffn_down"}) {
        if (!rest.starts_with(p)) continue;
        const std::string_view tail = rest.substr(p.size());
        if (tail.starts_with("_exps.")) return true;
        if (tail.size() > 1 && tail[0] == '.' && std::isdigit(static_cast<unsigned char>(tail[1])))
            return true;
    }
    return false;
}

}  // namespace

Expected<ModelSpec> spec_from_hf_config(const nlohmann::json& top, std::string name) {
    std::string type = "llama";  // configs without a model_type are read as llama
    if (auto it = top.find("model_type"); it != top.end() && it->is_string()) type = *it;
    if (std::find(kHfTypes.begin(), kHfTypes.end(), type) == kHfTypes.end())
        return make_error("{}: model_type '{}' is not one ferry plan models ({})", name, type,
                          fmt::join(kHfTypes, ", "));
    // Gemma 3's multimodal config nests the language model under text_config; the vision tower
    // (SigLIP, ~0.4 B parameters) is not counted.
    const bool gemma = type == "gemma3" || type == "gemma3_text";
    const nlohmann::json* text = &top;
    if (type == "gemma3") {
        auto it = top.find("text_config");
        if (it == top.end() || !it->is_object())
            return make_error("{}: a gemma3 config without a text_config object", name);
        text = &*it;
    }
    const nlohmann::json& c = *text;
    for (const char* key : kUnmodeledMoeKeys)
        if (has_value(c, key))
            return make_error("{}: '{}' is set; ferry plan does not model that MoE layout", name,
                              key);
    const bool mixtral = type == "mixtral", qwen_moe = type == "qwen2_moe" || type == "qwen3_moe";
    for (const char* key : {"num_local_experts", "num_experts", "num_experts_per_tok"})
        if (!mixtral && !qwen_moe && has_value(c, key))
            return make_error(
                "{}: '{}' on model_type '{}'; ferry plan models experts for mixtral, qwen2_moe "
                "and qwen3_moe only",
                name, key, type);

    // Gemma 3's configs leave most fields to Gemma3TextConfig's defaults (gemma-3-27b-it's
    // text_config has no vocab_size, rope_theta or sliding_window_pattern).
    auto get = [&](const char* key, int64_t fallback) -> int64_t {
        auto it = c.find(key);
        return it != c.end() && it->is_number() ? it->get<int64_t>() : fallback;
    };
    ModelSpec m;
    m.name = std::move(name);
    m.source = "config.json";
    m.arch = type;
    m.n_layers = get("num_hidden_layers", gemma ? 26 : 0);
    m.hidden = get("hidden_size", gemma ? 2304 : 0);
    m.n_heads = get("num_attention_heads", gemma ? 8 : 0);
    m.n_kv_heads = get("num_key_value_heads", gemma ? 4 : m.n_heads);
    m.head_dim = get("head_dim", gemma ? 256 : 0);
    m.ffn = get("intermediate_size", gemma ? 9216 : 0);
    m.vocab = get("vocab_size", gemma ? 262208 : 0);
    m.max_ctx = get("max_position_embeddings", gemma ? 131072 : 0);
    m.tied_embeddings = gemma;
    for (const nlohmann::json* j : {&top, &c})  // the text model's own key wins
        if (auto it = j->find("tie_word_embeddings"); it != j->end() && it->is_boolean())
            m.tied_embeddings = *it;
    if (gemma) m.rope_theta = 1e6, m.rms_eps = 1e-6;
    if (auto it = c.find("rope_theta"); it != c.end() && it->is_number()) m.rope_theta = *it;
    if (auto it = c.find("rms_norm_eps"); it != c.end() && it->is_number()) m.rms_eps = *it;
    // Qwen2 (and Qwen2-MoE) configs do not spell the bias out; the architecture implies it.
    m.qkv_bias = type == "qwen2" || type == "qwen2_moe" || c.value("attention_bias", false);
    set_family_norms(m);
    for (const nlohmann::json* j : {&top, &c})
        if (auto it = j->find("torch_dtype"); it != j->end() && it->is_string())
            m.native_bits = *it == "float32" ? 32.0 : 16.0;

    if (mixtral) {
        m.n_experts = get("num_local_experts", 0);
        m.n_experts_used = get("num_experts_per_tok", 0);
        m.expert_ffn = m.ffn;  // Mixtral's intermediate_size is one expert's
    } else if (qwen_moe) {
        // transformers 5 writes Mixtral's name for it (num_local_experts) on qwen3_moe.
        m.n_experts = get("num_experts", get("num_local_experts", 0));
        m.n_experts_used = get("num_experts_per_tok", 0);
        m.expert_ffn = get("moe_intermediate_size", 0);
        // transformers builds a shared expert (with its sigmoid gate) for Qwen2-MoE only.
        if (type == "qwen2_moe" && get("shared_expert_intermediate_size", 0) > 0) {
            m.n_shared_experts = 1;
            m.shared_expert_ffn = get("shared_expert_intermediate_size", 0);
            m.shared_expert_gate = true;
        }
        // Layer i has experts unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step
        // != 0; those keep a dense MLP of intermediate_size.
        const int64_t step = get("decoder_sparse_step", 1);
        if (step < 1) return make_error("{}: decoder_sparse_step {} (need >= 1)", m.name, step);
        std::vector<bool> dense(std::max<int64_t>(m.n_layers, 0), false);
        if (auto it = c.find("mlp_only_layers"); it != c.end() && it->is_array())
            for (const auto& l : *it) {
                if (!l.is_number_integer() || l.get<int64_t>() < 0 ||
                    l.get<int64_t>() >= m.n_layers)
                    return make_error("{}: mlp_only_layers entry {} is not a layer index", m.name,
                                      l.dump());
                dense[l.get<int64_t>()] = true;
            }
        for (int64_t i = 0; i < m.n_layers; ++i)
            m.n_dense_layers += dense[i] || (i + 1) % step != 0;
    }
    if ((mixtral || qwen_moe) && m.n_experts <= 0)
        return make_error("{}: a {} config without its expert count ({})", m.name, type,
                          mixtral ? "num_local_experts" : "num_experts");
    if ((mixtral || qwen_moe) && m.n_experts_used <= 0)
        return make_error("{}: a {} config without num_experts_per_tok", m.name, type);
    if (qwen_moe && m.expert_ffn <= 0)
        return make_error("{}: a {} config without moe_intermediate_size", m.name, type);

    // Gemma 3's sliding layers: layer_types where given, else every sliding_window_pattern-th
    // layer is global and the others slide. Elsewhere a window is on every layer (Mistral v0.1,
    // Phi-3), or with Qwen2's use_sliding_window on the layers from max_window_layers on; ferry
    // gives blocks out of the window back where every layer slides.
    if (!gemma) {
        const int64_t w = get("sliding_window", 0);  // null: none
        bool on = true;
        int64_t first = 0;
        if (auto u = c.find("use_sliding_window"); u != c.end()) {
            on = u->is_boolean() && u->get<bool>();
            first = std::clamp<int64_t>(get("max_window_layers", 0), 0, m.n_layers);
        }
        if (on && w > 0 && w < m.max_ctx) {
            m.sliding_window = w;
            m.n_sliding_layers = m.n_layers - first;
        }
    }
    if (gemma) {
        m.sliding_window = get("sliding_window", 4096);
        if (auto lt = c.find("layer_types"); lt != c.end() && lt->is_array()) {
            if (static_cast<int64_t>(lt->size()) != m.n_layers)
                return make_error("{}: layer_types lists {} layers of {}", m.name, lt->size(),
                                  m.n_layers);
            for (const auto& t : *lt) m.n_sliding_layers += t == "sliding_attention";
        } else {
            const int64_t pattern = get("sliding_window_pattern", 6);
            if (pattern < 1)
                return make_error("{}: sliding_window_pattern {} (need >= 1)", m.name, pattern);
            m.n_sliding_layers = m.n_layers - m.n_layers / pattern;
        }
        if (m.sliding_window >= m.max_ctx) m.n_sliding_layers = 0;  // the window never cuts
    }
    if (Status s = validate(m); !s) return s.error();
    return m;
}

Expected<ModelSpec> spec_from_hf_config_file(const std::string& path) {
    std::error_code ec;
    // A FIFO or a device would block the read or never end it.
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
        return make_error("config '{}' is not a regular file", path);
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

    // Experts: Mixtral GGUFs are arch llama with expert_count; Qwen's have their own archs.
    m.n_experts = key("expert_count").value_or(0);
    if (m.n_experts > 0) {
        if (m.arch != "llama" && m.arch != "qwen2moe" && m.arch != "qwen3moe")
            return make_error(
                "{}: GGUF architecture '{}' with {} experts is not one ferry plan models "
                "(llama / Mixtral, qwen2moe, qwen3moe)",
                path, m.arch, m.n_experts);
        if (key("leading_dense_block_count").value_or(0) > 0)
            return make_error(
                "{}: leading_dense_block_count is set; ferry plan does not model "
                "that MoE layout",
                path);
        m.n_experts_used = key("expert_used_count").value_or(0);
        m.expert_ffn = key("expert_feed_forward_length").value_or(m.ffn);
        m.shared_expert_ffn = key("expert_shared_feed_forward_length").value_or(0);
        m.n_shared_experts = key("expert_shared_count").value_or(m.shared_expert_ffn > 0 ? 1 : 0);
        m.shared_expert_gate = f.tensor("blk.0.ffn_gate_inp_shexp.weight") != nullptr;
        // A layer without a router keeps a dense MLP.
        for (int64_t l = 0; l < m.n_layers; ++l)
            m.n_dense_layers += f.tensor(fmt::format("blk.{}.ffn_gate_inp.weight", l)) == nullptr;
    }
    // Gemma 3: every sixth layer is global, the others slide (llama.cpp's fixed pattern).
    // (Any other architecture's window is on every layer, as ferry runs it.)
    if (auto w = key("attention.sliding_window"); w && *w > 0 && *w < m.max_ctx) {
        m.sliding_window = *w;
        m.n_sliding_layers = m.arch == "gemma3" ? m.n_layers - m.n_layers / 6 : m.n_layers;
    }

    // The real weights: every tensor's elements and bytes, and the type that holds most bytes
    // (norms stay f32 in every quantized file, so a plain majority would mislead).
    std::map<std::string, uint64_t> bytes_by_type;
    for (const auto& t : f.tensors()) {
        m.gguf_params += t.n_elements;
        m.gguf_weight_bytes += t.n_bytes;
        if (t.name == "token_embd.weight") m.gguf_embed_bytes = t.n_bytes;
        if (m.n_experts > 0 && is_routed_expert_tensor(t.name)) {
            m.gguf_expert_params += t.n_elements;
            m.gguf_expert_bytes += t.n_bytes;
        }
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
    if (model.ends_with(".gguf") || gguf::has_gguf_magic(model)) return spec_from_gguf(model);
    std::error_code ec;
    if (fs::is_directory(model, ec)) return spec_from_hf_config_file(model + "/config.json");
    // Any other file is a config.json by another name; only a name that is no file is a preset.
    if (model.ends_with(".json") || fs::is_regular_file(model, ec))
        return spec_from_hf_config_file(model);
    return spec_from_preset(model);
}

}  // namespace ferry::plan
