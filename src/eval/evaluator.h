// Model quality on a text: perplexity, and with a reference model the divergence of the
// next-token distributions (what `ferry eval` reports). Long texts are scored in windows of
// ctx tokens advanced by `stride`, each token scored once, as in Hugging Face's
// sliding-window perplexity: a window only scores the tokens the previous one did not, and
// uses the overlap as context.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "core/status.h"
#include "kernels/backend.h"
#include "kv/kv_store.h"
#include "model/llama.h"

namespace ferry::eval {

struct EvalOptions {
    int ctx = 512;
    int stride = 0;          // 0: ctx / 2
    kv::KvFormat kv_format;  // the model's KV cache; the reference always keeps f32
    std::shared_ptr<kernels::Backend> backend;  // both models run on it; null: the default CPU's
};

struct EvalResult {
    int64_t n_tokens = 0;  // in the text
    int64_t n_scored = 0;  // tokens predicted (all but the first)
    int n_windows = 0;
    double nll = 0;  // mean negative log-likelihood per scored token, nats
    double perplexity = 0;
    // Against the reference (has_ref): KL(ref || model) in nats per scored token.
    bool has_ref = false;
    double kl_mean = 0;
    double kl_p99 = 0;
    double top1_agreement = 0;  // fraction of scored tokens whose argmax matches
    double max_abs_logit_diff = 0;
    double ref_perplexity = 0;
};

// `ref` may be null. Both models must share the vocabulary. on_window(done, total) reports
// progress.
Expected<EvalResult> evaluate(const model::LlamaModel& model, const model::LlamaModel* ref,
                              std::span<const int32_t> tokens, const EvalOptions& opt,
                              const std::function<void(int, int)>& on_window = nullptr);

}  // namespace ferry::eval
