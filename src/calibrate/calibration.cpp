#include "calibrate/calibration.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "kernels/host_math.h"

namespace ferry::calibrate {
namespace {

constexpr int kKvBlock = 256;

class Collector final : public model::ActivationObserver {
  public:
    Collector(CalibrationStats& stats, const CalibrationOptions& opt, int64_t n_total,
              ThreadPool& pool)
        : stats_(stats), opt_(opt), pool_(pool) {
        // Token rows kept for AWQ's error search: indices floor(k N / S), spread over the text.
        sampled_.assign(static_cast<size_t>(n_total), 0);
        const int64_t s = std::min(opt.n_samples, n_total);
        for (int64_t k = 0; k < s; ++k) sampled_[static_cast<size_t>(k * n_total / s)] = 1;
    }

    void begin_window(int64_t offset) { offset_ = offset; }

    int last_layer() const override { return opt_.only_layer; }

    void observe(int layer, model::LinearInput which, const Tensor& rows) override {
        if (opt_.only_layer >= 0 && layer != opt_.only_layer) return;
        const float* x = rows.data<const float>();
        const int64_t n = rows.rows(), dim = rows.cols();
        InputStats& st = stats_.layers[static_cast<size_t>(layer)][static_cast<size_t>(which)];
        if (st.dim == 0) {
            st.dim = dim;
            if (opt_.hessian) st.hessian.assign(static_cast<size_t>(dim * dim), 0.0);
            if (opt_.abs_mean) st.abs_mean.assign(static_cast<size_t>(dim), 0.0);
            if (opt_.abs_max) st.abs_max.assign(static_cast<size_t>(dim), 0.0);
            if (opt_.sq_mean) st.sq_mean.assign(static_cast<size_t>(dim), 0.0);
        }
        st.n_tokens += n;
        if (opt_.abs_mean) {
            for (int64_t t = 0; t < n; ++t)
                for (int64_t i = 0; i < dim; ++i) st.abs_mean[i] += std::fabs(x[t * dim + i]);
        }
        if (opt_.sq_mean) {
            for (int64_t t = 0; t < n; ++t)
                for (int64_t i = 0; i < dim; ++i) {
                    const double v = x[t * dim + i];
                    st.sq_mean[i] += v * v;
                }
        }
        if (opt_.abs_max) {
            for (int64_t t = 0; t < n; ++t)
                for (int64_t i = 0; i < dim; ++i)
                    st.abs_max[i] = std::max<double>(st.abs_max[i], std::fabs(x[t * dim + i]));
        }
        for (int64_t t = 0; t < n; ++t)
            if (sampled_[static_cast<size_t>(offset_ + t)]) {
                st.samples.insert(st.samples.end(), x + t * dim, x + (t + 1) * dim);
                ++st.n_samples;
            }
        if (opt_.hessian) add_gram(st, x, n, dim);
    }

  private:
    // X^T X for one window with the float matmul kernel (the dense product is most of the
    // calibration's work), summed in float over at most a window of tokens and then into
    // double. With XT = X^T as a weight of dim rows of n, XT applied to the rows of XT is
    // X^T X.
    void add_gram(InputStats& st, const float* x, int64_t n, int64_t dim) {
        xt_.resize(static_cast<size_t>(dim * n));
        for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < dim; ++i) xt_[i * n + t] = x[t * dim + i];
        gram_.resize(static_cast<size_t>(dim * dim));
        kernels::matmul_f32(xt_.data(), dim, n, xt_.data(), dim, gram_.data(), pool_);
        for (size_t i = 0; i < gram_.size(); ++i) st.hessian[i] += gram_[i];
    }

    CalibrationStats& stats_;
    const CalibrationOptions& opt_;
    ThreadPool& pool_;
    std::vector<uint8_t> sampled_;
    int64_t offset_ = 0;
    std::vector<float> xt_, gram_;
};

}  // namespace

Expected<CalibrationStats> calibrate(const model::LlamaModel& model,
                                     std::shared_ptr<kernels::Backend> backend,
                                     std::span<const int32_t> tokens, const CalibrationOptions& opt,
                                     const std::function<void(int, int)>& on_window) {
    const auto& c = model.config();
    const auto n = static_cast<int64_t>(tokens.size());
    if (n < 1) return make_error("the calibration text has no tokens");
    if (opt.window < 1) return make_error("calibration window must be at least 1 token");
    CalibrationStats stats;
    stats.n_tokens = n;
    stats.layers.resize(static_cast<size_t>(c.n_layer));

    const int window = static_cast<int>(std::min<int64_t>(opt.window, n));
    engine::ModelRunner runner(model, backend, (window + kKvBlock - 1) / kKvBlock, kKvBlock);
    std::vector<int32_t> blocks(static_cast<size_t>(runner.kv().n_blocks()));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);

    Collector collector(stats, opt, n, backend->host_pool());
    runner.set_observer(&collector);
    const int n_windows = static_cast<int>((n + window - 1) / window);
    for (int w = 0; w < n_windows; ++w) {
        const int64_t begin = static_cast<int64_t>(w) * window;
        const int64_t len = std::min<int64_t>(window, n - begin);
        collector.begin_window(begin);
        // Only the activations are wanted, not the output head.
        const engine::ModelRunner::Work work{
            tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(len)), 0, blocks, 0};
        runner.run({&work, 1});
        if (on_window) on_window(w + 1, n_windows);
    }

    for (auto& layer : stats.layers)
        for (InputStats& st : layer) {
            if (st.n_tokens == 0) continue;
            const double inv = 1.0 / static_cast<double>(st.n_tokens);
            for (double& h : st.hessian) h *= 2.0 * inv;
            for (double& a : st.abs_mean) a *= inv;
            for (double& a : st.sq_mean) a *= inv;
        }
    return stats;
}

}  // namespace ferry::calibrate
