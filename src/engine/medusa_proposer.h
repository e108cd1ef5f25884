// Medusa drafting (model/medusa_heads.h): the target's final hidden state at the position that
// gave a sequence's last token goes through each trained head and the target's own output head,
// and each head's top token is a draft token, head k's at depth k + 1. One step's heads for every
// sequence run as two products on the target's backend (the heads', then the output head's). The
// drafts are point masses, so verification keeps the output exactly the target's (greedy and
// seeded sampling alike), as with prompt lookup.
//
// With a tree budget of N tokens it drafts a tree instead (Medusa's tree attention): each head's
// few likeliest tokens are candidates at its depth, a branch is as likely as the product of its
// heads' probabilities, and the N likeliest branches' tokens are verified in one pass (the
// likeliest chain first, so that its acceptance moves nothing in the cache).
//
// It needs the target's hidden state: under tensor parallelism rank 0 has it whole, under a
// pipeline (--pp) the last stage sends it with the logits. Rank 0 then holds only a slice of
// the output head (--tp) or none of it (--pp), so the proposer keeps a whole copy of the head
// (as the file stores it) beside the heads; drafts only decide what gets verified, so its type
// does not matter.
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/speculation.h"
#include "kernels/backend.h"
#include "model/medusa_heads.h"

namespace ferry::model {
class LlamaModel;
}

namespace ferry::engine {

class MedusaProposer final : public Proposer {
  public:
    // Refuses heads made for another shape of model and a model split over ranks.
    // tree_tokens: 0 drafts a chain (one token per head), N > 0 trees of up to N tokens.
    static Expected<std::unique_ptr<MedusaProposer>> create(const LoadedModel& target,
                                                            model::MedusaHeads heads,
                                                            int tree_tokens = 0);

    bool wants_hidden() const override { return true; }
    void observe_hidden(uint64_t seq, std::span<const float> h) override;
    void propose(std::span<ProposalJob> jobs) override;
    void release(uint64_t seq) override { hidden_.erase(seq); }
    int max_draft() const override { return tree_ > 0 ? tree_ : heads_.n_heads(); }
    bool drafts_trees() const override { return tree_ > 0; }
    bool own_budget() const override { return tree_ > 0; }

    // The likeliest tree of at most `budget` tokens over per-depth candidates (cand[d]: the
    // tokens proposed at depth d + 1 with their probabilities, likeliest first), its leading
    // chain first (Draft::parent). Exposed for tests.
    static void build_tree(const std::vector<std::vector<Sampler::Candidate>>& cand, int budget,
                           Draft& out);

  private:
    MedusaProposer(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
                   model::MedusaHeads heads, int tree_tokens,
                   const std::optional<Tensor>& whole_head);
    // A device buffer of at least rows x cols floats, kept between steps.
    Tensor buffer(int slot, int64_t rows, int64_t cols);

    const model::LlamaModel& model_;
    std::shared_ptr<kernels::Backend> backend_;
    model::MedusaHeads heads_;
    std::vector<kernels::Matrix> w_;  // W_k, resident
    std::unordered_map<uint64_t, std::vector<float>> hidden_;
    // The output head the drafts are read through: the model's, or under tensor parallelism
    // this proposer's whole copy.
    const kernels::Matrix& head() const;

    Tensor bufs_[4];
    int tree_ = 0;
    kernels::Matrix whole_head_;
};

}  // namespace ferry::engine
