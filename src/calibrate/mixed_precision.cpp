#include "calibrate/mixed_precision.h"

#include <algorithm>
#include <limits>

namespace ferry::calibrate {

Expected<std::vector<size_t>> allocate_precision(std::span<const MixItem> items, size_t budget) {
    size_t least = 0;
    for (const MixItem& it : items) {
        if (it.options.empty()) return make_error("mixed precision: '{}' has no option", it.name);
        size_t m = it.options[0].bytes;
        for (const MixOption& o : it.options) m = std::min(m, o.bytes);
        least += m;
    }
    if (least > budget)
        return make_error("the budget is {} bytes; the smallest types offered take {}", budget,
                          least);
    const size_t spare = budget - least;
    const size_t unit = std::max<size_t>(1, (spare + kMixUnits - 1) / kMixUnits);
    const auto cap = static_cast<int64_t>(spare / unit);
    constexpr double kNone = std::numeric_limits<double>::infinity();
    // best[b]: the least summed KL of the items so far spending b units above their cheapest;
    // pick[i][b]: item i's option there.
    std::vector<double> best(static_cast<size_t>(cap + 1), kNone), next(best.size());
    best[0] = 0;
    std::vector<std::vector<uint8_t>> pick(items.size(), std::vector<uint8_t>(best.size(), 0));
    std::vector<std::vector<int64_t>> cost(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        const MixItem& it = items[i];
        if (it.options.size() > 255) return make_error("mixed precision: too many options");
        size_t m = it.options[0].bytes;
        for (const MixOption& o : it.options) m = std::min(m, o.bytes);
        for (const MixOption& o : it.options)
            cost[i].push_back(static_cast<int64_t>((o.bytes - m + unit - 1) / unit));
        std::fill(next.begin(), next.end(), kNone);
        for (int64_t b = 0; b <= cap; ++b) {
            if (best[static_cast<size_t>(b)] == kNone) continue;
            for (size_t k = 0; k < it.options.size(); ++k) {
                const int64_t nb = b + cost[i][k];
                if (nb > cap) continue;
                const double v = best[static_cast<size_t>(b)] + it.options[k].kl;
                auto& slot = next[static_cast<size_t>(nb)];
                if (v < slot) {
                    slot = v;
                    pick[i][static_cast<size_t>(nb)] = static_cast<uint8_t>(k);
                }
            }
        }
        best.swap(next);
    }
    int64_t b = 0;
    for (int64_t x = 1; x <= cap; ++x)
        if (best[static_cast<size_t>(x)] < best[static_cast<size_t>(b)]) b = x;
    std::vector<size_t> chosen(items.size());
    for (size_t i = items.size(); i-- > 0;) {
        chosen[i] = pick[i][static_cast<size_t>(b)];
        b -= cost[i][chosen[i]];
    }
    return chosen;
}

}  // namespace ferry::calibrate
