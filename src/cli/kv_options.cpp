#include "cli/kv_options.h"

#include "cli/commands.h"
#include "engine/kv_calibration.h"

namespace ferry::cli {

void KvDTypeOption::add_to(CLI::App& cmd) {
    cmd.add_option("--kv-dtype", name,
                   "KV cache element type: f32, f16, int8 (per-channel key scales, per-token "
                   "value scales) or fp8 (E4M3, per-token scales)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "f16", "int8", "fp8"}));
}

quant::KvDType KvDTypeOption::resolved() const {
    return quant::parse_kv_dtype(name).value_or(quant::KvDType::F16);
}

kv::KvFormat KvDTypeOption::format(const engine::LoadedModel& lm) const {
    return engine::kv_format_for(lm, resolved());
}

void KvEvictionOption::add_to(CLI::App& cmd) {
    kind_option = cmd.add_option("--kv-eviction", kind,
                                 "streaming: a sequence keeps its first tokens (attention sinks) "
                                 "and its latest, --kv-budget in all, so it runs past the budget "
                                 "and the model's context in flat memory (StreamingLLM); h2o: "
                                 "the sinks, the latest half of the budget and the blocks that "
                                 "drew the most attention (Heavy-Hitter Oracle; within the "
                                 "context); none: the whole context")
                      ->capture_default_str()
                      ->check(CLI::IsMember({"none", "streaming", "h2o"}));
    budget_option = cmd.add_option("--kv-budget", config.budget,
                                   "--kv-eviction: tokens a sequence's cache keeps at most")
                        ->check(CLI::Range(1, 1 << 24));
    sink_option = cmd.add_option("--kv-sink", config.sink_tokens,
                                 "--kv-eviction: attention-sink tokens kept from the start "
                                 "(rounded up to whole blocks; 0: a plain sliding window, the "
                                 "baseline)")
                      ->capture_default_str()
                      ->check(CLI::Range(0, 1 << 16));
}

bool KvEvictionOption::given() const {
    return (kind_option && kind_option->count()) || (budget_option && budget_option->count()) ||
           (sink_option && sink_option->count());
}

engine::KvEvictionConfig KvEvictionOption::resolved() const {
    engine::KvEvictionConfig c = config;
    c.kind = engine::parse_kv_eviction(kind).value_or(engine::KvEvictionKind::None);
    if (c.on() && c.budget <= 0)
        throw ExitError("--kv-eviction " + kind + " needs --kv-budget TOKENS");
    if (!c.on() && (c.budget > 0 || (sink_option && sink_option->count() > 0)))
        throw ExitError("--kv-budget and --kv-sink apply to --kv-eviction streaming or h2o");
    return c;
}

}  // namespace ferry::cli
