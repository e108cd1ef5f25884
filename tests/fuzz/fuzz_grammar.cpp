// The constraint compilers and the grammar engine: a JSON Schema (byte 0 even: strict when
// byte 0 & 2), a regular expression (1), a choice list (3, one choice per line) or a GBNF
// grammar (5, 7), compiled as a request's constraint is, then walked for a few dozen tokens
// over a small vocabulary. Besides crashes and hangs it checks the engine against itself: a
// token the mask allows is accepted, and an output the matcher calls complete is a sentence of
// the grammar by the reference acceptor (grammar::accepts).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/constraint.h"
#include "fuzz_target.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace {

using namespace ferry;

// Every byte as a token, then multi-byte pieces a JSON or text output is made of, then one
// end-of-generation token.
std::shared_ptr<const grammar::Vocabulary> small_vocab() {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, char(b));
    for (const char* p :
         {"{\"",      "\":",      "\": \"", "\",",    "\"}", "true", "false",    "null",
          "  ",       "\n",       "12",     "-0.5e3", "ab",  "name", "\xc3\xa9", "\xe4\xbd\xa0",
          "\xf0\x9f", "\x98\x80", "[]",     "{}",     "\\n", "\\u00"})
        pieces.emplace_back(p);
    const int32_t end = static_cast<int32_t>(pieces.size());
    pieces.emplace_back();
    std::vector<bool> usable(pieces.size(), true);
    usable[end] = false;
    return std::make_shared<grammar::Vocabulary>(std::move(pieces), std::move(usable),
                                                 std::vector<int32_t>{end});
}

}  // namespace

FERRY_FUZZ_TARGET(grammar)(const uint8_t* data, size_t size) {
    static const auto vocab = small_vocab();
    if (size < 2) return 0;
    const uint8_t mode = data[0], seed = data[1];
    const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);

    engine::Constraint c;
    if (!(mode & 1)) {
        c.kind = engine::Constraint::Kind::JsonSchema;
        c.schema = nlohmann::ordered_json::parse(text, nullptr, false);
        if (c.schema.is_discarded()) return 0;
        c.strict = mode & 2;
        c.compact = mode & 4;
    } else if ((mode & 7) == 1) {
        c.kind = engine::Constraint::Kind::Regex;
        c.text = text;
    } else if ((mode & 7) == 3) {
        c.kind = engine::Constraint::Kind::Choice;
        size_t at = 0;
        while (at <= text.size()) {
            const size_t nl = std::min(text.find('\n', at), text.size());
            c.choices.push_back(text.substr(at, nl - at));
            at = nl + 1;
        }
    } else {
        c.kind = engine::Constraint::Kind::Grammar;
        c.text = text;
    }
    auto gbnf = c.to_gbnf();
    if (!gbnf.ok()) return 0;
    auto g = grammar::Grammar::parse(*gbnf);
    if (!g.ok()) return 0;
    const grammar::Grammar reference = *g;
    auto compiled = std::make_shared<const grammar::CompiledGrammar>(std::move(*g), vocab);

    grammar::Matcher m(compiled);
    std::string out;
    uint32_t pick = seed;
    for (int step = 0; step < 48 && !m.ended(); ++step) {
        const auto mask = m.mask();
        const int64_t allowed = mask->count();
        if (allowed == 0) break;
        pick = pick * 1103515245u + 12345u;
        int64_t k = static_cast<int64_t>((pick >> 8) % static_cast<uint64_t>(allowed));
        int32_t tok = 0;
        for (; tok < vocab->n_vocab(); ++tok)
            if (mask->test(tok) && k-- == 0) break;
        if (!m.accept(tok)) {
            std::fprintf(stderr, "the mask allowed token %d but the matcher refused it\n", tok);
            std::abort();
        }
        if (!m.ended()) out += vocab->pieces[tok];
    }
    if (m.complete() && !grammar::accepts(reference, out)) {
        std::fprintf(stderr, "complete by the matcher, not a sentence by the acceptor: %s\n",
                     out.c_str());
        std::abort();
    }
    return 0;
}
