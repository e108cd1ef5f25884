// Who holds which KV blocks, in terms of block tables: allocation for the positions a step will
// write, copy-on-write of a block shared with siblings before it is written, prefix-cache
// matching and registration (a hash chained over every full block's tokens), trimming after a
// speculative step, and release. The scheduler keeps every sequence's table here and the
// draft model's proposer keeps its own cache's; neither touches the pool directly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_eviction.h"
#include "kv/block_pool.h"

namespace ferry::engine {

// A sequence's blocks in position order, and the chain hashes of its leading full blocks
// that are registered in the prefix cache. The first n_dropped blocks were given back (out of
// every layer's sliding window): their entries stay, so positions still index the table, but
// the sequence no longer holds them and attention never weighs them.
// With KV eviction (engine/kv_eviction.h) `evicted` tokens were taken out of the middle, so
// the table covers positions [0, tokens computed - evicted) of the cache, and sink_sources
// hold the sinks' original blocks that blocks[0, sink_sources.size()) are moved copies of.
struct BlockTable {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;
    size_t n_dropped = 0;
    std::vector<int32_t> sink_sources;
    int64_t evicted = 0;
    // H2O: the attention each block has drawn so far, by table index (may be shorter than
    // blocks: missing entries are 0).
    std::vector<float> mass;
};

// A block to copy before the step that writes into dst runs (copy-on-write).
struct BlockCopy {
    int32_t src;
    int32_t dst;
};

// A block whose keys move by delta positions under RoPE after the step's copies, before it
// runs (KV eviction's attention sinks following the window; engine/kv_eviction.h).
struct KeyMove {
    int32_t block;
    int64_t delta;
};

class BlockManager {
  public:
    BlockManager(int64_t n_blocks, int block_size, bool prefix_caching);

    int block_size() const { return pool_.block_size(); }
    bool prefix_caching() const { return pool_.prefix_caching(); }
    const kv::BlockPool& pool() const { return pool_; }
    int64_t num_free() const { return pool_.num_free(); }

    // Takes cached blocks for the longest run of leading full blocks of `tokens` the prefix
    // cache holds, leaving at least one token to compute (its logits are needed); returns the
    // tokens they cover. Only for an empty table.
    int match_prefix(BlockTable& t, std::span<const int32_t> tokens);
    // A hybrid cache's window pool (kv::KvWindowPool): after the other pool matched
    // full.hashes.size() blocks of `tokens`, takes into the empty table w the cached blocks the
    // window of the next token needs (the `window` positions before it), for the longest run
    // of those matched blocks whose window the pool still holds; returns how many blocks that
    // is (the other table is to be trimmed to it). Blocks before the window are entries w
    // holds no block of, as if dropped.
    int match_window(BlockTable& w, const BlockTable& full, std::span<const int32_t> tokens,
                     int window);
    // The blocks allocate(t, first_write, n_positions, ...) takes from the pool.
    int64_t blocks_needed(const BlockTable& t, int64_t first_write, int64_t n_positions) const;
    // Makes the table cover n_positions positions. The block that position first_write falls
    // in is copied first (listed in `copies`) when another table holds it too. False, with
    // nothing changed, when the pool has too few blocks.
    bool allocate(BlockTable& t, int64_t first_write, int64_t n_positions,
                  std::vector<BlockCopy>& copies);
    // Registers every full block of tokens[0, n_computed) not registered yet, so later
    // requests with the same prefix can reuse it.
    void register_full(BlockTable& t, std::span<const int32_t> tokens, int64_t n_computed);
    // Gives back the blocks past those covering n_positions positions.
    void trim(BlockTable& t, int64_t n_positions);
    // Gives back the leading full, registered blocks wholly before position `first_needed`
    // (a model whose every layer slides never reads them again); returns how many.
    int drop_before(BlockTable& t, int64_t first_needed);
    // KV eviction: when the table holds more than `budget` of its cache_len positions, gives
    // back whole blocks from just after the first sink_blocks until it holds at most budget,
    // then lists the sinks' fresh copies and the key moves that put them before the window
    // (sink_blocks 0: a plain sliding window, the baseline the sinks are measured against).
    // Returns the tokens evicted (0 when under budget, or when the pool has no block for the
    // sinks' first copies). A table that evicted registers no more blocks in the prefix cache:
    // what it computes from then on saw only part of its prefix.
    int64_t evict(BlockTable& t, int64_t cache_len, int64_t budget, int sink_blocks,
                  std::vector<BlockCopy>& copies, std::vector<KeyMove>& moves);
    // H2O: while the table holds more than `budget` positions, gives back the block between the
    // first sink_blocks and the blocks holding the last `recent` positions that has drawn the
    // least attention (t.mass; the oldest among equals). Nothing moves: kept blocks keep their
    // positions. Returns the tokens evicted.
    int64_t evict_light(BlockTable& t, int64_t cache_len, int64_t budget, int sink_blocks,
                        int64_t recent);
    // The policy `e` names (evict or evict_light) on a table holding cache_len positions;
    // returns the tokens evicted.
    int64_t evict_over_budget(BlockTable& t, int64_t cache_len, const KvEvictionConfig& e,
                              std::vector<BlockCopy>& copies, std::vector<KeyMove>& moves);
    // H2O's scores: adds the attention a step gave each of the table's blocks.
    static void add_attention_mass(BlockTable& t, std::span<const float> mass);
    // Gives back every block (the last first, so a prefix's later blocks are evicted before
    // its first ones).
    void release(BlockTable& t);
    // `to` becomes a copy of `from`, holding every block too.
    void share(const BlockTable& from, BlockTable& to);

  private:
    // What allocate() must take: fresh blocks, and a copy of block `first` when it is shared.
    struct Growth {
        int64_t fresh = 0;
        size_t first = 0;
        bool cow = false;
    };
    Growth growth(const BlockTable& t, int64_t first_write, int64_t n_positions) const;

    kv::BlockPool pool_;
};

}  // namespace ferry::engine
