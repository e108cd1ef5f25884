// The soak: clients that keep a server past its capacity for a long time, in bursts, with every
// kind of request a real deployment sees (streaming and not, chat and completions, clients
// that hang up mid-stream or read slowly, bodies that are malformed, oversized, over the
// context or carry a schema the server must refuse), while a sampler reads /health and
// /metrics every second. It fails on a request that vanished (neither completed nor answered
// with an error), a valid one answered wrongly, a /health that did not answer, or a server
// figure (resident memory, descriptors, threads, KV blocks) that trends up after warm-up or is
// not back where it started once the load has drained.
#include "cli/bench_soak.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/http_client.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- what the clients do -----------------------------------------------------------------

enum class Scenario {
    Stream,      // /v1/completions, streamed to [DONE]
    Chat,        // /v1/chat/completions, one JSON answer
    Disconnect,  // a stream the client hangs up on after a few events
    SlowReader,  // a stream read a few hundred bytes at a time, with pauses
    Malformed,   // a body that is not JSON: 400
    Oversized,   // a Content-Length far over the server's limit: 413
    BadSchema,   // a json_schema the grammar engine cannot honour: 400
    TooLong,     // a prompt longer than the context: 400
};
constexpr int kScenarios = 8;
const char* scenario_name(Scenario s) {
    static const char* names[] = {"stream",    "chat",      "disconnect", "slow_reader",
                                  "malformed", "oversized", "bad_schema", "too_long"};
    return names[static_cast<int>(s)];
}
// Out of 100: mostly real work, with every fault present each second at a few dozen clients.
constexpr int kWeights[kScenarios] = {34, 20, 12, 8, 7, 5, 7, 7};

enum class Outcome {
    Completed,     // a valid request answered in full
    Rejected,      // a bad request answered with the 4xx it deserves
    Refused,       // 429 / 503: the server said it is full (an answer, not a loss)
    Disconnected,  // the client hung up on purpose
    Lost,          // no complete answer: the connection closed or timed out
    Wrong,         // an answer, but not the right one (a 500, a 200 for a bad body, ...)
};
constexpr int kOutcomes = 6;
const char* outcome_name(Outcome o) {
    static const char* names[] = {"completed",    "rejected", "refused",
                                  "disconnected", "lost",     "wrong"};
    return names[static_cast<int>(o)];
}

struct Result {
    Outcome outcome;
    std::string detail;  // for lost and wrong: what came back
};

struct Client {
    const SoakOptions& o;
    Target target;
    int max_model_len;

    std::string prompt(std::mt19937_64& rng, int words) const {
        static const char* vocab[] = {"river",  "stone", "light",  "market", "window",
                                      "garden", "quiet", "engine", "paper",  "cloud",
                                      "silver", "road",  "winter", "music",  "harbor"};
        std::string p;
        // Some prompts share a long opening, so the prefix cache and its copy-on-write run too.
        if (rng() % 10 < 3) p = "You are a helpful assistant who answers in short sentences about";
        for (int k = 0; k < words; ++k) {
            if (!p.empty()) p += ' ';
            p += vocab[rng() % 15];
        }
        return p;
    }
    int draw(std::mt19937_64& rng, const std::vector<int>& r) const {
        const int lo = r[0], hi = r.size() > 1 ? r[1] : r[0];
        return std::uniform_int_distribution<int>(std::min(lo, hi), std::max(lo, hi))(rng);
    }
    json completion(std::mt19937_64& rng, bool stream) const {
        json b = {{"prompt", prompt(rng, draw(rng, o.input_len))},
                  {"max_tokens", draw(rng, o.output_len)},
                  {"temperature", double(rng() % 3) * 0.4},
                  {"seed", int(rng() % 1000)},
                  {"stream", stream}};
        if (!o.model.empty()) b["model"] = o.model;
        return b;
    }

    // A status that says "full" is an answer; so is a stream whose error event says so.
    static bool refused(int status) { return status == 429 || status == 503; }

