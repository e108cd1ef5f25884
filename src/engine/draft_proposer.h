// Draft-model speculation: a smaller model with the same vocabulary proposes K tokens by
// decoding greedily (or sampling with the sequence's own rules, keeping each distribution q
// for the verifier). It keeps its own paged KV cache and, per sequence, the tokens whose keys
// and values are in it; each step it re-syncs with the sequence's real history (whatever was
// rejected or preempted is recomputed from the first differing position) and drafts for all
// sequences of the step in one ragged batch per drafted position.
#pragma once

#include <memory>
#include <unordered_map>

#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/speculation.h"

namespace ferry::engine {

class DraftProposer final : public Proposer {
  public:
    // Refuses a draft whose vocabulary differs from the target's (ids would mean different
    // text). max_tokens: token slots of the draft cache, shared by every sequence. The draft
    // runs on its own model's backend.
    static Expected<std::unique_ptr<DraftProposer>> create(const LoadedModel& target,
                                                           const LoadedModel& draft,
                                                           int64_t max_tokens,
                                                           quant::KvDType kv = quant::KvDType::F32);

    void propose(std::span<ProposalJob> jobs) override;
    void release(uint64_t seq) override;
    void prefill(uint64_t seq, std::span<const int32_t> tokens) override;

    int64_t blocks_in_use() const { return blocks_.pool().num_used(); }

  private:
    DraftProposer(const LoadedModel& draft, int64_t n_blocks, kv::KvFormat kv);
    struct State {
        BlockTable kv;
        std::vector<int32_t> fed;  // tokens whose keys and values are in the draft cache
    };
    bool reserve(State& st, int64_t positions);

    static constexpr int kBlockSize = 16;
    BlockManager blocks_;
    ModelRunner runner_;
    std::unordered_map<uint64_t, State> states_;
};

}  // namespace ferry::engine
