// The Llama-family forward pass: token embedding, then per layer RMSNorm → grouped-query
// attention with RoPE (optional q/k/v biases and per-head q/k RMSNorms before the rotation, as
// Qwen2 and Qwen3 have) over the KV cache → residual → RMSNorm → SwiGLU MLP → residual, then a
// final RMSNorm and the output head (tied to the embedding when the file has no separate
// `output.weight`). Written once against kernels::Backend and to be read top to bottom: it
// names ops and tensors; where they run and how fast is the backend's business.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gguf/gguf_file.h"
#include "kernels/backend.h"
#include "model/llama_config.h"
#include "model/moe.h"
#include "model/tensor_split.h"
#include "model/weight_file.h"

namespace ferry::model {

// The inputs of a layer's linear maps, as an ActivationObserver sees them: q, k and v share
// Attn; gate and up share Ffn.
enum class LinearInput { Attn = 0, AttnOut = 1, Ffn = 2, FfnDown = 3 };
constexpr int kLinearInputs = 4;

// Sees the activations entering each linear map during forward (calibration for GPTQ and AWQ
// in `ferry quantize`). `rows` is {n_tokens, dim} floats in host memory, valid only during the
// call.
class ActivationObserver {
  public:
    virtual ~ActivationObserver() = default;
    virtual void observe(int layer, LinearInput which, const Tensor& rows) = 0;
    // The output head's input: the final-normed hidden state of each token whose logits are
    // wanted, in the batch's logit order (Medusa heads read it). Not called on a rank without
    // the head (a pipeline's earlier stages).
    virtual void observe_head(const Tensor& /*rows*/) {}
    // The last layer whose inputs it wants (-1: every layer). A pass that wants no logits and
    // runs in one process stops after that layer: sequential pruning's pass for layer L runs
    // L + 1 layers, not the whole depth.
    virtual int last_layer() const { return -1; }
};

struct LayerWeights {
    Tensor attn_norm;
    kernels::Matrix wq, wk, wv, wo;
    Tensor bq, bk, bv;      // qwen2 has q/k/v biases; empty where the file has none
    Tensor q_norm, k_norm;  // qwen3: RMSNorm of each head's q and k (head_dim), else empty
    Tensor ffn_norm;
    kernels::Matrix w_gate, w_up, w_down;
    Tensor post_attn_norm, post_ffn_norm;  // Gemma's norms after each block, else empty
    // A mixture of experts in place of w_gate / w_up / w_down (model/moe.h): the router
    // ({n_expert, n_embd}), each expert's SwiGLU, and where declared the shared expert and its
    // gate ({1, n_embd}).
    kernels::Matrix router;
    std::vector<kernels::Matrix> exp_gate, exp_up, exp_down;
    kernels::Matrix sh_gate, sh_up, sh_down, sh_router;
};

// The ranks a model is split over. `world` is all of them (rank 0 sends every step's message);
// within it `tp` is the group this rank splits its layers' matrices with (tensor parallelism,
// model/tensor_split.h) and `pp` the stages it hands the residual stream along (a pipeline: each
// a run of consecutive layers, the first with the embedding, the last with the output head).
// Either may be the world itself, or null; with both, world rank = stage x tp + tp rank.
struct ParallelGroups {
    std::shared_ptr<comm::Communicator> world, tp, pp;
};

class LlamaModel {
  public:
    // Binds every tensor by name and checks its shape and type; fails with the tensor's name.
    // Then makes the weights resident on `backend` in the layout it reads, under a progress
    // bar with `progress`; the model runs on any backend of that device.
    static Expected<std::unique_ptr<LlamaModel>> load(std::shared_ptr<gguf::File> file,
                                                      kernels::Backend& backend,
                                                      bool progress = false);
    struct LoadOptions {
        bool progress = false;
        // Every matrix rounded to this type on the way in (vLLM's --quantization): a checkpoint
        // in 16 bits served at 8 or 4. Unset: the file's types.
        std::optional<DType> weights;
        // The ranks to split the model over; null (or one rank): the whole model here.
        ParallelGroups parallel;
    };
    // From any checkpoint (GGUF or a Hugging Face directory) with its hyper-parameters.
    static Expected<std::unique_ptr<LlamaModel>> load(std::shared_ptr<const WeightFile> file,
                                                      const LlamaConfig& config,
                                                      kernels::Backend& backend,
                                                      const LoadOptions& opt);

    // Under tensor parallelism, this rank's share: its heads, KV heads and MLP columns (what
    // its KV cache and scratch are sized by); n_vocab stays the whole vocabulary.
    const LlamaConfig& config() const { return cfg_; }
    // The whole group this model is split over (step messages, failures), or null.
    comm::Communicator* comm() const { return comm_.get(); }
    // What this rank exchanged in all its groups (comm/communicator.h).
    comm::CommStats comm_stats() const;
    const TensorSplit& split() const { return split_; }
    // The output head ({n_vocab, n_embd}; this rank's vocabulary slice under tensor
    // parallelism), resident on the model's backend: Medusa heads project through it.
    const kernels::Matrix& output_head() const { return output_; }
    // The whole output head as the file holds it ({n_vocab, n_embd}, on the host, paged in from
    // the file again where loading released it): what a rank holding only its vocabulary
    // slice makes resident when it needs every row (Medusa under tensor parallelism).
    Expected<Tensor> output_head_in_file() const;
    Device device() const { return device_; }
    // Bytes of weights one decode step reads on `backend` (every matrix once, in the layout the
    // backend reads, and one embedding row).
    size_t weight_bytes_per_token(const kernels::Backend& backend) const;
    int64_t parameter_count() const;
    // The parameters one token computes with: all of a dense model's; a mixture's without the
    // experts it is not routed to (its FLOPs per token are twice this).
    int64_t active_parameter_count() const;

