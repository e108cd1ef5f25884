#include "kernels/cuda/graph_cache.h"

#include <functional>

namespace ferry::kernels::cuda {

namespace {
uint64_t hash_of(std::string_view s) {
    return std::hash<std::string_view>{}(s);
}
}  // namespace

GraphCache::Decision GraphCache::decide(std::string_view signature) {
    if (!opt_.enabled) {
        ++stats_.eager;
        return {};
    }
    if (auto it = graphs_.find(signature); it != graphs_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        ++stats_.replayed;
        return {Action::Replay, it->second.graph};
    }
    const uint64_t h = hash_of(signature);
    if (!refused_.contains(h)) {
        // A server's prefill shapes would grow the counts without end: past the bound they
        // start again from nothing.
        if (seen_.size() >= opt_.max_tracked && !seen_.contains(h)) seen_.clear();
        if (++seen_[h] >= opt_.capture_after) return {Action::Capture, nullptr};
    }
    ++stats_.eager;
    return {};
}

std::vector<void*> GraphCache::store(std::string_view signature, void* graph) {
    std::vector<void*> evicted;
    if (graphs_.contains(signature)) {  // not after a Capture: one graph a signature
        evicted.push_back(graph);
        return evicted;
    }
    while (!lru_.empty() && lru_.size() >= opt_.capacity) {
        auto old = graphs_.find(lru_.back());
        evicted.push_back(old->second.graph);
        seen_[hash_of(old->first)] = -3 * opt_.capture_after;
        graphs_.erase(old);
        lru_.pop_back();
        ++stats_.evicted;
    }
    lru_.emplace_front(signature);
    graphs_.emplace(lru_.front(), Graph{graph, lru_.begin()});
    seen_.erase(hash_of(signature));
    ++stats_.captured;
    stats_.resident = lru_.size();
    return evicted;
}

void GraphCache::refuse(std::string_view signature) {
    refused_.insert(hash_of(signature));
    ++stats_.refused;
}

std::vector<void*> GraphCache::take_all() {
    std::vector<void*> all;
    for (auto& [sig, g] : graphs_) all.push_back(g.graph);
    graphs_.clear();
    lru_.clear();
    seen_.clear();
    stats_.resident = 0;
    return all;
}

}  // namespace ferry::kernels::cuda
