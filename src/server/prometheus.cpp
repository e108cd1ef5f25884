#include "server/prometheus.h"

#include <fmt/format.h>

namespace ferry::server {

namespace {

std::string escape_label(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"')
            out += '\\', out += c;
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string num(double v) {
    return fmt::format("{}", v);
}

struct Writer {
    std::string out;
    std::string label;  // model_name="..."

    void head(const char* name, const char* type, const char* help) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    }
    void sample(const char* name, double v, const std::string& extra = {}) {
        out += fmt::format("{}{{{}{}}} {}\n", name, label, extra, num(v));
    }
    void gauge(const char* name, double v, const char* help) {
        head(name, "gauge", help);
        sample(name, v);
    }
    void counter(const char* name, double v, const char* help) {
        head(name, "counter", help);
        sample(name, v);
    }
    void histogram(const char* name, const engine::Histogram& h, const char* help) {
        head(name, "histogram", help);
        histogram_samples(name, h, {});
    }
    void histogram_samples(const char* name, const engine::Histogram& h, const std::string& extra) {
        uint64_t cum = 0;
        for (size_t i = 0; i < h.bounds.size(); ++i) {
            cum += i < h.counts.size() ? h.counts[i] : 0;
            out += fmt::format("{}_bucket{{{}{},le=\"{}\"}} {}\n", name, label, extra,
                               num(h.bounds[i]), cum);
        }
        out += fmt::format("{}_bucket{{{}{},le=\"+Inf\"}} {}\n", name, label, extra, h.count);
        out += fmt::format("{}_sum{{{}{}}} {}\n", name, label, extra, num(h.sum));
        out += fmt::format("{}_count{{{}{}}} {}\n", name, label, extra, h.count);
    }
};

}  // namespace

std::string render_prometheus(const engine::EngineMetrics& m, const ServerCounters& s,
                              const std::string& model_name) {
    Writer w;
    w.label = fmt::format("model_name=\"{}\"", escape_label(model_name));
    w.gauge("ferry:num_requests_running", m.running, "Requests in the running batch.");
    w.gauge("ferry:num_requests_waiting", m.waiting, "Requests waiting to be scheduled.");
    w.gauge("ferry:kv_cache_usage_perc", m.kv_usage(),
            "Fraction of KV-cache blocks referenced by live requests (1 = full).");
    w.gauge("ferry:kv_cache_used_blocks", double(m.kv_blocks_used),
            "KV-cache blocks referenced by live requests.");
    w.gauge("ferry:kv_cache_cached_blocks", double(m.kv_blocks_cached),
            "Unreferenced KV-cache blocks kept for prefix reuse (evictable).");
    w.gauge("ferry:kv_cache_total_blocks", double(m.kv_blocks_total),
            "KV-cache blocks in the pool.");
    if (m.kv_pool_bytes > 0)
        w.gauge("ferry:kv_cache_pool_bytes", double(m.kv_pool_bytes),
                "Bytes of the KV block pools (scales included), allocated at start.");
    if (!m.device.empty() && m.device_memory_total > 0) {
        const std::string dev = fmt::format(",device=\"{}\"", escape_label(m.device));
        w.head("ferry:device_memory_total_bytes", "gauge",
               "Memory of the device the model runs on (RAM for the CPU).");
        w.sample("ferry:device_memory_total_bytes", double(m.device_memory_total), dev);
        w.head("ferry:device_memory_free_bytes", "gauge",
               "Of which free when scraped (MemAvailable for the CPU, cudaMemGetInfo on a GPU).");
        w.sample("ferry:device_memory_free_bytes", double(m.device_memory_free), dev);
    }
    if (m.kv_window_blocks_total > 0) {
        w.gauge("ferry:kv_cache_window_used_blocks", double(m.kv_window_blocks_used),
                "Blocks of the sliding-window layers' own pool referenced by live requests.");
        w.gauge("ferry:kv_cache_window_total_blocks", double(m.kv_window_blocks_total),
                "Blocks in the sliding-window layers' own pool.");
    }
    w.counter("ferry:prefix_cache_queries_total", double(m.prefix_query_tokens),
              "Prompt tokens looked up in the prefix cache.");
    w.counter("ferry:prefix_cache_hits_total", double(m.prefix_hit_tokens),
              "Prompt tokens found in the prefix cache.");
    w.counter("ferry:prompt_tokens_total", double(m.prompt_tokens_total),
              "Prompt tokens processed.");
    w.counter("ferry:generation_tokens_total", double(m.generation_tokens_total),
              "Tokens generated.");
    w.head("ferry:request_success_total", "counter", "Finished requests by finish reason.");
    for (const char* r : {"stop", "length", "abort"}) {
        auto it = m.finished.find(r);
        w.sample("ferry:request_success_total", it == m.finished.end() ? 0 : double(it->second),
                 fmt::format(",finished_reason=\"{}\"", r));
    }
    for (const auto& [r, n] : m.finished)
        if (r != "stop" && r != "length" && r != "abort")
            w.sample("ferry:request_success_total", double(n),
                     fmt::format(",finished_reason=\"{}\"", escape_label(r)));
    w.counter("ferry:num_preemptions_total", double(m.preemptions), "Preempted sequences.");
    w.counter("ferry:num_priority_preemptions_total", double(m.priority_preemptions),
              "Sequences preempted to board a request of a better priority.");
    w.counter("ferry:kv_blocks_dropped_total", double(m.kv_blocks_dropped),
              "KV blocks given back because they left every layer's sliding window.");
    w.counter("ferry:kv_evicted_tokens_total", double(m.kv_evicted_tokens),
              "Tokens taken out of sequences' caches over the KV budget (--kv-eviction).");
    w.counter("ferry:spec_decode_num_draft_tokens_total", double(m.spec_draft_tokens),
              "Speculative draft tokens verified by the target model.");
    w.counter("ferry:spec_decode_num_accepted_tokens_total", double(m.spec_accepted_tokens),
              "Speculative draft tokens the target model accepted.");
    w.counter("ferry:spec_decode_num_tree_branch_steps_total", double(m.spec_tree_moved_steps),
              "Tree verifications (--medusa-tree, --spec-tree) that accepted a branch off the "
              "leading chain.");
    w.counter("ferry:spec_decode_num_steps_total", double(m.spec_steps),
              "Sequence steps that verified a draft.");
    w.counter("ferry:spec_decode_num_declined_steps_total", double(m.spec_declined_steps),
              "Steps the cost policy ran without drafts because they would not have paid.");
    w.counter("ferry:engine_steps_total", double(m.steps), "Forward steps run.");
    w.counter("ferry:engine_id_steps_total", double(m.id_steps),
              "Steps whose every token the device picked (its argmax or its draw, a grammar's "
              "mask included; no logprobs or draft): only token ids crossed to the host.");
    w.histogram("ferry:time_to_first_token_seconds", m.ttft, "Time to first token.");
    w.histogram("ferry:inter_token_latency_seconds", m.itl, "Time between generated tokens.");
    w.histogram("ferry:e2e_request_latency_seconds", m.e2e, "End-to-end request latency.");
    w.histogram("ferry:request_queue_time_seconds", m.queue, "Time spent waiting to be scheduled.");
    w.gauge("ferry:http_connections_open", double(s.connections_open), "Open HTTP connections.");
    w.head("ferry:http_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (const auto& [key, n] : s.responses)
        w.sample("ferry:http_requests_total", double(n),
                 fmt::format(",route=\"{}\",status=\"{}\"", escape_label(key.first), key.second));
    w.head("ferry:http_request_duration_seconds", "histogram",
           "Time from a request's arrival to its answer's end (a stream's last event), by route.");
    for (const auto& [route, h] : s.duration)
        w.histogram_samples("ferry:http_request_duration_seconds", h,
                            fmt::format(",route=\"{}\"", escape_label(route)));
    w.counter("ferry:http_rejected_queue_full_total", double(s.rejected_queue_full),
              "Generation requests refused with 429 because the waiting queue was full.");
    w.counter("ferry:http_client_disconnects_total", double(s.client_disconnects),
              "Generation requests aborted because the client went away.");
    // The standard process collector's names, without the model label, as every Prometheus
    // client library exports them (process_threads is the one addition: a thread leak).
    if (s.process.ok) {
        const ProcessStats& p = s.process;
        auto plain = [&](const char* name, const char* type, double v, const char* help) {
            w.head(name, type, help);
            w.out += fmt::format("{} {}\n", name, num(v));
        };
        plain("process_resident_memory_bytes", "gauge", double(p.resident_bytes),
              "Resident memory size in bytes.");
        plain("process_virtual_memory_bytes", "gauge", double(p.virtual_bytes),
              "Virtual memory size in bytes.");
        plain("process_open_fds", "gauge", double(p.open_fds), "Number of open file descriptors.");
        plain("process_max_fds", "gauge", double(p.max_fds),
              "Maximum number of open file descriptors.");
        plain("process_threads", "gauge", double(p.threads), "Number of OS threads.");
        plain("process_cpu_seconds_total", "counter", p.cpu_seconds,
              "Total user and system CPU time spent in seconds.");
        plain("process_start_time_seconds", "gauge", p.start_time_unix,
              "Start time of the process since unix epoch in seconds.");
    }
    return std::move(w.out);
}

}  // namespace ferry::server
