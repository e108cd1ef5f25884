// Per-layer mixed precision: given what each matrix would cost in bytes and in quality (its
// measured KL, calibrate/sensitivity.h) at each candidate type, the type per matrix that
// minimises the summed KL within a byte budget: a multiple-choice knapsack, solved exactly by
// dynamic programming over the bytes each matrix spends above its cheapest option. Those are
// counted in units of at least 1/kMixUnits of the spare budget, each option's rounded up, so the
// result always fits and is optimal up to that rounding (a greedy pass by KL saved per byte is
// not: one large upgrade it cannot fit can be worth more than the small ones it takes instead).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::calibrate {

struct MixOption {
    DType type;
    size_t bytes;  // the whole matrix in this type
    double kl;     // its rounding's measured cost
};

constexpr int64_t kMixUnits = 50000;

struct MixItem {
    std::string name;
    std::vector<MixOption> options;  // at least one
};

// The chosen option per item (an index into its options); of equal sums, the fewest bytes.
// An error, saying what the least is, when even every item's smallest option exceeds `budget`.
Expected<std::vector<size_t>> allocate_precision(std::span<const MixItem> items, size_t budget);

}  // namespace ferry::calibrate