    // Runs a ragged batch over the KV cache `kv` (whose blocks must cover every sequence's
    // positions up to its last token) and writes n_vocab logits for each of the batch's
    // logit_tokens into `logits` ({logit_tokens, n_vocab}; may be empty when none are wanted).
    // `observer` (may be null) sees the input of every linear map.
    void forward(kernels::Backend& backend, const kernels::Batch& batch,
                 const kernels::KvCacheView& kv, const Tensor& logits,
                 ActivationObserver* observer = nullptr) const;
    // forward as a pipeline runs it, micro-batch by micro-batch: this rank's stage of each
    // (taking the previous stage's output, handing its own to the next; the last stage's logits
    // go to rank 0), then, once every micro-batch went through, rank 0 takes their logits in the
    // same order (collect_logits each) and end_step waits for what this rank still sends. One
    // process, or a tensor-parallel group: forward_stage is forward, the others do nothing.
    void forward_stage(kernels::Backend& backend, const kernels::Batch& batch,
                       const kernels::KvCacheView& kv, const Tensor& logits,
                       ActivationObserver* observer = nullptr) const;
    // Rank 0 of a pipeline takes each micro-batch's logits from the last stage, and the output
    // head's input rows sent beside them, which it shows `observer` (Medusa's heads read them).
    void collect_logits(kernels::Backend& backend, const Tensor& logits,
                        ActivationObserver* observer = nullptr) const;
    void end_step() const;
    // The pipeline's stages (1 without one) and this rank's layers, which its KV cache holds.
    int pipeline_stages() const { return pp_ ? pp_->size() : 1; }
    // The tensor-parallel group's size (1 without one).
    int tensor_ranks() const { return tp_ ? tp_->size() : 1; }
    int first_layer() const { return first_layer_; }
    int kv_layers() const { return end_layer_ - first_layer_; }

    // Moves the keys of one block of `kv` (every layer this rank holds) by `delta` positions
    // under RoPE, as if they had been computed there: KV eviction's attention sinks follow the
    // window this way. A pure rotation: YaRN's attention factor, already in the keys, is not
    // applied again.
    void move_keys(kernels::Backend& backend, const kernels::KvCacheView& kv, int32_t block,
                   int64_t delta) const;

    // Puts `host` ({rows, cols} as the file holds it, any type the backend reads) in place of
    // the matrix the file names `name`: a dense layer's attn_q/k/v/output or ffn_gate/up/down,
    // `output.weight`, or `token_embd.weight` (the output head too when tied). For tools that
    // try one matrix at a time (quantize --auto-mixed measures each one's rounding alone); not
    // under tensor or pipeline parallelism.
    Status replace_matrix(kernels::Backend& backend, const std::string& name, const Tensor& host);
    // Whether replace_matrix can swap `name` (a fused matrix, as Phi-3's attn_qkv, cannot).
    bool can_replace(const std::string& name) const;

    // Each rotary pair's inverse frequency, the checkpoint's rope scaling applied.
    const std::vector<double>& rope_inv_freq() const { return rope_inv_freq_; }

    // What the load did other than asked (matrices whose rows forced a fallback type).
    const std::vector<std::string>& load_notes() const { return load_notes_; }

    // A mixture of experts' routing since the last reset: tokens each expert took, indexed
    // [layer * n_expert + expert] (empty for a dense model), for `bench`.
    std::vector<int64_t> expert_tokens() const;
    void reset_expert_tokens() const;

  private:
    LlamaModel() = default;
    // The resident matrices the file's `name` is (a tied head is the embedding's too), with how
    // each is read; empty for a name replace_matrix cannot swap.
    std::vector<std::pair<kernels::Matrix*, kernels::MatrixUse>> swappable(const std::string& name);
    // Completes a partial sum over the ranks (after attention output and MLP down).
    void reduce(kernels::Backend& be, const Tensor& t) const;
    void moe_ffn(kernels::Backend& be, const LayerWeights& L, int layer, const Tensor& xn,
                 const Tensor& x) const;
    // hidden: the output head's input rows of those logits, sent after them.
    void send_logits_to_rank0(kernels::Backend& be, const Tensor& logits,
                              const Tensor& hidden) const;
    std::vector<std::string> load_notes_;
    std::shared_ptr<const WeightFile> file_;
    LlamaConfig cfg_;
    Device device_ = Device::CPU;
    kernels::Matrix tok_embd_;
    kernels::Matrix output_;
    bool tied_output_ = false;  // output_ is token_embd's matrix
    Tensor output_norm_;
    std::vector<LayerWeights> layers_;
    std::shared_ptr<comm::Communicator> comm_, tp_, pp_;  // ParallelGroups' world, tp and pp
    TensorSplit split_;
    int first_layer_ = 0, end_layer_ = 0;      // this rank's layers
    mutable std::vector<float> logits_parts_;  // the ranks' logits slices, gathered on rank 0
    // The last stage's hidden rows in flight to rank 0, kept until end_step's wait.
    mutable std::deque<std::vector<float>> hidden_out_;
    std::vector<double> rope_inv_freq_;
    std::vector<double> rope_inv_freq_swa_;  // the sliding layers' where they have their own
    float rope_scale_ = 1.0f;
    // Counted by forward, which runs on one thread at a time (the backend's caller), and read
    // between steps.
    mutable std::vector<int64_t> expert_tokens_;
    // A mixture's host-side state of one step (the router's choice, the shared expert's
    // gates), kept so a decode step reuses what the last one allocated; written by forward on
    // that same one thread.
    mutable Routing routing_;
    mutable std::vector<float> shared_gate_;
    mutable std::vector<int32_t> shared_rows_;
};

}  // namespace ferry::model
