#include "engine/loaded_model.h"

namespace ferry::engine {

Expected<LoadedModel> LoadedModel::load(const std::string& path, bool progress,
                                        std::shared_ptr<kernels::Backend> backend) {
    LoadedModel lm;
    if (!backend) {
        auto be = kernels::make_backend();
        if (!be) return be.error();
        backend = std::move(*be);
    }
    lm.backend = std::move(backend);
    auto file = gguf::File::open(path);
    if (!file) return file.error();
    lm.file = *file;
    auto model = model::LlamaModel::load(lm.file, *lm.backend, progress);
    if (!model) return model.error();
    lm.model = std::move(*model);
    auto tok = tokenizer::Tokenizer::from_gguf(*lm.file);
    if (!tok) return tok.error();
    lm.tokenizer = std::move(*tok);

    const auto& tk = *lm.tokenizer;
    auto text_of = [&](int32_t id) { return id >= 0 ? tk.token_text(id) : std::string(); };
    auto tmpl = tokenizer::ChatTemplate::from_source(
        lm.file->get_string("tokenizer.chat_template").value_or(""), text_of(tk.bos()),
        text_of(tk.eos()));
    if (tmpl)
        lm.chat_template = std::move(*tmpl);
    else
        lm.chat_template_error = tmpl.error().message;
    return lm;
}

}  // namespace ferry::engine
