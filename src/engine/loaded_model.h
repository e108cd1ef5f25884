// Everything a front end needs from a model: the checkpoint (a GGUF file or a Hugging Face
// directory), the forward pass with its weights resident on a backend, the tokenizer, the chat
// template (when the model has one that parses) and the sampling defaults the model ships.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/sampler.h"
#include "gguf/gguf_file.h"
#include "hf/model_dir.h"
#include "kernels/backend.h"
#include "model/llama.h"
#include "model/weight_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {

// generation_config.json's sampling values, where it gives them (vLLM applies them to every
// request that does not set its own).
struct GenerationDefaults {
    std::optional<float> temperature, top_p;
    std::optional<int> top_k;
    std::optional<float> repetition_penalty;

    // Sets in `s` every value this gives.
    void apply_to(SamplingParams& s) const;
};

struct LoadedModel {
    std::string path;
    std::shared_ptr<gguf::File> file;         // the GGUF; null for a directory
    std::shared_ptr<const hf::ModelDir> dir;  // the Hugging Face directory; null for a GGUF
    std::shared_ptr<const model::WeightFile> weights;  // the tensors of either
    // What the weights are resident on; the model's runners run on it too, unless a caller
    // gives them another backend of the same device.
    std::shared_ptr<kernels::Backend> backend;
    std::unique_ptr<model::LlamaModel> model;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;
    std::optional<tokenizer::ChatTemplate> chat_template;
    std::string chat_template_error;  // why chat_template is empty
    // What a chat template sees as bos_token / eos_token (the GGUF's token texts, or
    // tokenizer_config.json's for a directory).
    std::string bos_text, eos_text;
    GenerationDefaults generation;
    std::optional<DType> loaded_as;  // the type every matrix was rounded to at load, if any

    // Opens and validates `path` (a .gguf, or a directory holding config.json), binds and makes
    // the weights resident on `backend` (nullptr: a CPU backend with the default options),
    // rounding every matrix to `weights` when given, under a progress bar with `progress`;
    // split over `parallel`'s ranks, only this rank's share: within every layer (tensor
    // parallelism), its stage of the layers (a pipeline), or both.
    static Expected<LoadedModel> load(const std::string& path, bool progress,
                                      std::shared_ptr<kernels::Backend> backend = nullptr,
                                      std::optional<DType> weights = std::nullopt,
                                      model::ParallelGroups parallel = {});
};

}  // namespace ferry::engine