    // Streams one request; `hang_up_after` > 0 closes after that many data events, `slow`
    // reads a little at a time.
    Result stream(const json& body, const std::string& path, int hang_up_after, bool slow,
                  std::mt19937_64& rng) const {
        const int fd = connect_to(target, 1.0);
        if (fd < 0) return {Outcome::Lost, "connect failed"};
        if (slow) {
            int small = 4096;
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        }
        if (!send_all(fd, http_request(target, "POST", path, body.dump(), o.api_key))) {
            close(fd);
            return {Outcome::Lost, "send failed"};
        }
        const auto deadline =
            Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(o.request_timeout_s));
        std::string buf, error_event;
        char tmp[8192];
        int status = 0, events = 0;
        bool done = false, header = true;
        std::optional<Result> r;
        while (!r && Clock::now() < deadline) {
            if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 60));
            const ssize_t n = recv(fd, tmp, slow ? 256 : sizeof tmp, 0);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
            if (n <= 0) break;
            buf.append(tmp, size_t(n));
            if (header) {
                const size_t e = buf.find("\r\n\r\n");
                if (e == std::string::npos) continue;
                status = buf.compare(0, 9, "HTTP/1.1 ") == 0 ? std::atoi(buf.c_str() + 9) : 0;
                header = false;
                if (status != 200) {
                    // An error answer is JSON with a length: read it to its end (or close).
                    continue;
                }
                buf.erase(0, e + 4);
            }
            if (status != 200) continue;
            size_t nl;
            while (!r && (nl = buf.find('\n')) != std::string::npos) {
                std::string line = buf.substr(0, nl);
                buf.erase(0, nl + 1);
                if (line.rfind("data: ", 0) != 0) continue;
                if (!line.empty() && line.back() == '\r') line.pop_back();
                const std::string data = line.substr(6);
                if (data == "[DONE]") {
                    done = true;
                    r = Result{Outcome::Completed, ""};
                    break;
                }
                if (data.rfind("{\"error\"", 0) == 0) error_event = data;
                if (hang_up_after > 0 && ++events >= hang_up_after)
                    r = Result{Outcome::Disconnected, ""};
            }
        }
        close(fd);
        if (r && r->outcome == Outcome::Disconnected) return *r;
        if (status != 200 && status != 0) {
            if (refused(status)) return {Outcome::Refused, ""};
            return {Outcome::Wrong, fmt::format("status {}: {}", status, buf.substr(0, 300))};
        }
        if (!done) return {Outcome::Lost, status == 0 ? "no answer" : "stream ended before [DONE]"};
        if (!error_event.empty()) {
            if (error_event.find("shutting_down") != std::string::npos ||
                error_event.find("queue_full") != std::string::npos)
                return {Outcome::Refused, ""};
            return {Outcome::Wrong, "error event: " + error_event.substr(0, 300)};
        }
        return {Outcome::Completed, ""};
    }

    // One non-streaming request whose right answer is `want` (200 means a full completion).
    Result plain(const std::string& path, const std::string& body, int want) const {
        HttpReply rep = fetch(target, "POST", path, body, o.api_key, o.request_timeout_s);
        if (!rep.complete)
            return {Outcome::Lost,
                    rep.status ? fmt::format("status {}, body cut short", rep.status) : rep.error};
        if (refused(rep.status)) return {Outcome::Refused, ""};
        if (rep.status != want)
            return {Outcome::Wrong, fmt::format("status {} (wanted {}): {}", rep.status, want,
                                                rep.body.substr(0, 300))};
        auto j = json::parse(rep.body, nullptr, false);
        if (want == 200) {
            if (j.is_discarded() || !j.contains("choices") || j["choices"].empty())
                return {Outcome::Wrong, "200 without choices: " + rep.body.substr(0, 300)};
            return {Outcome::Completed, ""};
        }
        if (j.is_discarded() || !j.contains("error"))
            return {Outcome::Wrong, fmt::format("{} without an error object", rep.status)};
        return {Outcome::Rejected, ""};
    }

    // Announces far more body than the server takes and sends a little of it: the answer must
    // be a 413 right away, not a server reading (or buffering) a gigabyte.
    Result oversized() const {
        const int fd = connect_to(target, std::min(o.request_timeout_s, 30.0));
        if (fd < 0) return {Outcome::Lost, "connect failed"};
        std::string head = "POST /v1/completions HTTP/1.1\r\nHost: " + target.host +
                           "\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n";
        if (!o.api_key.empty()) head += "Authorization: Bearer " + o.api_key + "\r\n";
        head += "\r\n{\"prompt\": \"" + std::string(16384, 'x');
        send_all(fd, head);  // the server may answer and close before all of it is taken
        std::string got;
        char tmp[4096];
        for (;;) {
            const ssize_t n = recv(fd, tmp, sizeof tmp, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got.append(tmp, size_t(n));
            if (got.find("\r\n\r\n") != std::string::npos) break;
        }
        close(fd);
        if (got.empty()) return {Outcome::Lost, "no answer to an oversized body"};
        const int status = got.compare(0, 9, "HTTP/1.1 ") == 0 ? std::atoi(got.c_str() + 9) : 0;
        if (status == 413) return {Outcome::Rejected, ""};
        return {Outcome::Wrong, fmt::format("status {} for a 1 GiB body (wanted 413)", status)};
    }

    Result run(Scenario s, std::mt19937_64& rng) const {
        switch (s) {
            case Scenario::Stream:
                return stream(completion(rng, true), "/v1/completions", 0, false, rng);
            case Scenario::Chat: {
                json b = {{"messages",
                           {{{"role", "user"}, {"content", prompt(rng, draw(rng, o.input_len))}}}},
                          {"max_tokens", draw(rng, o.output_len)},
                          {"temperature", 0}};
                if (!o.model.empty()) b["model"] = o.model;
                return plain("/v1/chat/completions", b.dump(), 200);
            }
            case Scenario::Disconnect: {
                json b = completion(rng, true);
                b["max_tokens"] = std::max(b["max_tokens"].get<int>(), 16);
                return stream(b, "/v1/completions", 1 + int(rng() % 4), false, rng);
            }
            case Scenario::SlowReader:
                return stream(completion(rng, true), "/v1/completions", 0, true, rng);
            case Scenario::Malformed: {
                std::string body = completion(rng, false).dump();
                body.resize(body.size() / 2);  // cut mid-way: not JSON
                return plain("/v1/completions", body, 400);
            }
            case Scenario::Oversized:
                return oversized();
            case Scenario::BadSchema: {
                // A lookbehind: no regular grammar honours it, so it must be refused up front.
                json b = {{"messages", {{{"role", "user"}, {"content", "a name"}}}},
                          {"max_tokens", 8},
                          {"response_format",
                           {{"type", "json_schema"},
                            {"json_schema",
                             {{"name", "n"},
                              {"schema",
                               {{"type", "object"},
                                {"properties",
                                 {{"name", {{"type", "string"}, {"pattern", "(?<=a)b"}}}}}}}}}}}};
                if (!o.model.empty()) b["model"] = o.model;
                return plain("/v1/chat/completions", b.dump(), 400);
            }
            case Scenario::TooLong: {
                json b = completion(rng, false);
                b["prompt"] = prompt(rng, max_model_len + 64);
                return plain("/v1/completions", b.dump(), 400);
            }
        }
        return {Outcome::Wrong, "unknown scenario"};
    }
};

