// Constrained decoding: a grammar compiled against a vocabulary (CompiledGrammar, shared by
// every sequence that uses the same constraint, with its cache of token masks per grammar
// state), and one sequence's position in it (Matcher).
//
// A mask depends only on the matcher's state (its stacks and any UTF-8 bytes of a character a
// token split), so sequences in the same state (n > 1, many requests with one schema, a
// schema's repeated string and number states) share one computation, as XGrammar shares its
// context-independent token sets.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/stack.h"
#include "grammar/vocabulary.h"

namespace ferry::grammar {

// What a stack's top entries allow whatever lies below them: `allowed`, the tokens they take
// whole, and `context`, those (as indices into Vocabulary::sorted, ascending) that pop below
// them with bytes left, which the rest of the stack decides. Two entries: the position in a
// character's rule and the repetition it returns to, so a string's characters stay above
// what is below (one entry pops after every character).
constexpr size_t kTopDepth = 2;
inline Stack stack_top(const Stack& s) {
    return Stack(s.end() - static_cast<long>(std::min(s.size(), kTopDepth)), s.end());
}
struct TopMask {
    TokenMask allowed;
    std::vector<uint32_t> context;
};

// The memoised stepper behind the masks (token_mask.cpp): stacks interned as shared nodes,
// one step per (set of stacks, character) computed once. Kept across one grammar's masks, so
// a later mask steps through what earlier ones already worked out.
class MaskWalker;
struct MaskWalkerDeleter {
    void operator()(MaskWalker* w) const;
};
using MaskWalkerPtr = std::unique_ptr<MaskWalker, MaskWalkerDeleter>;
MaskWalkerPtr make_mask_walker(const Grammar& g);
size_t mask_walker_bytes(const MaskWalker& w);

class SharedTops;

class CompiledGrammar {
  public:
    // `shared`: the top masks of the other grammars compiled against `vocab` (optional).
    CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab,
                    std::shared_ptr<SharedTops> shared = nullptr);

    const Grammar& grammar() const { return grammar_; }
    const Vocabulary& vocab() const { return *vocab_; }
    const std::vector<Stack>& start() const { return start_; }

    // The tokens allowed in a state (computed once per state, then shared).
    std::shared_ptr<const TokenMask> mask(const std::vector<Stack>& stacks,
                                          const std::string& pending) const;

    struct Stats {
        int64_t computed = 0, hits = 0;
        double compute_s = 0;
        double max_s = 0;           // the longest one mask took
        int64_t tops_computed = 0;  // top masks made (computed masks reuse the rest)
        int64_t tops_derived = 0;   // of those, taken from a wider link's (walking long tokens)
        int64_t tops_shared = 0;    // tops another grammar had already computed
    };
    Stats stats() const;

  private:
    Grammar grammar_;
    std::shared_ptr<const Vocabulary> vocab_;
    std::shared_ptr<SharedTops> shared_;
    std::vector<Stack> start_;
    mutable std::mutex mu_;
    mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
    mutable std::unordered_map<std::string, std::shared_ptr<const TopMask>> tops_;
    mutable Stats stats_;

    // Walkers not in use (one per thread computing a mask at the same time, at most).
    mutable std::vector<MaskWalkerPtr> walkers_;

    std::shared_ptr<const TopMask> top_mask(MaskWalker& w, const Stack& top) const;
    MaskWalkerPtr take_walker() const;
    void give_back(MaskWalkerPtr w) const;
};

// Computes a state's mask from scratch by walking the whole vocabulary from its stacks (the
// reference the faster path below is tested against, and the path for a split character).
TokenMask compute_mask(const Grammar& g, const Vocabulary& v, const std::vector<Stack>& stacks,
                       const std::string& pending);
TokenMask compute_mask(MaskWalker& w, const Vocabulary& v, const std::vector<Stack>& stacks,
                       const std::string& pending);

TopMask compute_top_mask(const Grammar& g, const Vocabulary& v, const Stack& top);
TopMask compute_top_mask(MaskWalker& w, const Vocabulary& v, const Stack& top);
// `top`'s mask from `wide`, the mask of a top that accepts the same text of up to `upto` bytes
// (Grammar::widest): only the longer tokens are walked. Equal to compute_top_mask(top).
TopMask derive_top_mask(MaskWalker& w, const Vocabulary& v, const Stack& top, const TopMask& wide,
                        size_t upto);
// A state's mask (no split character pending) from its stacks' top masks: their union, and
// their context tokens checked against the whole stacks. Equal to compute_mask.
TokenMask mask_from_tops(const Grammar& g, const Vocabulary& v, const std::vector<Stack>& stacks,
                         const std::vector<const TopMask*>& tops);
TokenMask mask_from_tops(MaskWalker& w, const Vocabulary& v, const std::vector<Stack>& stacks,
                         const std::vector<const TopMask*>& tops);

// Whether the first bytes of a UTF-8 character can still become one some stack accepts.
bool partial_viable(const Grammar& g, const std::vector<Stack>& stacks, std::string_view pending);

class Matcher {
  public:
    explicit Matcher(std::shared_ptr<const CompiledGrammar> g);

    // The tokens that may come next; end tokens only where the grammar is complete.
    std::shared_ptr<const TokenMask> mask() const;
    // Consumes a token; false (and nothing changes) when the grammar does not allow it.
    bool accept(int32_t token);
    // The output so far is a whole sentence of the grammar.
    bool complete() const;
    // Some character may still follow (false: the output is finished, only an end remains).
    bool can_continue() const;
    // Consumed an end token.
    bool ended() const { return ended_; }
    // Consumes text (which may end inside a character); false, with nothing changed, when the
    // grammar does not allow it.
    bool accept_text(const std::string& bytes);

  private:
    std::shared_ptr<const CompiledGrammar> g_;
    std::vector<Stack> stacks_;
    std::string pending_;  // the first bytes of a character a token split
    bool ended_ = false;
};

}  // namespace ferry::grammar
