#include "engine/generator.h"

#include <chrono>

namespace ferry::engine {
namespace {
constexpr int kBlock = 256;  // a single stream needs no fine-grained blocks

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Generator::Generator(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
                     int64_t n_ctx, kv::KvFormat kv)
    : n_ctx_(n_ctx),
      runner_(model, std::move(backend), (n_ctx + kBlock - 1) / kBlock, kBlock, std::move(kv)),
      blocks_(static_cast<size_t>(runner_.kv().n_blocks())) {
    for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i] = static_cast<int32_t>(i);
}

std::span<const float> Generator::feed(std::span<const int32_t> tokens, int n_logits) {
    const ModelRunner::Work w{tokens, position(), blocks_, n_logits};
    const auto logits = runner_.run({&w, 1});
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    return logits;
}

Expected<GenerationStats> Generator::generate(std::span<const int32_t> prompt,
                                              const SamplingParams& params, int max_tokens,
                                              const std::function<bool(int32_t)>& on_token,
                                              const std::function<bool(int32_t)>& is_eog,
                                              const SpecRun& spec) {
    const int64_t n_vocab = runner_.n_vocab();
    if (prompt.empty()) return make_error("the prompt is empty");
    for (int32_t t : prompt)
        if (t < 0 || t >= n_vocab)
            return make_error("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
    if (position() + static_cast<int64_t>(prompt.size()) > n_ctx())
        return make_error("the prompt is {} tokens but the context holds {} ({} already used)",
                          prompt.size(), n_ctx(), position());

    GenerationStats st;
    st.prompt_tokens = static_cast<int>(prompt.size());
    Sampler sampler(params);
    const int k_max = spec.proposer ? std::max(1, spec.k) : 0;
    auto t0 = std::chrono::steady_clock::now();
    std::span<const float> logits = feed(prompt, 1);
    if (spec.proposer) spec.proposer->prefill(0, history_);
    st.prefill_ms = ms_since(t0);

    st.finish_reason = "length";
    auto t_decode = std::chrono::steady_clock::now();
    // Tokens decided but not yet fed: one per plain step, up to K + 1 after a verification.
    std::vector<int32_t> pending{sampler.sample({logits.data(), size_t(n_vocab)}, history_)};
    st.ttft_ms = ms_since(t0);
    t_decode = std::chrono::steady_clock::now();
    Draft draft;
    int k = k_max;
    for (;;) {
        bool done = false;
        for (int32_t tok : pending) {
            ++st.generated_tokens;
            if ((is_eog && is_eog(tok)) || (on_token && !on_token(tok))) {
                st.finish_reason = "stop";
                done = true;
                break;
            }
            if (st.generated_tokens == max_tokens) {
                done = true;
                break;
            }
        }
        if (done || position() + 1 > n_ctx()) break;
        const int32_t last = pending.back();

        draft.clear();
        if (spec.proposer) {
            const int64_t room =
                std::min<int64_t>(max_tokens - st.generated_tokens - 1, n_ctx() - position() - 1);
            const int want = static_cast<int>(std::min<int64_t>(k, room));
            if (want > 0) {
                std::vector<int32_t> ctx = history_;
                ctx.push_back(last);
                ProposalJob job{0, ctx, want, &sampler, &draft};
                spec.proposer->propose({&job, 1});
            }
        }
        const int64_t before = position();
        std::vector<int32_t> run{last};
        run.insert(run.end(), draft.tokens.begin(), draft.tokens.end());
        logits = feed(run, static_cast<int>(run.size()));
        if (draft.tokens.empty()) {
            pending.assign(1, sampler.sample({logits.data(), size_t(n_vocab)}, history_));
            continue;
        }
        // Roll back to the verified prefix: rejected positions are simply overwritten later.
        history_.resize(static_cast<size_t>(before + 1));
        std::vector<int32_t> hist = history_;
        pending = verify_draft(sampler, logits.data(), static_cast<int>(n_vocab), draft, hist);
        const int accepted = static_cast<int>(pending.size()) - 1;
        history_.insert(history_.end(), draft.tokens.begin(), draft.tokens.begin() + accepted);
        ++st.spec_steps;
        st.spec_draft_tokens += static_cast<int>(draft.tokens.size());
        st.spec_accepted_tokens += accepted;
        if (spec.adaptive) k = adapt_k(k, accepted, static_cast<int>(draft.tokens.size()), k_max);
    }
    st.decode_ms = ms_since(t_decode);
    if (spec.proposer) spec.proposer->release(0);
    return st;
}

Expected<std::vector<float>> Generator::logits_for(std::span<const int32_t> tokens) {
    if (tokens.empty() || static_cast<int64_t>(tokens.size()) > n_ctx())
        return make_error("need 1..{} tokens, got {}", n_ctx(), tokens.size());
    reset();
    const auto logits = feed(tokens, 1);
    return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace ferry::engine
