#include "engine/model_runner.h"

namespace ferry::engine {

ModelRunner::ModelRunner(const model::LlamaModel& model, int n_threads, int64_t n_blocks,
                         int block_size, kv::KvFormat kv)
    : model_(model),
      pool_(n_threads),
      store_(model.config().n_layer, n_blocks, block_size, model.config().kv_dim(),
             model.config().head_dim, std::move(kv)) {}

const std::vector<float>& ModelRunner::execute(const SchedulerOutput& out) {
    for (auto [src, dst] : out.copies) store_.copy_block(src, dst);
    tokens_.clear();
    seqs_.clear();
    int rows = 0;
    for (const ScheduledSeq& s : out.seqs) {
        const Sequence& q = *s.seq;
        const int real = s.num_tokens - s.num_draft;
        tokens_.insert(tokens_.end(), q.tokens.begin() + q.num_computed,
                       q.tokens.begin() + q.num_computed + real);
        tokens_.insert(tokens_.end(), q.draft.tokens.begin(), q.draft.tokens.begin() + s.num_draft);
        model::LlamaModel::BatchSeq b;
        b.start_pos = q.num_computed;
        b.n_tokens = s.num_tokens;
        b.kv = {q.blocks.data(), static_cast<int64_t>(q.blocks.size())};
        b.n_logits = s.wants_logits ? 1 + s.num_draft : 0;
        rows += b.n_logits;
        seqs_.push_back(b);
    }
    logits_.resize(static_cast<size_t>(rows) * n_vocab());
    if (!seqs_.empty()) model_.forward(tokens_, seqs_, store_, logits_.data(), pool_);
    return logits_;
}

}  // namespace ferry::engine
