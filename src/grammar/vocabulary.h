// The tokenizer's vocabulary as the token masks need it: every token's bytes, sorted so tokens
// sharing a prefix are neighbours (a prefix the grammar rejects skips all of them at once),
// and which tokens end a generation (allowed only where the grammar is complete).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::grammar {

struct Vocabulary {
    // pieces[id]: the token's bytes; `usable[id]` false for control and unused tokens, which a
    // constrained output never contains.
    Vocabulary(std::vector<std::string> pieces, std::vector<bool> usable,
               std::vector<int32_t> end_tokens);

    int32_t n_vocab() const { return static_cast<int32_t>(pieces.size()); }

    std::vector<std::string> pieces;
    std::vector<int32_t> end_tokens;
    std::vector<int32_t> sorted;  // usable, non-empty token ids in byte order of their pieces
    std::vector<uint32_t> lcp;    // lcp[i]: common prefix of sorted[i - 1]'s and sorted[i]'s piece
    // The sorted pieces back to back (sorted_text[sorted_at[i] .. sorted_at[i + 1]]): a mask
    // walks them in this order, and one buffer read front to back keeps that walk in cache.
    std::string sorted_text;
    std::vector<uint32_t> sorted_at;
    std::string_view sorted_piece(size_t i) const {
        return {sorted_text.data() + sorted_at[i], sorted_at[i + 1] - sorted_at[i]};
    }
    // The first sorted index after i whose piece shares fewer than d bytes with its
    // predecessor (so with piece i), for d = 1..kSkipDepth: a prefix the grammar rejects
    // skips the tokens that extend it in one step instead of one by one.
    static constexpr size_t kSkipDepth = 4;
    size_t skip(size_t i, size_t d) const { return d <= kSkipDepth ? skip_[d - 1][i] : i + 1; }
    // The sorted indices (ascending) of the pieces longer than n bytes. All of them together
    // hold as many entries as the vocabulary has bytes.
    const std::vector<uint32_t>& longer_than(size_t n) const {
        return longer_[std::min(n, longer_.size() - 1)];
    }

  private:
    std::vector<uint32_t> skip_[kSkipDepth];
    std::vector<std::vector<uint32_t>> longer_;  // [n]: pieces longer than n; the last is empty
};

// One bit per token id.
struct TokenMask {
    std::vector<uint64_t> bits;
    explicit TokenMask(int32_t n = 0) : bits((static_cast<size_t>(n) + 63) / 64, 0) {}
    bool test(int32_t id) const { return (bits[id >> 6] >> (id & 63)) & 1; }
    void set(int32_t id) { bits[id >> 6] |= uint64_t{1} << (id & 63); }
    void clear(int32_t id) { bits[id >> 6] &= ~(uint64_t{1} << (id & 63)); }
    int64_t count() const;
};

}  // namespace ferry::grammar
