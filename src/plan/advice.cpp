#include "plan/advice.h"

#include <fmt/format.h>

namespace ferry::plan {
namespace {

bool fits_with(const ModelSpec& m, const Device& d, PlanOptions o, const std::string& weights,
               int64_t* shortfall = nullptr) {
    o.weights = weights;
    auto p = plan_memory(m, d, o);
    if (!p) return false;
    if (shortfall) *shortfall = -p->margin_bytes;
    return p->fits;
}

}  // namespace

int min_devices(const ModelSpec& m, const Device& d, PlanOptions o, const std::string& weights,
                bool even) {
    for (int n = 1; n <= 256; ++n) {
        if (even && m.n_heads % n != 0) continue;
        o.tp = n;
        if (fits_with(m, d, o, weights)) return n;
    }
    return 0;
}

Expected<Advice> advise(const ModelSpec& m, const Device& d, const PlanOptions& o) {
    auto chosen = plan_memory(m, d, o);  // surfaces bad options as an error, once
    if (!chosen) return chosen.error();

    Advice a;
    a.fits_16bit = fits_with(m, d, o, "f16", &a.shortfall_16bit_bytes);
    a.fits_int8 = fits_with(m, d, o, "int8");
    a.fits_int4 = fits_with(m, d, o, "int4");
    a.min_devices = min_devices(m, d, o, o.weights, false);
    a.min_devices_even = min_devices(m, d, o, o.weights, true);
    a.min_devices_16bit = min_devices(m, d, o, "f16", true);
    a.min_devices_int4 = min_devices(m, d, o, "int4", true);

    const std::string where = fmt::format("{} x {}", o.tp, d.name);
    const double short_gb = static_cast<double>(a.shortfall_16bit_bytes) / 1e9;
    if (a.fits_16bit) {
        a.recommendation = "keep_16bit";
        a.text = fmt::format("fits at 16-bit on {}: keep FP16/BF16 weights (best quality)", where);
    } else if (a.fits_int8) {
        a.recommendation = "int8";
        a.text = fmt::format(
            "short by {:.1f} GB at 16-bit on {}; fits at 8-bit: quantize weights to INT8 "
            "(or FP8), a near-lossless halving",
            short_gb, where);
    } else if (a.fits_int4) {
        a.recommendation = "int4";
        a.text = fmt::format(
            "short by {:.1f} GB at 16-bit on {}, and still short at INT8; fits at 4-bit: "
            "quantize weights to INT4 (AWQ/GPTQ or GGUF Q4_K)",
            short_gb, where);
    } else if (a.min_devices_16bit > 0) {
        a.recommendation = "tensor_parallel";
        a.text = fmt::format(
            "does not fit on {} even at INT4: use tensor parallelism over {} x {} at 16-bit", where,
            a.min_devices_16bit, d.name);
        if (a.min_devices_int4 > 0 && a.min_devices_int4 < a.min_devices_16bit)
            a.text += fmt::format(" (or {} x {} at INT4)", a.min_devices_int4, d.name);
    } else {
        a.recommendation = "does_not_fit";
        a.text = fmt::format(
            "does not fit on up to 256 x {} at these settings; reduce --ctx or "
            "--batch, or use a larger device",
            d.name);
    }
    return a;
}

}  // namespace ferry::plan
