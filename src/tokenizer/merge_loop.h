// The merge loop every BPE flavour in ferry shares: symbols in a linked list, the best
// adjacent pair merged first, ties going to the leftmost pair, until no pair merges. What
// "best" means is the caller's rule: a merge rank (GPT-2 byte-level BPE, tokenizer.json BPE)
// or a token score (SentencePiece BPE). llama.cpp, sentencepiece and Hugging Face tokenizers
// all break ties by position, so one loop reproduces each of them.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace ferry::tokenizer {

struct MergeSymbol {
    int32_t id;      // the symbol's token; -1 when it is none (a character outside the vocabulary)
    uint32_t start;  // the bytes of the input it covers
    uint32_t len;
    int prev, next;  // neighbours in the list, -1 at the ends
};

struct MergeCandidate {
    double priority;  // lower merges first: a rank, or minus a score
    int32_t result;   // the token the pair becomes
};

// Symbols laid out one after another over the input, linked in order.
inline void link_symbols(std::vector<MergeSymbol>& syms) {
    const int n = static_cast<int>(syms.size());
    for (int i = 0; i < n; ++i) {
        syms[i].prev = i - 1;
        syms[i].next = i + 1 < n ? i + 1 : -1;
    }
}

// rule(left, right) -> std::optional<MergeCandidate>: whether two adjacent symbols merge.
// Afterwards the surviving symbols are those reachable from index 0 through `next` (a merge
// keeps the left slot, so index 0 always survives).
template <class Rule>
void merge_symbols(std::vector<MergeSymbol>& syms, Rule&& rule) {
    struct Entry {
        double priority;
        int left, right;
        uint32_t left_len, right_len;  // a symbol only grows, so equal lengths mean unchanged
        int32_t result;
        bool operator<(const Entry& o) const {  // priority_queue pops the "largest"
            return priority != o.priority ? priority > o.priority : left > o.left;
        }
    };
    std::vector<Entry> storage;
    storage.reserve(syms.size());
    std::priority_queue<Entry> queue(std::less<Entry>(), std::move(storage));
    auto try_add = [&](int left) {
        if (left < 0) return;
        int right = syms[left].next;
        if (right < 0) return;
        std::optional<MergeCandidate> c = rule(syms[left], syms[right]);
        if (c) queue.push({c->priority, left, right, syms[left].len, syms[right].len, c->result});
    };
    for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) try_add(i);

    while (!queue.empty()) {
        Entry e = queue.top();
        queue.pop();
        MergeSymbol& l = syms[e.left];
        if (l.len != e.left_len || l.next != e.right || syms[e.right].len != e.right_len) continue;
        MergeSymbol& r = syms[e.right];
        l.id = e.result;
        l.len += r.len;
        r.len = 0;  // absorbed
        l.next = r.next;
        if (l.next >= 0) syms[l.next].prev = e.left;
        try_add(l.prev);
        try_add(e.left);
    }
}

}  // namespace ferry::tokenizer