// ---- what the sampler sees ----------------------------------------------------------------

struct Sample {
    double t = 0;
    bool health = false;
    double health_ms = 0;
    // From /metrics; NaN when the server does not export it.
    double rss = NAN, fds = NAN, threads = NAN, kv_used = NAN, kv_total = NAN, running = NAN,
           waiting = NAN, connections = NAN;
};

// A metric's value summed over its label sets, NaN when absent.
double metric(const std::string& text, const std::string& name) {
    double sum = 0;
    bool found = false;
    size_t at = 0;
    while ((at = text.find(name, at)) != std::string::npos) {
        const bool line_start = at == 0 || text[at - 1] == '\n';
        const size_t after = at + name.size();
        at = after;
        if (!line_start || after >= text.size() || (text[after] != ' ' && text[after] != '{'))
            continue;
        const size_t eol = text.find('\n', after);
        const std::string line = text.substr(after, eol == std::string::npos ? eol : eol - after);
        const size_t sp = line.rfind(' ');
        if (sp == std::string::npos) continue;
        sum += std::strtod(line.c_str() + sp + 1, nullptr);
        found = true;
    }
    return found ? sum : NAN;
}

Sample take_sample(const Target& t, const std::string& key, double at) {
    Sample s;
    s.t = at;
    const auto h0 = Clock::now();
    HttpReply h = fetch(t, "GET", "/health", "", key, 5.0);
    s.health = h.complete && h.status == 200;
    s.health_ms = since(h0) * 1000;
    HttpReply m = fetch(t, "GET", "/metrics", "", key, 5.0);
    if (m.complete && m.status == 200) {
        s.rss = metric(m.body, "process_resident_memory_bytes");
        s.fds = metric(m.body, "process_open_fds");
        s.threads = metric(m.body, "process_threads");
        s.kv_used = metric(m.body, "ferry:kv_cache_used_blocks");
        s.kv_total = metric(m.body, "ferry:kv_cache_total_blocks");
        s.running = metric(m.body, "ferry:num_requests_running");
        s.waiting = metric(m.body, "ferry:num_requests_waiting");
        s.connections = metric(m.body, "ferry:http_connections_open");
    }
    return s;
}

