#include "plan/roofline.h"

#include <algorithm>
#include <cmath>

namespace ferry::plan {

StepCost decode_step_cost(int64_t params, double weight_bytes, double kv_bytes_per_token,
                          int64_t batch, int64_t ctx) {
    return {weight_bytes + kv_bytes_per_token * static_cast<double>(batch) * ctx,
            2.0 * static_cast<double>(params) * batch};
}

StepCost prefill_cost(int64_t params, double weight_bytes, int64_t tokens) {
    return {weight_bytes, 2.0 * static_cast<double>(params) * tokens};
}

double expected_experts_touched(int64_t n_experts, int64_t k, double tokens) {
    if (n_experts <= 0) return 0;
    const double e = static_cast<double>(n_experts);
    return e * (1.0 - std::pow(1.0 - static_cast<double>(k) / e, tokens));
}

double decode_weight_bytes(const MemoryPlan& p, double batch) {
    // An untied embedding is looked up, a row per token, not streamed.
    const double embed = static_cast<double>(p.embed_bytes_total);
    const double rows = p.vocab > 0 ? std::min(1.0, batch / static_cast<double>(p.vocab)) : 1.0;
    const double all = static_cast<double>(p.weights_bytes_total) - embed + embed * rows;
    if (p.n_experts <= 0 || p.expert_bytes_total == 0) return all;
    const double experts = static_cast<double>(p.expert_bytes_total);
    const double touched = expected_experts_touched(p.n_experts, p.n_experts_used, batch);
    return all - experts + experts * touched / p.n_experts;
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
    // all-reduces are left out; over NVLink they cost little next to the weight reads. A
    // sequence's KV is read whole each step (sliding layers: their window).
    const double kv_seq_dev = p.kv_bytes_per_sequence * p.kv_share;
    const double active_dev = static_cast<double>(p.params_active) / p.tp;
    // Bytes and FLOPs of a step of b sequences (b real, for the crossover search).
    auto weight_bytes = [&](double b) {
        return decode_weight_bytes(p, b) / p.tp + static_cast<double>(p.tp_uneven_bytes);
    };
    auto intensity = [&](double b) {
        return 2.0 * active_dev * b / (weight_bytes(b) + kv_seq_dev * b);
    };
    r.experts_touched_per_layer =
        expected_experts_touched(p.n_experts, p.n_experts_used, static_cast<double>(p.batch));
    r.decode_weight_bytes_per_step = weight_bytes(static_cast<double>(p.batch));
    r.decode_kv_bytes_per_step = kv_seq_dev * p.batch;
    const StepCost step{r.decode_weight_bytes_per_step + r.decode_kv_bytes_per_step,
                        2.0 * active_dev * p.batch};
    r.decode_bytes_per_step = step.bytes;
    r.decode_flops_per_step = step.flops;
    r.arithmetic_intensity = step.flops / step.bytes;
    r.decode_bound = r.arithmetic_intensity >= r.machine_balance ? "compute" : "bandwidth";
    r.decode_memory_ms = seconds_to_read(step.bytes, d.bandwidth_gbs) * 1e3;
    r.decode_compute_ms = step.flops / peak_flops * 1e3;
    r.decode_step_ms = std::max(r.decode_memory_ms, r.decode_compute_ms);
    r.decode_tokens_per_s_per_sequence = 1e3 / r.decode_step_ms;
    r.decode_tokens_per_s = p.batch * r.decode_tokens_per_s_per_sequence;

    // The batch where intensity reaches the balance. Intensity grows with b (the weight bytes
    // per sequence fall) towards 2 A / kv_seq, so there is one when that limit exceeds the
    // balance. Dense: the closed form of 2 A b / (W + kv_seq b) = balance; MoE (W grows with
    // b): bisection on the same curve.
    if (2.0 * active_dev > r.machine_balance * kv_seq_dev) {
        if (p.n_experts <= 0) {
            r.crossover_batch = r.machine_balance * p.weights_bytes /
                                (2.0 * active_dev - r.machine_balance * kv_seq_dev);
        } else {
            double lo = 0, hi = 1;
            while (intensity(hi) < r.machine_balance && hi < 1e15) lo = hi, hi *= 2;
            for (int i = 0; i < 200 && hi - lo > 1e-9 * hi; ++i) {
                const double mid = (lo + hi) / 2;
                (intensity(mid) < r.machine_balance ? lo : hi) = mid;
            }
            r.crossover_batch = hi;
        }
    }

    r.prefill_tokens_per_s = p.tp * peak_flops / (2.0 * static_cast<double>(p.params_active));
    return r;
}

}  // namespace ferry::plan
