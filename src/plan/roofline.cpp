#include "plan/roofline.h"

#include <algorithm>

namespace ferry::plan {

StepCost decode_step_cost(int64_t params, double weight_bytes, double kv_bytes_per_token,
                          int64_t batch, int64_t ctx) {
    return {weight_bytes + kv_bytes_per_token * static_cast<double>(batch) * ctx,
            2.0 * static_cast<double>(params) * batch};
}

StepCost prefill_cost(int64_t params, double weight_bytes, int64_t tokens) {
    return {weight_bytes, 2.0 * static_cast<double>(params) * tokens};
}

double peak_tflops(const Device& d, ComputeClass c) {
    if (c == ComputeClass::FP8 && d.fp8_tflops > 0) return d.fp8_tflops;
    if (c == ComputeClass::INT8 && d.int8_tops > 0) return d.int8_tops;
    return d.fp16_tflops;
}

const char* compute_class_name(ComputeClass c) {
    switch (c) {
        case ComputeClass::FP8:
            return "fp8";
        case ComputeClass::INT8:
            return "int8";
        default:
            return "fp16";
    }
}

Roofline roofline(const MemoryPlan& p, const Device& d) {
    Roofline r;
    // A format without its own units on this device falls back to the FP16 rate.
    ComputeClass c = p.weights.compute;
    if (peak_tflops(d, c) == d.fp16_tflops) c = ComputeClass::FP16;
    r.compute_precision = compute_class_name(c);
    r.peak_tflops = peak_tflops(d, c);
    r.bandwidth_gbs = d.bandwidth_gbs;
    const double peak_flops = r.peak_tflops * 1e12, bw = d.bandwidth_gbs * 1e9;
    r.machine_balance = peak_flops / bw;

    // Per device: its weight shard, its share of the KV heads, 1/tp of the FLOPs. The TP
    // all-reduces are left out; over NVLink they cost little next to the weight reads.
    const double kv_token_dev = p.kv_bytes_per_token * p.kv_share;
    const double params_dev = static_cast<double>(p.params) / p.tp;
    const StepCost step =
        decode_step_cost(static_cast<int64_t>(params_dev), static_cast<double>(p.weights_bytes),
                         kv_token_dev, p.batch, p.ctx);
    r.decode_bytes_per_step = step.bytes;
    r.decode_flops_per_step = step.flops;
    r.arithmetic_intensity = step.flops / step.bytes;
    r.decode_bound = r.arithmetic_intensity >= r.machine_balance ? "compute" : "bandwidth";
    r.decode_memory_ms = seconds_to_read(step.bytes, d.bandwidth_gbs) * 1e3;
    r.decode_compute_ms = step.flops / peak_flops * 1e3;
    r.decode_step_ms = std::max(r.decode_memory_ms, r.decode_compute_ms);
    r.decode_tokens_per_s_per_sequence = 1e3 / r.decode_step_ms;
    r.decode_tokens_per_s = p.batch * r.decode_tokens_per_s_per_sequence;

    // Solve 2 P b / (W + kv_seq b) = balance for b.
    const double kv_seq_dev = kv_token_dev * p.ctx;
    const double denom = 2.0 * params_dev - r.machine_balance * kv_seq_dev;
    if (denom > 0) r.crossover_batch = r.machine_balance * p.weights_bytes / denom;

    r.prefill_tokens_per_s = p.tp * peak_flops / (2.0 * static_cast<double>(p.params));
    return r;
}

}  // namespace ferry::plan
