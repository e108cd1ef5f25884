#include "cli/kv_options.h"

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

}  // namespace ferry::cli
