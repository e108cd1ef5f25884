#include "engine/constraint.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/shared_tops.h"

namespace ferry::engine {

namespace {
constexpr size_t kMaxCompiled = 256;
}

Expected<std::string> Constraint::to_gbnf() const {
    switch (kind) {
        case Kind::JsonSchema: {
            grammar::JsonSchemaOptions opt;
            opt.strict = strict;
            opt.compact = compact;
            return grammar::json_schema_to_gbnf(schema, opt);
        }
        case Kind::JsonObject:
            return grammar::json_object_gbnf(compact);
        case Kind::Regex:
            return grammar::regex_grammar(text);
        case Kind::Choice: {
            if (choices.empty()) return make_error("a choice list needs at least one choice");
            std::string g = "root ::= ";
            for (size_t i = 0; i < choices.size(); ++i) {
                if (choices[i].empty()) return make_error("choice {} is empty", i);
                g += (i ? " | " : "") + grammar::gbnf_literal(choices[i]);
            }
            return g + "\n";
        }
        case Kind::Grammar:
            if (text.find("::=") == std::string::npos)
                return make_error(
                    "the grammar is not GBNF (rules are written `name ::= ...`, with a `root` "
                    "rule); Lark and other notations are not supported");
            return text;
    }
    return make_error("unknown constraint");
}

std::string Constraint::cache_key() const {
    // One letter for the kind, then the constraint's text.
    std::string k(1, "sorcg"[static_cast<int>(kind)]);
    if (kind == Kind::JsonSchema && strict) k = "S";
    if (compact) k += '~';
    switch (kind) {
        case Kind::JsonSchema:
            k += schema.dump();
            break;
        case Kind::JsonObject:
            break;
        case Kind::Regex:
        case Kind::Grammar:
            k += text;
            break;
        case Kind::Choice:
            k += nlohmann::ordered_json(choices).dump();
            break;
    }
    return k;
}

std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary(const tokenizer::Tokenizer& tok) {
    const int32_t n = tok.n_vocab();
    std::vector<std::string> pieces(n);
    std::vector<bool> usable(n, false);
    std::vector<int32_t> ends;
    for (int32_t id = 0; id < n; ++id) {
        const auto attr = tok.token_attr(id);
        if (tok.is_eog(id)) ends.push_back(id);
        if (attr == tokenizer::TokenAttr::Control || attr == tokenizer::TokenAttr::Unused ||
            attr == tokenizer::TokenAttr::Unknown)
            continue;
        pieces[id] = tok.token_to_piece(id, false);
        usable[id] = true;
    }
    return std::make_shared<const grammar::Vocabulary>(std::move(pieces), std::move(usable),
                                                       std::move(ends));
}

bool mask_logits(const grammar::TokenMask& mask, const float* logits, int n_vocab,
                 std::vector<float>& out) {
    out.assign(logits, logits + n_vocab);
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    bool any = false;
    // A model may have more output rows than the tokenizer has tokens: those are never allowed.
    const size_t words = (static_cast<size_t>(n_vocab) + 63) / 64;
    for (size_t w = 0; w < words; ++w) {
        const uint64_t bits = w < mask.bits.size() ? mask.bits[w] : 0;
        any |= bits != 0;
        if (bits == ~uint64_t{0}) continue;
        const int end = std::min<int>(n_vocab, static_cast<int>(w * 64 + 64));
        if (bits == 0) {  // most words outside a string: one fill the compiler vectorises
            std::fill(out.begin() + static_cast<long>(w * 64), out.begin() + end, kNegInf);
            continue;
        }
        for (int id = static_cast<int>(w * 64); id < end; ++id)
            if (!((bits >> (id & 63)) & 1)) out[id] = kNegInf;
    }
    return any;
}

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<const grammar::Vocabulary> vocab)
    : vocab_(std::move(vocab)), shared_tops_(std::make_shared<grammar::SharedTops>()) {}

Expected<std::shared_ptr<const grammar::CompiledGrammar>> ConstraintCompiler::compile(
    const Constraint& c) {
    const std::string key = c.cache_key();
    {
        std::lock_guard lock(mu_);
        if (auto it = index_.find(key); it != index_.end()) {
            lru_.splice(lru_.end(), lru_, it->second);
            ++stats_.hits;
            return it->second->second;
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto gbnf = c.to_gbnf();
    if (!gbnf) return gbnf.error();
    auto g = grammar::Grammar::parse(*gbnf);
    if (!g) return g.error();
    auto compiled =
        std::make_shared<const grammar::CompiledGrammar>(std::move(*g), vocab_, shared_tops_);
    // The start state's mask is the first one every request needs: computed here, it is paid
    // once at compile time rather than inside the first decode step.
    (void)grammar::Matcher(compiled).mask();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mu_);
    ++stats_.compiled;
    stats_.compile_s += s;
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;
    lru_.emplace_back(key, compiled);
    index_[key] = std::prev(lru_.end());
    if (lru_.size() > kMaxCompiled) {
        index_.erase(lru_.front().first);
        lru_.pop_front();
    }
    return std::shared_ptr<const grammar::CompiledGrammar>(compiled);
}

ConstraintCompiler::Stats ConstraintCompiler::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

}  // namespace ferry::engine
