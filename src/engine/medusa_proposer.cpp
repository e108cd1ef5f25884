#include "engine/medusa_proposer.h"

#include <algorithm>

#include "engine/loaded_model.h"
#include "model/llama.h"

namespace ferry::engine {

Expected<std::unique_ptr<MedusaProposer>> MedusaProposer::create(const LoadedModel& target,
                                                                 model::MedusaHeads heads) {
    const model::LlamaModel& m = *target.model;
    if (m.comm())
        return make_error(
            "--spec medusa runs in one process: the heads read the final hidden state and the "
            "whole output head, which --tp splits and --pp keeps on the last stage");
    if (Status s = heads.check_fits(m.config()); !s) return s.error();
    return std::unique_ptr<MedusaProposer>(new MedusaProposer(m, target.backend, std::move(heads)));
}

MedusaProposer::MedusaProposer(const model::LlamaModel& model,
                               std::shared_ptr<kernels::Backend> backend, model::MedusaHeads heads)
    : model_(model), backend_(std::move(backend)), heads_(std::move(heads)) {
    std::vector<kernels::MatrixSource> src;
    for (auto& w : heads_.w)
        src.push_back({Tensor(w.data(), DType::F32, {heads_.n_embd, heads_.n_embd}),
                       kernels::MatrixUse::Matmul});
    w_ = backend_->make_resident(src);
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
        const int n = std::min(j.k, heads_.n_heads());
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
    const kernels::MatmulOut head[] = {{&model_.output_head(), logits}};
    be.matmul(head, z);
    std::vector<int32_t> top(static_cast<size_t>(nz));
    be.argmax(logits, top);  // token ids cross to the host, not logits

    // Rows are head-major, in the order they were laid out above.
    at = 0;
    for (int k = 0; k < n_max; ++k)
        for (int64_t r = 0; r < nr; ++r)
            if (k < rows[r].n) rows[r].job->out->tokens.push_back(top[static_cast<size_t>(at++)]);
}

}  // namespace ferry::engine
