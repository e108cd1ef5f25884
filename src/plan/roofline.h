// The roofline: how fast a step can possibly go, given the bytes it must read and the FLOPs it
// must do, against the device's bandwidth and peak throughput. Decode reads every weight once
// per step (shared by the batch) plus each sequence's KV cache; prefill is compute-bound.
#pragma once

#include <cstdint>
#include <string>

#include "plan/devices.h"
#include "plan/memory_plan.h"

namespace ferry::plan {

// Work of one forward step, in bytes read and FLOPs done. FLOPs count the matmuls only:
// 2 x (active) params per token (attention's score FLOPs are left out; they matter only at long
// ctx).
struct StepCost {
    double bytes = 0;
    double flops = 0;
};

// One decode step of `batch` sequences each `ctx` tokens long: all weights once, plus
// batch x ctx x kv_bytes_per_token of KV cache; 2 x params x batch FLOPs.
StepCost decode_step_cost(int64_t params, double weight_bytes, double kv_bytes_per_token,
                          int64_t batch, int64_t ctx);
// Prefilling `tokens` prompt tokens: weights once, 2 x params x tokens FLOPs (KV writes are
// small next to the weights and left out).
StepCost prefill_cost(int64_t params, double weight_bytes, int64_t tokens);

// Mixture of experts. Each of `tokens` tokens picks k of a layer's E experts; assuming routing
// is uniform and independent across tokens (real routers are skewed, which touches fewer), an
// expert is missed by one token with probability 1 - k/E, so the expected number of distinct
// experts the batch touches per layer is E (1 - (1 - k/E)^tokens): k at one token, E in the
// limit. 0 when E is 0 (a dense model).
double expected_experts_touched(int64_t n_experts, int64_t k, double tokens);
// Weight bytes one decode step of `batch` sequences reads, whole model: everything but the
// routed experts once, and of the experts the expected share the batch touches.
double decode_weight_bytes(const MemoryPlan& plan, double batch);
inline constexpr const char* kRoutingRule =
    "uniform routing: a step of B tokens touches E (1 - (1 - k/E)^B) of each layer's E experts";

// Seconds to move `bytes` at `gbs` GB/s (14 GB at 2000 GB/s = 7 ms).
inline double seconds_to_read(double bytes, double gbs) {
    return bytes / (gbs * 1e9);
}

// The device's dense peak for a weight format, in TFLOP/s: FP8 and INT8 units where the format
// can use them and the device has them, FP16 otherwise.
double peak_tflops(const Device& device, ComputeClass compute);
const char* compute_class_name(ComputeClass c);

struct Roofline {
    std::string compute_precision;  // "fp16", "fp8" or "int8"
    double peak_tflops = 0;         // one device
    double bandwidth_gbs = 0;       // one device
    double machine_balance = 0;     // FLOPs per byte where the two roofs meet (peak / bandwidth)

    // One decode step on one device (its weight shard and KV share).
    double decode_bytes_per_step = 0;
    double decode_weight_bytes_per_step = 0, decode_kv_bytes_per_step = 0;  // its two parts
    double experts_touched_per_layer = 0;  // expected, of n_experts (0 for a dense model)
    double decode_flops_per_step = 0;
    double arithmetic_intensity = 0;  // decode FLOPs / bytes
    std::string decode_bound;         // "bandwidth" or "compute"
    double decode_memory_ms = 0, decode_compute_ms = 0, decode_step_ms = 0;
    double decode_tokens_per_s_per_sequence = 0;
    double decode_tokens_per_s = 0;  // aggregate: batch / step time
    // Batch where decode turns compute-bound at this ctx; < 0 when the KV reads grow as fast
    // as the FLOPs and it never does.
    double crossover_batch = -1;

    double prefill_tokens_per_s = 0;  // all tp devices: tp x peak / (2 x active params)
};

Roofline roofline(const MemoryPlan& plan, const Device& device);

}  // namespace ferry::plan
