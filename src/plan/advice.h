// The seeds' deployment advice made concrete: fits → keep 16-bit; short by a little (fits at
// INT8) → INT8; short by a lot (fits only at INT4) → INT4; still short → tensor parallelism,
// with the smallest device count that fits.
#pragma once

#include <string>

#include "core/status.h"
#include "plan/devices.h"
#include "plan/memory_plan.h"
#include "plan/model_spec.h"

namespace ferry::plan {

struct Advice {
    // "keep_16bit", "int8", "int4", "tensor_parallel", or "does_not_fit" (not even on 256).
    std::string recommendation;
    bool fits_16bit = false, fits_int8 = false, fits_int4 = false;  // at the asked tp
    int64_t shortfall_16bit_bytes = 0;  // need - capacity at 16-bit, all devices; <= 0 fits
    // Smallest device counts that fit (0: none up to 256). "_even" also divides the attention
    // heads, which tensor parallelism needs to split them evenly: what engines accept.
    int min_devices = 0, min_devices_even = 0;        // at the chosen weight format
    int min_devices_16bit = 0, min_devices_int4 = 0;  // even split
    std::string text;
};

// Smallest tp in 1..256 at which `options` fits (with `weights` overriding its format);
// 0 if none. `even`: only counts dividing the model's attention heads.
int min_devices(const ModelSpec& model, const Device& device, PlanOptions options,
                const std::string& weights, bool even);

Expected<Advice> advise(const ModelSpec& model, const Device& device, const PlanOptions& options);

}  // namespace ferry::plan
