#include "grammar/vocabulary.h"

#include <algorithm>
#include <bit>

namespace ferry::grammar {

Vocabulary::Vocabulary(std::vector<std::string> p, std::vector<bool> usable,
                       std::vector<int32_t> ends)
    : pieces(std::move(p)), end_tokens(std::move(ends)) {
    // End tokens are never text: they are allowed only where the grammar is complete.
    for (int32_t id : end_tokens)
        if (id >= 0 && id < n_vocab()) usable[id] = false;
    for (int32_t id = 0; id < n_vocab(); ++id)
        if (usable[id] && !pieces[id].empty()) sorted.push_back(id);
    std::sort(sorted.begin(), sorted.end(),
              [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });
    sorted_at.push_back(0);
    for (int32_t id : sorted) {
        sorted_text += pieces[id];
        sorted_at.push_back(static_cast<uint32_t>(sorted_text.size()));
    }
    lcp.assign(sorted.size(), 0);
    for (size_t i = 1; i < sorted.size(); ++i) {
        const std::string& a = pieces[sorted[i - 1]];
        const std::string& b = pieces[sorted[i]];
        uint32_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        lcp[i] = n;
    }
    for (size_t i = 0; i < sorted.size(); ++i) {
        const size_t len = sorted_at[i + 1] - sorted_at[i];
        if (longer_.size() < len + 1) longer_.resize(len + 1);
        for (size_t n = 0; n < len; ++n) longer_[n].push_back(static_cast<uint32_t>(i));
    }
    longer_.emplace_back();
    for (size_t d = 1; d <= kSkipDepth; ++d) {
        auto& next = skip_[d - 1];
        next.assign(sorted.size(), static_cast<uint32_t>(sorted.size()));
        for (size_t i = sorted.size(); i-- > 1;)
            next[i - 1] = lcp[i] < d ? static_cast<uint32_t>(i) : next[i];
    }
}

int64_t TokenMask::count() const {
    int64_t n = 0;
    for (uint64_t w : bits) n += std::popcount(w);
    return n;
}

}  // namespace ferry::grammar
