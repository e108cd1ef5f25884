#include "model/llama_config.h"

#include <array>
#include <string_view>

namespace ferry::model {
namespace {

// Architectures whose forward pass is the plain Llama block (pre-norm attention with RoPE and
// a SwiGLU MLP). They differ only in rotation style and optional q/k/v biases.
struct ArchTraits {
    std::string_view arch;
    kernels::RopeStyle rope;
};
constexpr std::array kArchs = {
    ArchTraits{"llama", kernels::RopeStyle::Normal},
    ArchTraits{"mistral", kernels::RopeStyle::Normal},
    ArchTraits{"qwen2", kernels::RopeStyle::Neox},
};

}  // namespace

Expected<LlamaConfig> read_llama_config(const gguf::File& file) {
    LlamaConfig c;
    auto arch = file.get_string("general.architecture");
    if (!arch) return make_error("{}: missing general.architecture", file.path());
    c.arch = *arch;
    const ArchTraits* traits = nullptr;
    for (const auto& a : kArchs)
        if (a.arch == c.arch) traits = &a;
    if (!traits)
        return make_error("{}: unsupported architecture '{}' (ferry runs llama, mistral, qwen2)",
                          file.path(), c.arch);
    c.rope_style = traits->rope;
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
    c.rope_theta = static_cast<float>(file.get_float(p + "rope.freq_base").value_or(10000.0));
    c.rms_eps =
        static_cast<float>(file.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    if (auto v = file.get_int(p + "vocab_size"))
        c.n_vocab = static_cast<int>(*v);
    else if (const auto* toks = file.get_array("tokenizer.ggml.tokens"))
        c.n_vocab = static_cast<int>(toks->items.size());
    if (c.n_vocab <= 0) return make_error("{}: vocabulary size unknown", file.path());
    return c;
}

}  // namespace ferry::model
