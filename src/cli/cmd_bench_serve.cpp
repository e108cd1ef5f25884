// `ferry bench serve`: an HTTP load generator in the spirit of vLLM's benchmark_serving. Requests
// arrive as a gamma process (burstiness 1 = Poisson) at --request-rate, stream from
// /v1/completions, and each one's TTFT, inter-token gaps and end-to-end time are measured on the
// client side. Loopback only and bounded in count and time, so it cannot be aimed elsewhere.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/bench_soak.h"
#include "cli/commands.h"
#include "cli/loopback_http.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct BenchServeOptions {
    std::string url = "http://127.0.0.1:8080";
    std::string api_key, model, dataset;
    int num_prompts = 100;
    std::string request_rate = "inf";
    double burstiness = 1.0;
    int max_concurrency = 64;
    std::vector<int> input_len{64, 64}, output_len{64, 64};
    double slo_ttft_ms = 0, slo_tpot_ms = 0;
    double timeout_s = 600;
    uint64_t seed = 0;
    bool json_out = false;
};

struct Result {
    bool ok = false;
    std::string error;
    double ttft = 0, e2e = 0;
    std::vector<double> itl;
    int output_tokens = 0, prompt_tokens = 0;
    double tpot() const { return output_tokens > 1 ? (e2e - ttft) / double(output_tokens - 1) : 0; }
};

Result run_one(const Target& t, const std::string& body, const std::string& api_key,
               Clock::time_point deadline) {
    Result r;
    auto t0 = Clock::now();
    const int fd = connect_to(t, 5.0);
    if (fd < 0) {
        r.error = "connect";
        return r;
    }
    if (!send_all(fd, http_request(t, "POST", "/v1/completions", body, api_key))) {
        close(fd);
        r.error = "send";
        return r;
    }
    std::string buf;
    char tmp[8192];
    bool header = true, done = false;
    double last = 0;
    while (!done && Clock::now() < deadline) {
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) break;
        buf.append(tmp, size_t(n));
        if (header) {
            auto e = buf.find("\r\n\r\n");
            if (e == std::string::npos) continue;
            if (buf.compare(0, 12, "HTTP/1.1 200") != 0) {
                r.error = buf.substr(9, 3);
                break;
            }
            buf.erase(0, e + 4);
            header = false;
        }
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
            std::string line = buf.substr(0, nl);
            buf.erase(0, nl + 1);
            if (line.rfind("data: ", 0) != 0) continue;
            std::string data = line.substr(6);
            if (!data.empty() && data.back() == '\r') data.pop_back();
            if (data == "[DONE]") {
                done = true;
                break;
            }
            auto j = json::parse(data, nullptr, false);
            if (j.is_discarded()) continue;
            if (j.contains("usage") && j["usage"].is_object()) {
                r.output_tokens = j["usage"].value("completion_tokens", 0);
                r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
            }
            if (j.contains("choices") && !j["choices"].empty() &&
                !j["choices"][0].value("text", "").empty()) {
                double now = std::chrono::duration<double>(Clock::now() - t0).count();
                if (r.ttft == 0)
                    r.ttft = now;
                else
                    r.itl.push_back(now - last);
                last = now;
            }
        }
    }
    close(fd);
    r.e2e = std::chrono::duration<double>(Clock::now() - t0).count();
    r.ok = done;
    if (!done && r.error.empty()) r.error = "incomplete";
    return r;
}

json stats(std::vector<double> v) {
    if (v.empty()) return json{{"mean", 0}, {"p50", 0}, {"p90", 0}, {"p99", 0}};
    std::sort(v.begin(), v.end());
    double s = 0;
    for (double x : v) s += x;
    auto pct = [&](double p) {
        return v[std::min(v.size() - 1,
                          size_t(std::ceil(p / 100.0 * double(v.size()))) - (p > 0 ? 1 : 0))] *
               1000.0;
    };
    return json{{"mean", s / double(v.size()) * 1000.0},
                {"p50", pct(50)},
                {"p90", pct(90)},
                {"p99", pct(99)}};
}

