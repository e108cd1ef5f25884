// What a request constrains its output to (a JSON Schema, any JSON object, a regular
// expression, a list of choices, a GBNF grammar), compiled against the served vocabulary once
// per distinct constraint: a service that sends the same schema with every request compiles it
// once, and its sequences share the compiled grammar's cache of token masks.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {

struct Constraint {
    enum class Kind { JsonSchema, JsonObject, Regex, Choice, Grammar };
    Kind kind = Kind::JsonObject;
    nlohmann::ordered_json schema;     // JsonSchema, in its declared property order
    bool strict = false;               // JsonSchema: OpenAI's strict rules
    bool compact = false;              // JsonSchema, JsonObject: no whitespace between tokens
    std::string text;                  // Regex, Grammar (GBNF)
    std::vector<std::string> choices;  // Choice

    // The constraint as GBNF, or why it cannot be honoured (naming the construct).
    Expected<std::string> to_gbnf() const;
    std::string cache_key() const;
};

// The vocabulary as the grammar masks see it: every token's bytes, control tokens unusable,
// the tokenizer's end-of-generation tokens as the grammar's end.
std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary(const tokenizer::Tokenizer& tok);

// `logits` with every token the mask forbids set to -inf, into `out`; false when the mask
// allows nothing at all (the caller ends the sequence).
bool mask_logits(const grammar::TokenMask& mask, const float* logits, int n_vocab,
                 std::vector<float>& out);

class ConstraintCompiler {
  public:
    explicit ConstraintCompiler(std::shared_ptr<const grammar::Vocabulary> vocab);

    Expected<std::shared_ptr<const grammar::CompiledGrammar>> compile(const Constraint& c);

    struct Stats {
        int64_t compiled = 0, hits = 0;
        double compile_s = 0;
    };
    Stats stats() const;

  private:
    std::shared_ptr<const grammar::Vocabulary> vocab_;
    // Stack tops' masks, shared by the grammars compiled here (a new schema reuses the string,
    // number and date tops earlier ones computed).
    std::shared_ptr<grammar::SharedTops> shared_tops_;
    mutable std::mutex mu_;
    // Least recently used last; a few hundred distinct schemas cover any real service.
    std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>> lru_;
    std::unordered_map<std::string, decltype(lru_)::iterator> index_;
    Stats stats_;
};

}  // namespace ferry::engine
