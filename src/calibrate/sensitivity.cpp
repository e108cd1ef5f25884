#include "calibrate/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"

namespace ferry::calibrate {
namespace {

constexpr int kKvBlock = 256;

// The loaded model's next-token distribution at every position, kept as probabilities and
// log-probabilities (floats: 8 bytes per vocabulary entry and position), so a trial's KL is one
// pass over its own logits.
struct Reference {
    int64_t n_vocab = 0;
    std::vector<float> p, lp;
};

// Every position's logits over the text, window by window, into `out` ({n_tokens, n_vocab}).
void run_text(engine::ModelRunner& runner, std::span<const int32_t> tokens, int window,
              std::span<const int32_t> blocks, std::vector<float>& out) {
    const int64_t n_vocab = runner.n_vocab();
    out.resize(tokens.size() * static_cast<size_t>(n_vocab));
    for (size_t b = 0; b < tokens.size(); b += static_cast<size_t>(window)) {
        const auto w = tokens.subspan(b, std::min(tokens.size() - b, static_cast<size_t>(window)));
        const engine::ModelRunner::Work work{w, 0, blocks, static_cast<int>(w.size())};
        const std::span<const float> logits = runner.run({&work, 1});
        std::copy(logits.begin(), logits.end(), out.begin() + static_cast<int64_t>(b) * n_vocab);
    }
}

// log-sum-exp in double: the KLs compared are small differences of large terms.
double log_sum_exp(const float* x, int64_t n) {
    double mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
    return mx + std::log(sum);
}

Reference make_reference(const std::vector<float>& logits, int64_t n_vocab, ThreadPool& pool) {
    Reference r;
    r.n_vocab = n_vocab;
    r.p.resize(logits.size());
    r.lp.resize(logits.size());
    const auto n_pos = static_cast<int64_t>(logits.size()) / n_vocab;
    pool.parallel_for(n_pos, [&](int64_t p0, int64_t p1) {
        for (int64_t t = p0; t < p1; ++t) {
            const float* x = logits.data() + t * n_vocab;
            const double lse = log_sum_exp(x, n_vocab);
            for (int64_t i = 0; i < n_vocab; ++i) {
                const double lp = x[i] - lse;
                r.lp[static_cast<size_t>(t * n_vocab + i)] = static_cast<float>(lp);
                r.p[static_cast<size_t>(t * n_vocab + i)] = static_cast<float>(std::exp(lp));
            }
        }
    });
    return r;
}

// Mean over positions of KL(reference || softmax(logits)).
double mean_kl(const Reference& ref, const std::vector<float>& logits, ThreadPool& pool) {
    const int64_t n_vocab = ref.n_vocab;
    const auto n_pos = static_cast<int64_t>(logits.size()) / n_vocab;
    std::vector<double> kl(static_cast<size_t>(n_pos));
    pool.parallel_for(n_pos, [&](int64_t p0, int64_t p1) {
        for (int64_t t = p0; t < p1; ++t) {
            const float* x = logits.data() + t * n_vocab;
            const float* p = ref.p.data() + t * n_vocab;
            const float* lp = ref.lp.data() + t * n_vocab;
            const double lse = log_sum_exp(x, n_vocab);
            double s = 0;
            for (int64_t i = 0; i < n_vocab; ++i)
                s += static_cast<double>(p[i]) * (lp[i] - (x[i] - lse));
            kl[static_cast<size_t>(t)] = std::max(0.0, s);  // rounding can dip an exact 0 below
        }
    });
    double sum = 0;
    for (double k : kl) sum += k;
    return sum / static_cast<double>(n_pos);
}

}  // namespace

Expected<std::vector<double>> measure_sensitivity(model::LlamaModel& model,
                                                  const model::WeightFile& file,
                                                  std::shared_ptr<kernels::Backend> backend,
                                                  std::span<const int32_t> tokens,
                                                  std::span<const SensitivityTrial> trials,
                                                  int window,
                                                  const std::function<void(int, int)>& on_trial) {
    if (tokens.empty()) return make_error("sensitivity: no calibration tokens");
    if (window < 1) return make_error("sensitivity: window must be positive (got {})", window);
    for (int32_t t : tokens)
        if (t < 0 || t >= model.config().n_vocab)
            return make_error("token id {} is outside the vocabulary (0..{})", t,
                              model.config().n_vocab - 1);
    ThreadPool& pool = backend->host_pool();
    const int64_t n_vocab = model.config().n_vocab;
    const int n_win = std::min<int>(window, static_cast<int>(tokens.size()));
    engine::ModelRunner runner(model, backend, (n_win + kKvBlock - 1) / kKvBlock, kKvBlock);
    std::vector<int32_t> blocks(static_cast<size_t>(runner.kv().n_blocks()));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);

