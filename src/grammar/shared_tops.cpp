#include "grammar/shared_tops.h"

#include <deque>

#include "grammar/matcher.h"

namespace ferry::grammar {

namespace {

template <class T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

std::string top_signature(const Grammar& g, const Stack& top, size_t max_elements) {
    std::string sig;
    std::unordered_map<uint32_t, uint32_t> numbered;  // rule -> its number in this view
    std::deque<uint32_t> queue;
    size_t elements = 0;
    // One element; a Ref names the rule by its number here, numbering it if new.
    auto element = [&](const Element& e) {
        put(sig, static_cast<uint8_t>(e.kind));
        if (e.kind == Element::Chars) {
            put(sig, static_cast<uint8_t>(e.negated));
            put(sig, static_cast<uint32_t>(e.ranges.size()));
            for (const auto& [lo, hi] : e.ranges) put(sig, lo), put(sig, hi);
        } else if (e.kind == Element::Ref) {
            auto [it, fresh] = numbered.try_emplace(e.rule, static_cast<uint32_t>(numbered.size()));
            if (fresh) queue.push_back(e.rule);
            put(sig, it->second);
        }
        return ++elements <= max_elements;
    };
    // The elements from `pos` to the end of its alternative.
    auto run = [&](uint32_t pos) {
        for (;; ++pos) {
            const Element& e = g.element(pos);
            if (!element(e)) return false;
            if (e.kind == Element::End) return true;
        }
    };
    put(sig, static_cast<uint32_t>(top.size()));
    for (uint32_t p : top)
        if (!run(p)) return {};
    while (!queue.empty()) {
        const uint32_t r = queue.front();
        queue.pop_front();
        const auto& alts = g.alternatives(r);
        put(sig, static_cast<uint32_t>(alts.size()));
        for (uint32_t a : alts)
            if (!run(a)) return {};
    }
    return sig;
}

std::shared_ptr<const TopMask> SharedTops::find(const std::string& signature) const {
    std::lock_guard lock(mu_);
    auto it = masks_.find(signature);
    return it == masks_.end() ? nullptr : it->second;
}

void SharedTops::insert(std::string signature, std::shared_ptr<const TopMask> mask) {
    const size_t bytes = signature.size() + mask->allowed.bits.size() * sizeof(uint64_t) +
                         mask->context.size() * sizeof(uint32_t);
    std::lock_guard lock(mu_);
    if (bytes_ + bytes > max_bytes_) {
        masks_.clear();
        bytes_ = 0;
    }
    if (masks_.emplace(std::move(signature), std::move(mask)).second) bytes_ += bytes;
}

}  // namespace ferry::grammar
