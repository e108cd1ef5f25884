#include "engine/loaded_model.h"

#include "model/gguf_weights.h"
#include "model/hf_weights.h"
#include "model/llama_config.h"

namespace ferry::engine {
namespace {

Status load_gguf(LoadedModel& lm, const model::LlamaModel::LoadOptions& opt) {
    auto file = gguf::File::open(lm.path);
    if (!file) return file.error();
    lm.file = *file;
    auto config = model::read_llama_config(*lm.file);
    if (!config) return config.error();
    lm.weights = std::make_shared<model::GgufWeights>(lm.file);
    auto model = model::LlamaModel::load(lm.weights, *config, *lm.backend, opt);
    if (!model) return model.error();
    lm.model = std::move(*model);
    auto tok = tokenizer::Tokenizer::from_gguf(*lm.file);
    if (!tok) return tok.error();
    lm.tokenizer = std::move(*tok);

    const auto& tk = *lm.tokenizer;
    auto text_of = [&](int32_t id) { return id >= 0 ? tk.token_text(id) : std::string(); };
    lm.bos_text = text_of(tk.bos());
    lm.eos_text = text_of(tk.eos());
    auto tmpl = tokenizer::ChatTemplate::from_source(
        lm.file->get_string("tokenizer.chat_template").value_or(""), lm.bos_text, lm.eos_text);
    if (tmpl)
        lm.chat_template = std::move(*tmpl);
    else
        lm.chat_template_error = tmpl.error().message;
    return Status::Ok();
}

GenerationDefaults generation_defaults(const nlohmann::json& g) {
    GenerationDefaults d;
    if (!g.is_object()) return d;
    auto num = [&](const char* k) -> std::optional<float> {
        if (g.contains(k) && g[k].is_number()) return g[k].get<float>();
        return std::nullopt;
    };
    d.repetition_penalty = num("repetition_penalty");
    // transformers ignores temperature/top_p/top_k unless do_sample; so does ferry.
    if (!g.value("do_sample", false)) return d;
    d.temperature = num("temperature");
    d.top_p = num("top_p");
    if (g.contains("top_k") && g["top_k"].is_number_integer()) d.top_k = g["top_k"].get<int>();
    return d;
}

Status load_dir(LoadedModel& lm, const model::LlamaModel::LoadOptions& opt) {
    auto dir = hf::ModelDir::open(lm.path);
    if (!dir) return dir.error();
    lm.dir = std::move(*dir);
    auto config = model::read_llama_config(lm.dir->config(), lm.path + "/config.json");
    if (!config) return config.error();
    lm.weights = std::make_shared<model::HfWeights>(lm.dir);
    auto model = model::LlamaModel::load(lm.weights, *config, *lm.backend, opt);
    if (!model) return model.error();
    lm.model = std::move(*model);

    if (lm.dir->tokenizer_json_path().empty())
        return make_error("{}: no tokenizer.json (ferry reads a directory's tokenizer from it)",
                          lm.path);
    const std::vector<int32_t> eos = lm.dir->eos_token_ids();
    auto tok = tokenizer::Tokenizer::from_tokenizer_json(
        lm.dir->tokenizer_json_path(),
        lm.dir->tokenizer_config().is_null() ? "" : lm.dir->tokenizer_config().dump(), eos);
    if (!tok) return make_error("{}: {}", lm.path, tok.error().message);
    lm.tokenizer = std::move(*tok);
    if (lm.tokenizer->n_vocab() > lm.model->config().n_vocab)
        return make_error("{}: tokenizer.json has {} tokens but the model's vocabulary is {}",
                          lm.path, lm.tokenizer->n_vocab(), lm.model->config().n_vocab);

    auto source = lm.dir->chat_template();
    if (!source) return source.error();
    lm.bos_text = lm.dir->special_token_text("bos_token");
    lm.eos_text = lm.dir->special_token_text("eos_token");
    auto tmpl = tokenizer::ChatTemplate::from_source(*source, lm.bos_text, lm.eos_text);
    if (tmpl)
        lm.chat_template = std::move(*tmpl);
    else
        lm.chat_template_error = tmpl.error().message;
    lm.generation = generation_defaults(lm.dir->generation_config());
    return Status::Ok();
}

}  // namespace

void GenerationDefaults::apply_to(SamplingParams& s) const {
    if (temperature) s.temperature = *temperature;
    if (top_p) s.top_p = *top_p;
    if (top_k) s.top_k = *top_k;
    if (repetition_penalty) s.repetition_penalty = *repetition_penalty;
}

Expected<LoadedModel> LoadedModel::load(const std::string& path, bool progress,
                                        std::shared_ptr<kernels::Backend> backend,
                                        std::optional<DType> weights,
                                        model::ParallelGroups parallel) {
    LoadedModel lm;
    lm.path = path;
    lm.loaded_as = weights;
    if (!backend) {
        auto be = kernels::make_backend();
        if (!be) return be.error();
        backend = std::move(*be);
    }
    lm.backend = std::move(backend);
    const model::LlamaModel::LoadOptions opt{progress, weights, std::move(parallel)};
    Status s = hf::is_model_dir(path) ? load_dir(lm, opt) : load_gguf(lm, opt);
    if (!s) return s.error();
    return lm;
}

}  // namespace ferry::engine
