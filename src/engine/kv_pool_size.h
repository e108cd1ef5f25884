// How many bytes the KV block pool takes when --kv-cache-memory does not say: on the CPU a share
// of the RAM that is free; on a GPU vLLM's --gpu-memory-utilization rule, so a card is filled
// with cache (the batch it can hold is the throughput it gives) without running out mid-step.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/llama_config.h"

namespace ferry::engine {

// The device's memory as the engine starts, weights already resident.
struct DeviceMemory {
    std::string name;    // for the message ("NVIDIA H100 80GB HBM3")
    uint64_t total = 0;  // bytes
    uint64_t free = 0;   // bytes still free now
};

// utilization x total is this engine's in all. What is taken already (its weights, the CUDA
// context, any other process: total - free) and a step's working memory (`workspace`) come off
// it; the pool gets the rest. An error, with every figure, when that is below `needed` (a
// step's worth of cache).
Expected<int64_t> gpu_pool_bytes(const DeviceMemory& m, double utilization, uint64_t workspace,
                                 uint64_t needed);

// What a forward step holds besides weights and cache, at most: the layers' activations for
// `batched_tokens` tokens (f32) and the logits of `logit_rows` rows, plus room for the
// backend's argument buffers. An upper bound, as the scratch grows to the largest step it sees.
uint64_t step_workspace_bytes(const model::LlamaConfig& c, int64_t batched_tokens,
                              int64_t logit_rows);

// The CPU's default: a quarter of the available RAM, at most 2 GiB (1 GiB where the kernel
// does not say what is available).
int64_t cpu_pool_bytes(uint64_t available);

}  // namespace ferry::engine
