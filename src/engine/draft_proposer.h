// Draft-model speculation: a smaller model with the same vocabulary proposes K tokens by
// decoding greedily (or sampling with the sequence's own rules, keeping each distribution q
// for the verifier). It keeps its own paged KV cache and, per sequence, the tokens whose keys
// and values are in it; each step it re-syncs with the sequence's real history (whatever was
// rejected or preempted is recomputed from the first differing position) and drafts for all
// sequences of the step in one ragged batch per drafted position.
#pragma once

#include <memory>
#include <unordered_map>

#include "engine/speculation.h"
#include "kv/block_pool.h"
#include "kv/kv_store.h"
#include "model/llama.h"

namespace ferry::engine {

class DraftProposer final : public Proposer {
  public:
    // Refuses a draft whose vocabulary differs from the target's (ids would mean different
    // text). max_tokens: token slots of the draft cache, shared by every sequence.
    static Expected<std::unique_ptr<DraftProposer>> create(const LoadedModel& target,
                                                           const LoadedModel& draft,
                                                           int64_t max_tokens,
                                                           quant::KvDType kv = quant::KvDType::F32);

    void propose(std::span<ProposalJob> jobs, ThreadPool& pool) override;
    void release(uint64_t seq) override;
    void prefill(uint64_t seq, std::span<const int32_t> tokens, ThreadPool& pool) override;

    int64_t blocks_in_use() const { return blocks_.num_used(); }

  private:
    DraftProposer(const model::LlamaModel& draft, int64_t n_blocks, kv::KvFormat kv);
    struct State {
        std::vector<int32_t> blocks;
        std::vector<int32_t> fed;  // tokens whose keys and values are in the draft cache
    };
    bool reserve(State& st, int64_t positions);

    static constexpr int kBlockSize = 16;
    const model::LlamaModel& model_;
    kv::BlockPool blocks_;
    kv::KvStore store_;
    std::unordered_map<uint64_t, State> states_;
};

}  // namespace ferry::engine
