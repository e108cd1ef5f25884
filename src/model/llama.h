// The Llama-family forward pass on the CPU: token embedding, then per layer RMSNorm →
// grouped-query attention with RoPE over the KV cache → residual → RMSNorm → SwiGLU MLP →
// residual, then a final RMSNorm and the output head (tied to the embedding when the file
// has no separate `output.weight`). Written to be read top to bottom; speed lives in kernels.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/huge_buffer.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kernels/kernels.h"
#include "kernels/packed_weights.h"
#include "kv/kv_store.h"
#include "model/llama_config.h"

namespace ferry::model {

// The inputs of a layer's linear maps, as an ActivationObserver sees them: q, k and v share
// Attn; gate and up share Ffn.
enum class LinearInput { Attn = 0, AttnOut = 1, Ffn = 2, FfnDown = 3 };
constexpr int kLinearInputs = 4;

// Sees the activations entering each linear map during forward (calibration for GPTQ and AWQ
// in `ferry quantize`). `rows` holds n_tokens rows of dim floats and is valid only during the
// call.
class ActivationObserver {
  public:
    virtual ~ActivationObserver() = default;
    virtual void observe(int layer, LinearInput which, const float* rows, int64_t n_tokens,
                         int64_t dim) = 0;
};

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
    // Then makes the matrices resident in huge pages: Q4_0/Q4_1/Q8_0/Q4_K/Q6_K/int4 ones packed for
    // the integer kernels, the others copied; with progress, under a progress bar.
    static Expected<std::unique_ptr<LlamaModel>> load(std::shared_ptr<gguf::File> file,
                                                      bool progress = false);

    const LlamaConfig& config() const { return cfg_; }
    const gguf::File& file() const { return *file_; }
    // Bytes of weights one decode step reads (every matrix once, packed where the integer path
    // reads it packed, and one embedding row).
    size_t weight_bytes_per_token() const;
    int64_t parameter_count() const;

    // One sequence's share of a ragged batch: n_tokens consecutive tokens starting at
    // position start_pos, whose keys and values go into (and whose attention reads from) the
    // blocks of `kv`, which must cover positions [0, start_pos + n_tokens).
    struct BatchSeq {
        int64_t start_pos = 0;
        int n_tokens = 0;
        kv::SeqKv kv;
        int n_logits = 1;  // logits wanted for this many of the chunk's last tokens (0..n_tokens)
    };

    // Runs a ragged batch: `tokens` holds every sequence's chunk, back to back in seqs' order.
    // Writes n_vocab logits per wanted token, sequence by sequence, into `logits`.
    void forward(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                 kv::KvStore& store, float* logits, ThreadPool& pool) const;

    // Calls `o` (not owned; null to stop) from every later forward on this model. A null
    // observer costs one branch per linear input.
    void set_observer(ActivationObserver* o) { observer_ = o; }

  private:
    LlamaModel() = default;
    // Copies of the matrices in one huge-page buffer, interleaved for the integer kernels
    // where they can be; their file pages are then released.
    void make_resident(bool progress);
    std::shared_ptr<gguf::File> file_;
    LlamaConfig cfg_;
    kernels::Weight tok_embd_;
    kernels::Weight output_;
    const float* output_norm_ = nullptr;
    std::vector<LayerWeights> layers_;
    HugeBuffer resident_;  // every matrix a token reads, packed or copied, one after another
    ActivationObserver* observer_ = nullptr;
};

}  // namespace ferry::model
