#include "calibrate/smoothquant.h"

#include <algorithm>
#include <cmath>

namespace ferry::calibrate {

std::vector<float> smooth_scales(std::span<const double> act_max,
                                 std::span<const FloatMatrix* const> mats, double alpha) {
    const size_t cols = act_max.size();
    std::vector<double> wmax(cols, 0.0);
    for (const FloatMatrix* m : mats)
        for (int64_t r = 0; r < m->rows; ++r)
            for (size_t c = 0; c < cols; ++c)
                wmax[c] = std::max<double>(wmax[c], std::fabs(m->w[r * m->cols + c]));
    std::vector<float> s(cols);
    for (size_t c = 0; c < cols; ++c) {
        const double v = std::pow(std::max(act_max[c], 1e-5), alpha) /
                         std::pow(std::max(wmax[c], 1e-5), 1.0 - alpha);
        s[c] = static_cast<float>(std::clamp(v, 1e-5, 1e5));
    }
    return s;
}

double channel_spread(std::span<const double> act_max) {
    if (act_max.empty()) return 1.0;
    std::vector<double> v(act_max.begin(), act_max.end());
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    const double median = v[v.size() / 2];
    const double top = *std::max_element(act_max.begin(), act_max.end());
    return median > 0 ? top / median : 1.0;
}

SmoothResult smoothquant_layer(AwqLayer& l,
                               const std::array<InputStats, model::kLinearInputs>& stats,
                               double alpha, int n_head, int n_head_kv, int head_dim) {
    using model::LinearInput;
    SmoothResult res;
    auto apply = [&](LinearInput which, std::vector<const FloatMatrix*> mats,
                     std::span<const double> act_max) {
        const auto k = static_cast<size_t>(which);
        AwqScales scales;
        scales[k] = smooth_scales(act_max, mats, alpha);
        std::vector<double> after(act_max.size());
        for (size_t c = 0; c < after.size(); ++c) after[c] = act_max[c] / scales[k][c];
        res.spread_before[k] = channel_spread(act_max);
        res.spread_after[k] = channel_spread(after);
        fold_awq_scales(l, scales, n_head, n_head_kv, head_dim);
    };

    // Attention output: maxima over the query heads of each kv group, for activations and
    // weight columns alike, so s comes out equal across the group.
    const std::vector<double>& ao = stats[static_cast<size_t>(LinearInput::AttnOut)].abs_max;
    const int group = n_head / n_head_kv;
    std::vector<double> tied(ao.size());
    FloatMatrix wo_tied = l.wo;
    for (int kvh = 0; kvh < n_head_kv; ++kvh)
        for (int c = 0; c < head_dim; ++c) {
            double a = 0;
            for (int g = 0; g < group; ++g) a = std::max(a, ao[(kvh * group + g) * head_dim + c]);
            for (int64_t r = 0; r < l.wo.rows; ++r) {
                float w = 0;
                for (int g = 0; g < group; ++g)
                    w = std::max(
                        w, std::fabs(l.wo.w[r * l.wo.cols + (kvh * group + g) * head_dim + c]));
                for (int g = 0; g < group; ++g)
                    wo_tied.w[r * l.wo.cols + (kvh * group + g) * head_dim + c] = w;
            }
            for (int g = 0; g < group; ++g) tied[(kvh * group + g) * head_dim + c] = a;
        }
    apply(LinearInput::AttnOut, {&wo_tied}, tied);
    apply(LinearInput::FfnDown, {&l.w_down},
          stats[static_cast<size_t>(LinearInput::FfnDown)].abs_max);
    apply(LinearInput::Attn, {&l.wq, &l.wk, &l.wv},
          stats[static_cast<size_t>(LinearInput::Attn)].abs_max);
    apply(LinearInput::Ffn, {&l.w_gate, &l.w_up},
          stats[static_cast<size_t>(LinearInput::Ffn)].abs_max);
    return res;
}

}  // namespace ferry::calibrate
