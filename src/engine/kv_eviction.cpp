#include "engine/kv_eviction.h"

namespace ferry::engine {

const char* kv_eviction_name(KvEvictionKind k) {
    switch (k) {
        case KvEvictionKind::None:
            return "none";
        case KvEvictionKind::Streaming:
            return "streaming";
        case KvEvictionKind::H2O:
            return "h2o";
    }
    return "?";
}

std::optional<KvEvictionKind> parse_kv_eviction(std::string_view name) {
    if (name == "none") return KvEvictionKind::None;
    if (name == "streaming") return KvEvictionKind::Streaming;
    if (name == "h2o") return KvEvictionKind::H2O;
    return std::nullopt;
}

Status check_kv_eviction(const KvEvictionConfig& e, quant::KvDType kv, bool sliding_window,
                         int block_size, int step_tokens, const char* remedy, int64_t context,
                         const char* context_name) {
    if (!e.on()) return Status::Ok();
    const char* what = kv_eviction_name(e.kind);
    const bool moves = e.kind == KvEvictionKind::Streaming && e.sink_tokens > 0;
    if (kv == quant::KvDType::Int8 && moves)
        return make_error(
            "--kv-eviction {} moves the sinks' keys, which int8 keys' fixed per-channel scales "
            "cannot follow: use --kv-dtype f16, f32 or fp8",
            what);
    if (sliding_window)
        return make_error(
            "--kv-eviction {}: this model has sliding-window layers, which bound their own "
            "cache; eviction over them is not supported",
            what);
    if (e.sink_tokens < 0) return make_error("--kv-sink must not be negative");
    const int bs = block_size;
    const int sinks = e.sink_blocks(bs);
    if (e.budget < (sinks + 2) * bs)
        return make_error(
            "--kv-budget {} is too small: the {} sink token(s) take {} block(s) of {} and the "
            "window needs at least two more, so at least {} tokens",
            e.budget, e.sink_tokens, sinks, bs, (sinks + 2) * bs);
    // The cache holds the budget, a step's tokens on top, a partial block and (streaming) the
    // sinks' originals.
    const int64_t peak = int64_t{e.budget} + step_tokens + int64_t{(moves ? sinks : 0) + 1} * bs;
    if (peak > context)
        return make_error(
            "--kv-budget {} plus a step's {} tokens ({} with the partial block and the sinks' "
            "originals) exceed the {} positions {} holds; lower --kv-budget, or {}",
            e.budget, step_tokens, peak, context, context_name, remedy);
    return Status::Ok();
}

}  // namespace ferry::engine
