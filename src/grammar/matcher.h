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

class CompiledGrammar {
  public:
    CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab);

    const Grammar& grammar() const { return grammar_; }
    const Vocabulary& vocab() const { return *vocab_; }
    const std::vector<Stack>& start() const { return start_; }

    // The tokens allowed in a state (computed once per state, then shared).
    std::shared_ptr<const TokenMask> mask(const std::vector<Stack>& stacks,
                                          const std::string& pending) const;

    struct Stats {
        int64_t computed = 0, hits = 0;
        double compute_s = 0;
    };
    Stats stats() const;

  private:
    Grammar grammar_;
    std::shared_ptr<const Vocabulary> vocab_;
    std::vector<Stack> start_;
    mutable std::mutex mu_;
    mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
    mutable Stats stats_;
};

// Computes a state's mask from scratch (what CompiledGrammar caches; tests compare it with
// the reference acceptor).
TokenMask compute_mask(const Grammar& g, const Vocabulary& v, const std::vector<Stack>& stacks,
                       const std::string& pending);

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
