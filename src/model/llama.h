// The Llama-family forward pass on the CPU: token embedding, then per layer RMSNorm →
// grouped-query attention with RoPE over the KV cache → residual → RMSNorm → SwiGLU MLP →
// residual, then a final RMSNorm and the output head (tied to the embedding when the file
// has no separate `output.weight`). Written to be read top to bottom; speed lives in kernels.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kernels/kernels.h"
#include "kv/contiguous_cache.h"
#include "model/llama_config.h"

namespace ferry::model {

struct LayerWeights {
    const float* attn_norm = nullptr;
    kernels::Weight wq, wk, wv, wo;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2 has q/k/v biases
    const float* ffn_norm = nullptr;
    kernels::Weight w_gate, w_up, w_down;
};

class LlamaModel {
  public:
    // Binds every tensor by name and checks its shape and type; fails with the tensor's name.
    static Expected<std::unique_ptr<LlamaModel>> load(std::shared_ptr<gguf::File> file);

    const LlamaConfig& config() const { return cfg_; }
    const gguf::File& file() const { return *file_; }
    // Bytes of weights one decode step reads (every matrix once, one embedding row).
    size_t weight_bytes_per_token() const;
    int64_t parameter_count() const;

    // Runs tokens at positions [pos, pos + tokens.size()) of one sequence, writing their keys
    // and values into `cache`. Logits (n_vocab floats) are written for the last token only, or
    // for every token when all_logits is set (logits must then hold tokens.size() * n_vocab).
    void forward(std::span<const int32_t> tokens, int64_t pos, kv::ContiguousCache& cache,
                 float* logits, bool all_logits, ThreadPool& pool) const;

  private:
    LlamaModel() = default;
    std::shared_ptr<gguf::File> file_;
    LlamaConfig cfg_;
    kernels::Weight tok_embd_;
    kernels::Weight output_;
    const float* output_norm_ = nullptr;
    std::vector<LayerWeights> layers_;
};

}  // namespace ferry::model
