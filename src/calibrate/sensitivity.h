// How much each matrix's rounding alone moves the model, for per-layer mixed precision
// (`ferry quantize --auto-mixed`): the model runs over a calibration text as loaded, then once
// per trial with only that trial's matrix rounded to the trial's type (the others as loaded),
// and the trial's cost is the mean KL(loaded || trial) of the next-token distributions over
// every position of the text. Costs of different matrices are then treated as adding up, the
// usual assumption of sensitivity-based bit allocation (HAWQ, llama.cpp's importance-guided
// mixes); `ferry eval` on the mixed file measures what they really add up to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "model/llama.h"
#include "model/weight_file.h"

namespace ferry::calibrate {

struct SensitivityTrial {
    std::string tensor;  // as the file names it ("blk.3.ffn_down.weight", "token_embd.weight")
    DType type;          // rounded to nearest, row by row
};

// One KL per trial, in order. Trials of one tensor should be adjacent (each tensor is read and
// put back once per run of its trials); a trial whose rounding gives back the loaded bytes costs
// exactly 0 without running. The model is left as loaded. Tokens run in windows of `window`,
// each from an empty cache; on_trial(done, total) reports progress.
Expected<std::vector<double>> measure_sensitivity(
    model::LlamaModel& model, const model::WeightFile& file,
    std::shared_ptr<kernels::Backend> backend, std::span<const int32_t> tokens,
    std::span<const SensitivityTrial> trials, int window = 512,
    const std::function<void(int, int)>& on_trial = nullptr);

}  // namespace ferry::calibrate
