// The matcher's state in its plainest form: a set of stacks, each a list of grammar positions
// (the top is where the next character must match; the rest are where to return to). The
// reference acceptor and the per-sequence matcher both step these; the token masks use a
// faster shared representation of the same thing (token_mask.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8.h"

namespace ferry::grammar {

using Stack = std::vector<uint32_t>;

// Every stack the grammar can start in, expanded so each top is a Chars element (an empty
// stack means the grammar is complete).
std::vector<Stack> initial_stacks(const Grammar& g);
// The stacks after consuming `cp`, sorted and without duplicates; empty: `cp` is not allowed.
std::vector<Stack> advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp);
// Expands `s` (whose top may be End or Ref) into stacks whose tops are Chars, appending them.
void expand(const Grammar& g, Stack s, std::vector<Stack>& out);

// One UTF-8 character at s[i], advancing i; a byte that does not start a complete, valid
// sequence stands for itself.
inline uint32_t decode_utf8(std::string_view s, size_t& i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = utf8_continuations(b);
    if (n <= 0 || i + n >= s.size()) {
        ++i;
        return b;
    }
    uint32_t cp = b & (0x3fu >> n);
    for (int k = 1; k <= n; ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        if ((c >> 6) != 2) {
            ++i;
            return b;
        }
        cp = (cp << 6) | (c & 0x3fu);
    }
    i += n + 1;
    return cp;
}

}  // namespace ferry::grammar
