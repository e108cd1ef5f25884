// Top masks shared across grammars. A top's mask depends only on the grammar as seen from the
// top (its entries' remaining elements and the rules they reach), not on which grammar it is
// in: a string of at most 40 characters, a number, an integer between 0 and 120 or a date
// look the same from inside in every schema that has one. So the grammars compiled against
// one vocabulary share one cache, keyed by that view (top_signature), and a new schema
// computes only the tops no earlier schema had.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/stack.h"

namespace ferry::grammar {

struct TopMask;

// The grammar as seen from `top`: each entry's elements up to the end of its alternative, then
// every rule they reach (numbered in the order reached), so equal signatures accept the same
// text and pop below the top at the same places. Empty when more than `max_elements` elements
// are reached (a top near a large schema's root: not worth comparing, rarely shared).
std::string top_signature(const Grammar& g, const Stack& top, size_t max_elements);

class SharedTops {
  public:
    // Past `max_bytes` of masks, the cache is emptied and filled again.
    explicit SharedTops(size_t max_bytes = size_t{64} << 20) : max_bytes_(max_bytes) {}

    std::shared_ptr<const TopMask> find(const std::string& signature) const;
    void insert(std::string signature, std::shared_ptr<const TopMask> mask);

  private:
    size_t max_bytes_;
    mutable std::mutex mu_;
    std::unordered_map<std::string, std::shared_ptr<const TopMask>> masks_;
    size_t bytes_ = 0;
};

}  // namespace ferry::grammar
