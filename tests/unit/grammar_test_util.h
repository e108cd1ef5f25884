// A compiled GBNF text under test: what it compiled to, the grammar (or why there is none),
// and whether it accepts a text. The JSON Schema and regex compilers' tests share it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace ferry::grammar {

struct GbnfUnderTest {
    void load(const Expected<std::string>& e) {
        if (!e) {
            error = e.error().message;
            return;
        }
        gbnf = e.value();
        auto g = Grammar::parse(gbnf);
        if (!g) {
            error = "the GBNF does not parse: " + g.error().message + "\n" + gbnf;
            return;
        }
        grammar = std::move(*g);
    }
    bool operator()(std::string_view text) const { return grammar && accepts(*grammar, text); }

    std::optional<Grammar> grammar;
    std::string gbnf, error;
};

}  // namespace ferry::grammar
