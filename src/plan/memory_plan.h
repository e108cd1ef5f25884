// Adds up what serving a model takes on one device: weights, KV cache, activations and the
// framework's own overhead, against the device's capacity; and from that, how many sequences of
// the given context fit at once.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "plan/devices.h"
#include "plan/model_spec.h"

namespace ferry::plan {

// Which tensor-core rate a weight format computes at. Weight-only formats (int4, GGUF block
// types) dequantize to 16-bit before the matmul, so they compute at the FP16 rate.
enum class ComputeClass { FP16, FP8, INT8 };

struct Precision {
    std::string name;  // "f16", "int4", "q4_k", ... or the GGUF file's own type
    double bits = 16;  // per weight (or per KV element), including block scales
    ComputeClass compute = ComputeClass::FP16;
};

// f32, f16, bf16, fp8, int8, int4, or any GGUF type name (q4_1 = 5 bits, q4_k = 4.5 bits).
Expected<Precision> parse_weight_precision(std::string_view name);
// f32, f16, bf16, fp8, int8.
Expected<Precision> parse_kv_precision(std::string_view name);

struct PlanOptions {
    std::string weights;  // empty: the model's own (GGUF tensor bytes; 16-bit otherwise)
    std::string kv_dtype = "f16";
    int64_t ctx = 0;  // tokens per sequence; 0 = the model's trained context
    int64_t batch = 1;
    int tp = 1;                           // tensor-parallel devices
    double gpu_memory_utilization = 0.9;  // fraction of each device's memory ferry may use
    // A fixed KV pool (bytes, whole model) instead of batch x ctx: how engines really allocate,
    // and what `ferry serve --kv-cache-memory` will take; max_sequences then divides the pool.
    int64_t kv_cache_memory = 0;
    // Tokens one forward step may process (chunked prefill budget); sizes the activations.
    int64_t max_batched_tokens = 512;  // the serving engine's default --max-num-batched-tokens
};

// All byte counts are per device unless the name says otherwise.
struct MemoryPlan {
    Precision weights;
    Precision kv;
    int64_t ctx = 0, batch = 0;
    int tp = 1;
    double utilization = 0.9;
    int64_t params = 0;         // total: memory holds every expert
    int64_t params_active = 0;  // per token (= params for a dense model)

    uint64_t weights_bytes_total = 0;  // whole model
    uint64_t weights_bytes = 0;        // this device's shard (the busiest rank's under tp)
    // Under tp, what the busiest rank holds beyond an even split: attention is split by KV
    // heads, so a rank holds ceil(kv_heads / tp) / kv_heads of it (the default model's 3 over
    // 2 ranks: 2 / 3), not 1 / tp.
    uint64_t tp_uneven_bytes = 0;
    // Of weights_bytes_total, the routed experts' (0 for a dense model), and their layout: a
    // decode step reads only the experts its tokens are routed to (roofline.h).
    uint64_t expert_bytes_total = 0;
    int64_t n_experts = 0, n_experts_used = 0;
    // Of weights_bytes_total, an untied token embedding's (0 when tied: it is the output head,
    // read whole every step): memory holds it, a decode step reads one row per token.
    uint64_t embed_bytes_total = 0;
    int64_t vocab = 0;

    // Whole model, so they compare with the seeds' figures; "_mha" = as if n_kv_heads ==
    // n_heads (no grouped-query attention).
    uint64_t kv_bytes_per_token = 0, kv_bytes_per_token_mha = 0;
    // A sequence of ctx tokens: sliding-window layers hold only their window (see kKvRule).
    uint64_t kv_bytes_per_sequence = 0, kv_bytes_per_sequence_mha = 0;
    // As if every layer kept every token: what an engine without per-layer windows holds
    // (ferry's own KV pool today). Equal to kv_bytes_per_sequence without sliding layers.
    uint64_t kv_bytes_per_sequence_no_window = 0;
    uint64_t kv_bytes_total = 0, kv_bytes_total_mha = 0;  // batch sequences, or the fixed pool
    bool kv_pool_fixed = false;
    double kv_share = 1;    // fraction of the KV cache one device holds under TP
    uint64_t kv_bytes = 0;  // this device's share

    int64_t tokens_per_step = 0;
    int activation_bytes_per_value = 4;
    uint64_t activation_bytes = 0;
    double overhead_fraction = 0;
    uint64_t overhead_bytes = 0;

    // What --tp's ranks exchange per token of a decode step (kTpCommRule): the sums over the
    // ranks, two a layer of `hidden` activation values each; what a ring all-reduce of them
    // sends from each rank; and the output head's logits, each rank's vocabulary slice
    // gathered on one. 0 without tp.
    int64_t tp_sums_per_token = 0;
    uint64_t tp_sum_bytes_per_token = 0;
    uint64_t tp_ring_bytes_per_token = 0;
    uint64_t tp_logits_bytes_per_token = 0;

    uint64_t total_bytes = 0;     // need on one device
    uint64_t capacity_bytes = 0;  // device memory x utilization
    bool fits = false;
    int64_t margin_bytes = 0;   // capacity - need, summed over the tp devices (negative: short)
    int64_t max_sequences = 0;  // concurrent sequences of ctx tokens that fit
};

// The rules, stated once so the report can print them.
// KV per sequence of L tokens = per-layer-token bytes x (global_layers x L + sliding_layers x
//   min(L, window)); per token (kv_bytes_per_token) counts every layer.
// activations = T x (3 hidden + q_dim + 2 kv_dim + 2 ffn) x value_bytes + batch x vocab x 4
//   (ffn: the MLP width a token runs, top-k x expert_ffn + shared experts for MoE)
//   with T = min(max_batched_tokens, batch x ctx) but at least batch; value_bytes 4 on CPU
//   (ferry computes in f32), 2 on accelerators.
// overhead = runtime floor (1 GiB on a GPU: CUDA context, library workspaces; 16 MiB on CPU, where
//   ferry serve measured ~25 MB beyond weights + KV pool, activations included)
//   clamped to 10-20 % of weights + KV + activations.
inline constexpr const char* kKvRule =
    "2 (K, V) x kv_heads x head_dim x bytes (+ 8-bit scales) per layer and token; a sequence of "
    "L tokens holds global_layers x L + sliding_layers x min(L, sliding_window) of them";
inline constexpr const char* kActivationRule =
    "T x (3*hidden + q_dim + 2*kv_dim + 2*ffn) x value_bytes + batch x vocab x 4 (f32 logits), "
    "T = min(max_batched_tokens, batch x ctx), value_bytes = 4 on cpu, 2 on GPUs, ffn = the "
    "MLP width a token runs (MoE: top-k x expert ffn + shared experts)";
inline constexpr const char* kTpCommRule =
    "per token: 2 sums a layer (attention output, MLP) of hidden x value_bytes each; a ring "
    "all-reduce sends 2 (tp-1)/tp of that from every rank; logits: (tp-1)/tp x vocab x 4 "
    "bytes gathered on one rank";
inline constexpr const char* kOverheadRule =
    "runtime floor (1 GiB on a GPU, 16 MiB on cpu) clamped to 10-20 % of weights + KV + "
    "activations";

Expected<MemoryPlan> plan_memory(const ModelSpec& model, const Device& device,
                                 const PlanOptions& options);

}  // namespace ferry::plan
