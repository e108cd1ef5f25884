#include "engine/loaded_model.h"

#include "core/progress.h"

namespace ferry::engine {
namespace {

// Touches one byte per page of every tensor so the file is resident before the first token.
void prefault(const gguf::File& file, bool progress) {
    int64_t total = 0;
    for (const auto& t : file.tensors()) total += static_cast<int64_t>(t.n_bytes);
    Progress bar("loading weights", total, progress);
    int64_t done = 0;
    volatile uint8_t sink = 0;
    for (const auto& t : file.tensors()) {
        for (size_t off = 0; off < t.n_bytes; off += 4096) sink = sink + t.data[off];
        done += static_cast<int64_t>(t.n_bytes);
        bar.update(done);
    }
    bar.finish();
}

}  // namespace

Expected<LoadedModel> LoadedModel::load(const std::string& path, bool progress) {
    LoadedModel lm;
    auto file = gguf::File::open(path);
    if (!file) return file.error();
    lm.file = *file;
    auto model = model::LlamaModel::load(lm.file);
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
    if (progress) prefault(*lm.file, progress);
    return lm;
}

}  // namespace ferry::engine
