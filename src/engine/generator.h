// Single-stream generation: prefill the prompt in one batched forward pass, then decode one
// token at a time until max_tokens, an end-of-generation token or the context is full.
// This is what `ferry run`, `ferry chat` and `ferry bench decode` drive.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/block_manager.h"
#include "engine/engine_config.h"
#include "engine/kv_eviction.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/spec_planner.h"
#include "engine/speculation.h"
#include "kv/kv_store.h"
#include "model/llama.h"

namespace ferry::engine {

struct GenerationStats {
    int prompt_tokens = 0;
    int generated_tokens = 0;
    double prefill_ms = 0;      // the batched forward pass over the prompt
    double ttft_ms = 0;         // prefill plus sampling the first token
    double decode_ms = 0;       // every later token
    std::string finish_reason;  // "stop" (end-of-generation token) or "length"
    int spec_steps = 0;         // verification passes that carried a draft
    int spec_draft_tokens = 0;  // tokens proposed and verified
    int spec_accepted_tokens = 0;
    int spec_tree_moved_steps = 0;  // a tree's branch other than its leading chain was accepted
    int spec_declined_steps = 0;    // steps the cost policy ran without the draft it could have had
    // With a proposer, every decode step's draft length and how many of it were accepted (0, 0
    // for a step run without a draft), in order: acceptance along the generation.
    std::vector<int> spec_step_drafted, spec_step_accepted;

    double prefill_tokens_per_s() const {
        return prefill_ms > 0 ? prompt_tokens / prefill_ms * 1e3 : 0;
    }
    double decode_tokens_per_s() const {
        return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_ms * 1e3 : 0;
    }
};

// Speculation for one stream: a proposer (nullptr: plain decoding), its K (the most, under the
// cost policy) and the policy.
struct SpecRun {
    Proposer* proposer = nullptr;
    int k = 4;
    SpecPolicy policy = SpecPolicy::Cost;
};

class Generator {
  public:
    // Runs `model` on `backend` with a cache of n_ctx positions; kv: what the cache stores
    // (engine::kv_format_for makes it for a model), f32 by default. With `eviction` on
    // (engine/kv_eviction.h) the stream runs past n_ctx: the cache keeps the sinks and the
    // latest tokens, the budget of them, and a prompt goes in in chunks; check_eviction says
    // whether the configuration fits n_ctx.
    Generator(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
              int64_t n_ctx, kv::KvFormat kv = {}, KvEvictionConfig eviction = {});
    // Why `eviction` cannot run over this model, cache type and context; Ok when it can.
    static Status check_eviction(const model::LlamaModel& model, quant::KvDType kv, int64_t n_ctx,
                                 const KvEvictionConfig& eviction);

    int64_t n_ctx() const { return n_ctx_; }
    int64_t position() const { return static_cast<int64_t>(history_.size()); }
    const std::vector<int32_t>& history() const { return history_; }
    void reset();
    // Tokens eviction took out of the cache so far.
    int64_t evicted() const { return table_.evicted; }
    const kv::KvStore& kv_store() const { return runner_.kv(); }
    kernels::Backend& backend() { return runner_.backend(); }
    // Where tokens are drawn (SampleOn; Auto unless set): on the device, a plain step (no
    // speculation) sends back a token id instead of the logits row.
    void set_sample_on(SampleOn where) { sample_on_ = where; }
    // What the speculation cost policy has learnt (step costs by width, acceptance).
    const SpecPlanner& spec_planner() const { return planner_; }
    // Forgets everything after the first n tokens (their cache slots are simply overwritten;
    // under eviction, n within what was evicted forgets everything).
    void truncate(int64_t n);

    // Continues the sequence with `prompt` (appended to what is already in the cache, so a
    // chat keeps its earlier turns) and generates. on_token returns false to stop early.
    // stop_on_eog: is_eog decides which tokens end the generation (may be empty).
    Expected<GenerationStats> generate(std::span<const int32_t> prompt,
                                       const SamplingParams& params, int max_tokens,
                                       const std::function<bool(int32_t)>& on_token,
                                       const std::function<bool(int32_t)>& is_eog,
                                       const SpecRun& spec = {});

    // Logits of the last position after feeding `tokens` from an empty cache (for tests).
    Expected<std::vector<float>> logits_for(std::span<const int32_t> tokens);

  private:
    // Runs tokens at the end of the sequence and returns the logits of the last n_logits.
    // tree: a draft tree's masks (kernels::BatchSeq::tree), or empty.
    std::span<const float> feed(std::span<const int32_t> tokens, int n_logits,
                                std::span<const uint64_t> tree = {});
    // feed(tokens, 1) and the token `sampler` gives for the last position: drawn on the device
    // when `on_device` (only the id crosses), else from the logits on the host.
    int32_t feed_and_pick(std::span<const int32_t> tokens, Sampler& sampler, bool on_device);
    // Positions the cache holds: the history, but what eviction took out.
    int64_t cache_len() const { return position() - table_.evicted; }
    // What counts against n_ctx: the history, or under streaming eviction (which runs past it)
    // what the cache holds.
    int64_t context_len() const { return eviction_.past_context() ? cache_len() : position(); }

    int64_t n_ctx_;
    int window_;  // the model's smallest sliding window (0: none), which a draft tree must fit
    KvEvictionConfig eviction_;
    ModelRunner runner_;
    SampleOn sample_on_ = SampleOn::Auto;
    // A device draw's arguments, kept until the step that reads them is done.
    kernels::SampleRow pick_row_;
    std::vector<kernels::LogitEdit> pick_edits_;
    std::vector<int32_t> pick_history_;
    // Under eviction the stream's blocks are managed as the engine's are (small blocks, a
    // table); otherwise blocks_ is simply 0, 1, 2, ...
    std::unique_ptr<BlockManager> blocks_mgr_;
    BlockTable table_;
    // Step costs and acceptance, kept across calls (a benchmark's plain runs measure the
    // one-token step the speculative runs compare with).
    SpecPlanner planner_;
    std::vector<int32_t> blocks_;  // one stream: its blocks are simply 0, 1, 2, ...
    std::vector<int32_t> history_;
};

}  // namespace ferry::engine
