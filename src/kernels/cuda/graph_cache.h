// Which recorded queues (launch_queue.h) run as CUDA graphs. A signature seen `capture_after` times
// is captured, then replayed while it stays among the `capacity` most recently used; one evicted
// waits four times as many sightings before its next capture (a workload with more recurring
// shapes than the cache holds would otherwise capture every other step), and one whose capture
// failed runs eagerly from then on. Capturing on the second sighting rather than the first
// keeps one-off shapes (a prompt's prefill) from paying a capture they never reuse, as vLLM
// captures only the decode batch sizes. Graphs are opaque handles here (cudaGraphExec_t); the
// caller destroys the ones handed back. Plain C++, tested on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ferry::kernels::cuda {

class GraphCache {
  public:
    struct Options {
        bool enabled = true;        // false: every queue runs eagerly (--cuda-graphs off)
        int capture_after = 2;      // sightings before a capture
        size_t capacity = 64;       // graphs kept
        size_t max_tracked = 4096;  // signatures counted before the counts are forgotten
    };
    enum class Action { Eager, Capture, Replay };
    struct Decision {
        Action action = Action::Eager;
        void* graph = nullptr;  // Replay's
    };
    struct Stats {
        uint64_t eager = 0, captured = 0, replayed = 0, refused = 0, evicted = 0;
        size_t resident = 0;
    };

    GraphCache() : GraphCache(Options{}) {}
    explicit GraphCache(Options o) : opt_(o) {}

    bool enabled() const { return opt_.enabled; }
    Decision decide(std::string_view signature);
    // The graph captured after a Capture decision; returns the graphs evicted to make room.
    std::vector<void*> store(std::string_view signature, void* graph);
    // The capture after a Capture decision failed: this signature runs eagerly from now on.
    void refuse(std::string_view signature);
    // Every graph held, handed back (the cache is empty after).
    std::vector<void*> take_all();
    const Stats& stats() const { return stats_; }

  private:
    struct Graph {
        void* graph = nullptr;
        std::list<std::string>::iterator lru;
    };
    Options opt_;
    // Full signatures only for the graphs held (a decode step's is tens of KB); sightings and
    // refusals by hash, where a collision costs at most a capture early or a graph missed.
    // Found by a view of the signature, not a copy of it, step after step.
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, Graph, Hash, std::equal_to<>> graphs_;
    std::list<std::string> lru_;  // signatures with a graph, most recent first
    std::unordered_map<uint64_t, int> seen_;
    std::unordered_set<uint64_t> refused_;
    Stats stats_;
};

}  // namespace ferry::kernels::cuda
