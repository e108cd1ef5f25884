// Calibration statistics for GPTQ, AWQ and SmoothQuant: the model is run over a calibration text
// and the inputs of every linear map are summarised per layer (model::LinearInput says which: q/k/v
// share one input, gate/up another). All layers see the activations of the model as given,
// not of the partly quantized one that sequential GPTQ would use: one forward pass serves
// every layer, at some cost in how well later layers' errors are compensated. Sequential pruning
// (ferry prune --sequential) instead runs a pass per layer, keeping that layer's statistics only
// (CalibrationOptions::only_layer), on the model with the earlier layers already pruned.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "model/llama.h"

namespace ferry::calibrate {

struct CalibrationOptions {
    bool hessian = false;   // GPTQ: H = 2/N X^T X
    bool abs_mean = false;  // AWQ: per-channel mean |x|
    bool abs_max = false;   // SmoothQuant: per-channel max |x|
    bool sq_mean = false;   // Wanda: per-channel mean x^2
    int64_t n_samples = 0;  // AWQ: keep this many token rows, spread evenly over the text
    int window = 512;       // tokens per forward pass, each from an empty cache
    int only_layer = -1;    // >= 0: that layer's statistics only (sequential pruning)
};

struct InputStats {
    int64_t dim = 0;
    int64_t n_tokens = 0;
    std::vector<double> hessian;   // dim x dim, 2/N X^T X
    std::vector<double> abs_mean;  // dim
    std::vector<double> abs_max;   // dim
    std::vector<double> sq_mean;   // dim
    std::vector<float> samples;    // n_samples x dim, rows of X
    int64_t n_samples = 0;
};

struct CalibrationStats {
    int64_t n_tokens = 0;
    std::vector<std::array<InputStats, model::kLinearInputs>> layers;

    const InputStats& at(int layer, model::LinearInput which) const {
        return layers[static_cast<size_t>(layer)][static_cast<size_t>(which)];
    }
};

// Runs `model` on `backend` over `tokens` in windows of opt.window tokens, each from an empty
// cache; the statistics' own products run on the backend's host pool. on_window(done, total)
// reports progress.
Expected<CalibrationStats> calibrate(const model::LlamaModel& model,
                                     std::shared_ptr<kernels::Backend> backend,
                                     std::span<const int32_t> tokens, const CalibrationOptions& opt,
                                     const std::function<void(int, int)>& on_window = nullptr);

}  // namespace ferry::calibrate
