// AWQ (Lin et al. 2023, "Activation-aware Weight Quantization"): before round-to-nearest,
// input channel i of a linear map is scaled by s_i = mean|x_i|^alpha in the weights and by
// 1/s_i in whatever produces the input, so the float model is unchanged while the channels
// that carry large activations get a finer share of the weight grid. alpha is picked per
// input by grid search on calibration activations.
//
// Where 1/s goes (so no extra operation is needed at inference):
//   q, k, v      (attn input)        the attn_norm weight
//   gate, up     (ffn input)         the ffn_norm weight
//   attn_output  (attention output)  v's rows (and bias): attention mixes values linearly per
//                                    head, so v's channel c of kv head h scales head outputs
//                                    of every query head sharing h; one scale per (h, c)
//   ffn_down     (silu(gate) * up)   up's rows: the product is linear in up
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "calibrate/calibration.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/llama.h"

namespace ferry::calibrate {

struct FloatMatrix {
    int64_t rows = 0, cols = 0;
    std::vector<float> w;             // rows x cols
    DType target = DType::INT4_G128;  // what it will be rounded to (AWQ's error search)
};

// One layer's weights as floats, as AWQ rewrites them.
struct AwqLayer {
    std::vector<float> attn_norm, ffn_norm;
    FloatMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
    std::vector<float> bv;  // empty when the model has no v bias
};

// Per-channel scales of the four inputs (model::LinearInput order); an empty vector leaves
// that input unscaled.
using AwqScales = std::array<std::vector<float>, model::kLinearInputs>;

// Multiplies each input's consumers' columns by s and divides its producer by s (see above).
// For AttnOut, s has q_dim entries and must be equal across the query heads of a kv group.
void fold_awq_scales(AwqLayer& l, const AwqScales& s, int n_head, int n_head_kv, int head_dim);

struct AwqResult {
    std::vector<float> scale;  // the chosen s (all ones when alpha = 0 wins)
    double alpha = 0;
    double err_rtn = 0;  // sum over the matrices of ||X W^T - X Q(W)^T||^2 on the samples
    double err = 0;      // the same with the chosen scales: ||X W^T - (X/s) Q(W s)^T||^2
};

constexpr int kAwqGrid = 20;  // alpha in {0, 1/20, ..., 1}

// Searches alpha for matrices sharing an input whose per-channel mean |x| is act_mean, with
// the error measured on the sample rows x (n_samples x cols). alpha = 0 (s = 1, plain RTN) is
// tried first and only a strictly smaller error replaces it, so AWQ never does worse than RTN
// on the samples.
AwqResult awq_search(std::span<const FloatMatrix* const> mats, std::span<const double> act_mean,
                     std::span<const float> x, int64_t n_samples, ThreadPool& pool);

// Searches and folds all four inputs of one layer. attn_output and ffn_down go first: their
// folding rescales v's and up's rows, which the q/k/v and gate/up searches must then see.
std::array<AwqResult, model::kLinearInputs> awq_layer(
    AwqLayer& l, const std::array<InputStats, model::kLinearInputs>& stats, int n_head,
    int n_head_kv, int head_dim, ThreadPool& pool);

}  // namespace ferry::calibrate
