// Cutting special tokens out of raw text before any other tokenization, as llama.cpp does
// (tokenizer_st_partition): each special token in turn, longest text first, is found in every
// text fragment still left, and splits it. A token flagged lstrip / rstrip also drops the ASCII
// whitespace before / after it (llama.cpp sets those flags for some models by name).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tokenizer {

// Bits of a token's strip flags.
constexpr uint8_t kLstrip = 1, kRstrip = 2;

struct Fragment {
    int32_t id;  // -1: text still to tokenize
    std::string_view text;
};

// specials: token ids, longest text first; text_of(id) gives a token's text and
// wanted(id) whether it is matched in this call; strip: flags by id (empty: none).
template <class TextOf, class Wanted>
std::vector<Fragment> split_on_specials(std::string_view text, const std::vector<int32_t>& specials,
                                        TextOf&& text_of, Wanted&& wanted,
                                        const std::vector<uint8_t>& strip = {}) {
    auto space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
    };
    std::vector<Fragment> frags{{-1, text}};
    std::vector<Fragment> next;
    for (int32_t sid : specials) {
        const std::string_view st = text_of(sid);
        if (st.empty() || !wanted(sid) || text.find(st) == std::string_view::npos) continue;
        next.clear();
        for (const Fragment& f : frags) {
            if (f.id >= 0) {
                next.push_back(f);
                continue;
            }
            const uint8_t flags = static_cast<size_t>(sid) < strip.size() ? strip[sid] : 0;
            size_t from = 0;
            for (size_t at; (at = f.text.find(st, from)) != std::string_view::npos;) {
                std::string_view left = f.text.substr(from, at - from);
                if (flags & kLstrip)
                    while (!left.empty() && space(left.back())) left.remove_suffix(1);
                if (!left.empty()) next.push_back({-1, left});
                next.push_back({sid, {}});
                from = at + st.size();
                if (flags & kRstrip)
                    while (from < f.text.size() && space(f.text[from])) ++from;
            }
            if (from < f.text.size()) next.push_back({-1, f.text.substr(from)});
        }
        frags.swap(next);
    }
    return frags;
}

}  // namespace ferry::tokenizer
