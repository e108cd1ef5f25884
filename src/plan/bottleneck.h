// Where a measured run sits under the roofline: achieved bandwidth and FLOP rate as fractions
// of the machine's peaks, and which one it is near. `ferry bench` prints one per phase.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ferry::plan {

struct BottleneckInput {
    std::string phase;       // "decode", "prefill", "throughput", ...
    double bytes = 0;        // bytes read during the measured interval
    double flops = 0;        // FLOPs done during it
    double seconds = 0;      // its wall time
    double peak_gbs = 0;     // measured (or sheet) read bandwidth, GB/s
    double peak_gflops = 0;  // measured (or sheet) peak, GFLOP/s
};

struct BottleneckReport {
    std::string phase;
    double achieved_gbs = 0;
    double achieved_gflops = 0;
    double bandwidth_fraction = 0;  // achieved / peak, 0..1 (can exceed 1 if caches help)
    double compute_fraction = 0;
    std::string bound;     // "bandwidth" or "compute": the larger fraction
    std::string sentence;  // "decode: 82 % of read bandwidth, 9 % of compute → bandwidth-bound"

    // Keys: phase, achieved_gbs, achieved_gflops, bandwidth_fraction, compute_fraction, bound,
    // summary.
    nlohmann::json to_json() const;
};

BottleneckReport analyze_bottleneck(const BottleneckInput& in);

}  // namespace ferry::plan
