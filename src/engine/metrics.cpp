#include "engine/metrics.h"

#include <algorithm>

namespace ferry::engine {

Histogram Histogram::latency_seconds() {
    Histogram h;
    h.bounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 120.0};
    h.counts.assign(h.bounds.size() + 1, 0);
    return h;
}

void Histogram::observe(double v) {
    const size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
    ++counts[i];
    sum += v;
    ++count;
}

}  // namespace ferry::engine
