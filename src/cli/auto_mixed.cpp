#include "cli/auto_mixed.h"

#include <algorithm>

#include <fmt/format.h>

#include "calibrate/mixed_precision.h"
#include "calibrate/sensitivity.h"
#include "cli/commands.h"
#include "core/progress.h"
#include "quant/quantize.h"

namespace ferry::cli {

MixedPlan plan_auto_mixed(
    engine::LoadedModel& lm, std::span<const DType> candidates, double budget_bpw,
    std::span<const int32_t> tokens, int window,
    const std::function<std::optional<DType>(const std::string&, size_t, int64_t)>& fixed,
    bool progress) {
    if (lm.model->config().is_moe())
        throw ExitError(
            "--auto-mixed on a mixture of experts is not supported yet (each expert would be a "
            "trial of its own); quantize it to one type");
    const gguf::File& file = *lm.file;
    size_t fixed_bytes = 0;
    int64_t n_elements = 0;
    std::vector<calibrate::MixItem> items;
    std::vector<calibrate::SensitivityTrial> trials;
    std::vector<std::vector<size_t>> option_of;  // [item][candidate]: its option for it
    for (const gguf::TensorInfo& t : file.tensors()) {
        n_elements += t.n_elements;
        const int64_t row = t.shape[0], n_rows = t.n_elements / row;
        if (const std::optional<DType> f = fixed(t.name, t.shape.size(), row)) {
            fixed_bytes +=
                *f == t.type ? t.n_bytes : row_bytes(*f, row) * static_cast<size_t>(n_rows);
            continue;
        }
        if (!lm.model->can_replace(t.name))
            throw ExitError(fmt::format(
                "--auto-mixed: '{}' cannot be tried on its own (a fused matrix, as Phi-3's "
                "attn_qkv); leave it out of the mix with --keep or --keep-f16",
                t.name));
        calibrate::MixItem item{t.name, {}};
        std::vector<size_t>& of = option_of.emplace_back();
        for (DType c : candidates) {
            // As ferry quantize writes it: int4s's embedding and head are int4.
            const DType type = quant::type_for_tensor(c, t.name, t.shape.size(), row);
            const auto seen =
                std::find_if(item.options.begin(), item.options.end(),
                             [&](const calibrate::MixOption& o) { return o.type == type; });
            of.push_back(static_cast<size_t>(seen - item.options.begin()));
            if (seen != item.options.end()) continue;
            item.options.push_back({type, row_bytes(type, row) * static_cast<size_t>(n_rows), 0.0});
            trials.push_back({t.name, type});
        }
        items.push_back(std::move(item));
    }
    if (items.empty()) throw ExitError("--auto-mixed: no matrix is left to mix");
    const auto budget = static_cast<size_t>(budget_bpw * static_cast<double>(n_elements) / 8.0);
    if (fixed_bytes >= budget)
        throw ExitError(fmt::format(
            "--budget {}: the tensors outside the mix (norms, --keep, --keep-f16) alone take "
            "{:.2f} bits per weight",
            budget_bpw, 8.0 * static_cast<double>(fixed_bytes) / static_cast<double>(n_elements)));
    // Fail on a budget too small before the minutes of measuring.
    size_t least = fixed_bytes;
    for (const auto& it : items) {
        size_t m = it.options[0].bytes;
        for (const auto& o : it.options) m = std::min(m, o.bytes);
        least += m;
    }
    if (least > budget)
        throw ExitError(fmt::format(
            "--budget {}: the smallest candidate types give {:.3f} bits per weight; raise the "
            "budget or offer a smaller type in --mix-types",
            budget_bpw, 8.0 * static_cast<double>(least) / static_cast<double>(n_elements)));

    std::vector<double> kl;
    {
        Progress bar("sensitivity", static_cast<int64_t>(trials.size()), progress);
        kl = take(calibrate::measure_sensitivity(*lm.model, *lm.weights, lm.backend, tokens, trials,
                                                 window, [&](int done, int) { bar.update(done); }));
        bar.finish();
    }
    size_t k = 0;
    for (auto& it : items)
        for (auto& o : it.options) o.kl = kl[k++];
    const auto chosen = take(calibrate::allocate_precision(items, budget - fixed_bytes));

    MixedPlan plan;
    size_t bytes = fixed_bytes;
    for (size_t i = 0; i < items.size(); ++i) {
        const calibrate::MixOption& o = items[i].options[chosen[i]];
        plan.types[items[i].name] = o.type;
        plan.kl_sum += o.kl;
        bytes += o.bytes;
    }
    plan.bits_per_weight = 8.0 * static_cast<double>(bytes) / static_cast<double>(n_elements);
    for (size_t c = 0; c < candidates.size(); ++c) {
        double sum = 0;
        for (size_t i = 0; i < items.size(); ++i) sum += items[i].options[option_of[i][c]].kl;
        plan.uniform_kl_sums.emplace_back(candidates[c], sum);
    }
    return plan;
}

std::vector<int32_t> spread_windows(const std::vector<int32_t>& text, int64_t n, int window) {
    const auto len = static_cast<int64_t>(text.size());
    if (len <= n || len <= window) return text;
    const int64_t k = std::max<int64_t>(1, (n + window - 1) / window);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < k; ++i) {
        const int64_t start = k == 1 ? 0 : i * (len - window) / (k - 1);
        out.insert(out.end(), text.begin() + start, text.begin() + start + window);
    }
    return out;
}

std::vector<std::string> describe(const MixedPlan& plan) {
    auto list = [](const std::map<DType, int>& count) {
        std::string s;
        for (const auto& [t, n] : count)
            s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, dtype_name(t));
        return s;
    };
    std::map<DType, int> count;
    std::map<std::string, std::map<DType, int>> by_kind;
    for (const auto& [name, t] : plan.types) {
        ++count[t];
        std::string kind = name.starts_with("blk.") ? name.substr(name.find('.', 4) + 1) : name;
        if (kind.ends_with(".weight")) kind.resize(kind.size() - 7);
        ++by_kind[kind][t];
    }
    std::string uniform;
    for (const auto& [t, kl] : plan.uniform_kl_sums)
        uniform += fmt::format("{}all {} {:.4f}", uniform.empty() ? "" : ", ", dtype_name(t), kl);
    std::vector<std::string> lines = {
        fmt::format("chose {} ({:.3f} bits per weight); summed single-matrix KL {:.4f} ({})",
                    list(count), plan.bits_per_weight, plan.kl_sum, uniform)};
    for (const auto& [kind, c] : by_kind)
        lines.push_back(fmt::format("  {:<12} {}", kind, list(c)));
    return lines;
}

void set_mixed_metadata(gguf::Writer& w, double budget_bpw, std::span<const DType> candidates) {
    w.remove("general.file_type");
    w.remove("general.quantization_version");
    w.set("ferry.weight_type", gguf::make_string("mixed"));
    w.set("ferry.mixed.budget_bpw", gguf::make_f32(static_cast<float>(budget_bpw)));
    std::string names;
    for (DType t : candidates) names += (names.empty() ? "" : ",") + std::string(dtype_name(t));
    w.set("ferry.mixed.types", gguf::make_string(names));
}

}  // namespace ferry::cli
