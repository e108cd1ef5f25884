#include "calibrate/awq.h"

#include <algorithm>
#include <cmath>

#include "kernels/host_math.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"

namespace ferry::calibrate {
namespace {

void scale_cols(FloatMatrix& m, const std::vector<float>& s) {
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t c = 0; c < m.cols; ++c) m.w[r * m.cols + c] *= s[c];
}

void divide_rows(FloatMatrix& m, const std::vector<float>& s) {
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t c = 0; c < m.cols; ++c) m.w[r * m.cols + c] /= s[r];
}

// ||X E^T||^2 with E = W - Q(W diag(s)) diag(1/s): the output error on the sample rows.
double output_error(const FloatMatrix& m, const std::vector<float>& s, std::span<const float> x,
                    int64_t n_samples, DType type, ThreadPool& pool) {
    std::vector<float> e(m.w.size());
    pool.run_tasks(m.rows, [&](int64_t r) {
        std::vector<float> row(static_cast<size_t>(m.cols));
        std::vector<uint8_t> q(row_bytes(type, m.cols));
        const float* w = &m.w[r * m.cols];
        for (int64_t c = 0; c < m.cols; ++c) row[c] = w[c] * s[c];
        // Only a type ferry cannot write fails here (the CLI refuses those first); it then
        // counts as losing the whole matrix, which no alpha can win with.
        if (!quant::quantize_row(type, row.data(), q.data(), m.cols) ||
            !quant::dequantize_row(type, q.data(), row.data(), m.cols))
            std::fill(row.begin(), row.end(), 0.0f);
        for (int64_t c = 0; c < m.cols; ++c) e[r * m.cols + c] = w[c] - row[c] / s[c];
    });
    std::vector<float> y(static_cast<size_t>(n_samples * m.rows));
    kernels::matmul_f32(e.data(), m.rows, m.cols, x.data(), n_samples, y.data(), pool);
    double sum = 0;
    for (float v : y) sum += static_cast<double>(v) * v;
    return sum;
}

}  // namespace

void fold_awq_scales(AwqLayer& l, const AwqScales& s, int n_head, int n_head_kv, int head_dim) {
    using model::LinearInput;
    if (const auto& a = s[static_cast<size_t>(LinearInput::Attn)]; !a.empty()) {
        for (size_t i = 0; i < a.size(); ++i) l.attn_norm[i] /= a[i];
        for (FloatMatrix* m : {&l.wq, &l.wk, &l.wv}) scale_cols(*m, a);
    }
    if (const auto& a = s[static_cast<size_t>(LinearInput::AttnOut)]; !a.empty()) {
        // Query head h reads kv head h / group; the scale of v's channel (kvh, c) is the
        // (shared) scale of channel c of the first query head of that group.
        const int group = n_head / n_head_kv;
        std::vector<float> sv(static_cast<size_t>(n_head_kv * head_dim));
        for (int kvh = 0; kvh < n_head_kv; ++kvh)
            for (int c = 0; c < head_dim; ++c)
                sv[kvh * head_dim + c] = a[(kvh * group) * head_dim + c];
        divide_rows(l.wv, sv);
        for (size_t i = 0; i < l.bv.size(); ++i) l.bv[i] /= sv[i];
        scale_cols(l.wo, a);
    }
    if (const auto& a = s[static_cast<size_t>(LinearInput::Ffn)]; !a.empty()) {
        for (size_t i = 0; i < a.size(); ++i) l.ffn_norm[i] /= a[i];
        for (FloatMatrix* m : {&l.w_gate, &l.w_up}) scale_cols(*m, a);
    }
    if (const auto& a = s[static_cast<size_t>(LinearInput::FfnDown)]; !a.empty()) {
        divide_rows(l.w_up, a);
        scale_cols(l.w_down, a);
    }
}

AwqResult awq_search(std::span<const FloatMatrix* const> mats, std::span<const double> act_mean,
                     std::span<const float> x, int64_t n_samples, ThreadPool& pool) {
    const auto cols = static_cast<int64_t>(act_mean.size());
    AwqResult best;
    std::vector<float> s(static_cast<size_t>(cols));
    for (int step = 0; step <= kAwqGrid; ++step) {
        const double alpha = static_cast<double>(step) / kAwqGrid;
        // s = mean|x|^alpha, normalised so max(s) min(s) = 1 (AutoAWQ's choice): only the
        // ratios between channels matter, and this keeps s and 1/s in a symmetric range.
        double lo = INFINITY, hi = 0;
        std::vector<double> p(static_cast<size_t>(cols));
        for (int64_t i = 0; i < cols; ++i) {
            p[i] = std::pow(std::max(act_mean[i], 1e-4), alpha);
            lo = std::min(lo, p[i]);
            hi = std::max(hi, p[i]);
        }
        const double norm = std::sqrt(lo * hi);
        for (int64_t i = 0; i < cols; ++i) s[i] = static_cast<float>(p[i] / norm);
        if (step == 0) std::fill(s.begin(), s.end(), 1.0f);  // exactly RTN
        double err = 0;
        for (const FloatMatrix* m : mats) err += output_error(*m, s, x, n_samples, m->target, pool);
        if (step == 0) {
            best.err_rtn = best.err = err;
            best.scale = s;
        } else if (err < best.err) {
            best.err = err;
            best.alpha = alpha;
            best.scale = s;
        }
    }
    return best;
}

std::array<AwqResult, model::kLinearInputs> awq_layer(
    AwqLayer& l, const std::array<InputStats, model::kLinearInputs>& stats, int n_head,
    int n_head_kv, int head_dim, ThreadPool& pool) {
    using model::LinearInput;
    std::array<AwqResult, model::kLinearInputs> res;
    auto search = [&](LinearInput which, std::vector<const FloatMatrix*> mats,
                      std::span<const double> act_mean) {
        const InputStats& st = stats[static_cast<size_t>(which)];
        AwqResult r = awq_search(mats, act_mean, st.samples, st.n_samples, pool);
        AwqScales scales;
        scales[static_cast<size_t>(which)] = r.scale;
        fold_awq_scales(l, scales, n_head, n_head_kv, head_dim);
        res[static_cast<size_t>(which)] = std::move(r);
    };

    // The attention output's channels of query heads that share a kv head get one scale (it
    // goes into a single v row), so their mean |x| is averaged over the group.
    const InputStats& ao = stats[static_cast<size_t>(LinearInput::AttnOut)];
    std::vector<double> tied(ao.abs_mean.size());
    const int group = n_head / n_head_kv;
    for (int kvh = 0; kvh < n_head_kv; ++kvh)
        for (int c = 0; c < head_dim; ++c) {
            double sum = 0;
            for (int g = 0; g < group; ++g) sum += ao.abs_mean[(kvh * group + g) * head_dim + c];
            for (int g = 0; g < group; ++g) tied[(kvh * group + g) * head_dim + c] = sum / group;
        }
    search(LinearInput::AttnOut, {&l.wo}, tied);
    search(LinearInput::FfnDown, {&l.w_down},
           stats[static_cast<size_t>(LinearInput::FfnDown)].abs_mean);
    search(LinearInput::Attn, {&l.wq, &l.wk, &l.wv},
           stats[static_cast<size_t>(LinearInput::Attn)].abs_mean);
    search(LinearInput::Ffn, {&l.w_gate, &l.w_up},
           stats[static_cast<size_t>(LinearInput::Ffn)].abs_mean);
    return res;
}

}  // namespace ferry::calibrate
