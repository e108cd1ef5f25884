// SmoothQuant (Xiao et al. 2023, "SmoothQuant: Accurate and Efficient Post-Training
// Quantization for Large Language Models"): a few input channels of a linear map carry
// activations 10-100x larger than the rest, and a per-token 8-bit grid sized for them rounds
// everything else away. Dividing channel j of the input by s_j and multiplying column j of the
// weights by s_j leaves the float product unchanged and moves part of that range into the
// weights, whose per-row grid absorbs it better:
//
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)     (max|W_j| over every consumer's column j)
//
// alpha = 0 leaves the activations alone, 1 makes every channel's max 1 (all the range in the
// weights); the paper's 0.5 splits the difficulty evenly in log scale. The scales are folded
// where AWQ's go (calibrate/awq.h: the norms, v's rows, up's rows), so inference needs no extra
// operation.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "calibrate/awq.h"
#include "calibrate/calibration.h"
#include "model/llama.h"

namespace ferry::calibrate {

// The scales for matrices sharing an input whose per-channel max |x| is act_max. A dead channel
// (max 0) or an all-zero column gets s within [1e-5, 1e5] rather than 0 or infinity.
std::vector<float> smooth_scales(std::span<const double> act_max,
                                 std::span<const FloatMatrix* const> mats, double alpha);

// How uneven an input's channels are: the largest channel max over the median one.
double channel_spread(std::span<const double> act_max);

struct SmoothResult {
    // channel_spread of each input (model::LinearInput order) before and after the folding.
    std::array<double, model::kLinearInputs> spread_before{}, spread_after{};
};

// Computes and folds all four inputs of one layer. As in awq_layer, attn_output and ffn_down go
// first: their folding rescales v's and up's rows, whose columns the q/k/v and gate/up scales
// then read. The attention output's channels of query heads sharing a kv head get one scale
// (it goes into a single v row): their maxima are taken over the group.
SmoothResult smoothquant_layer(AwqLayer& l,
                               const std::array<InputStats, model::kLinearInputs>& stats,
                               double alpha, int n_head, int n_head_kv, int head_dim);

}  // namespace ferry::calibrate
