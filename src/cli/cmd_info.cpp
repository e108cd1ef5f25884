// `ferry info`: what a model file is and what it will cost to run.
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_options.h"
#include "core/paths.h"
#include "engine/engine.h"
#include "kv/kv_store.h"

namespace ferry::cli {
namespace {

int sliding_layers(const model::LlamaConfig& c) {
    int n = 0;
    for (int l = 0; l < c.n_layer; ++l) n += c.window(l) > 0;
    return n;
}

struct InfoOptions {
    std::string model = "default";
    bool json = false;
    DeviceOption device;  // where the costs below are for (weights/token is the device's layout)
};

// The rope scaling the model runs with: the config's type and factor, or a GGUF's per-pair
// divisors (Llama 3.1's rope_freqs.weight), or none.
std::string rope_scaling_text(const engine::LoadedModel& lm) {
    const model::LlamaConfig& c = lm.model->config();
    if (c.rope_scaling.type != model::RopeScaling::Type::None)
        return fmt::format("{} x{}", model::rope_scaling_name(c.rope_scaling.type),
                           c.rope_scaling.factor);
    if (lm.model->rope_inv_freq() != model::rope_inv_freq(c.rope_dim, c.rope_theta, {}))
        return "rope_freqs.weight";
    return "none";
}

void info(const InfoOptions& o) {
    auto lm = take(engine::LoadedModel::load(take(resolve_model_path(o.model)), false,
                                             o.device.backend(resolve_threads(0), {}, 1)));
    // The backend's own description: the GPU's name and memory, or the CPU's kernel level.
    nlohmann::json device = nlohmann::json::object();
    std::string device_text;
    for (const auto& [k, v] : lm.backend->describe()) {
        device[k] = v;
        if (k != "backend")
            device_text += fmt::format("{}{} {}", device_text.empty() ? "" : ", ", k, v);
    }
    const auto& c = lm.model->config();
    const auto types = lm.weights->stored_types();
    size_t weight_bytes = 0;
    for (const auto& [name, e] : types) weight_bytes += e.bytes;
    const std::string format =
        lm.file ? fmt::format("GGUF v{}", lm.file->version()) : "Hugging Face directory";
    // What the serving engine's cache takes per token at its default block size, scales and
    // padding included.
    auto kv_per_token = [&](quant::KvDType t) {
        const int bs = engine::EngineConfig{}.block_size;
        return kv::KvStore::bytes_per_block(c.n_layer, bs, c.kv_dim(), c.head_dim, t) / bs;
    };
    // With sliding-window and global layers both, each token past a sequence's window costs
    // only the global layers' share (the engine's window pool holds the rest).
    const int global_layers = c.n_layer - c.window_layers(0, c.n_layer);
    auto kv_past_window = [&](quant::KvDType t) {
        const int bs = engine::EngineConfig{}.block_size;
        const bool hybrid = global_layers > 0 && global_layers < c.n_layer;
        return kv::KvStore::bytes_per_block(hybrid ? global_layers : c.n_layer, bs, c.kv_dim(),
                                            c.head_dim, t) /
               bs;
    };
    nlohmann::json j = {
        {"model", lm.path},
        {"name", c.name},
        {"architecture", c.arch},
        {"format", lm.file ? "gguf" : "hf"},
        {"gguf_version", lm.file ? nlohmann::json(lm.file->version()) : nlohmann::json()},
        {"file_bytes", lm.file ? lm.file->file_size() : weight_bytes},
        {"parameters", lm.model->parameter_count()},
        {"n_layer", c.n_layer},
        {"n_embd", c.n_embd},
        {"n_head", c.n_head},
        {"n_head_kv", c.n_head_kv},
        {"head_dim", c.head_dim},
        {"n_ff", c.n_ff},
        {"n_vocab", c.n_vocab},
        {"context_length", c.n_ctx_train},
        {"rope_theta", c.rope_theta},
        {"rope_style", c.rope_style == kernels::RopeStyle::Normal ? "normal" : "neox"},
        {"rope_scaling", rope_scaling_text(lm)},
        {"sliding_window", c.sliding_window},
        {"sliding_layers", sliding_layers(c)},
        {"rope_theta_sliding", c.rope_theta_swa > 0 ? c.rope_theta_swa : c.rope_theta},
        {"rms_eps", c.rms_eps},
        {"weight_bytes_per_token", lm.model->weight_bytes_per_token(*lm.backend)},
        {"kv_bytes_per_token",
         {{"f32", kv_per_token(quant::KvDType::F32)},
          {"f16", kv_per_token(quant::KvDType::F16)},
          {"int8", kv_per_token(quant::KvDType::Int8)},
          {"fp8", kv_per_token(quant::KvDType::FP8)}}},
        {"kv_bytes_per_token_past_window_f16", kv_past_window(quant::KvDType::F16)},
        {"kv_cache_dtype", KvDTypeOption{}.name},
        {"chat_template", lm.chat_template ? "jinja" : "none"},
        {"device", device},
        {"bos_token_id", lm.tokenizer->bos()},
        {"eos_token_id", lm.tokenizer->eos()},
    };
    const auto& g = lm.generation;
    if (g.temperature) j["generation_defaults"]["temperature"] = *g.temperature;
    if (g.top_p) j["generation_defaults"]["top_p"] = *g.top_p;
    if (g.top_k) j["generation_defaults"]["top_k"] = *g.top_k;
    if (g.repetition_penalty)
        j["generation_defaults"]["repetition_penalty"] = *g.repetition_penalty;
    for (const auto& [name, e] : types)
        j["tensor_types"][name] = {{"tensors", e.tensors}, {"bytes", e.bytes}};
    if (c.is_moe())
        j["experts"] = {{"n_expert", c.n_expert},
                        {"n_expert_used", c.n_expert_used},
                        {"expert_ffn", c.n_ff_expert},
                        {"shared_expert_ffn", c.n_ff_shared},
                        {"weights_renormalised", c.expert_norm},
                        {"active_parameters", lm.model->active_parameter_count()}};
    if (o.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    auto mib = [](double b) { return b / (1024.0 * 1024.0); };
    std::printf("model           %s\n", lm.path.c_str());
    std::printf("name            %s (%s, %s)\n", c.name.c_str(), c.arch.c_str(), format.c_str());
    std::printf("%s       %.1f MiB\n", lm.file ? "file size" : "weights  ",
                mib(double(lm.file ? lm.file->file_size() : weight_bytes)));
    std::printf("parameters      %.1f M", lm.model->parameter_count() / 1e6);
    if (c.is_moe())
        std::printf(" (%.1f M active per token)", lm.model->active_parameter_count() / 1e6);
    std::printf("\n");
    std::printf("layers          %d   embedding %d   ffn %d   vocab %d\n", c.n_layer, c.n_embd,
                c.is_moe() ? c.n_ff_expert : c.n_ff, c.n_vocab);
    if (c.is_moe())
        std::printf("experts         %d of %d per token, ffn %d each, weights %s%s\n",
                    c.n_expert_used, c.n_expert, c.n_ff_expert,
                    c.expert_norm ? "renormalised over the chosen" : "the softmax over all",
                    c.n_ff_shared > 0 ? fmt::format("; a shared expert of {} behind a sigmoid gate",
                                                    c.n_ff_shared)
                                            .c_str()
                                      : "");
    std::printf("attention       %d heads, %d KV heads (GQA %d:1), head dim %d\n", c.n_head,
                c.n_head_kv, c.n_head / c.n_head_kv, c.head_dim);
    std::printf("rope            theta %.0f, %s style, %d dims, scaling %s\n", c.rope_theta,
                c.rope_style == kernels::RopeStyle::Normal ? "normal" : "neox", c.rope_dim,
                rope_scaling_text(lm).c_str());
    if (c.sliding_window > 0 && !c.all_layers_slide())
        std::printf(
            "context         %d tokens (trained), sliding window %d on %d of %d layers (the "
            "others global)%s\n",
            c.n_ctx_train, c.sliding_window, sliding_layers(c), c.n_layer,
            c.rope_theta_swa > 0 ? fmt::format(", their rope theta {}", c.rope_theta_swa).c_str()
                                 : "");
    else if (c.sliding_window > 0)
        std::printf("context         %d tokens (trained), sliding window %d\n", c.n_ctx_train,
                    c.sliding_window);
    else
        std::printf("context         %d tokens (trained)\n", c.n_ctx_train);
    std::printf("tensor types   ");
    for (const auto& [name, e] : types)
        std::printf(" %s: %d (%.1f MiB)", name.c_str(), e.tensors, mib(double(e.bytes)));
    std::printf("\nweights/token   %.1f MiB read per decoded token\n",
                mib(double(lm.model->weight_bytes_per_token(*lm.backend))));
    std::printf(
        "KV per token    %.1f KiB at f32, %.1f KiB at f16 (the default), %.1f KiB at int8, "
        "%.1f KiB at fp8 (--kv-dtype; scales included)\n",
        kv_per_token(quant::KvDType::F32) / 1024.0, kv_per_token(quant::KvDType::F16) / 1024.0,
        kv_per_token(quant::KvDType::Int8) / 1024.0, kv_per_token(quant::KvDType::FP8) / 1024.0);
    if (global_layers > 0 && global_layers < c.n_layer)
        std::printf(
            "                %.1f KiB at f16 past a sequence's window (%d global layers; "
            "the sliding layers' window pool holds the rest)\n",
            kv_past_window(quant::KvDType::F16) / 1024.0, global_layers);
    std::printf("chat template   %s\n",
                lm.chat_template ? "jinja" : lm.chat_template_error.c_str());
    std::printf("device          %s (%s)\n",
                kernels::backend_property(*lm.backend, "backend").c_str(), device_text.c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto o = std::make_shared<InfoOptions>();
    CLI::App* cmd = app.add_subcommand("info", "describe a model: architecture, sizes, costs");
    cmd->add_option("-m,--model", o->model,
                    "GGUF model file, Hugging Face model directory, or 'default'")
        ->capture_default_str();
    cmd->add_flag("--json", o->json, "machine-readable output");
    o->device.add_to(*cmd);
    cmd->callback([o] { info(*o); });
}

}  // namespace ferry::cli
