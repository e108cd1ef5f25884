// `ferry bench serve --soak DURATION`: a long run against a server under overload and faults,
// watching the server for what a short benchmark cannot see (memory, descriptors, threads or KV
// blocks that creep up; requests that vanish; a server that stops answering).
#pragma once

#include <string>
#include <vector>

namespace ferry::cli {

struct SoakOptions {
    std::string url, api_key, model;
    double duration_s = 0;
    double warmup_s = -1;       // < 0: a fifth of the run, at most 60 s
    int concurrency = 16;       // clients between bursts
    int burst_factor = 4;       // clients during a burst: concurrency * burst_factor
    double burst_every_s = 30;  // a burst starts this often ...
    double burst_s = 5;         // ... and lasts this long
    std::vector<int> input_len{16, 96}, output_len{8, 48};
    double request_timeout_s = 120;  // an accepted request unanswered this long is lost
    uint64_t seed = 0;
    bool json_out = false;
};

// "90", "90s", "30m", "2h" in seconds; anything else exits.
double parse_duration(const std::string& s);

// Runs the soak; throws ExitError naming every check that failed.
void run_soak(const SoakOptions& o);

}  // namespace ferry::cli
