#include "engine/medusa_proposer.h"

#include <algorithm>
#include <optional>
#include <queue>

#include "engine/loaded_model.h"
#include "engine/spec_planner.h"
#include "model/llama.h"

namespace ferry::engine {

namespace {

// Candidates per head in a tree: more rarely pay on a CPU, where every token verified costs.
constexpr int kTreeWidth = 4;

// The `width` likeliest entries of a probability row, likeliest first (the lower id on ties).
std::vector<Sampler::Candidate> likeliest(const float* p, int64_t n, int width) {
    std::vector<Sampler::Candidate> top;
    for (int64_t i = 0; i < n; ++i) {
        if (static_cast<int>(top.size()) == width && p[i] <= top.back().p) continue;
        Sampler::Candidate c{static_cast<int32_t>(i), 0.0f, p[i]};
        auto at = std::upper_bound(top.begin(), top.end(), c,
                                   [](const auto& a, const auto& b) { return a.p > b.p; });
        top.insert(at, c);
        if (static_cast<int>(top.size()) > width) top.pop_back();
    }
    return top;
}

}  // namespace

void MedusaProposer::build_tree(const std::vector<std::vector<Sampler::Candidate>>& cand,
                                int budget, Draft& out) {
    out.clear();
    budget = std::min(budget, kMaxTreeDraft);
    if (budget <= 0 || cand.empty()) return;
    // Best first: a branch is never likelier than its parent, so taking the likeliest open
    // branch each time yields the likeliest tree, parents before children.
    struct Open {
        double p;
        int32_t parent;  // index in the selection; -1: the sequence's last token
        int depth;       // 0-based: the head that proposes it
        int rank;        // among that head's candidates
        int32_t token;
        bool operator<(const Open& o) const { return p < o.p; }
    };
    std::priority_queue<Open> open;
    auto open_children = [&](int32_t parent, double p, int depth) {
        if (depth >= static_cast<int>(cand.size())) return;
        for (int r = 0; r < static_cast<int>(cand[static_cast<size_t>(depth)].size()); ++r) {
            const Sampler::Candidate& c = cand[static_cast<size_t>(depth)][static_cast<size_t>(r)];
            open.push({p * c.p, parent, depth, r, c.id});
        }
    };
    open_children(-1, 1.0, 0);
    std::vector<Open> sel;
    while (!open.empty() && static_cast<int>(sel.size()) < budget) {
        const Open o = open.top();
        open.pop();
        sel.push_back(o);
        open_children(static_cast<int32_t>(sel.size()) - 1, o.p, o.depth + 1);
    }
    // The leading chain (every head's first choice) first, then the rest in selection order:
    // parents still come before their children.
    std::vector<int32_t> order;
    std::vector<bool> in_chain(sel.size(), false);
    int32_t at = -1;
    for (;;) {
        int32_t next = -1;
        for (size_t i = 0; i < sel.size(); ++i)
            if (sel[i].parent == at && sel[i].rank == 0) next = static_cast<int32_t>(i);
        if (next < 0) break;
        in_chain[static_cast<size_t>(next)] = true;
        order.push_back(next);
        at = next;
    }
    for (size_t i = 0; i < sel.size(); ++i)
        if (!in_chain[i]) order.push_back(static_cast<int32_t>(i));
    std::vector<int32_t> new_index(sel.size());
    for (size_t i = 0; i < order.size(); ++i)
        new_index[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
    for (const int32_t i : order) {
        const Open& o = sel[static_cast<size_t>(i)];
        out.tokens.push_back(o.token);
        out.parent.push_back(o.parent < 0 ? -1 : new_index[static_cast<size_t>(o.parent)]);
    }
}

Expected<std::unique_ptr<MedusaProposer>> MedusaProposer::create(const LoadedModel& target,
                                                                 model::MedusaHeads heads,
                                                                 int tree_tokens) {
    const model::LlamaModel& m = *target.model;
    if (Status s = heads.check_fits(m.config()); !s) return s.error();
    const int most = std::min(kMaxTreeDraft, kMaxDraftTokens);
    if (tree_tokens < 0 || tree_tokens > most)
        return make_error("--medusa-tree {}: a tree holds 1..{} tokens (0: a chain)", tree_tokens,
                          most);
    // Under tensor parallelism this rank holds a slice of the output head's vocabulary, under a
    // pipeline none of it (the last stage does), and every head needs all of it: a whole copy,
    // as the file stores it.
    std::optional<Tensor> whole_head;
    if (m.tensor_ranks() > 1 || m.pipeline_stages() > 1) {
        auto host = m.output_head_in_file();
        if (!host) return host.error();
        whole_head = *host;
    }
    return std::unique_ptr<MedusaProposer>(
        new MedusaProposer(m, target.backend, std::move(heads), tree_tokens, whole_head));
}

MedusaProposer::MedusaProposer(const model::LlamaModel& model,
                               std::shared_ptr<kernels::Backend> backend, model::MedusaHeads heads,
                               int tree_tokens, const std::optional<Tensor>& whole_head)
    : model_(model), backend_(std::move(backend)), heads_(std::move(heads)), tree_(tree_tokens) {
    std::vector<kernels::MatrixSource> src;
    for (auto& w : heads_.w)
        src.push_back({Tensor(w.data(), DType::F32, {heads_.n_embd, heads_.n_embd}),
                       kernels::MatrixUse::Matmul});
    w_ = backend_->make_resident(src);
    if (whole_head) {
        const kernels::MatrixSource head[] = {{*whole_head, kernels::MatrixUse::Matmul}};
        whole_head_ = std::move(backend_->make_resident(head)[0]);
    }
}

const kernels::Matrix& MedusaProposer::head() const {
    return whole_head_.data.empty() ? model_.output_head() : whole_head_;
}

Tensor MedusaProposer::buffer(int slot, int64_t rows, int64_t cols) {
    Tensor& b = bufs_[slot];
    if (b.empty() || b.numel() < rows * cols) {
        const int64_t shape[] = {rows * cols};
        b = backend_->alloc(DType::F32, shape);
    }
    return Tensor(b.raw(), DType::F32, {rows, cols}, b.device());  // b keeps the memory
}

void MedusaProposer::observe_hidden(uint64_t seq, std::span<const float> h) {
    hidden_[seq].assign(h.begin(), h.end());
}

void MedusaProposer::propose(std::span<ProposalJob> jobs) {
    // The sequences that can draft: a hidden state seen, and room for at least one token.
    struct Row {
        ProposalJob* job;
        const std::vector<float>* h;
        int n;  // heads used
    };
    std::vector<Row> rows;
    int n_max = 0;
    for (ProposalJob& j : jobs) {
        j.out->clear();
        const auto it = hidden_.find(j.seq);
        // A tree spends its budget over every depth; a chain drafts one token per head.
        const int n =
            tree_ > 0 ? (j.k > 0 ? heads_.n_heads() : 0) : std::min(j.k, heads_.n_heads());
        if (it == hidden_.end() || n <= 0) continue;
        rows.push_back({&j, &it->second, n});
        n_max = std::max(n_max, n);
    }
    if (rows.empty()) return;
    const int64_t d = heads_.n_embd, nr = static_cast<int64_t>(rows.size());
    kernels::Backend& be = *backend_;

    // a_k = W_k h for every sequence and head in one product.
    const Tensor x = buffer(0, nr, d);
    std::vector<float> hx(static_cast<size_t>(nr * d));
    for (int64_t r = 0; r < nr; ++r)
        std::copy(rows[r].h->begin(), rows[r].h->end(), hx.begin() + r * d);
    be.upload(hx.data(), x);
    const Tensor a = buffer(1, n_max * nr, d);
    std::vector<kernels::MatmulOut> outs;
    for (int k = 0; k < n_max; ++k) outs.push_back({&w_[k], a.slice(k * nr, nr)});
    be.matmul(outs, x);
    const Tensor ah = be.host_view(a);

    // z_k = h + SiLU(a_k + b_k), then the output head over every z.
    int64_t nz = 0;
    for (const Row& r : rows) nz += r.n;
    std::vector<float> hz(static_cast<size_t>(nz * d));
    int64_t at = 0;
    for (int k = 0; k < n_max; ++k)
        for (int64_t r = 0; r < nr; ++r)
            if (k < rows[r].n)
                heads_.finish(k, rows[r].h->data(), ah.data<float>() + (k * nr + r) * d,
                              hz.data() + (at++) * d);
    const Tensor z = buffer(2, nz, d);
    be.upload(hz.data(), z);
    const int64_t nv = model_.config().n_vocab;
    const Tensor logits = buffer(3, nz, nv);
    const kernels::MatmulOut out_head[] = {{&head(), logits}};
    be.matmul(out_head, z);
    if (tree_ > 0) {
        // Each head's likeliest few tokens and their probabilities: the softmax on the
        // backend, the picking on the host.
        be.softmax(logits);
        const Tensor ph = be.host_view(logits);
        const int width = std::min(kTreeWidth, tree_);
        std::vector<std::vector<std::vector<Sampler::Candidate>>> cand(rows.size());
        at = 0;
        for (int k = 0; k < n_max; ++k)
            for (int64_t r = 0; r < nr; ++r)
                if (k < rows[r].n)
                    cand[r].push_back(likeliest(ph.data<float>() + (at++) * nv, nv, width));
        for (size_t r = 0; r < rows.size(); ++r)
            build_tree(cand[r], std::min(rows[r].job->k, tree_), *rows[r].job->out);
        return;
    }
    std::vector<int32_t> top(static_cast<size_t>(nz));
    be.argmax(logits, top);  // token ids cross to the host, not logits

    // Rows are head-major, in the order they were laid out above.
    at = 0;
    for (int k = 0; k < n_max; ++k)
        for (int64_t r = 0; r < nr; ++r)
            if (k < rows[r].n) rows[r].job->out->tokens.push_back(top[static_cast<size_t>(at++)]);
}

}  // namespace ferry::engine
