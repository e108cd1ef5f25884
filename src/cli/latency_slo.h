// A latency target for goodput (DistServe's measure, as vLLM's benchmarks report it): the
// requests per second whose TTFT and TPOT both met it. The bench commands share its options
// and its test, so "goodput" means one thing in every report.
#pragma once

#include <CLI/CLI.hpp>

namespace ferry::cli {

struct LatencySlo {
    double ttft_ms = 0;  // 0: no limit
    double tpot_ms = 0;
    bool met(double ttft_s, double tpot_s) const {
        return (ttft_ms <= 0 || ttft_s * 1e3 <= ttft_ms) &&
               (tpot_ms <= 0 || tpot_s * 1e3 <= tpot_ms);
    }
    void add_to(CLI::App& cmd) {
        cmd.add_option("--slo-ttft-ms", ttft_ms, "goodput: TTFT at most this (0: any)")
            ->capture_default_str()
            ->check(CLI::Range(0.0, 1e9));
        cmd.add_option("--slo-tpot-ms", tpot_ms, "goodput: TPOT at most this (0: any)")
            ->capture_default_str()
            ->check(CLI::Range(0.0, 1e9));
    }
};

}  // namespace ferry::cli
