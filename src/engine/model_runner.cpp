#include "engine/model_runner.h"

#include <stdexcept>

namespace ferry::engine {

ModelRunner::ModelRunner(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
                         int64_t n_blocks, int block_size, kv::KvFormat kv)
    : model_(model),
      backend_(std::move(backend)),
      store_(*backend_, model.config().n_layer, n_blocks, block_size, model.config().kv_dim(),
             model.config().head_dim, std::move(kv)) {
    if (backend_->device() != model.device())
        throw std::invalid_argument("ModelRunner: the model's weights are on another device");
}

std::span<const float> ModelRunner::run(std::span<const Work> work) {
    tokens_.clear();
    positions_.clear();
    token_seq_.clear();
    logit_tokens_.clear();
    seqs_.clear();
    for (const Work& w : work) {
        const auto first = static_cast<int32_t>(tokens_.size());
        const auto n = static_cast<int32_t>(w.tokens.size());
        tokens_.insert(tokens_.end(), w.tokens.begin(), w.tokens.end());
        for (int32_t i = 0; i < n; ++i) {
            positions_.push_back(w.start_pos + i);
            token_seq_.push_back(static_cast<int32_t>(seqs_.size()));
        }
        for (int32_t i = n - w.n_logits; i < n; ++i) logit_tokens_.push_back(first + i);
        seqs_.push_back({w.start_pos, n, first, w.blocks});
    }
    if (tokens_.empty()) return {};
    const auto rows = static_cast<int64_t>(logit_tokens_.size());
    const int64_t n_vocab = model_.config().n_vocab;
    if (rows > 0 && (logits_.empty() || logits_.dim(0) < rows)) {
        const int64_t shape[] = {rows, n_vocab};
        logits_ = backend_->alloc(DType::F32, shape);
    }
    const Tensor logits = rows > 0 ? logits_.slice(0, rows) : Tensor();
    const kernels::Batch batch{tokens_, positions_, token_seq_, seqs_, logit_tokens_};
    model_.forward(*backend_, batch, store_.view(), logits, observer_);
    if (rows == 0) return {};
    const Tensor host = backend_->host_view(logits);
    return {host.data<const float>(), static_cast<size_t>(rows * n_vocab)};
}

std::span<const float> ModelRunner::execute(const SchedulerOutput& out) {
    copies_.clear();
    for (const BlockCopy& c : out.copies) copies_.emplace_back(c.src, c.dst);
    if (!copies_.empty()) store_.copy_blocks(copies_);
    work_.clear();
    for (const ScheduledSeq& s : out.seqs)
        work_.push_back({s.tokens, s.start_pos, s.blocks, s.num_logits()});
    return run(work_);
}

}  // namespace ferry::engine
