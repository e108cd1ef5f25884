#include "plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/dtype.h"
#include "core/strings.h"

namespace ferry::plan {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
// Byte counts are summed in doubles and held at this ceiling instead of wrapping; a plan that
// reaches it is refused. Far beyond any device, and far enough below 2^64 that the sums and the
// overhead on top of them stay exact integers.
constexpr uint64_t kMaxBytes = 1ull << 60;

uint64_t bytes_of(double b) {
    return b >= static_cast<double>(kMaxBytes) ? kMaxBytes : b > 0 ? static_cast<uint64_t>(b) : 0;
}

// Everything in plan_memory that depends on the number of sequences, so max_sequences can ask
// "does n fit?" with exactly the rules the report prints.
struct Need {
    uint64_t kv_total, kv_device, activations, overhead, total;
    double overhead_fraction;
    int64_t tokens_per_step;
};

Need need_for(const ModelSpec& m, const MemoryPlan& p, const Device& d, const PlanOptions& o,
              int64_t n_seqs) {
    Need n{};
    n.kv_total =
        p.kv_pool_fixed
            ? static_cast<uint64_t>(o.kv_cache_memory)
            : bytes_of(static_cast<double>(p.kv_bytes_per_sequence) * static_cast<double>(n_seqs));
    n.kv_device = bytes_of(std::ceil(static_cast<double>(n.kv_total) * p.kv_share));

    const int64_t q_dim = m.n_heads * m.head_dim, kv_dim = m.n_kv_heads * m.head_dim;
    int64_t seq_tokens = 0;
    if (__builtin_mul_overflow(n_seqs, p.ctx, &seq_tokens))
        seq_tokens = std::numeric_limits<int64_t>::max();
    n.tokens_per_step = std::max(n_seqs, std::min(o.max_batched_tokens, seq_tokens));
    const double per_token_values = 3.0 * m.hidden + static_cast<double>(q_dim) +
                                    2.0 * static_cast<double>(kv_dim) + 2.0 * m.active_ffn();
    n.activations = bytes_of(static_cast<double>(n.tokens_per_step) * per_token_values *
                                 p.activation_bytes_per_value +
                             static_cast<double>(n_seqs) * static_cast<double>(m.vocab) * 4);

    const uint64_t sub = p.weights_bytes + n.kv_device + n.activations;
    const uint64_t floor_bytes = d.measured ? 16 * kMiB : kGiB;
    n.overhead = std::clamp<uint64_t>(floor_bytes, sub / 10, sub / 5);
    n.overhead_fraction = sub ? static_cast<double>(n.overhead) / sub : 0;
    n.total = sub + n.overhead;
    return n;
}

}  // namespace

namespace {

// The names weights and KV caches share: float formats and 8-bit integers. W8A8
// (SmoothQuant-style) runs on the INT8 units.
std::optional<Precision> parse_float_or_int8(const std::string& s) {
    if (s == "f32" || s == "fp32") return Precision{"f32", 32, ComputeClass::FP16};
    if (s == "f16" || s == "fp16") return Precision{"f16", 16, ComputeClass::FP16};
    if (s == "bf16") return Precision{"bf16", 16, ComputeClass::FP16};
    if (s == "fp8" || s == "f8") return Precision{"fp8", 8, ComputeClass::FP8};
    if (s == "int8" || s == "i8") return Precision{"int8", 8, ComputeClass::INT8};
    return std::nullopt;
}

}  // namespace

Expected<Precision> parse_weight_precision(std::string_view name) {
    const std::string s = ascii_lower(name);
    if (auto p = parse_float_or_int8(s)) return *p;
    if (s == "int4" || s == "i4") return Precision{"int4", 4, ComputeClass::FP16};
    // ferry's w8a8: int8 weights and int8 activations, so prefill runs on the INT8 units.
    if (s == "w8a8") return Precision{"w8a8", 8, ComputeClass::INT8};
    // ferry's 2:4 sparse int4 at its middle group size (the embedding and head, which pruning
    // leaves dense, are counted at its rate too).
    if (auto t = dtype_from_name(s == "int4s" ? "int4s_g64" : s)) {
        const DTypeInfo& info = dtype_info(*t);
        return Precision{std::string(info.name), 8.0 * info.block_bytes / info.block_size,
                         ComputeClass::FP16};
    }
    return make_error(
        "unknown weight format '{}'; use f16, bf16, fp8, int8, int4, int4s (2:4 sparse) or a "
        "GGUF type such as q4_k, q4_1, q8_0",
        name);
}

