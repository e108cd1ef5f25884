// `ferry info`: what a model file is and what it will cost to run.
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_options.h"
#include "core/paths.h"
#include "engine/engine.h"
#include "kv/kv_store.h"

namespace ferry::cli {
namespace {

struct InfoOptions {
    std::string model = "default";
    bool json = false;
};

void info(const InfoOptions& o) {
    auto lm = take(engine::LoadedModel::load(take(resolve_model_path(o.model)), false));
    const auto& c = lm.model->config();
    const auto& f = *lm.file;
    std::map<std::string, std::pair<int, size_t>> types;  // name -> (tensors, bytes)
    for (const auto& t : f.tensors()) {
        auto& e = types[std::string(dtype_name(t.type))];
        ++e.first;
        e.second += t.n_bytes;
    }
    // What the serving engine's cache takes per token at its default block size, scales and
    // padding included.
    auto kv_per_token = [&](quant::KvDType t) {
        const int bs = engine::EngineConfig{}.block_size;
        return kv::KvStore::bytes_per_block(c.n_layer, bs, c.kv_dim(), c.head_dim, t) / bs;
    };
    nlohmann::json j = {
        {"model", f.path()},
        {"name", c.name},
        {"architecture", c.arch},
        {"gguf_version", f.version()},
        {"file_bytes", f.file_size()},
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
        {"rms_eps", c.rms_eps},
        {"weight_bytes_per_token", lm.model->weight_bytes_per_token(*lm.backend)},
        {"kv_bytes_per_token",
         {{"f32", kv_per_token(quant::KvDType::F32)},
          {"f16", kv_per_token(quant::KvDType::F16)},
          {"int8", kv_per_token(quant::KvDType::Int8)},
          {"fp8", kv_per_token(quant::KvDType::FP8)}}},
        {"kv_cache_dtype", KvDTypeOption{}.name},
        {"chat_template", lm.chat_template ? "jinja" : "none"},
        {"bos_token_id", lm.tokenizer->bos()},
        {"eos_token_id", lm.tokenizer->eos()},
    };
    for (const auto& [name, e] : types)
        j["tensor_types"][name] = {{"tensors", e.first}, {"bytes", e.second}};
    if (o.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    auto mib = [](double b) { return b / (1024.0 * 1024.0); };
    std::printf("model           %s\n", f.path().c_str());
    std::printf("name            %s (%s, GGUF v%u)\n", c.name.c_str(), c.arch.c_str(), f.version());
    std::printf("file size       %.1f MiB\n", mib(double(f.file_size())));
    std::printf("parameters      %.1f M\n", lm.model->parameter_count() / 1e6);
    std::printf("layers          %d   embedding %d   ffn %d   vocab %d\n", c.n_layer, c.n_embd,
                c.n_ff, c.n_vocab);
    std::printf("attention       %d heads, %d KV heads (GQA %d:1), head dim %d\n", c.n_head,
                c.n_head_kv, c.n_head / c.n_head_kv, c.head_dim);
    std::printf("rope            theta %.0f, %s style, %d dims\n", c.rope_theta,
                c.rope_style == kernels::RopeStyle::Normal ? "normal" : "neox", c.rope_dim);
    std::printf("context         %d tokens (trained)\n", c.n_ctx_train);
    std::printf("tensor types   ");
    for (const auto& [name, e] : types)
        std::printf(" %s: %d (%.1f MiB)", name.c_str(), e.first, mib(double(e.second)));
    std::printf("\nweights/token   %.1f MiB read per decoded token\n",
                mib(double(lm.model->weight_bytes_per_token(*lm.backend))));
    std::printf(
        "KV per token    %.1f KiB at f32, %.1f KiB at f16 (the default), %.1f KiB at int8, "
        "%.1f KiB at fp8 (--kv-dtype; scales included)\n",
        kv_per_token(quant::KvDType::F32) / 1024.0, kv_per_token(quant::KvDType::F16) / 1024.0,
        kv_per_token(quant::KvDType::Int8) / 1024.0, kv_per_token(quant::KvDType::FP8) / 1024.0);
    std::printf("chat template   %s\n",
                lm.chat_template ? "jinja" : lm.chat_template_error.c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto o = std::make_shared<InfoOptions>();
    CLI::App* cmd = app.add_subcommand("info", "describe a model: architecture, sizes, costs");
    cmd->add_option("-m,--model", o->model, "GGUF model file, or 'default'")->capture_default_str();
    cmd->add_flag("--json", o->json, "machine-readable output");
    cmd->callback([o] { info(*o); });
}

}  // namespace ferry::cli
