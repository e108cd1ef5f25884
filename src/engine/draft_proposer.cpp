#include "engine/draft_proposer.h"

#include <algorithm>

#include "engine/kv_calibration.h"
#include "engine/loaded_model.h"

namespace ferry::engine {

Expected<std::unique_ptr<DraftProposer>> DraftProposer::create(const LoadedModel& target,
                                                               const LoadedModel& draft,
                                                               int64_t max_tokens,
                                                               quant::KvDType kv) {
    const auto& tt = *target.tokenizer;
    const auto& dt = *draft.tokenizer;
    if (tt.n_vocab() != dt.n_vocab() ||
        draft.model->config().n_vocab != target.model->config().n_vocab)
        return make_error(
            "the draft model's vocabulary ({} tokens) differs from the target's ({} tokens); "
            "speculation needs the same tokenizer",
            dt.n_vocab(), tt.n_vocab());
    for (int32_t id = 0; id < tt.n_vocab(); ++id)
        if (tt.token_text(id) != dt.token_text(id))
            return make_error(
                "the draft model's vocabulary differs from the target's at token {} ('{}' vs "
                "'{}'); speculation needs the same tokenizer",
                id, dt.token_text(id), tt.token_text(id));
    const int64_t n_blocks = std::max<int64_t>(1, (max_tokens + kBlockSize - 1) / kBlockSize);
    return std::unique_ptr<DraftProposer>(
        new DraftProposer(*draft.model, n_blocks, kv_format_for(draft, kv)));
}

DraftProposer::DraftProposer(const model::LlamaModel& draft, int64_t n_blocks, kv::KvFormat kv)
    : model_(draft),
      blocks_(n_blocks, kBlockSize, false),
      store_(draft.config().n_layer, n_blocks, kBlockSize, draft.config().kv_dim(),
             draft.config().head_dim, std::move(kv)) {}

bool DraftProposer::reserve(State& st, int64_t positions) {
    const size_t need = static_cast<size_t>((positions + kBlockSize - 1) / kBlockSize);
    while (st.blocks.size() > need) {  // a shorter history than last time: give back the rest
        blocks_.decref(st.blocks.back());
        st.blocks.pop_back();
    }
    if (blocks_.num_free() < static_cast<int64_t>(need - st.blocks.size())) return false;
    while (st.blocks.size() < need) st.blocks.push_back(*blocks_.allocate());
    return true;
}

void DraftProposer::release(uint64_t seq) {
    auto it = states_.find(seq);
    if (it == states_.end()) return;
    for (int32_t b : it->second.blocks) blocks_.decref(b);
    states_.erase(it);
}

void DraftProposer::prefill(uint64_t seq, std::span<const int32_t> tokens, ThreadPool& pool) {
    // Everything but the last token, which propose() always recomputes for its logits.
    if (tokens.size() < 2) return;
    State& st = states_[seq];
    const size_t valid = static_cast<size_t>(
        std::mismatch(st.fed.begin(), st.fed.end(), tokens.begin(), tokens.end()).first -
        st.fed.begin());
    const size_t upto = tokens.size() - 1;
    if (valid >= upto) return;
    st.fed.resize(valid);
    if (!reserve(st, static_cast<int64_t>(upto))) {
        release(seq);
        return;
    }
    model::LlamaModel::BatchSeq b;
    b.start_pos = static_cast<int64_t>(valid);
    b.n_tokens = static_cast<int>(upto - valid);
    b.kv = {st.blocks.data(), static_cast<int64_t>(st.blocks.size())};
    b.n_logits = 1;  // forward always wants a row; it is not used
    std::vector<float> logits(static_cast<size_t>(model_.config().n_vocab));
    model_.forward(tokens.subspan(valid, upto - valid), {&b, 1}, store_, logits.data(), pool);
    st.fed.insert(st.fed.end(), tokens.begin() + static_cast<std::ptrdiff_t>(valid),
                  tokens.begin() + static_cast<std::ptrdiff_t>(upto));
}

void DraftProposer::propose(std::span<ProposalJob> jobs, ThreadPool& pool) {
    const int n_vocab = model_.config().n_vocab;
    struct Active {
        ProposalJob* job;
        State* st;
        std::vector<int32_t> history;  // the sequence plus what was drafted so far
        std::vector<int32_t> feed;     // tokens to run this round
    };
    std::vector<Active> active;
    for (auto& j : jobs) {
        j.out->clear();
        if (j.k <= 0 || j.tokens.empty()) continue;
        State& st = states_[j.seq];
        // Keep the cached prefix the real history still agrees with, and always recompute the
        // last token: its logits are what the first draft comes from.
        size_t valid =
            std::mismatch(st.fed.begin(), st.fed.end(), j.tokens.begin(), j.tokens.end()).first -
            st.fed.begin();
        valid = std::min(valid, j.tokens.size() - 1);
        st.fed.resize(valid);
        // The last drafted token is never fed, so the cache needs len + k - 1 positions.
        if (!reserve(st, static_cast<int64_t>(j.tokens.size()) + j.k - 1)) {
            release(j.seq);  // the draft cache is full: this sequence decodes plainly
            continue;
        }
        Active a{&j, &st, {j.tokens.begin(), j.tokens.end()}, {}};
        a.feed.assign(j.tokens.begin() + static_cast<std::ptrdiff_t>(valid), j.tokens.end());
        active.push_back(std::move(a));
    }

    std::vector<int32_t> tokens;
    std::vector<model::LlamaModel::BatchSeq> seqs;
    std::vector<float> logits;
    while (!active.empty()) {
        tokens.clear();
        seqs.clear();
        for (const auto& a : active) {
            tokens.insert(tokens.end(), a.feed.begin(), a.feed.end());
            model::LlamaModel::BatchSeq b;
            b.start_pos = static_cast<int64_t>(a.st->fed.size());
            b.n_tokens = static_cast<int>(a.feed.size());
            b.kv = {a.st->blocks.data(), static_cast<int64_t>(a.st->blocks.size())};
            b.n_logits = 1;
            seqs.push_back(b);
        }
        logits.resize(active.size() * static_cast<size_t>(n_vocab));
        model_.forward(tokens, seqs, store_, logits.data(), pool);

        std::vector<Active> next;
        for (size_t i = 0; i < active.size(); ++i) {
            Active& a = active[i];
            a.st->fed.insert(a.st->fed.end(), a.feed.begin(), a.feed.end());
            std::span<const float> row(logits.data() + i * n_vocab, n_vocab);
            Sampler& s = *a.job->sampler;
            auto q = s.candidates(row, a.history);
            int32_t d;
            if (s.params().greedy()) {
                d = q.front().id;
            } else {
                d = s.draw(q);
                a.job->out->q.push_back(std::move(q));
            }
            a.job->out->tokens.push_back(d);
            a.history.push_back(d);
            if (static_cast<int>(a.job->out->tokens.size()) < a.job->k) {
                a.feed.assign(1, d);
                next.push_back(std::move(a));
            }
        }
        active.swap(next);
    }
}

}  // namespace ferry::engine
