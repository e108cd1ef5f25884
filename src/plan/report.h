// One complete plan (memory, roofline, advice) for a model on a device, and its two
// renderings: a short human table and JSON with stable snake_case keys (docs/plan.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "plan/advice.h"
#include "plan/devices.h"
#include "plan/memory_plan.h"
#include "plan/model_spec.h"
#include "plan/roofline.h"

namespace ferry::plan {

struct PlanReport {
    ModelSpec model;
    Device device;
    PlanOptions options;
    MemoryPlan memory;
    Roofline roof;
    Advice advice;
};

Expected<PlanReport> make_plan(const ModelSpec& model, const Device& device,
                               const PlanOptions& options);

nlohmann::json plan_to_json(const PlanReport& report);
std::string plan_to_text(const PlanReport& report);

// "14.0 GB", "327.7 KB": decimal units, as sheets and the seeds use them.
std::string human_bytes(double bytes);

}  // namespace ferry::plan
