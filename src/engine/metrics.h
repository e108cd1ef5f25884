// Counters and histograms the engine keeps, read as snapshots by the server's /metrics, by
// `ferry bench throughput` and by tests. Histograms use fixed bucket bounds (Prometheus style).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ferry::engine {

struct Histogram {
    std::vector<double> bounds;    // upper bounds, ascending; +Inf is implicit
    std::vector<uint64_t> counts;  // per bucket (not cumulative), bounds.size() + 1 entries
    double sum = 0;
    uint64_t count = 0;

    static Histogram latency_seconds();  // 1 ms .. 120 s
    void observe(double v);
};

struct EngineMetrics {
    int running = 0;
    int waiting = 0;
    int64_t kv_blocks_total = 0;
    int64_t kv_blocks_used = 0;    // referenced by a live sequence
    int64_t kv_blocks_cached = 0;  // unreferenced but kept for prefix reuse (evictable)
    // A hybrid cache's sliding layers' pool (EngineConfig::kv_window_pool); 0 without one.
    int64_t kv_window_blocks_total = 0;
    int64_t kv_window_blocks_used = 0;
    int block_size = 0;
    uint64_t kv_pool_bytes = 0;  // the block pools' memory, scales included
    // The device the engine runs on ("cpu", "cuda"), its memory and what is free as the metrics
    // are read (RAM on the CPU); empty / 0 where unknown, and then no gauge is shown.
    std::string device;
    uint64_t device_memory_total = 0;
    uint64_t device_memory_free = 0;
    double kv_waste_fraction = 0;  // slots held by running sequences but not yet filled
    double kv_usage() const {
        return kv_blocks_total ? double(kv_blocks_used) / double(kv_blocks_total) : 0.0;
    }
    uint64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
    uint64_t prefix_hit_tokens = 0;    // of which found
    uint64_t prompt_tokens_total = 0;
    uint64_t generation_tokens_total = 0;
    uint64_t preemptions = 0;
    uint64_t priority_preemptions = 0;  // of those, to board a request of a better priority
    uint64_t kv_blocks_dropped = 0;     // given back out of every layer's sliding window
    uint64_t kv_evicted_tokens = 0;     // taken out of caches over --kv-budget (--kv-eviction)
    uint64_t steps = 0;
    uint64_t id_steps = 0;              // of which the device picked every token: only ids crossed
    uint64_t batched_tokens_total = 0;  // tokens run over all steps
    uint64_t batched_seqs_total = 0;    // sequences run over all steps
    std::map<std::string, uint64_t> finished;  // by finish reason
    uint64_t spec_steps = 0;                   // sequence steps that verified a draft
    uint64_t spec_draft_tokens = 0;            // draft tokens verified
    uint64_t spec_accepted_tokens = 0;         // of which the target accepted
    uint64_t spec_tree_moved_steps = 0;        // a tree's branch past its leading chain won
    uint64_t spec_declined_steps =
        0;  // steps the cost policy ran without drafts that could have had some
    Histogram ttft = Histogram::latency_seconds();
    Histogram itl = Histogram::latency_seconds();
    Histogram e2e = Histogram::latency_seconds();
    Histogram queue = Histogram::latency_seconds();
};

// What one request experienced, reported when it finishes.
struct RequestMetrics {
    double queue_s = 0;
    double ttft_s = 0;
    double e2e_s = 0;
    std::vector<double> itl_s;  // inter-token latencies of the first completion
    int prompt_tokens = 0;
    int output_tokens = 0;  // all completions together
    int cached_tokens = 0;
    int priority = 0;
    double tpot_s() const {
        double s = 0;
        for (double x : itl_s) s += x;
        return itl_s.empty() ? 0 : s / double(itl_s.size());
    }
};

}  // namespace ferry::engine
