#include "engine/block_manager.h"

#include <algorithm>

namespace ferry::engine {
namespace {

size_t blocks_for(int64_t positions, int block_size) {
    return static_cast<size_t>((positions + block_size - 1) / block_size);
}

}  // namespace

BlockManager::BlockManager(int64_t n_blocks, int block_size, bool prefix_caching)
    : pool_(n_blocks, block_size, prefix_caching) {}

int BlockManager::match_prefix(BlockTable& t, std::span<const int32_t> tokens) {
    if (!pool_.prefix_caching() || !t.blocks.empty()) return 0;
    const int bs = block_size();
    // At least one token must be left to compute, or there would be no logits to sample.
    const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / bs;
    uint64_t parent = 0;
    for (int64_t i = 0; i < max_blocks; ++i) {
        const auto toks = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
        const uint64_t h = kv::BlockPool::chain_hash(parent, toks);
        auto b = pool_.lookup(h, parent, toks);
        if (!b) break;
        t.blocks.push_back(*b);
        t.hashes.push_back(h);
        parent = h;
    }
    return static_cast<int>(t.blocks.size()) * bs;
}

int BlockManager::match_window(BlockTable& w, const BlockTable& full,
                               std::span<const int32_t> tokens, int window) {
    if (!pool_.prefix_caching() || !w.blocks.empty()) return 0;
    const int bs = block_size();
    const auto block_tokens = [&](size_t j) { return tokens.subspan(j * bs, size_t(bs)); };
    const auto parent = [&](size_t j) { return j ? full.hashes[j - 1] : 0; };
    for (size_t m = std::min(full.hashes.size(), full.blocks.size()); m > 0; --m) {
        // The next token, at position m * bs, reads back to m * bs - window + 1.
        const size_t first =
            static_cast<size_t>(std::max<int64_t>(0, int64_t(m * bs) - window + 1) / bs);
        bool held = true;
        for (size_t j = first; j < m && held; ++j)
            held = pool_.find(full.hashes[j], parent(j), block_tokens(j)).has_value();
        if (!held) continue;
        for (size_t j = first; j < m; ++j)
            w.blocks.push_back(*pool_.lookup(full.hashes[j], parent(j), block_tokens(j)));
        // The entries before the window are never read: any block number will do.
        w.blocks.insert(w.blocks.begin(), first, w.blocks.front());
        w.hashes.assign(full.hashes.begin(), full.hashes.begin() + static_cast<std::ptrdiff_t>(m));
        w.n_dropped = first;
        return static_cast<int>(m);
    }
    return 0;
}

BlockManager::Growth BlockManager::growth(const BlockTable& t, int64_t first_write,
                                          int64_t n_positions) const {
    const size_t need = blocks_for(n_positions, block_size());
    Growth g;
    g.fresh = static_cast<int64_t>(need > t.blocks.size() ? need - t.blocks.size() : 0);
    // Copy-on-write: the block the first new token goes into may be shared with siblings.
    g.first = static_cast<size_t>(first_write / block_size());
    g.cow = g.first < t.blocks.size() && pool_.ref(t.blocks[g.first]) > 1;
    return g;
}

int64_t BlockManager::blocks_needed(const BlockTable& t, int64_t first_write,
                                    int64_t n_positions) const {
    const Growth g = growth(t, first_write, n_positions);
    return g.fresh + (g.cow ? 1 : 0);
}

bool BlockManager::allocate(BlockTable& t, int64_t first_write, int64_t n_positions,
                            std::vector<BlockCopy>& copies) {
    const auto [fresh, first, cow] = growth(t, first_write, n_positions);
    if (pool_.num_free() < fresh + (cow ? 1 : 0)) return false;
    if (cow) {
        const int32_t copy = *pool_.allocate();
        copies.push_back({t.blocks[first], copy});
        pool_.decref(t.blocks[first]);
        t.blocks[first] = copy;
        // The copy is partial and private, so it no longer has a registered hash.
        t.hashes.resize(std::min(t.hashes.size(), first));
    }
    for (int64_t i = 0; i < fresh; ++i) t.blocks.push_back(*pool_.allocate());
    return true;
}

void BlockManager::register_full(BlockTable& t, std::span<const int32_t> tokens,
                                 int64_t n_computed) {
    if (t.evicted > 0) return;
    const int bs = block_size();
    while (static_cast<int64_t>(t.hashes.size()) < n_computed / bs) {
        const size_t i = t.hashes.size();
        const uint64_t parent = i ? t.hashes[i - 1] : 0;
        const auto toks = tokens.subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs));
        const uint64_t h = kv::BlockPool::chain_hash(parent, toks);
        pool_.register_full(t.blocks[i], h, parent, toks);
        t.hashes.push_back(h);
    }
}

void BlockManager::trim(BlockTable& t, int64_t n_positions) {
    const size_t keep = std::max(blocks_for(n_positions, block_size()), t.n_dropped);
    while (t.blocks.size() > keep) {
        pool_.decref(t.blocks.back());
        t.blocks.pop_back();
    }
    t.hashes.resize(std::min(t.hashes.size(), t.blocks.size()));
    t.mass.resize(std::min(t.mass.size(), t.blocks.size()));
}

int BlockManager::drop_before(BlockTable& t, int64_t first_needed) {
    // Only registered blocks: one dropped before its hash were taken would be registered later
    // with whatever another sequence has written there since.
    const size_t upto =
        std::min({static_cast<size_t>(std::max<int64_t>(0, first_needed) / block_size()),
                  t.hashes.size(), t.blocks.size()});
    int n = 0;
    for (; t.n_dropped < upto; ++t.n_dropped, ++n) pool_.decref(t.blocks[t.n_dropped]);
    return n;
}

