#include "grammar/stack.h"

#include <algorithm>

namespace ferry::grammar {

void expand(const Grammar& g, Stack s, std::vector<Stack>& out) {
    while (!s.empty()) {
        const uint32_t top = s.back();
        const Element& e = g.element(top);
        if (e.kind == Element::End) {
            s.pop_back();
            continue;
        }
        if (e.kind == Element::Chars) break;
        // A reference: return after it (unless nothing follows, so right recursion keeps the
        // stack flat), then one stack per alternative.
        s.pop_back();
        if (g.element(top + 1).kind != Element::End) s.push_back(top + 1);
        const auto& alts = g.alternatives(e.rule);
        for (size_t a = 0; a + 1 < alts.size(); ++a) {
            Stack t = s;
            t.push_back(alts[a]);
            expand(g, std::move(t), out);
        }
        s.push_back(alts.back());
    }
    out.push_back(std::move(s));
}

namespace {
void normalize(std::vector<Stack>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}
}  // namespace

std::vector<Stack> initial_stacks(const Grammar& g) {
    std::vector<Stack> out;
    for (uint32_t alt : g.alternatives(g.root())) expand(g, Stack{alt}, out);
    normalize(out);
    return out;
}

std::vector<Stack> advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp) {
    std::vector<Stack> out;
    for (const Stack& s : stacks) {
        if (s.empty() || !g.element(s.back()).matches(cp)) continue;
        Stack t = s;
        t.back() += 1;
        expand(g, std::move(t), out);
    }
    normalize(out);
    return out;
}

}  // namespace ferry::grammar
