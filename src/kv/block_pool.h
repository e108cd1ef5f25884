// Owns who holds which KV block: reference counts, the free list, and the prefix cache.
// A full block can be registered under a hash chained over every token before it and in it;
// when its last holder lets go it is kept (evictable, least recently used first) so a later
// request with the same prefix can take it back instead of recomputing it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace ferry::kv {

class BlockPool {
  public:
    BlockPool(int64_t n_blocks, int block_size, bool prefix_caching);

    int64_t total() const { return static_cast<int64_t>(ref_.size()); }
    int64_t num_free() const;  // free plus evictable: what allocate() can still hand out
    int64_t num_used() const { return used_; }  // blocks with a holder
    int64_t num_cached() const { return static_cast<int64_t>(lru_.size()); }  // evictable
    int block_size() const { return block_size_; }
    bool prefix_caching() const { return prefix_caching_; }

    // A fresh block with one holder, evicting the least recently used cached block if
    // nothing is free; nullopt when every block is held.
    std::optional<int32_t> allocate();
    void incref(int32_t block);
    void decref(int32_t block);
    int ref(int32_t block) const { return ref_[block]; }

    // The hash of a full block given the hash of the block before it (0 for the first).
    static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);
    // The cached block with this content, if there is one ...
    std::optional<int32_t> find(uint64_t hash, uint64_t parent,
                                std::span<const int32_t> tokens) const;
    // ... and the same, taking a holder on it.
    std::optional<int32_t> lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
    // Marks a full block as reusable under `hash` (no-op without prefix caching or when an
    // identical block is already registered).
    void register_full(int32_t block, uint64_t hash, uint64_t parent,
                       std::span<const int32_t> tokens);

    // Invariant check for tests: counts agree with the per-block state.
    bool consistent() const;

  private:
    void forget(int32_t block);  // drop a block's prefix-cache entry

    int block_size_;
    bool prefix_caching_;
    std::vector<int> ref_;
    std::vector<int32_t> free_;  // blocks with no holder and no cached content
    int64_t used_ = 0;
    // Prefix cache: content of registered blocks, and evictable ones in LRU order.
    struct Entry {
        uint64_t hash = 0, parent = 0;
        std::vector<int32_t> tokens;
        bool registered = false;
        std::list<int32_t>::iterator lru_pos;
        bool in_lru = false;
    };
    std::vector<Entry> entries_;
    std::unordered_map<uint64_t, int32_t> by_hash_;
    std::list<int32_t> lru_;  // front: least recently released
};

}  // namespace ferry::kv
