#include "kv/block_pool.h"

namespace ferry::kv {

BlockPool::BlockPool(int64_t n_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      ref_(n_blocks, 0),
      entries_(n_blocks) {
    free_.reserve(n_blocks);
    // Hand out low block numbers first: a lone sequence then reads memory in order.
    for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t BlockPool::num_free() const {
    return static_cast<int64_t>(free_.size() + lru_.size());
}

std::optional<int32_t> BlockPool::allocate() {
    int32_t b;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else if (!lru_.empty()) {
        b = lru_.front();
        lru_.pop_front();
        entries_[b].in_lru = false;
        forget(b);
    } else {
        return std::nullopt;
    }
    ref_[b] = 1;
    ++used_;
    return b;
}

void BlockPool::incref(int32_t b) {
    if (ref_[b]++ == 0) {
        // A cached block comes back into use.
        Entry& e = entries_[b];
        if (e.in_lru) {
            lru_.erase(e.lru_pos);
            e.in_lru = false;
        }
        ++used_;
    }
}

void BlockPool::decref(int32_t b) {
    if (--ref_[b] > 0) return;
    --used_;
    Entry& e = entries_[b];
    if (e.registered) {
        e.lru_pos = lru_.insert(lru_.end(), b);
        e.in_lru = true;
    } else {
        free_.push_back(b);
    }
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
    // FNV-1a over the parent hash and the token ids, then a final avalanche (splitmix64).
    uint64_t h = 1469598103934665603ull ^ parent;
    for (int32_t t : tokens) {
        h ^= static_cast<uint32_t>(t);
        h *= 1099511628211ull;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash, uint64_t parent,
                                         std::span<const int32_t> tokens) {
    const auto b = find(hash, parent, tokens);
    if (b) incref(*b);
    return b;
}

std::optional<int32_t> BlockPool::find(uint64_t hash, uint64_t parent,
                                       std::span<const int32_t> tokens) const {
    if (!prefix_caching_) return std::nullopt;
    auto it = by_hash_.find(hash);
    if (it == by_hash_.end()) return std::nullopt;
    const Entry& e = entries_[it->second];
    // The hash only finds the candidate; the content decides, so a collision costs a miss.
    if (e.parent != parent ||
        !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()))
        return std::nullopt;
    return it->second;
}

void BlockPool::register_full(int32_t b, uint64_t hash, uint64_t parent,
                              std::span<const int32_t> tokens) {
    if (!prefix_caching_ || entries_[b].registered || by_hash_.count(hash)) return;
    Entry& e = entries_[b];
    e.hash = hash;
    e.parent = parent;
    e.tokens.assign(tokens.begin(), tokens.end());
    e.registered = true;
    by_hash_[hash] = b;
}

void BlockPool::forget(int32_t b) {
    Entry& e = entries_[b];
    if (!e.registered) return;
    by_hash_.erase(e.hash);
    e.registered = false;
    e.tokens.clear();
}

bool BlockPool::consistent() const {
    int64_t used = 0, cached = 0;
    for (size_t b = 0; b < ref_.size(); ++b) {
        if (ref_[b] < 0) return false;
        if (ref_[b] > 0) ++used;
        if (entries_[b].in_lru) {
            if (ref_[b] != 0 || !entries_[b].registered) return false;
            ++cached;
        }
    }
    return used == used_ && cached == num_cached() && used + num_free() == total();
}

}  // namespace ferry::kv
