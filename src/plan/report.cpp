#include "plan/report.h"

#include <cmath>

#include <fmt/format.h>

namespace ferry::plan {

Expected<PlanReport> make_plan(const ModelSpec& model, const Device& device,
                               const PlanOptions& options) {
    PlanReport r{model, device, options, {}, {}, {}};
    auto mem = plan_memory(model, device, options);
    if (!mem) return mem.error();
    r.memory = *mem;
    r.roof = roofline(r.memory, device);
    auto adv = advise(model, device, options);
    if (!adv) return adv.error();
    r.advice = *adv;
    return r;
}

std::string human_bytes(double b) {
    const double a = std::fabs(b);
    if (a >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
    if (a >= 100e9) return fmt::format("{:.1f} GB", b / 1e9);
    if (a >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
    if (a >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
    if (a >= 1e3) return fmt::format("{:.1f} KB", b / 1e3);
    return fmt::format("{:.0f} B", b);
}

namespace {

std::string human_count(double n) {
    if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
    if (n >= 1e6) return fmt::format("{:.1f} M", n / 1e6);
    return fmt::format("{:.0f}", n);
}

}  // namespace

nlohmann::json plan_to_json(const PlanReport& r) {
    const ModelSpec& m = r.model;
    const Device& d = r.device;
    const MemoryPlan& p = r.memory;
    const Roofline& f = r.roof;
    const Advice& a = r.advice;
    nlohmann::json j;
    j["model"] = {{"name", m.name},
                  {"source", m.source},
                  {"arch", m.arch},
                  {"params", p.params},
                  {"params_total", p.params},
                  {"params_active", p.params_active},
                  {"n_layers", m.n_layers},
                  {"hidden_size", m.hidden},
                  {"n_heads", m.n_heads},
                  {"n_kv_heads", m.n_kv_heads},
                  {"head_dim", m.head_dim},
                  {"intermediate_size", m.ffn},
                  {"vocab_size", m.vocab},
                  {"max_context", m.max_ctx},
                  {"tied_embeddings", m.tied_embeddings},
                  {"n_experts", m.n_experts},
                  {"n_experts_used", m.n_experts_used},
                  {"expert_intermediate_size", m.expert_ffn},
                  {"n_shared_experts", m.n_shared_experts},
                  {"shared_expert_intermediate_size", m.shared_expert_ffn},
                  {"n_moe_layers", m.moe_layers()},
                  {"sliding_window", m.sliding_window},
                  {"n_sliding_layers", m.n_sliding_layers}};
    j["device"] = {{"name", d.name},
                   {"count", p.tp},
                   {"memory_gb", d.memory_gb},
                   {"memory_bytes", d.memory_bytes},
                   {"bandwidth_gbs", d.bandwidth_gbs},
                   {"fp16_tflops", d.fp16_tflops},
                   {"fp8_tflops", d.fp8_tflops},
                   {"int8_tops", d.int8_tops},
                   {"measured", d.measured},
                   {"source", d.source}};
    j["settings"] = {{"weights", p.weights.name},
                     {"weight_bits", p.weights.bits},
                     {"kv_dtype", p.kv.name},
                     {"ctx", p.ctx},
                     {"batch", p.batch},
                     {"tp", p.tp},
                     {"gpu_memory_utilization", p.utilization},
                     {"kv_cache_memory", r.options.kv_cache_memory},
                     {"max_batched_tokens", r.options.max_batched_tokens}};
    j["memory"] = {{"weights_bytes", p.weights_bytes_total},
                   {"weights_bytes_per_device", p.weights_bytes},
                   {"expert_bytes", p.expert_bytes_total},
                   {"kv_bytes_per_token", p.kv_bytes_per_token},
                   {"kv_bytes_per_token_mha", p.kv_bytes_per_token_mha},
                   {"kv_bytes_per_sequence", p.kv_bytes_per_sequence},
                   {"kv_bytes_per_sequence_mha", p.kv_bytes_per_sequence_mha},
                   {"kv_bytes_per_sequence_no_window", p.kv_bytes_per_sequence_no_window},
                   {"kv_rule", kKvRule},
                   {"kv_bytes_total", p.kv_bytes_total},
                   {"kv_bytes_total_mha", p.kv_bytes_total_mha},
                   {"kv_bytes_per_device", p.kv_bytes},
                   {"kv_pool_fixed", p.kv_pool_fixed},
                   {"tokens_per_step", p.tokens_per_step},
                   {"activation_bytes", p.activation_bytes},
                   {"activation_rule", kActivationRule},
                   {"overhead_bytes", p.overhead_bytes},
                   {"overhead_fraction", p.overhead_fraction},
                   {"overhead_rule", kOverheadRule},
                   {"total_bytes_per_device", p.total_bytes},
                   {"total_bytes", p.total_bytes * p.tp},
                   {"capacity_bytes_per_device", p.capacity_bytes},
                   {"capacity_bytes", p.capacity_bytes * p.tp},
                   {"fits", p.fits},
                   {"margin_bytes", p.margin_bytes},
                   {"max_sequences", p.max_sequences}};
    if (p.tp > 1)
        j["tensor_parallel"] = {{"sums_per_token", p.tp_sums_per_token},
                                {"sum_bytes_per_token", p.tp_sum_bytes_per_token},
                                {"ring_bytes_per_rank_per_token", p.tp_ring_bytes_per_token},
                                {"logits_gather_bytes_per_token", p.tp_logits_bytes_per_token},
                                {"rule", kTpCommRule}};
    j["performance"] = {{"compute_precision", f.compute_precision},
                        {"peak_tflops", f.peak_tflops},
                        {"bandwidth_gbs", f.bandwidth_gbs},
                        {"machine_balance", f.machine_balance},
                        {"decode_bytes_per_step", f.decode_bytes_per_step},
                        {"decode_weight_bytes_per_step", f.decode_weight_bytes_per_step},
                        {"decode_kv_bytes_per_step", f.decode_kv_bytes_per_step},
                        {"experts_touched_per_layer", f.experts_touched_per_layer},
                        {"routing_rule", kRoutingRule},
                        {"decode_flops_per_step", f.decode_flops_per_step},
                        {"arithmetic_intensity", f.arithmetic_intensity},
                        {"bound", f.decode_bound},
                        {"decode_memory_ms", f.decode_memory_ms},
                        {"decode_compute_ms", f.decode_compute_ms},
                        {"decode_ms_per_step", f.decode_step_ms},
                        {"decode_tokens_per_s_per_sequence", f.decode_tokens_per_s_per_sequence},
                        {"decode_tokens_per_s", f.decode_tokens_per_s},
                        {"crossover_batch", f.crossover_batch},
                        {"prefill_tokens_per_s", f.prefill_tokens_per_s}};
    j["advice"] = {{"recommendation", a.recommendation},
                   {"fits_16bit", a.fits_16bit},
                   {"fits_int8", a.fits_int8},
                   {"fits_int4", a.fits_int4},
                   {"min_devices", a.min_devices},
                   {"min_devices_even", a.min_devices_even},
                   {"min_devices_16bit", a.min_devices_16bit},
                   {"min_devices_int4", a.min_devices_int4},
                   {"text", a.text}};
    return j;
}

std::string plan_to_text(const PlanReport& r) {
    const ModelSpec& m = r.model;
    const Device& d = r.device;
    const MemoryPlan& p = r.memory;
    const Roofline& f = r.roof;
    std::string o;
    auto line = [&o](std::string_view label, const std::string& value, const std::string& note) {
        o += fmt::format("  {:<24}{:>11}   {}\n", label, value, note);
    };

    const std::string params = human_count(static_cast<double>(p.params));
    const std::string moe =
        m.is_moe()
            ? fmt::format(
                  ", {} experts top-{}{}", m.n_experts, m.n_experts_used,
                  m.n_shared_experts > 0 ? fmt::format(" + {} shared", m.n_shared_experts) : "")
            : "";
    o += fmt::format(
        "model   {} ({}, {} params{}: {} layers, hidden {}, {} heads / {} KV heads{})\n", m.name,
        m.source, params,
        m.is_moe() ? fmt::format(", {} active", human_count(static_cast<double>(p.params_active)))
                   : "",
        m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, moe);
    const std::string mem = d.measured ? human_bytes(static_cast<double>(d.memory_bytes))
                                       : fmt::format("{:g} GiB", d.memory_gb);
    o += fmt::format("device  {} x {}: {} each, {:.1f} GB/s, {:.3g} TFLOP/s {} dense{}\n", p.tp,
                     d.name, mem, d.bandwidth_gbs, f.peak_tflops, f.compute_precision,
                     d.measured ? " (measured)" : "");
    o += fmt::format(
        "        weights {} ({:.2f} bits), KV {}, ctx {}, batch {}, utilization {:.2f}\n\n",
        p.weights.name, p.weights.bits, p.kv.name, p.ctx, p.batch, p.utilization);

    const std::string per_dev = p.tp > 1 ? " (per device)" : "";
    o += fmt::format("memory{}\n", per_dev);
    line("weights", human_bytes(p.weights_bytes),
         fmt::format("{} params{} x {:.2f} bits{}", params,
                     m.is_moe() ? fmt::format(" (all {} experts)", m.n_experts) : "",
                     p.weights.bits, p.tp > 1 ? fmt::format(" / tp {}", p.tp) : ""));
    const std::string gqa_note =
        fmt::format("without GQA ({} KV heads instead of {})", m.n_heads, m.n_kv_heads);
    line(
        "KV cache per token", human_bytes(p.kv_bytes_per_token),
        fmt::format("2 x {} layers x {} KV heads x {} dims x {} B; {} {}", m.n_layers, m.n_kv_heads,
                    m.head_dim, p.kv.bits / 8, human_bytes(p.kv_bytes_per_token_mha), gqa_note));
    line("KV cache per sequence", human_bytes(p.kv_bytes_per_sequence),
         fmt::format("{} tokens; {} without GQA", p.ctx, human_bytes(p.kv_bytes_per_sequence_mha)));
    if (m.n_sliding_layers > 0)
        line("", "",
             fmt::format("{} of {} layers slide over {} tokens; {} if every layer kept all",
                         m.n_sliding_layers, m.n_layers, m.sliding_window,
                         human_bytes(p.kv_bytes_per_sequence_no_window)));
    line("KV cache total", human_bytes(p.kv_bytes),
         fmt::format("{}; {} without GQA",
                     p.kv_pool_fixed ? std::string("fixed pool (--kv-cache-memory)")
                                     : fmt::format("{} sequences", p.batch),
                     human_bytes(p.kv_bytes_total_mha * p.kv_share)));
    line("activations", human_bytes(p.activation_bytes),
         fmt::format("{} tokens/step x per-token buffers + logits", p.tokens_per_step));
    line("framework overhead", human_bytes(p.overhead_bytes),
         fmt::format("{:.0f} %: 1 GiB GPU / 16 MiB CPU floor, clamped to 10-20 %",
                     p.overhead_fraction * 100));
    line("total", human_bytes(p.total_bytes), "weights + KV + activations + overhead");
    line("capacity", human_bytes(p.capacity_bytes),
         fmt::format("{} x {:.2f} utilization", human_bytes(d.memory_bytes), p.utilization));
    const double margin = static_cast<double>(p.margin_bytes);
    o += fmt::format("  => {} {}{}\n", p.fits ? "FITS with spare" : "DOES NOT FIT: short by",
                     human_bytes(std::fabs(margin)), p.tp > 1 ? " (all devices)" : "");
    if (p.max_sequences == 0 && p.fits)
        // Memory is there, but the pool asked for cannot hold a single full-length sequence.
        o += fmt::format(
            "  => but the KV pool ({}) holds less than one sequence of {} tokens ({}): raise "
            "--kv-cache-memory or lower --ctx\n\n",
            human_bytes(p.kv_bytes_total), p.ctx, human_bytes(p.kv_bytes_per_sequence));
    else
        o += fmt::format("  => at most {} concurrent sequences of {} tokens\n\n", p.max_sequences,
                         p.ctx);

    if (p.tp > 1)
        o += fmt::format(
            "tensor parallel, per decoded token: {} sums over the ranks, {} of values ({} a "
            "ring all-reduce sends from each rank), {} of logits gathered on one rank\n\n",
            p.tp_sums_per_token, human_bytes(static_cast<double>(p.tp_sum_bytes_per_token)),
            human_bytes(static_cast<double>(p.tp_ring_bytes_per_token)),
            human_bytes(static_cast<double>(p.tp_logits_bytes_per_token)));
    o += "performance (roofline)\n";
    o += fmt::format("  decode: {} read + {:.1f} GFLOP per step -> {:.2f} ms/step\n",
                     human_bytes(f.decode_bytes_per_step), f.decode_flops_per_step / 1e9,
                     f.decode_step_ms);
    o += fmt::format("          {:.1f} tok/s per sequence, {:.1f} tok/s aggregate at batch {}\n",
                     f.decode_tokens_per_s_per_sequence, f.decode_tokens_per_s, p.batch);
    if (m.is_moe())
        o += fmt::format(
            "          experts: batch {} touches ~{:.1f} of {} per layer (uniform routing), so a "
            "step reads {} of weights{}; batch 1 reads {}, all experts {}\n",
            p.batch, f.experts_touched_per_layer, m.n_experts,
            human_bytes(f.decode_weight_bytes_per_step), p.tp > 1 ? " per device" : "",
            human_bytes(decode_weight_bytes(p, 1) / p.tp),
            human_bytes(static_cast<double>(p.weights_bytes)));
    std::string crossover =
        f.crossover_batch > 0
            ? fmt::format("turns compute-bound from batch ~{:.0f}", std::ceil(f.crossover_batch))
            : std::string("KV reads keep it bandwidth-bound at any batch");
    o += fmt::format(
        "          intensity {:.1f} FLOP/B vs machine balance {:.1f} FLOP/B -> "
        "{}-bound ({})\n",
        f.arithmetic_intensity, f.machine_balance, f.decode_bound, crossover);
    o += fmt::format("  prefill (compute-bound, 2 x {}params FLOP/token): {:.0f} tok/s\n\n",
                     m.is_moe() ? "active " : "", f.prefill_tokens_per_s);
    o += fmt::format("advice\n  {}\n", r.advice.text);
    return o;
}

}  // namespace ferry::plan
