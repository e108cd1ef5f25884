// Decides, each step, which sequences run and how many tokens each, under a token budget and
// a sequence cap, allocating their KV blocks (prefix-cache hits first) and preempting the
// lowest-priority, most recent sequence by recomputation when blocks run out, or when a request
// of a better priority waits for a seat or blocks. One budget rule covers prefill, decode and
// chunking: a sequence gets min(its uncomputed tokens, budget left).
// It never touches tensors: block copies for copy-on-write are listed in its output, and the
// blocks themselves are the block manager's.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/engine_config.h"
#include "engine/scheduler_output.h"
#include "engine/sequence.h"

namespace ferry::engine {

class Scheduler {
  public:
    // kv_window > 0: every layer attends to the last kv_window positions only, so a sequence's
    // blocks wholly before its window are given back as it advances (paged layout only).
    // n_window_blocks > 0 as well: only some layers do, and they keep a pool of their own
    // (kv::KvWindowPool), where each sequence's second table (kv_window) gives back what left
    // the window while its first keeps the whole context.
    Scheduler(const EngineConfig& config, int max_model_len, int64_t n_blocks, int kv_window = 0,
              int64_t n_window_blocks = 0);

    void add(Sequence* seq);          // a new request's first sequence: waits
    void add_running(Sequence* seq);  // a forked sibling: already holds its blocks
    // step_token_limit > 0: while anyone decodes, prefill adds at most this many tokens minus
    // the decodes' (never under kMinPrefillChunk, so prompts keep boarding); the engine derives
    // it from the latency target and measured step times.
    SchedulerOutput schedule(Clock::time_point now, int step_token_limit = 0);
    static constexpr int kMinPrefillChunk = 16;
    // After the model ran: the scheduled tokens are now in the cache (for a speculative
    // sequence, the real token now and the accepted draft tokens once verified).
    void on_computed(Sequence* seq, int num_tokens);
    // H2O eviction: the attention a step's last token gave each of the sequence's blocks.
    void add_attention_mass(Sequence* seq, std::span<const float> mass);
    // After a verification: frees whole blocks past the sequence's tokens (rejected drafts).
    void trim_blocks(Sequence* seq);
    const std::vector<Sequence*>& running() const { return running_; }
    // A sequence the scheduler holds (running or waiting) by id; nullptr once removed.
    Sequence* sequence(uint64_t id) const;
    // A finished or aborted sequence leaves and lets go of its blocks.
    void remove(Sequence* seq);
    // Copies a parent's block table into a sibling, taking a holder on every block.
    void share_blocks(const Sequence& parent, Sequence& child);

    int num_running() const { return static_cast<int>(running_.size()); }
    int num_waiting() const { return static_cast<int>(waiting_.size()); }
    const kv::BlockPool& pool() const { return blocks_.pool(); }
    uint64_t prefix_query_tokens() const { return prefix_query_tokens_; }
    uint64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
    uint64_t preemptions() const { return preemptions_; }  // all, priority ones included
    uint64_t priority_preemptions() const { return priority_preemptions_; }
    // Blocks given back because they fell out of every layer's window.
    uint64_t dropped_blocks() const { return dropped_blocks_; }
    // Token slots held by running sequences that hold no token yet, over all held slots.
    double kv_waste_fraction() const;
    int64_t blocks_held() const { return blocks_.pool().num_used(); }
    // The window pool of a hybrid cache; null otherwise.
    const kv::BlockPool* window_pool() const {
        return window_blocks_ ? &window_blocks_->pool() : nullptr;
    }
    // KV eviction: tokens taken out of running sequences' caches so far.
    uint64_t evicted_tokens() const { return evicted_tokens_; }

  private:
    bool admit_allowed() const;
    int match_prefix(Sequence* seq);  // takes cached blocks, returns tokens covered
    bool ensure_blocks(Sequence* seq, int num_tokens, SchedulerOutput& out);
    // KV eviction: a sequence whose cache outgrew the budget gives blocks back before its next
    // tokens are placed; what it listed, so a placement that fails after can take it back.
    struct Evicted {
        size_t copies, moves;  // out's lists before
        int64_t tokens;
    };
    Evicted evict(Sequence* seq, SchedulerOutput& out);
    void forget_eviction(const Evicted& ev, SchedulerOutput& out);
    void release_blocks(Sequence* seq);
    // The output entry for a sequence whose blocks are in place: its next num_tokens tokens
    // (the draft's last num_draft of them).
    void emit(Sequence* seq, int num_tokens, int num_draft, SchedulerOutput& out) const;
    void preempt(Sequence* victim, SchedulerOutput& out);
    Sequence* pick_victim() const;
    // Makes room (a seat, the blocks of a first chunk) for waiting sequences by preempting
    // running ones of a worse priority.
    void preempt_for_priority(SchedulerOutput& out);
    void insert_waiting(Sequence* seq);
    int reserve_tokens(const Sequence* seq) const;  // contiguous baseline's up-front reservation

    EngineConfig config_;
    int max_model_len_;
    int kv_window_;
    BlockManager blocks_;
    std::optional<BlockManager> window_blocks_;  // a hybrid cache's window pool
    std::unordered_map<uint64_t, Sequence*> by_id_;
    std::vector<Sequence*> waiting_;  // by (priority, arrival)
    std::vector<Sequence*> running_;
    bool static_batch_open_ = false;  // static batching: the current batch still runs
    uint64_t prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0, preemptions_ = 0;
    uint64_t priority_preemptions_ = 0;
    int boards_below_ = 0;  // this step admits only priorities below this (its victims')
    uint64_t dropped_blocks_ = 0;
    uint64_t evicted_tokens_ = 0;
};

}  // namespace ferry::engine
