#include "eval/evaluator.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model_runner.h"
#include "kernels/host_math.h"

namespace ferry::eval {
namespace {

constexpr int kBlock = 256;

// One model with a cache for one window; every window starts from an empty cache.
class WindowRunner {
  public:
    WindowRunner(const model::LlamaModel& m, int ctx, std::shared_ptr<kernels::Backend> backend,
                 kv::KvFormat format = {})
        : runner_(m, std::move(backend), (ctx + kBlock - 1) / kBlock, kBlock, std::move(format)),
          blocks_(static_cast<size_t>(runner_.kv().n_blocks())) {
        for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i] = static_cast<int32_t>(i);
    }

    // Logits of every position of the window, row by row.
    std::span<const float> run(std::span<const int32_t> window) {
        const engine::ModelRunner::Work w{window, 0, blocks_, static_cast<int>(window.size())};
        return runner_.run({&w, 1});
    }

  private:
    engine::ModelRunner runner_;
    std::vector<int32_t> blocks_;
};

// log-softmax in double: KL of two close distributions is a small difference of large
// terms, which float would drown in rounding.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
    out.resize(static_cast<size_t>(n));
    double mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
    const double lse = mx + std::log(sum);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - lse;
}

}  // namespace

Expected<EvalResult> evaluate(const model::LlamaModel& model, const model::LlamaModel* ref,
                              std::span<const int32_t> tokens, const EvalOptions& opt,
                              const std::function<void(int, int)>& on_window) {
    const int64_t n_vocab = model.config().n_vocab;
    if (ref && ref->config().n_vocab != n_vocab)
        return make_error("the reference model has {} tokens in its vocabulary, the model {}",
                          ref->config().n_vocab, n_vocab);
    const int ctx = opt.ctx;
    const int stride = opt.stride > 0 ? opt.stride : std::max(1, ctx / 2);
    if (ctx < 2) return make_error("--ctx must be at least 2 (got {})", ctx);
    if (stride > ctx) return make_error("--stride {} is larger than --ctx {}", stride, ctx);
    const auto n = static_cast<int64_t>(tokens.size());
    if (n < 2) return make_error("the text has {} tokens; at least 2 are needed", n);
    for (int32_t t : tokens)
        if (t < 0 || t >= n_vocab)
            return make_error("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);

    // The window starts: begin += stride until a window reaches the end of the text.
    std::vector<int64_t> begins;
    for (int64_t b = 0;; b += stride) {
        begins.push_back(b);
        if (b + ctx >= n) break;
    }

    std::shared_ptr<kernels::Backend> backend = opt.backend;
    if (!backend) {
        auto be = kernels::make_backend();
        if (!be) return be.error();
        backend = *be;
    }
    WindowRunner run_model(model, ctx, backend, opt.kv_format);
    std::optional<WindowRunner> run_ref;
    if (ref) run_ref.emplace(*ref, ctx, backend);

    EvalResult r;
    r.n_tokens = n;
    r.has_ref = ref != nullptr;
    std::span<const float> logits, ref_logits;
    std::vector<double> lp, ref_lp;
    std::vector<double> kls;
    double nll_sum = 0, ref_nll_sum = 0;
    int64_t top1 = 0;
    int64_t prev_end = 0;
    for (size_t w = 0; w < begins.size(); ++w) {
        const int64_t begin = begins[w], end = std::min(begin + ctx, n);
        const auto window =
            tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
        logits = run_model.run(window);
        if (run_ref) ref_logits = run_ref->run(window);
        // Target token t is predicted by the logits at t - 1.
        for (int64_t t = std::max(prev_end, begin + 1); t < end; ++t) {
            const float* lg = logits.data() + (t - 1 - begin) * n_vocab;
            log_softmax(lg, n_vocab, lp);
            nll_sum -= lp[static_cast<size_t>(tokens[t])];
            ++r.n_scored;
            if (!run_ref) continue;
            const float* rl = ref_logits.data() + (t - 1 - begin) * n_vocab;
            log_softmax(rl, n_vocab, ref_lp);
            ref_nll_sum -= ref_lp[static_cast<size_t>(tokens[t])];
            double kl = 0, maxdiff = 0;
            for (int64_t i = 0; i < n_vocab; ++i) {
                kl += std::exp(ref_lp[i]) * (ref_lp[i] - lp[i]);
                maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(lg[i] - rl[i])));
            }
            kls.push_back(std::max(0.0, kl));  // rounding can make an exact 0 slightly negative
            r.max_abs_logit_diff = std::max(r.max_abs_logit_diff, maxdiff);
            if (kernels::argmax(lg, n_vocab) == kernels::argmax(rl, n_vocab)) ++top1;
        }
        prev_end = end;
        ++r.n_windows;
        if (on_window) on_window(static_cast<int>(w + 1), static_cast<int>(begins.size()));
    }
    r.nll = nll_sum / static_cast<double>(r.n_scored);
    r.perplexity = std::exp(r.nll);
    if (ref) {
        double sum = 0;
        for (double k : kls) sum += k;
        r.kl_mean = sum / static_cast<double>(kls.size());
        std::sort(kls.begin(), kls.end());
        // Nearest-rank percentile: the smallest value with at least 99 % of the values <= it.
        const size_t idx =
            static_cast<size_t>(std::ceil(0.99 * static_cast<double>(kls.size()))) - 1;
        r.kl_p99 = kls[std::min(idx, kls.size() - 1)];
        r.top1_agreement = static_cast<double>(top1) / static_cast<double>(r.n_scored);
        r.ref_perplexity = std::exp(ref_nll_sum / static_cast<double>(r.n_scored));
    }
    return r;
}

}  // namespace ferry::eval
