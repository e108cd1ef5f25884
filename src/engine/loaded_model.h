// Everything a front end needs from a model file: the mapping, the forward pass, the
// tokenizer and (when the model has one ferry understands) the chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/llama.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {

struct LoadedModel {
    std::shared_ptr<gguf::File> file;
    std::unique_ptr<model::LlamaModel> model;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;
    std::optional<tokenizer::ChatTemplate> chat_template;
    std::string chat_template_error;  // why chat_template is empty

    // Opens, validates and binds. With `progress`, the weights are read into memory once
    // under a progress bar so the first token does not pay for page faults.
    static Expected<LoadedModel> load(const std::string& path, bool progress);
};

}  // namespace ferry::engine
