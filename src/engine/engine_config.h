// How a serving engine is set up: threads, context, batching and KV-cache limits, the
// baselines' switches and speculation. A plain value, shared by the engine, its scheduler and
// the front ends that fill it in.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "engine/kv_eviction.h"
#include "engine/speculation.h"
#include "quant/kv_format.h"

namespace ferry::engine {

struct LoadedModel;

// Where a step's tokens are drawn. Device: the backend picks them beside the logits
// (Backend::argmax / sample) and only ids cross to the host; Host: the logits cross and
// engine::Sampler draws (the baseline that measures the difference). Auto: the device on a GPU;
// on the CPU, where the logits are host memory already, only greedy argmax there. Rows that
// read their floats (logprobs, grammars, drafts, n > 1's first token) take the host path
// either way.
enum class SampleOn { Auto, Host, Device };
// Whether a row's token is picked on the device under `s` with backend `d`: an argmax (plain
// greedy, nothing to mask) wherever the host is not asked for, a draw only under Device or on
// a GPU.
inline bool picks_on_device(SampleOn s, Device d, bool argmax_only) {
    if (s == SampleOn::Host) return false;
    return argmax_only || s == SampleOn::Device || d != Device::CPU;
}

struct EngineConfig {
    int max_model_len = 0;             // 0: min(trained context, 4096)
    int max_num_seqs = 64;             // sequences in one step at most
    int max_num_batched_tokens = 512;  // tokens in one step at most (prefill chunks + decodes)
    // While any sequence decodes, prefill chunks of a step add up to at most this many tokens,
    // so a long prompt costs the others' next token a short step, not a whole budget's worth
    // (on a CPU a 512-token chunk is most of a second). 0: only the token budget applies.
    int prefill_chunk_while_decoding = 128;
    // Latency target (Sarathi-Serve's rule with a time budget): while anyone decodes, a step
    // carries only as many prefill tokens as keep its measured time within this, so running
    // requests' TPOT holds while new prompts are admitted. Replaces the fixed chunk above once
    // step times are known; 0: off.
    double max_tpot_ms = 0;
    // Bytes for the block pool; 0: on the CPU 25 % of the available RAM, at most 2 GiB; on a GPU
    // what gpu_memory_utilization leaves (engine/kv_pool_size.h).
    int64_t kv_cache_memory = 0;
    // A GPU: the share of its memory this engine may hold in all, weights, cache and working
    // memory (vLLM's --gpu-memory-utilization); unset: 0.9. Refused on the CPU and beside
    // kv_cache_memory, each of which would make it mean nothing.
    std::optional<double> gpu_memory_utilization;
    SampleOn sample_on = SampleOn::Auto;
    int block_size = 16;  // token slots per KV block
    bool prefix_cache = true;
    // A model with both sliding-window and global layers (Gemma 3) keeps the sliding layers'
    // blocks in a pool of their own, sized for the running sequences' windows, so only the
    // global layers' cache grows with the context (paged only). false: one pool for every
    // layer, the baseline that shows what it saves.
    bool kv_window_pool = true;
    enum class Batching { Continuous, Static } batching = Batching::Continuous;
    int batch_wait_ms = 50;  // static batching: how long the oldest request waits for company
    enum class KvLayout { Paged, Contiguous } kv_layout = KvLayout::Paged;
    quant::KvDType kv_dtype = quant::KvDType::F32;  // what the KV cache stores (quant/kv_format.h)
    KvEvictionConfig kv_eviction;  // keep sinks + a recent window per sequence (paged only)
    int max_waiting = 4096;        // requests queued beyond this are refused
    SpecConfig spec;               // speculative decoding for requests that do not choose
    const LoadedModel* draft_model = nullptr;  // for SpecMethod::Draft
};

}  // namespace ferry::engine
