// Everything a front end needs from a model file: the mapping, the forward pass with its
// weights resident on a backend, the tokenizer and (when the model has one that parses) the
// chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "kernels/backend.h"
#include "model/llama.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {

struct LoadedModel {
    std::shared_ptr<gguf::File> file;
    // What the weights are resident on; the model's runners run on it too, unless a caller
    // gives them another backend of the same device.
    std::shared_ptr<kernels::Backend> backend;
    std::unique_ptr<model::LlamaModel> model;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;
    std::optional<tokenizer::ChatTemplate> chat_template;
    std::string chat_template_error;  // why chat_template is empty

    // Opens, validates, binds and makes the weights resident on `backend` (nullptr: a CPU
    // backend with the default options), under a progress bar with `progress`.
    static Expected<LoadedModel> load(const std::string& path, bool progress,
                                      std::shared_ptr<kernels::Backend> backend = nullptr);
};

}  // namespace ferry::engine
