// Gemma 3's differences from the Llama block, as its checkpoints spell them: the embedding
// scaled by sqrt(n_embd), GeGLU, a norm after each block as well as before, q/k RMSNorms,
// sliding-window layers interleaved with global ones that rotate with two bases, the query
// scale of query_pre_attn_scalar, and logit soft-capping where declared. The shared reader
// (llama_config.cpp) has read the Llama-style keys; these fill in the rest.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/llama_config.h"

namespace ferry::model {

// GGUF `gemma3.*` as llama.cpp reads them: attention.sliding_window_pattern (a period, default
// 6: layer l slides unless l % period == period - 1; or one bool per layer), rope.freq_base_swa
// (default 10000), final_logit_softcapping; the query scale is 1/sqrt(head_dim) except for the
// 62-layer 27B, whose is 1/sqrt(n_embd / n_head), as llama.cpp (and Google's reference) have it.
Status read_gemma3(const gguf::File& file, LlamaConfig& c);
// config.json of model_type gemma3_text (transformers 4: rope_local_base_freq,
// sliding_window_pattern, rope_scaling for the global layers; 5: rope_parameters per layer
// type, layer_types).
Status read_gemma3(const nlohmann::json& j, const std::string& where, LlamaConfig& c);

}  // namespace ferry::model
