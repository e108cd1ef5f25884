// Cutting special tokens out of raw text before any other tokenization, as llama.cpp does
// (tokenizer_st_partition): each special token in turn, longest text first, is found in every
// text fragment still left, and splits it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tokenizer {

struct Fragment {
    int32_t id;  // -1: text still to tokenize
    std::string_view text;
};

// specials: token ids, longest text first; text_of(id) gives a token's text and
// wanted(id) whether it is matched in this call.
template <class TextOf, class Wanted>
std::vector<Fragment> split_on_specials(std::string_view text, const std::vector<int32_t>& specials,
                                        TextOf&& text_of, Wanted&& wanted) {
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
            size_t from = 0;
            for (size_t at; (at = f.text.find(st, from)) != std::string_view::npos;
                 from = at + st.size()) {
                if (at > from) next.push_back({-1, f.text.substr(from, at - from)});
                next.push_back({sid, {}});
            }
            if (from < f.text.size()) next.push_back({-1, f.text.substr(from)});
        }
        frags.swap(next);
    }
    return frags;
}

}  // namespace ferry::tokenizer