Expected<Precision> parse_kv_precision(std::string_view name) {
    if (auto p = parse_float_or_int8(ascii_lower(name))) return *p;
    return make_error("unknown KV cache dtype '{}'; use f16, fp8 or int8", name);
}

Expected<MemoryPlan> plan_memory(const ModelSpec& m, const Device& d, const PlanOptions& o) {
    MemoryPlan p;
    if (o.batch < 1) return make_error("--batch must be at least 1 (got {})", o.batch);
    if (o.tp < 1) return make_error("--tp must be at least 1 (got {})", o.tp);
    if (o.ctx < 0) return make_error("--ctx must be positive (got {})", o.ctx);
    if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1))
        return make_error("--gpu-memory-utilization must be in (0, 1] (got {})",
                          o.gpu_memory_utilization);
    if (o.max_batched_tokens < 1) return make_error("--max-batched-tokens must be at least 1");
    if (o.kv_cache_memory < 0)
        return make_error("--kv-cache-memory must be a byte count of 0 or more (got {})",
                          o.kv_cache_memory);
    if (static_cast<uint64_t>(o.kv_cache_memory) >= kMaxBytes)
        return make_error("--kv-cache-memory {} is more than the 1 EiB ferry plan counts up to",
                          o.kv_cache_memory);

    p.ctx = o.ctx > 0 ? o.ctx : m.max_ctx;
    p.batch = o.batch;
    p.tp = o.tp;
    p.utilization = o.gpu_memory_utilization;
    p.params = m.params();
    p.params_active = m.active_params();

    // Weights: the file's real bytes unless another format was asked for.
    const bool native = o.weights.empty() || ascii_lower(o.weights) == "native";
    if (native && m.gguf_weight_bytes > 0) {
        p.weights = {m.gguf_weight_type, m.native_bits, ComputeClass::FP16};
        p.weights_bytes_total = m.gguf_weight_bytes;
    } else {
        auto w = parse_weight_precision(native ? (m.native_bits > 16 ? "f32" : "f16") : o.weights);
        if (!w) return w.error();
        p.weights = *w;
        p.weights_bytes_total = bytes_of(std::round(p.params * p.weights.bits / 8));
    }
    p.weights_bytes = (p.weights_bytes_total + p.tp - 1) / p.tp;
    if (p.tp > 1 && m.n_kv_heads > 0 && p.params > 0) {
        const double attn_params = static_cast<double>(m.n_layers * m.hidden) *
                                   static_cast<double>(2 * (m.n_heads + m.n_kv_heads) * m.head_dim);
        const double attn_bytes = attn_params / static_cast<double>(p.params) *
                                  static_cast<double>(p.weights_bytes_total);
        const int64_t heads = (m.n_kv_heads + p.tp - 1) / p.tp;
        const double extra = attn_bytes * (static_cast<double>(heads) / m.n_kv_heads - 1.0 / p.tp);
        p.tp_uneven_bytes = static_cast<uint64_t>(std::llround(std::max(0.0, extra)));
        p.weights_bytes += p.tp_uneven_bytes;
    }
    p.vocab = m.vocab;
    if (!m.tied_embeddings)
        p.embed_bytes_total =
            std::min(p.weights_bytes_total,
                     native && m.gguf_embed_bytes > 0
                         ? m.gguf_embed_bytes
                         : static_cast<uint64_t>(std::llround(static_cast<double>(m.vocab) *
                                                              m.hidden * p.weights.bits / 8)));
    if (m.is_moe()) {
        p.n_experts = m.n_experts;
        p.n_experts_used = m.n_experts_used;
        // The file's own expert bytes when its weights are planned, else the experts' share.
        p.expert_bytes_total = native && m.gguf_expert_bytes > 0
                                   ? m.gguf_expert_bytes
                                   : static_cast<uint64_t>(std::llround(m.routed_expert_params() *
                                                                        p.weights.bits / 8));
        p.expert_bytes_total = std::min(p.expert_bytes_total, p.weights_bytes_total);
    }

    auto kv = parse_kv_precision(o.kv_dtype);
    if (!kv) return kv.error();
    p.kv = *kv;
    // K and V, every layer, every KV head: 2 x layers x kv_heads x head_dim x bytes, plus the
    // f32 scales ferry's 8-bit caches keep per (token, KV head): values only for int8 (its keys'
    // scales are per channel, fixed per model), keys and values for fp8 (quant/kv_format.h).
    const double kv_elem_bytes = p.kv.bits / 8;
    const double scale_bytes = p.kv.name == "int8" ? 4 : p.kv.name == "fp8" ? 8 : 0;
    // `layer_tokens`: tokens held summed over layers (n_layers per token without windows).
    auto kv_bytes = [&](int64_t heads, double layer_tokens) {
        return bytes_of(layer_tokens * static_cast<double>(heads) *
                        (2.0 * m.head_dim * kv_elem_bytes + scale_bytes));
    };
    // Sliding-window layers hold at most their window of a sequence; the others all of it.
    const int64_t global_layers = m.n_layers - m.n_sliding_layers;
    const double seq_layer_tokens =
        static_cast<double>(global_layers) * static_cast<double>(p.ctx) +
        static_cast<double>(m.n_sliding_layers * std::min(p.ctx, m.sliding_window));
    p.kv_bytes_per_token = kv_bytes(m.n_kv_heads, static_cast<double>(m.n_layers));
    p.kv_bytes_per_token_mha = kv_bytes(m.n_heads, static_cast<double>(m.n_layers));
    p.kv_bytes_per_sequence = kv_bytes(m.n_kv_heads, seq_layer_tokens);
    p.kv_bytes_per_sequence_mha = kv_bytes(m.n_heads, seq_layer_tokens);
    p.kv_bytes_per_sequence_no_window =
        bytes_of(static_cast<double>(p.kv_bytes_per_token) * static_cast<double>(p.ctx));
    p.kv_pool_fixed = o.kv_cache_memory > 0;
    // TP splits KV heads across devices; with more devices than KV heads each keeps a copy of
    // one head, so a device's share never drops below one head.
    const int64_t heads_per_device = (m.n_kv_heads + p.tp - 1) / p.tp;
    p.kv_share = static_cast<double>(heads_per_device) / m.n_kv_heads;
    p.activation_bytes_per_value = d.measured ? 4 : 2;
    if (p.tp > 1) {
        p.tp_sums_per_token = 2 * m.n_layers;
        p.tp_sum_bytes_per_token = static_cast<uint64_t>(p.tp_sums_per_token * m.hidden) *
                                   static_cast<uint64_t>(p.activation_bytes_per_value);
        p.tp_ring_bytes_per_token = 2 * p.tp_sum_bytes_per_token * (p.tp - 1) / p.tp;
        p.tp_logits_bytes_per_token = static_cast<uint64_t>(m.vocab) * 4 * (p.tp - 1) / p.tp;
    }

    const Need n = need_for(m, p, d, o, p.batch);
    if (std::max({p.weights_bytes_total, p.kv_bytes_per_sequence, n.kv_total, n.activations}) >=
        kMaxBytes)
        return make_error(
            "{} sequence{} of {} tokens{}: more than the 1 EiB ferry plan counts up to; lower "
            "--ctx or --batch",
            p.batch, p.batch == 1 ? "" : "s", p.ctx, o.ctx > 0 ? "" : " (the model's context)");
    p.kv_bytes_total = n.kv_total;
    p.kv_bytes_total_mha =
        bytes_of(p.kv_pool_fixed ? static_cast<double>(n.kv_total) * m.n_heads / m.n_kv_heads
                                 : static_cast<double>(p.kv_bytes_per_sequence_mha) *
                                       static_cast<double>(p.batch));
    p.kv_bytes = n.kv_device;
    p.tokens_per_step = n.tokens_per_step;
    p.activation_bytes = n.activations;
    p.overhead_bytes = n.overhead;
    p.overhead_fraction = n.overhead_fraction;
    p.total_bytes = n.total;
    p.capacity_bytes = static_cast<uint64_t>(d.memory_bytes * p.utilization);
    p.fits = p.total_bytes <= p.capacity_bytes;
    const int64_t margin =
        static_cast<int64_t>(p.capacity_bytes) - static_cast<int64_t>(p.total_bytes);
    if (__builtin_mul_overflow(margin, p.tp, &p.margin_bytes))
        p.margin_bytes =
            margin < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();

    // Largest n whose need fits. With a fixed pool the pool bounds it; otherwise need grows
    // with n, so a binary search finds the edge.
    if (p.kv_pool_fixed) {
        p.max_sequences = p.kv_bytes_per_sequence ? o.kv_cache_memory / p.kv_bytes_per_sequence : 0;
        if (!p.fits) p.max_sequences = 0;
    } else {
        auto fits_n = [&](int64_t k) { return need_for(m, p, d, o, k).total <= p.capacity_bytes; };
        int64_t lo = 0, hi = 1;
        while (fits_n(hi) && hi < (int64_t{1} << 40)) lo = hi, hi *= 2;
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            (fits_n(mid) ? lo : hi) = mid;
        }
        p.max_sequences = lo;
    }
    return p;
}

}  // namespace ferry::plan
