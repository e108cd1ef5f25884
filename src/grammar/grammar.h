// A context-free grammar over Unicode code points, in llama.cpp's GBNF notation, which every
// other constraint (JSON Schema, regular expressions, choice lists, json_object) is compiled
// to, so one parser and one matcher serve them all.
//
// GBNF as accepted here: `name ::= alternatives` (names [a-zA-Z0-9_-]+; the start rule is
// `root`), "literals" and [character classes] ([^...] negated, a-z ranges) with the escapes
// \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH, `.` for any character, ( groups ), the
// postfix operators * + ? {m} {m,} {m,n}, and # comments. A newline ends a rule except inside
// parentheses and right after `::=` or `|`, as in llama.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ferry::grammar {

// One element of an alternative, flattened: a run of elements ends with End.
struct Element {
    enum Kind : uint8_t { End, Chars, Ref } kind = End;
    bool negated = false;                               // Chars: any code point outside ranges
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // Chars: inclusive code point ranges
    uint32_t rule = 0;                                  // Ref: the rule it expands to

    bool matches(uint32_t cp) const;
};

class Grammar {
  public:
    // Parses GBNF; errors name the line and what was expected. Undefined rules, rules that can
    // recurse without consuming a character (left recursion) and grammars past the size limit
    // are refused here, so a matcher never loops.
    static Expected<Grammar> parse(std::string_view gbnf);

    uint32_t root() const { return root_; }
    // The positions where each alternative of `rule` starts (indices into elements()).
    const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule]; }
    const Element& element(uint32_t pos) const { return elements_[pos]; }
    size_t n_rules() const { return rules_.size(); }
    size_t n_elements() const { return elements_.size(); }
    const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

    // A bounded repetition `x{lo,hi}` is a chain of nested rules, one per count left
    // (opt_k ::= x opt_{k-1} | empty), so each position inside it is a state of its own. Text
    // too short to use up the count left cannot tell one link from a longer one: `widest`
    // maps a position in a link to the same position in the chain's longest link, which
    // accepts the same text of up to `upto` bytes (x never matches the empty string, so n
    // bytes fill at most n repetitions). nullopt: not in such a chain, or in its longest link.
    struct Widest {
        uint32_t pos;
        uint32_t upto;
    };
    std::optional<Widest> widest(uint32_t pos) const {
        if (pos >= widest_.size() || widest_[pos].upto == 0) return std::nullopt;
        return widest_[pos];
    }

  private:
    friend class GbnfParser;
    std::vector<Widest> widest_;  // per element; upto == 0: none
    std::vector<Element> elements_;
    std::vector<std::vector<uint32_t>> rules_;
    std::vector<std::string> names_;
    uint32_t root_ = 0;
};

// Whether the whole of `text` (UTF-8) is a sentence of the grammar: the reference the token
// masks are tested against, and what tests of the compilers use.
bool accepts(const Grammar& g, std::string_view text);

// `gbnf` with every rule name prefixed (its root becomes `<prefix>root`), so several grammars
// (one per tool's parameters) can live in one.
std::string prefix_rule_names(std::string_view gbnf, std::string_view prefix);

// A GBNF string literal for `text` (quotes included, everything that needs it escaped).
std::string gbnf_literal(std::string_view text);

}  // namespace ferry::grammar
