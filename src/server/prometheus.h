// /metrics in the Prometheus text exposition format (version 0.0.4), with vLLM's metric names
// under the `ferry:` prefix so existing vLLM dashboards work by changing the prefix only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "core/process_stats.h"
#include "engine/metrics.h"

namespace ferry::server {

// What the HTTP layer counts itself (the engine does not see connections).
struct ServerCounters {
    int64_t connections_open = 0;
    uint64_t rejected_queue_full = 0;
    uint64_t client_disconnects = 0;
    // Answered requests by (route, status): the route as the server matched it ("/v1/models/{id}";
    // "other" for paths it does not serve, so a scanner cannot grow the label set), the status
    // sent (499: the client went away before the answer was complete).
    std::map<std::pair<std::string, int>, uint64_t> responses;
    std::map<std::string, engine::Histogram> duration;  // per route, seconds until answered
    ProcessStats process;  // exported as Prometheus clients' process_* metrics when ok
};

std::string render_prometheus(const engine::EngineMetrics& m, const ServerCounters& s,
                              const std::string& model_name);

}  // namespace ferry::server
