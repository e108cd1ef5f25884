#include "plan/bottleneck.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ferry::plan {

BottleneckReport analyze_bottleneck(const BottleneckInput& in) {
    BottleneckReport r;
    r.phase = in.phase;
    if (in.seconds > 0) {
        r.achieved_gbs = in.bytes / in.seconds / 1e9;
        r.achieved_gflops = in.flops / in.seconds / 1e9;
    }
    if (in.peak_gbs > 0) r.bandwidth_fraction = r.achieved_gbs / in.peak_gbs;
    if (in.peak_gflops > 0) r.compute_fraction = r.achieved_gflops / in.peak_gflops;
    // The roof a run is closest to is the one it presses against; the other has room left.
    r.bound = r.compute_fraction > r.bandwidth_fraction ? "compute" : "bandwidth";
    const long bw_pct = std::lround(r.bandwidth_fraction * 100);
    const long fl_pct = std::lround(r.compute_fraction * 100);
    r.sentence = fmt::format("{}: {} % of read bandwidth, {} % of compute → {}-bound", r.phase,
                             bw_pct, fl_pct, r.bound);
    // Far below both roofs, neither is the real limit: say so rather than mislead.
    if (std::max(r.bandwidth_fraction, r.compute_fraction) < 0.25)
        r.sentence += " (but far from both peaks: overhead- or latency-bound)";
    return r;
}

nlohmann::json BottleneckReport::to_json() const {
    return {{"phase", phase},
            {"achieved_gbs", achieved_gbs},
            {"achieved_gflops", achieved_gflops},
            {"bandwidth_fraction", bandwidth_fraction},
            {"compute_fraction", compute_fraction},
            {"bound", bound},
            {"summary", sentence}};
}

}  // namespace ferry::plan
