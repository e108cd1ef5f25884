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
        new DraftProposer(draft, n_blocks, kv_format_for(draft, kv)));
}

DraftProposer::DraftProposer(const LoadedModel& draft, int64_t n_blocks, kv::KvFormat kv)
    : blocks_(n_blocks, kBlockSize, false),
      runner_(*draft.model, draft.backend, n_blocks, kBlockSize, std::move(kv)) {}

bool DraftProposer::reserve(State& st, int64_t positions) {
    blocks_.trim(st.kv, positions);  // a shorter history than last time: give back the rest
    std::vector<BlockCopy> none;     // nothing is shared here, so nothing is ever copied
    return blocks_.allocate(st.kv, positions, positions, none);
}

void DraftProposer::release(uint64_t seq) {
    auto it = states_.find(seq);
    if (it == states_.end()) return;
    blocks_.release(it->second.kv);
    states_.erase(it);
}

void DraftProposer::prefill(uint64_t seq, std::span<const int32_t> tokens) {
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
    const ModelRunner::Work w{tokens.subspan(valid, upto - valid), static_cast<int64_t>(valid),
                              st.kv.blocks, 0};
    runner_.run({&w, 1});
    st.fed.insert(st.fed.end(), tokens.begin() + static_cast<std::ptrdiff_t>(valid),
                  tokens.begin() + static_cast<std::ptrdiff_t>(upto));
}

void DraftProposer::propose(std::span<ProposalJob> jobs) {
    const int n_vocab = runner_.n_vocab();
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

    std::vector<ModelRunner::Work> work;
    while (!active.empty()) {
        work.clear();
        for (const auto& a : active)
            work.push_back({a.feed, static_cast<int64_t>(a.st->fed.size()), a.st->kv.blocks, 1});
        const std::span<const float> logits = runner_.run(work);

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
