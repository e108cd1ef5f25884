#include "eval/stream_eval.h"

#include <chrono>
#include <cmath>
#include <memory>

#include "engine/engine.h"

namespace ferry::eval {

Expected<StreamEvalResult> evaluate_stream(
    const engine::LoadedModel& lm, std::span<const int32_t> tokens,
    const engine::EngineConfig& config, const std::function<void(int64_t, int64_t)>& on_progress) {
    if (tokens.size() < 2)
        return make_error("the text has {} tokens; at least 2 are needed", tokens.size());
    auto e = engine::Engine::create(lm, config);
    if (!e) return e.error();
    engine::Engine& eng = **e;
    engine::RequestParams p;
    p.max_tokens = 0;  // score the prompt and end
    p.prompt_logprobs = 0;
    std::shared_ptr<const engine::PromptLogprobs> lps;
    std::string error;
    bool done = false;
    const auto t0 = std::chrono::steady_clock::now();
    auto id = eng.add_request({tokens.begin(), tokens.end()}, p, [&](const engine::TokenEvent& ev) {
        if (ev.prompt_logprobs) lps = ev.prompt_logprobs;
        if (ev.finish_reason == engine::FinishReason::Error) error = ev.error;
        if (ev.finished) done = true;
    });
    if (!id) return id.error();
    StreamEvalResult r;
    r.n_tokens = static_cast<int64_t>(tokens.size());
    while (!done && eng.step()) {
        const engine::EngineMetrics m = eng.metrics();
        r.peak_kv_blocks = std::max<int64_t>(r.peak_kv_blocks, m.kv_blocks_used);
        if (on_progress) on_progress(static_cast<int64_t>(m.batched_tokens_total), r.n_tokens);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!error.empty()) return make_error("{}", error);
    if (!lps || static_cast<int64_t>(lps->size()) != r.n_tokens - 1)
        return make_error("the engine returned {} of the text's {} logprobs", lps ? lps->size() : 0,
                          r.n_tokens - 1);
    double nll = 0;
    for (const engine::PromptLogprob& lp : *lps) nll -= lp.logprob;
    r.n_scored = r.n_tokens - 1;
    r.nll = nll / static_cast<double>(r.n_scored);
    r.perplexity = std::exp(r.nll);
    r.kv_bytes_per_block = eng.kv_bytes_per_block();
    r.block_size = eng.config().block_size;
    r.evicted_tokens = eng.metrics().kv_evicted_tokens;
    return r;
}

}  // namespace ferry::eval
