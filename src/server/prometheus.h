// /metrics in the Prometheus text exposition format (version 0.0.4), with vLLM's metric names
// under the `ferry:` prefix so existing vLLM dashboards work by changing the prefix only.
#pragma once

#include <cstdint>
#include <string>

#include "engine/metrics.h"

namespace ferry::server {

// What the HTTP layer counts itself (the engine does not see connections).
struct ServerCounters {
    int64_t connections_open = 0;
    uint64_t http_requests = 0;
    uint64_t rejected_queue_full = 0;
    uint64_t client_disconnects = 0;
};

std::string render_prometheus(const engine::EngineMetrics& m, const ServerCounters& s,
                              const std::string& model_name);

}  // namespace ferry::server