void bench_serve(const BenchServeOptions& o) {
    const Target target = parse_loopback_url(o.url);
    std::mt19937_64 rng(o.seed);
    auto draw = [&](const std::vector<int>& range) {
        int lo = range[0], hi = range.size() > 1 ? range[1] : range[0];
        return std::uniform_int_distribution<int>(std::min(lo, hi), std::max(lo, hi))(rng);
    };
    std::vector<std::string> prompts;
    if (!o.dataset.empty()) {
        std::ifstream in = open_or_exit(o.dataset);
        std::string line;
        int line_no = 0;
        while (int(prompts.size()) < o.num_prompts && std::getline(in, line)) {
            ++line_no;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            auto j = json::parse(line, nullptr, false);
            if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string() ||
                j["prompt"].get<std::string>().empty())
                throw ExitError(fmt::format(
                    "{}: line {}: each line must be a JSON object with a non-empty \"prompt\" "
                    "string",
                    o.dataset, line_no));
            prompts.push_back(j["prompt"]);
        }
        if (prompts.empty()) throw ExitError(o.dataset + ": no {\"prompt\": ...} lines");
    }
    static const char* words[] = {"river",  "stone", "light",  "market", "window",
                                  "garden", "quiet", "engine", "paper",  "cloud",
                                  "silver", "road",  "winter", "music"};
    std::vector<std::string> bodies;
    for (int i = 0; i < o.num_prompts; ++i) {
        std::string p;
        if (!prompts.empty()) {
            p = prompts[size_t(i) % prompts.size()];
        } else {
            int n = draw(o.input_len);  // about one token per word for this vocabulary
            for (int k = 0; k < n; ++k) p += (k ? " " : "") + std::string(words[rng() % 14]);
        }
        json b = {{"prompt", p},      {"max_tokens", draw(o.output_len)},
                  {"temperature", 0}, {"ignore_eos", true},
                  {"stream", true},   {"stream_options", {{"include_usage", true}}}};
        if (!o.model.empty()) b["model"] = o.model;
        bodies.push_back(b.dump());
    }
    const double rate = parse_request_rate(o.request_rate);
    const bool inf = rate == 0;
    // Gamma intervals with shape = burstiness keep the mean rate; shape 1 is exponential (Poisson).
    std::gamma_distribution<double> gap(o.burstiness, inf ? 1.0 : 1.0 / (rate * o.burstiness));

    std::vector<Result> results(size_t(o.num_prompts));
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0;
    std::vector<std::thread> threads;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.timeout_s));
    auto next = start;
    for (int i = 0; i < o.num_prompts && Clock::now() < deadline; ++i) {
        if (!inf) {
            next += std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(gap(rng)));
            std::this_thread::sleep_until(next);
        }
        {
            std::unique_lock lk(mu);
            cv.wait(lk, [&] { return in_flight < o.max_concurrency; });
            ++in_flight;
        }
        threads.emplace_back([&, i] {
            results[size_t(i)] = run_one(target, bodies[size_t(i)], o.api_key, deadline);
            std::lock_guard lk(mu);
            --in_flight;
            cv.notify_one();
        });
    }
    for (auto& t : threads) t.join();
    const double dur = std::chrono::duration<double>(Clock::now() - start).count();

    int completed = 0, failed = 0, good = 0;
    long out_tokens = 0, in_tokens = 0;
    std::vector<double> ttft, tpot, itl, e2e;
    json errors = json::object();
    for (const auto& r : results) {
        if (!r.ok) {
            ++failed;
            errors[r.error.empty() ? "not sent" : r.error] =
                errors.value(r.error.empty() ? "not sent" : r.error, 0) + 1;
            continue;
        }
        ++completed;
        out_tokens += r.output_tokens;
        in_tokens += r.prompt_tokens;
        ttft.push_back(r.ttft);
        e2e.push_back(r.e2e);
        if (r.output_tokens > 1) tpot.push_back(r.tpot());
        itl.insert(itl.end(), r.itl.begin(), r.itl.end());
        if ((o.slo_ttft_ms <= 0 || r.ttft * 1000 <= o.slo_ttft_ms) &&
            (o.slo_tpot_ms <= 0 || r.tpot() * 1000 <= o.slo_tpot_ms))
            ++good;
    }
    json j = {{"num_prompts", o.num_prompts},
              {"completed", completed},
              {"failed", failed},
              {"errors", errors},
              {"duration_s", dur},
              {"request_rate", o.request_rate},
              {"burstiness", o.burstiness},
              {"max_concurrency", o.max_concurrency},
              {"total_input_tokens", in_tokens},
              {"total_output_tokens", out_tokens},
              {"request_throughput", completed / dur},
              {"output_throughput", double(out_tokens) / dur},
              {"goodput", good / dur},
              {"slo_ttft_ms", o.slo_ttft_ms},
              {"slo_tpot_ms", o.slo_tpot_ms},
              {"ttft_ms", stats(ttft)},
              {"tpot_ms", stats(tpot)},
              {"itl_ms", stats(itl)},
              {"e2e_ms", stats(e2e)}};
    // Why requests failed goes to stderr whatever the format; none completing is an error.
    for (const auto& [why, count] : errors.items())
        std::fprintf(stderr, "bench serve: %d request(s) failed: %s\n", count.get<int>(),
                     why.c_str());
    auto finish = [&] {
        if (completed == 0)
            throw ExitError(
                fmt::format("no request completed (is `ferry serve` running at {}?)", o.url));
    };
    if (o.json_out) {
        std::printf("%s\n", j.dump(2).c_str());
        std::fflush(stdout);
        return finish();
    }
    std::printf(
        "completed %d, failed %d in %.2f s | %.2f req/s | %.1f output tok/s | goodput %.2f req/s\n",
        completed, failed, dur, completed / dur, double(out_tokens) / dur, good / dur);
    std::printf("%-8s %10s %10s %10s %10s\n", "ms", "mean", "p50", "p90", "p99");
    for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
        std::printf("%-8s %10.1f %10.1f %10.1f %10.1f\n",
                    std::string(k).substr(0, std::strlen(k) - 3).c_str(),
                    j[k]["mean"].get<double>(), j[k]["p50"].get<double>(),
                    j[k]["p90"].get<double>(), j[k]["p99"].get<double>());
    finish();
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
    auto o = std::make_shared<BenchServeOptions>();
    CLI::App* cmd = bench.add_subcommand("serve", "load a running `ferry serve` (loopback only)");
    cmd->add_option("--url", o->url, "server base URL")->capture_default_str();
    cmd->add_option("--api-key", o->api_key);
    cmd->add_option("--model", o->model, "model field of the requests");
    cmd->add_option("--num-prompts", o->num_prompts)
        ->capture_default_str()
        ->check(CLI::Range(1, 10000));
    cmd->add_option("--request-rate", o->request_rate, "requests per second, or inf")
        ->capture_default_str();
    cmd->add_option("--burstiness", o->burstiness, "gamma shape of arrivals (1 = Poisson)")
        ->capture_default_str()
        ->check(CLI::Range(0.01, 100.0));
    cmd->add_option("--max-concurrency", o->max_concurrency, "requests in flight at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--input-len", o->input_len, "prompt length in tokens: N or MIN MAX")
        ->expected(1, 2);
    cmd->add_option("--output-len", o->output_len, "output length in tokens: N or MIN MAX")
        ->expected(1, 2);
    cmd->add_option("--dataset", o->dataset,
                    "JSONL file of {\"prompt\": ...} lines (used in turn, repeated when "
                    "--num-prompts asks for more)");
    cmd->add_option("--slo-ttft-ms", o->slo_ttft_ms, "goodput: TTFT at most this");
    cmd->add_option("--slo-tpot-ms", o->slo_tpot_ms, "goodput: TPOT at most this");
    cmd->add_option("--timeout", o->timeout_s, "stop sending and waiting after this many seconds")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 86400.0));
    cmd->add_option("--seed", o->seed)->capture_default_str();
    cmd->add_flag("--json", o->json_out, "print the results as JSON");

    // The soak: the same target, a different job (docs/testing.md).
    auto soak = std::make_shared<SoakOptions>();
    auto soak_for = std::make_shared<std::string>();
    auto soak_opt = cmd->add_option("--soak", *soak_for,
                                    "soak for this long instead (90s, 30m, 2h): overload bursts, "
                                    "faults, and the server's memory, descriptors, threads and "
                                    "KV blocks watched every second");
    cmd->add_option("--soak-clients", soak->concurrency, "soak: clients between bursts")
        ->capture_default_str()
        ->check(CLI::Range(1, 512));
    cmd->add_option("--burst-factor", soak->burst_factor,
                    "soak: clients in a burst = clients x this")
        ->capture_default_str()
        ->check(CLI::Range(1, 16));
    cmd->add_option("--burst-every", soak->burst_every_s, "soak: seconds between burst starts")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 3600.0));
    cmd->add_option("--burst-seconds", soak->burst_s, "soak: how long a burst lasts")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 3600.0));
    cmd->add_option(
           "--warmup", soak->warmup_s,
           "soak: seconds before the trends count (default: a fifth of the run, at most 60)")
        ->check(CLI::Range(0.0, 86400.0));
    cmd->add_option("--request-timeout", soak->request_timeout_s,
                    "soak: an accepted request not answered in this many seconds is lost")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 3600.0));
    auto in_len = cmd->get_option("--input-len");
    auto out_len = cmd->get_option("--output-len");
    cmd->callback([o, soak, soak_for, soak_opt, in_len, out_len] {
        if (soak_opt->count() == 0) return bench_serve(*o);
        SoakOptions s = *soak;
        s.duration_s = parse_duration(*soak_for);
        s.url = o->url;
        s.api_key = o->api_key;
        s.model = o->model;
        s.seed = o->seed;
        s.json_out = o->json_out;
        if (in_len->count()) s.input_len = o->input_len;
        if (out_len->count()) s.output_len = o->output_len;
        run_soak(s);
    });
}

}  // namespace ferry::cli