double floor_of(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
    return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}

struct Check {
    std::string name;
    bool ok;
    std::string detail;
};

}  // namespace

double parse_duration(const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    const std::string unit = end ? std::string(end) : "";
    double mult = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
    if (end == s.c_str() || mult < 0 || !(v > 0))
        throw ExitError(fmt::format("--soak: '{}' is not a duration (90, 90s, 30m, 2h)", s));
    return v * mult;
}

void run_soak(const SoakOptions& o) {
    const Target target = parse_http_url(o.url);
    // The soak sends malformed, oversized and abandoned requests: only to this machine.
    if (!is_loopback(target))
        throw ExitError("--soak only targets a server on this machine (127.0.0.1, ::1, localhost)");
    if (!target.base_path.empty())
        throw ExitError("--soak: give the server's root URL (it reads /health and /metrics)");
    // The context, so the over-long prompts are over it.
    HttpReply models = fetch(target, "GET", "/v1/models", "", o.api_key, 10);
    int max_model_len = 0;
    if (models.complete && models.status == 200) {
        auto j = json::parse(models.body, nullptr, false);
        if (!j.is_discarded() && j.contains("data") && !j["data"].empty())
            max_model_len = j["data"][0].value("max_model_len", 0);
    }
    if (max_model_len <= 0)
        throw ExitError(
            fmt::format("no server answers GET {}/v1/models with a max_model_len "
                        "(is `ferry serve` running there?)",
                        o.url));
    const double warmup = o.warmup_s >= 0 ? o.warmup_s : std::min(60.0, o.duration_s / 5);
    const Client client{o, target, max_model_len};

    const auto t0 = Clock::now();
    const Sample idle_before = take_sample(target, o.api_key, 0);
    std::vector<Sample> samples{idle_before};
    std::mutex mu;
    std::atomic<bool> stop{false};
    std::array<std::array<long, kOutcomes>, kScenarios> counts{};
    std::vector<std::string> problems;  // the first few lost / wrong answers, verbatim

    auto limit_at = [&](double t) {
        const double phase = std::fmod(t, o.burst_every_s);
        const bool burst = t >= o.burst_every_s && phase < o.burst_s;
        return burst ? o.concurrency * o.burst_factor : o.concurrency;
    };
    std::vector<std::thread> workers;
    const int n_workers = o.concurrency * o.burst_factor;
    for (int w = 0; w < n_workers; ++w)
        workers.emplace_back([&, w] {
            std::mt19937_64 rng(o.seed * 1000003 + uint64_t(w));
            while (!stop) {
                if (w >= limit_at(since(t0))) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    continue;
                }
                int pick = int(rng() % 100), s = 0;
                while (pick >= kWeights[s]) pick -= kWeights[s++];
                const Result r = client.run(Scenario(s), rng);
                std::lock_guard lk(mu);
                ++counts[size_t(s)][size_t(r.outcome)];
                if ((r.outcome == Outcome::Lost || r.outcome == Outcome::Wrong) &&
                    problems.size() < 10)
                    problems.push_back(fmt::format("{} {}: {}", scenario_name(Scenario(s)),
                                                   outcome_name(r.outcome), r.detail));
            }
        });

    auto totals = [&] {
        std::array<long, kOutcomes> t{};
        std::lock_guard lk(mu);
        for (const auto& row : counts)
            for (int k = 0; k < kOutcomes; ++k) t[size_t(k)] += row[size_t(k)];
        return t;
    };
    auto fmt_mib = [](double b) {
        return std::isnan(b) ? std::string("n/a") : fmt::format("{:.1f}", b / 1048576);
    };
    auto progress = [&](const Sample& s) {
        const auto t = totals();
        std::fprintf(stderr,
                     "soak %5.0fs  rss %s MiB  fds %.0f  threads %.0f  kv %.0f/%.0f  run %.0f wait "
                     "%.0f  | completed %ld rejected %ld refused %ld disconnected %ld lost %ld "
                     "wrong %ld%s\n",
                     s.t, fmt_mib(s.rss).c_str(), s.fds, s.threads, s.kv_used, s.kv_total,
                     s.running, s.waiting, t[0], t[1], t[2], t[3], t[4], t[5],
                     s.health ? "" : "  /health FAILED");
    };
    // The sampler, once a second, on this thread.
    for (int tick = 1; since(t0) < o.duration_s; ++tick) {
        std::this_thread::sleep_until(t0 + std::chrono::seconds(tick));
        samples.push_back(take_sample(target, o.api_key, since(t0)));
        if (tick % 10 == 0) progress(samples.back());
    }
    stop = true;
    for (auto& w : workers) w.join();
    const double load_s = since(t0);
    // Drained: nothing running or waiting (for at most a minute), then the last sample.
    Sample idle_after = take_sample(target, o.api_key, since(t0));
    for (int i = 0; i < 60 && (idle_after.running > 0 || idle_after.waiting > 0 ||
                               idle_after.kv_used > 0 || idle_after.connections > 1);
         ++i) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        idle_after = take_sample(target, o.api_key, since(t0));
    }
    progress(idle_after);

    // ---- the verdict ------------------------------------------------------------------------
    const auto t = totals();
    std::vector<Check> checks;
    checks.push_back({"no request lost", t[size_t(Outcome::Lost)] == 0,
                      fmt::format("{} lost", t[size_t(Outcome::Lost)])});
    checks.push_back({"every answer right", t[size_t(Outcome::Wrong)] == 0,
                      fmt::format("{} wrong", t[size_t(Outcome::Wrong)])});
    int health_failed = 0;
    double health_worst = 0;
    for (const auto& s : samples) {
        health_failed += !s.health;
        health_worst = std::max(health_worst, s.health_ms);
    }
    health_failed += !idle_after.health;
    checks.push_back({"/health always answered", health_failed == 0,
                      fmt::format("{} of {} failed, slowest {:.0f} ms", health_failed,
                                  samples.size() + 1, health_worst)});
    // Flat after warm-up: the floor (the lowest sample) of the last third no higher than the
    // first third's plus a small slack. The floor, because bursts lift every figure for a
    // while and a third may end in one; a leak lifts the floor itself.
    std::vector<const Sample*> steady;
    for (const auto& s : samples)
        if (s.t >= warmup) steady.push_back(&s);
    struct Series {
        const char* name;
        double Sample::*field;
        double rel, abs;
        const char* unit;
        double scale;
    };
    const Series series[] = {{"resident memory", &Sample::rss, 0.01, 32 << 20, "MiB", 1048576},
                             // Each client between bursts may hold a connection at any sample.
                             {"open descriptors", &Sample::fds, 0.0, 8.0 + o.concurrency, "", 1},
                             {"threads", &Sample::threads, 0.0, 2, "", 1}};
    for (const Series& ser : series) {
        if (steady.size() < 6) {
            checks.push_back({std::string(ser.name) + " flat", false,
                              "the run is too short after warm-up to tell (< 6 samples)"});
            continue;
        }
        const size_t third = steady.size() / 3;
        std::vector<double> first, last;
        for (size_t i = 0; i < third; ++i) first.push_back(steady[i]->*ser.field);
        for (size_t i = steady.size() - third; i < steady.size(); ++i)
            last.push_back(steady[i]->*ser.field);
        const double a = floor_of(first), b = floor_of(last);
        if (std::isnan(a) || std::isnan(b)) {
            checks.push_back({std::string(ser.name) + " flat", true, "not exported by the server"});
            continue;
        }
        const double allowed = a * (1 + ser.rel) + ser.abs;
        checks.push_back(
            {std::string(ser.name) + " flat", b <= allowed,
             fmt::format("floor {:.1f}{} early, {:.1f}{} late (at most {:.1f})", a / ser.scale,
                         ser.unit, b / ser.scale, ser.unit, allowed / ser.scale)});
    }
    // KV blocks are not a "flat" series: under a sustained load the floor is the running
    // requests' working set, which rises with the queue. A leak shows instead as blocks held
    // while nothing runs or waits (the engine publishes all three in one snapshot).
    {
        int idle = 0, held = 0;
        double most = 0;
        for (const auto* s : steady) {
            if (std::isnan(s->kv_used) || s->running != 0 || s->waiting != 0) continue;
            ++idle;
            held += s->kv_used > 0;
            most = std::max(most, s->kv_used);
        }
        if (idle > 0)
            checks.push_back({"KV blocks free whenever idle", held == 0,
                              fmt::format("{} of {} idle samples held blocks (at most {:.0f})",
                                          held, idle, most)});
    }
    // Back to idle: no block held, no descriptor or thread more than before the load.
    if (!std::isnan(idle_after.kv_used))
        checks.push_back(
            {"KV blocks all free after the load",
             idle_after.kv_used == 0 && idle_after.running == 0 && idle_after.waiting == 0,
             fmt::format("{:.0f} in use, {:.0f} running, {:.0f} waiting", idle_after.kv_used,
                         idle_after.running, idle_after.waiting)});
    if (!std::isnan(idle_after.fds) && !std::isnan(idle_before.fds))
        checks.push_back(
            {"descriptors back to idle", idle_after.fds <= idle_before.fds + 2,
             fmt::format("{:.0f} before the load, {:.0f} after", idle_before.fds, idle_after.fds)});
    if (!std::isnan(idle_after.threads) && !std::isnan(idle_before.threads))
        checks.push_back({"threads back to idle", idle_after.threads <= idle_before.threads,
                          fmt::format("{:.0f} before the load, {:.0f} after", idle_before.threads,
                                      idle_after.threads)});
    int over = 0;
    double running_max = 0;
    for (const auto* s : steady) {
        over += s->waiting > 0;
        running_max = std::max(running_max, std::isnan(s->running) ? 0 : s->running);
    }
    bool passed = true;
    for (const auto& c : checks) passed &= c.ok;

    json j;
    j["duration_s"] = load_s;
    j["warmup_s"] = warmup;
    j["concurrency"] = o.concurrency;
    j["burst_concurrency"] = o.concurrency * o.burst_factor;
    j["running_max"] = running_max;
    j["samples_over_capacity"] = over;  // requests waiting: the server was full
    j["samples_after_warmup"] = steady.size();
    for (int k = 0; k < kOutcomes; ++k) j["outcomes"][outcome_name(Outcome(k))] = t[size_t(k)];
    for (int s = 0; s < kScenarios; ++s)
        for (int k = 0; k < kOutcomes; ++k)
            if (counts[size_t(s)][size_t(k)])
                j["by_scenario"][scenario_name(Scenario(s))][outcome_name(Outcome(k))] =
                    counts[size_t(s)][size_t(k)];
    j["problems"] = problems;
    auto num = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
    auto idle = [&](const Sample& s) {
        return json{{"rss_bytes", num(s.rss)},
                    {"open_fds", num(s.fds)},
                    {"threads", num(s.threads)},
                    {"kv_used_blocks", num(s.kv_used)}};
    };
    j["idle_before"] = idle(idle_before);
    j["idle_after"] = idle(idle_after);
    j["series"] = json::array();
    for (const auto& s : samples)
        j["series"].push_back({{"t", s.t},
                               {"health", s.health},
                               {"health_ms", s.health_ms},
                               {"rss_bytes", num(s.rss)},
                               {"open_fds", num(s.fds)},
                               {"threads", num(s.threads)},
                               {"kv_used_blocks", num(s.kv_used)},
                               {"running", num(s.running)},
                               {"waiting", num(s.waiting)},
                               {"connections", num(s.connections)}});
    for (const auto& c : checks)
        j["checks"].push_back({{"check", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    j["passed"] = passed;

    if (o.json_out) {
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf(
            "soak: %.0f s, %d clients (%d in bursts), server full in %d of %zu samples "
            "after warm-up, at most %.0f running\n",
            load_s, o.concurrency, o.concurrency * o.burst_factor, over, steady.size(),
            running_max);
        std::printf("%-12s", "");
        for (int k = 0; k < kOutcomes; ++k) std::printf(" %12s", outcome_name(Outcome(k)));
        std::printf("\n");
        for (int s = 0; s < kScenarios; ++s) {
            std::printf("%-12s", scenario_name(Scenario(s)));
            for (int k = 0; k < kOutcomes; ++k) std::printf(" %12ld", counts[size_t(s)][size_t(k)]);
            std::printf("\n");
        }
        for (const auto& c : checks)
            std::printf("%s %-36s %s\n", c.ok ? "ok  " : "FAIL", c.name.c_str(), c.detail.c_str());
        for (const auto& p : problems) std::printf("  %s\n", p.c_str());
    }
    std::fflush(stdout);
    if (!passed) {
        std::string failed;
        for (const auto& c : checks)
            if (!c.ok) failed += (failed.empty() ? "" : "; ") + c.name + " (" + c.detail + ")";
        throw ExitError("soak failed: " + failed);
    }
}

}  // namespace ferry::cli