int64_t BlockManager::evict(BlockTable& t, int64_t cache_len, int64_t budget, int sink_blocks,
                            std::vector<BlockCopy>& copies, std::vector<KeyMove>& moves) {
    const int bs = block_size();
    if (cache_len <= budget || sink_blocks < 0) return 0;
    // Whole blocks of the window's oldest, never the one the next token goes into.
    const int64_t full = cache_len / bs;
    const int64_t k = std::min<int64_t>((cache_len - budget + bs - 1) / bs, full - sink_blocks - 1);
    if (k < 1 || static_cast<int64_t>(t.blocks.size()) < full) return 0;
    const bool first = t.sink_sources.empty();
    const auto sinks = static_cast<size_t>(sink_blocks);
    const auto from = t.blocks.begin() + static_cast<std::ptrdiff_t>(sinks);
    int64_t fresh = 0, freed = 0;  // blocks the sinks' copies need, and those evicting frees
    for (size_t j = 0; j < sinks; ++j)
        if (first || pool_.ref(t.blocks[j]) > 1) ++fresh;
    for (auto it = from; it != from + k; ++it)
        if (pool_.ref(*it) == 1) ++freed;
    if (pool_.num_free() + freed < fresh) return 0;
    for (auto it = from; it != from + k; ++it) pool_.decref(*it);
    t.blocks.erase(from, from + k);
    if (t.mass.size() > sinks)
        t.mass.erase(t.mass.begin() + static_cast<std::ptrdiff_t>(sinks),
                     t.mass.begin() + static_cast<std::ptrdiff_t>(
                                          std::min(t.mass.size(), sinks + static_cast<size_t>(k))));
    if (first && sink_blocks > 0)
        t.sink_sources.assign(t.blocks.begin(), t.blocks.begin() + sink_blocks);
    t.hashes.clear();  // the table's blocks no longer follow the tokens' order
    t.evicted += k * bs;
    for (size_t j = 0; j < sinks; ++j) {
        if (first || pool_.ref(t.blocks[j]) > 1) {
            if (!first) pool_.decref(t.blocks[j]);  // a sibling keeps its own copy
            t.blocks[j] = *pool_.allocate();
        }
        // From the original each time: the copy is turned once, by everything evicted so far.
        copies.push_back({t.sink_sources[j], t.blocks[j]});
        moves.push_back({t.blocks[j], t.evicted});
    }
    return k * bs;
}

int64_t BlockManager::evict_light(BlockTable& t, int64_t cache_len, int64_t budget, int sink_blocks,
                                  int64_t recent) {
    const int bs = block_size();
    int64_t evicted = 0;
    while (cache_len > budget) {
        // Blocks [sink_blocks, keep_from) are candidates; keep_from holds the first recent
        // position.
        const int64_t keep_from = std::max<int64_t>(0, cache_len - recent) / bs;
        if (keep_from <= sink_blocks || static_cast<int64_t>(t.blocks.size()) < keep_from) break;
        auto mass_of = [&](int64_t j) {
            return static_cast<size_t>(j) < t.mass.size() ? t.mass[static_cast<size_t>(j)] : 0.0f;
        };
        int64_t victim = sink_blocks;
        for (int64_t j = sink_blocks + 1; j < keep_from; ++j)
            if (mass_of(j) < mass_of(victim)) victim = j;
        pool_.decref(t.blocks[static_cast<size_t>(victim)]);
        t.blocks.erase(t.blocks.begin() + static_cast<std::ptrdiff_t>(victim));
        if (static_cast<size_t>(victim) < t.mass.size())
            t.mass.erase(t.mass.begin() + static_cast<std::ptrdiff_t>(victim));
        cache_len -= bs;
        evicted += bs;
    }
    if (evicted > 0) {
        t.hashes.clear();  // the table's blocks no longer follow the tokens' order
        t.evicted += evicted;
    }
    return evicted;
}

int64_t BlockManager::evict_over_budget(BlockTable& t, int64_t cache_len, const KvEvictionConfig& e,
                                        std::vector<BlockCopy>& copies,
                                        std::vector<KeyMove>& moves) {
    const int sinks = e.sink_blocks(block_size());
    switch (e.kind) {
        case KvEvictionKind::Streaming:
            return evict(t, cache_len, e.budget, sinks, copies, moves);
        case KvEvictionKind::H2O:
            return evict_light(t, cache_len, e.budget, sinks, e.recent_tokens());
        case KvEvictionKind::None:
            break;
    }
    return 0;
}

void BlockManager::add_attention_mass(BlockTable& t, std::span<const float> mass) {
    if (t.mass.size() < mass.size()) t.mass.resize(mass.size(), 0.0f);
    for (size_t j = 0; j < mass.size(); ++j) t.mass[j] += mass[j];
}

void BlockManager::release(BlockTable& t) {
    for (size_t i = t.blocks.size(); i-- > t.n_dropped;) pool_.decref(t.blocks[i]);
    for (int32_t b : t.sink_sources) pool_.decref(b);
    t.blocks.clear();
    t.hashes.clear();
    t.n_dropped = 0;
    t.sink_sources.clear();
    t.evicted = 0;
    t.mass.clear();
}

void BlockManager::share(const BlockTable& from, BlockTable& to) {
    to = from;
    for (size_t i = to.n_dropped; i < to.blocks.size(); ++i) pool_.incref(to.blocks[i]);
    for (int32_t b : to.sink_sources) pool_.incref(b);
}

}  // namespace ferry::engine
