// What one engine step runs, as the scheduler decided it: a plain value of sequence ids, token
// ids, positions and block ids that the model runner executes without reading any live
// sequence state (so the step could as well be sent to another rank).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_manager.h"

namespace ferry::engine {

struct ScheduledSeq {
    uint64_t seq_id = 0;
    // What runs: a chunk of the sequence's uncomputed tokens, then num_draft draft tokens to
    // verify, at positions start_pos, start_pos + 1, ...
    std::vector<int32_t> tokens;
    int64_t start_pos = 0;  // the tokens already in the cache
    // What the tokens' rotary positions add to their cache positions: the tokens evicted
    // from the middle of the sequence's cache (engine/kv_eviction.h), 0 without eviction.
    int64_t rope_offset = 0;
    // H2O eviction: the runner sums the attention the chunk's real tokens give each block.
    bool attn_mass = false;
    // The sequence's block table, covering every position up to the last of `tokens`.
    std::vector<int32_t> blocks;
    // A hybrid cache's: the sliding layers' table (kv::KvWindowPool), in the same order.
    std::vector<int32_t> window_blocks;
    int num_draft = 0;
    // Empty, or the draft is a tree (engine/speculation.h): per token of `tokens`, the mask of
    // the tokens it sees among them (kernels::BatchSeq::tree).
    std::vector<uint64_t> tree;
    // The chunk reaches the end of the sequence's known tokens: logits come for the last
    // 1 + num_draft positions.
    bool wants_logits = false;
    // Logits for every position of the chunk (prompt logprobs); the last row is the one
    // wants_logits names when both are set.
    bool all_logits = false;
    int num_tokens() const { return static_cast<int>(tokens.size()); }
    int num_logits() const { return all_logits ? num_tokens() : wants_logits ? 1 + num_draft : 0; }
};

struct SchedulerOutput {
    std::vector<ScheduledSeq> seqs;
    std::vector<BlockCopy> copies;         // done before the step runs
    std::vector<BlockCopy> window_copies;  // the same, in a hybrid cache's window pool
    std::vector<KeyMove> moves;            // done after the copies, before the step runs
    int total_tokens = 0;
    int preempted = 0;
    bool empty() const { return seqs.empty(); }
};

}  // namespace ferry::engine