    std::vector<float> logits;
    run_text(runner, tokens, n_win, blocks, logits);
    const Reference ref = make_reference(logits, n_vocab, pool);

    std::vector<double> out(trials.size(), 0.0);
    std::string loaded_name;  // the tensor whose floats `floats` holds
    Tensor loaded;
    std::vector<float> floats;
    auto put_back = [&]() -> Status {
        if (loaded_name.empty()) return Status::Ok();
        return model.replace_matrix(*backend, loaded_name, loaded);
    };
    for (size_t i = 0; i < trials.size(); ++i) {
        const SensitivityTrial& tr = trials[i];
        if (tr.tensor != loaded_name) {
            if (Status s = put_back(); !s) return s.error();
            auto found = file.find(tr.tensor);
            if (!found) return found.error();
            if (!*found || (*found)->ndim() != 2)
                return make_error("sensitivity: {} has no matrix '{}'", file.path(), tr.tensor);
            loaded = **found;
            loaded_name = tr.tensor;
            floats.resize(static_cast<size_t>(loaded.numel()));
            const int64_t cols = loaded.cols();
            auto row = [&](int64_t r) {
                return quant::dequantize_row(
                    loaded.dtype(),
                    static_cast<const uint8_t*>(loaded.raw()) + r * loaded.row_bytes(),
                    &floats[static_cast<size_t>(r * cols)], cols);
            };
            // The first row says whether the type is readable; the rest cannot fail then.
            if (Status s = row(0); !s) return s.error();
            pool.parallel_for(loaded.rows(), [&](int64_t r0, int64_t r1) {
                for (int64_t r = std::max<int64_t>(r0, 1); r < r1; ++r) (void)row(r);
            });
        }
        const int64_t rows = loaded.rows(), cols = loaded.cols();
        if (cols % dtype_info(tr.type).block_size != 0)
            return make_error("sensitivity: '{}' has rows of {}, which {} does not split into",
                              tr.tensor, cols, dtype_name(tr.type));
        const size_t rb = row_bytes(tr.type, cols);
        auto bytes = std::make_shared<std::vector<uint8_t>>(rb * static_cast<size_t>(rows));
        // A row can be refused (int4s on a row that is not 2:4): the first refusal is the answer.
        std::mutex failed_mu;
        Status failed;
        pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
                if (Status s = quant::quantize_row(tr.type, &floats[r * cols],
                                                   bytes->data() + r * rb, cols);
                    !s) {
                    std::lock_guard lock(failed_mu);
                    if (failed) failed = std::move(s);
                    return;
                }
        });
        if (!failed)
            return make_error("sensitivity: {} as {}: {}", tr.tensor, dtype_name(tr.type),
                              failed.error().message);
        const bool same = tr.type == loaded.dtype() && loaded.contiguous() &&
                          std::memcmp(bytes->data(), loaded.raw(), bytes->size()) == 0;
        if (!same) {
            const Tensor trial =
                Tensor(bytes->data(), tr.type, {rows, cols}).owned_by(std::move(bytes));
            if (Status s = model.replace_matrix(*backend, tr.tensor, trial); !s) return s.error();
            run_text(runner, tokens, n_win, blocks, logits);
            out[i] = mean_kl(ref, logits, pool);
        }
        if (on_trial) on_trial(static_cast<int>(i + 1), static_cast<int>(trials.size()));
    }
    if (Status s = put_back(); !s) return s.error();
    return out;
}

}  // namespace ferry::calibrate
