// `ferry bench serve`: an HTTP load generator in the spirit of vLLM's benchmark_serving, for
// ferry or any OpenAI-compatible server (llama.cpp's, vLLM, ...). Requests arrive as a gamma
// process (burstiness 1 = Poisson) at each --request-rate, stream from /v1/completions or
// /v1/chat/completions, and each one's TTFT, inter-token gaps and end-to-end time are measured
// on the client side; goodput counts the requests that met the latency target.
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
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/bench_plot.h"
#include "cli/bench_soak.h"
#include "cli/commands.h"
#include "cli/http_client.h"
#include "cli/latency_slo.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct BenchServeOptions {
    std::string url = "http://127.0.0.1:8080";
    std::string api_key, model, dataset, endpoint, label, plot;
    int num_prompts = 100;
    int shared_prefix_len = 0;
    std::vector<std::string> request_rates{"inf"};
    double burstiness = 1.0;
    int max_concurrency = 64;
    std::vector<int> input_len{64, 64}, output_len{64, 64};
    bool ignore_eos = true;
    bool min_tokens = false;
    double temperature = 0;
    LatencySlo slo;
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
    int chunks = 0;      // stream events that carried text
    bool usage = false;  // the server reported token counts (else chunks are counted)
    double tpot() const { return output_tokens > 1 ? (e2e - ttft) / double(output_tokens - 1) : 0; }
};

// The text a streamed event carries: a completion's choices[0].text, a chat's delta content
// (or reasoning, which some servers stream apart and which is output all the same).
std::string event_text(const json& j, bool chat) {
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return "";
    const json& c = j["choices"][0];
    if (!c.is_object()) return "";
    if (!chat)
        return c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : "";
    if (!c.contains("delta") || !c["delta"].is_object()) return "";
    std::string out;
    for (const char* k : {"content", "reasoning_content", "reasoning"})
        if (c["delta"].contains(k) && c["delta"][k].is_string())
            out += c["delta"][k].get<std::string>();
    return out;
}

Result run_one(const Target& t, const std::string& path, const std::string& body,
               const std::string& api_key, bool chat, Clock::time_point deadline) {
    Result r;
    const auto t0 = Clock::now();
    const int fd = connect_to(t, 5.0);
    if (fd < 0) {
        r.error = "connect";
        return r;
    }
    if (!send_all(fd, http_request(t, "POST", path, body, api_key))) {
        close(fd);
        r.error = "send";
        return r;
    }
    ResponseStream in(fd);
    std::string buf;
    bool done = false;
    double last = 0;
    while (!done && in.next(buf, deadline)) {
        if (in.status() != 200) continue;  // read the error body whole
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
            std::string line = buf.substr(0, nl);
            buf.erase(0, nl + 1);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.rfind("data:", 0) != 0) continue;
            std::string data = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
            if (data == "[DONE]") {
                done = true;
                break;
            }
            auto j = json::parse(data, nullptr, false);
            if (j.is_discarded() || !j.is_object()) continue;
            if (j.contains("error")) {
                r.error = "error event";
                done = true;
                break;
            }
            if (j.contains("usage") && j["usage"].is_object()) {
                const json& u = j["usage"];
                auto count = [&](const char* k) {
                    return u.contains(k) && u[k].is_number_integer() ? u[k].get<int>() : 0;
                };
                r.output_tokens = count("completion_tokens");
                r.prompt_tokens = count("prompt_tokens");
                r.usage = u.contains("completion_tokens") && u["completion_tokens"].is_number();
            }
            if (!event_text(j, chat).empty()) {
                const double now = std::chrono::duration<double>(Clock::now() - t0).count();
                if (r.chunks++ == 0)
                    r.ttft = now;
                else
                    r.itl.push_back(now - last);
                last = now;
            }
        }
    }
    close(fd);
    r.e2e = std::chrono::duration<double>(Clock::now() - t0).count();
    if (in.status() != 0 && in.status() != 200) {
        r.error = std::to_string(in.status());
    } else if (!done && r.error.empty()) {
        // An OpenAI stream ends with [DONE]: one whose body ended without it is counted as failed.
        r.error = in.ended() ? "no [DONE]" : in.error().empty() ? "incomplete" : in.error();
    }
    if (!r.usage) r.output_tokens = r.chunks;
    r.ok = r.error.empty() && r.chunks > 0;
    if (r.error.empty() && !r.ok) r.error = "no text";
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

// One request of the workload: its body, and what the dataset says of it.
struct Workload {
    std::string route;  // "/v1/completions" or "/v1/chat/completions"
    bool chat = false;
    std::vector<std::string> bodies;
    std::vector<int> output_len;
};

// Fields a dataset line may carry for the request as it is: structured outputs and tools, in
// the dialects ferry's server takes.
constexpr const char* kPassThrough[] = {"response_format", "guided_json",    "guided_regex",
                                        "guided_choice",   "guided_grammar", "grammar",
                                        "json_schema",     "tools",          "tool_choice"};

// The requests of the `round`-th rate: each rate gets prompts of its own (the dataset's next
// lines, or fresh random words), so a later rate does not find the earlier one's in a prefix
// cache. The shared prefix is the same for all: it is meant to be cached.
Workload make_workload(const BenchServeOptions& o, const std::string& model, size_t round) {
    std::mt19937_64 rng(o.seed + round);
    auto draw = [&](const std::vector<int>& range) {
        int lo = range[0], hi = range.size() > 1 ? range[1] : range[0];
        return std::uniform_int_distribution<int>(std::min(lo, hi), std::max(lo, hi))(rng);
    };
    std::vector<json> lines;
    if (!o.dataset.empty()) {
        std::ifstream in = open_or_exit(o.dataset);
        std::string line;
        int line_no = 0;
        while (std::getline(in, line)) {
            ++line_no;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            auto bad = [&](const std::string& why) {
                return ExitError(fmt::format("{}: line {}: {}", o.dataset, line_no, why));
            };
            auto j = json::parse(line, nullptr, false);
            const bool has_prompt = j.is_object() && j.contains("prompt");
            const bool has_messages = j.is_object() && j.contains("messages");
            if (!has_prompt && !has_messages)
                throw bad(
                    "each line must be a JSON object with a \"prompt\" string or chat "
                    "\"messages\"");
            if (has_prompt && (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty()))
                throw bad("\"prompt\" must be a non-empty string");
            if (has_messages) {
                if (!j["messages"].is_array() || j["messages"].empty())
                    throw bad("\"messages\" must be a non-empty array");
                for (const auto& m : j["messages"])
                    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
                        !m.contains("content") || !m["content"].is_string())
                        throw bad("each message needs a \"role\" and a \"content\" string");
            }
            for (const char* key : {"output_len", "output_tokens", "max_tokens"})
                if (j.contains(key) && (!j[key].is_number_integer() || j[key].get<int64_t>() < 1 ||
                                        j[key].get<int64_t>() > (1 << 24)))
                    throw bad(fmt::format("\"{}\" must be a positive integer", key));
            lines.push_back(std::move(j));
        }
        if (lines.empty()) throw ExitError(o.dataset + ": no prompts in the file");
    }
    Workload w;
    bool any_messages = false, any_prompt = lines.empty();
    for (const auto& j : lines) (j.contains("messages") ? any_messages : any_prompt) = true;
    const std::string ep =
        o.endpoint.empty() ? (any_messages ? "chat" : "completions") : o.endpoint;
    if (ep == "chat" || ep == "/v1/chat/completions") {
        w.chat = true;
        w.route = "/v1/chat/completions";
    } else if (ep == "completions" || ep == "/v1/completions") {
        w.route = "/v1/completions";
    } else {
        throw ExitError(fmt::format("--endpoint: '{}' is not completions or chat", ep));
    }
    if (w.chat && any_prompt && !lines.empty())
        throw ExitError(o.dataset + ": the chat endpoint needs \"messages\" on every line");
    if (!w.chat && any_messages)
        throw ExitError(o.dataset +
                        ": \"messages\" lines need the chat endpoint (--endpoint chat)");

    static const char* words[] = {"river",  "stone", "light",  "market", "window",
                                  "garden", "quiet", "engine", "paper",  "cloud",
                                  "silver", "road",  "winter", "music"};
    // One text every request starts with (a system prompt, for chat), for the prefix cache.
    std::string prefix;
    {
        std::mt19937_64 prng(o.seed ^ 0x5eed);
        for (int k = 0; k < o.shared_prefix_len; ++k)
            prefix += (k ? " " : "") + std::string(words[prng() % 14]);
    }
    for (int i = 0; i < o.num_prompts; ++i) {
        json b = json::object();
        int out_len = draw(o.output_len);
        if (!lines.empty()) {
            const json& j = lines[(round * size_t(o.num_prompts) + size_t(i)) % lines.size()];
            if (w.chat)
                b["messages"] = j["messages"];
            else
                b["prompt"] = j["prompt"];
            for (const char* key : {"output_len", "output_tokens", "max_tokens"})
                if (j.contains(key)) {
                    out_len = j[key].get<int>();
                    break;
                }
            for (const char* key : kPassThrough)
                if (j.contains(key)) b[key] = j[key];
        } else {
            std::string p;
            const int n = draw(o.input_len);  // about one token per word for this vocabulary
            for (int k = 0; k < n; ++k) p += (k ? " " : "") + std::string(words[rng() % 14]);
            if (w.chat)
                b["messages"] = json::array({{{"role", "user"}, {"content", p}}});
            else
                b["prompt"] = p;
        }
        if (!prefix.empty()) {
            if (w.chat)
                b["messages"].insert(b["messages"].begin(),
                                     json{{"role", "system"}, {"content", prefix}});
            else
                b["prompt"] = prefix + " " + b["prompt"].get<std::string>();
        }
        b["max_tokens"] = out_len;
        b["temperature"] = o.temperature;
        if (o.ignore_eos) b["ignore_eos"] = true;
        if (o.min_tokens) b["min_tokens"] = out_len;
        b["stream"] = true;
        b["stream_options"] = {{"include_usage", true}};
        if (!model.empty()) b["model"] = model;
        w.bodies.push_back(b.dump());
        w.output_len.push_back(out_len);
    }
    if (round == 0 && !lines.empty() &&
        lines.size() < size_t(o.num_prompts) * o.request_rates.size())
        std::fprintf(stderr,
                     "bench serve: %s has %zu prompts for %zu requests; they are sent again in "
                     "turn (a server with a prefix cache may find them there)\n",
                     o.dataset.c_str(), lines.size(),
                     size_t(o.num_prompts) * o.request_rates.size());
    return w;
}

// The model the server names first, for servers that want the field (vLLM refuses a request
// without it); empty when it does not say.
std::string server_model(const Target& t, const std::string& key) {
    HttpReply r = fetch(t, "GET", route_path(t, "/v1/models"), "", key, 10);
    if (!r.complete || r.status != 200) return "";
    auto j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].is_object() || !j["data"][0].contains("id") ||
        !j["data"][0]["id"].is_string())
        return "";
    return j["data"][0]["id"].get<std::string>();
}

// One run of the workload at one request rate.
json run_at_rate(const BenchServeOptions& o, const Target& target, const Workload& w,
                 const std::string& rate_text, uint64_t seed) {
    const double rate = parse_request_rate(rate_text);
    const bool inf = rate == 0;
    std::mt19937_64 rng(seed);
    // Gamma intervals with shape = burstiness keep the mean rate; shape 1 is exponential (Poisson).
    std::gamma_distribution<double> gap(o.burstiness, inf ? 1.0 : 1.0 / (rate * o.burstiness));
    const std::string path = route_path(target, w.route);

    const size_t n = w.bodies.size();
    std::vector<Result> results(n);
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0;
    std::vector<std::thread> threads;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.timeout_s));
    auto next = start;
    for (size_t i = 0; i < n && Clock::now() < deadline; ++i) {
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
            results[i] = run_one(target, path, w.bodies[i], o.api_key, w.chat, deadline);
            std::lock_guard lk(mu);
            --in_flight;
            cv.notify_one();
        });
    }
    for (auto& t : threads) t.join();
    const double dur = std::chrono::duration<double>(Clock::now() - start).count();

    int completed = 0, failed = 0, good = 0, with_usage = 0, short_outputs = 0;
    long out_tokens = 0, in_tokens = 0;
    std::vector<double> ttft, tpot, itl, e2e;
    json errors = json::object(), requests = json::array();
    for (size_t i = 0; i < n; ++i) {
        const Result& r = results[i];
        json row = {{"ok", r.ok}};
        if (!r.ok) {
            ++failed;
            const std::string why = r.error.empty() ? "not sent" : r.error;
            errors[why] = errors.value(why, 0) + 1;
            row["error"] = why;
            requests.push_back(row);
            continue;
        }
        ++completed;
        with_usage += r.usage;
        short_outputs += r.output_tokens < w.output_len[i];
        out_tokens += r.output_tokens;
        in_tokens += r.prompt_tokens;
        ttft.push_back(r.ttft);
        e2e.push_back(r.e2e);
        if (r.output_tokens > 1) tpot.push_back(r.tpot());
        itl.insert(itl.end(), r.itl.begin(), r.itl.end());
        if (o.slo.met(r.ttft, r.tpot())) ++good;
        row.update({{"ttft_ms", r.ttft * 1e3},
                    {"tpot_ms", r.tpot() * 1e3},
                    {"e2e_ms", r.e2e * 1e3},
                    {"prompt_tokens", r.prompt_tokens},
                    {"output_tokens", r.output_tokens},
                    {"wanted_output_tokens", w.output_len[i]}});
        requests.push_back(row);
    }
    // Why requests failed goes to stderr whatever the format.
    for (const auto& [why, count] : errors.items())
        std::fprintf(stderr, "bench serve: %d request(s) failed: %s\n", count.get<int>(),
                     why.c_str());
    if (completed > 0 && with_usage < completed)
        std::fprintf(stderr,
                     "bench serve: %d of %d answers reported no token usage; their streamed "
                     "chunks were counted as tokens\n",
                     completed - with_usage, completed);
    if (short_outputs > 0)
        std::fprintf(stderr,
                     "bench serve: %d of %d answers were shorter than asked (the server stopped "
                     "early: EOS, a stop, or it does not take ignore_eos)\n",
                     short_outputs, completed);
    return {{"request_rate", rate_text},
            {"num_prompts", n},
            {"completed", completed},
            {"failed", failed},
            {"errors", errors},
            {"duration_s", dur},
            {"total_input_tokens", in_tokens},
            {"total_output_tokens", out_tokens},
            {"usage_reported", with_usage},
            {"short_outputs", short_outputs},
            {"request_throughput", completed / dur},
            {"output_throughput", double(out_tokens) / dur},
            {"goodput", good / dur},
            {"slo_met_fraction", n ? double(good) / double(n) : 0.0},
            {"ttft_ms", stats(ttft)},
            {"tpot_ms", stats(tpot)},
            {"itl_ms", stats(itl)},
            {"e2e_ms", stats(e2e)},
            {"requests", requests}};
}

void bench_serve(const BenchServeOptions& o) {
    const Target target = parse_http_url(o.url, "--base-url");
    for (const auto& r : o.request_rates) parse_request_rate(r);  // a bad one fails before any run
    const std::string model = o.model.empty() ? server_model(target, o.api_key) : o.model;
    json runs = json::array();
    std::string route;
    for (size_t k = 0; k < o.request_rates.size(); ++k) {
        const Workload w = make_workload(o, model, k);
        route = w.route;
        if (!o.json_out && o.request_rates.size() > 1)
            std::fprintf(stderr, "bench serve: request rate %s (%zu of %zu) ...\n",
                         o.request_rates[k].c_str(), k + 1, o.request_rates.size());
        runs.push_back(run_at_rate(o, target, w, o.request_rates[k], o.seed + k));
    }
    // One rate: the run's keys at the top, as before; several: a "runs" list beside the setup.
    json j = {{"bench", "serve"},
              {"label", o.label},
              {"base_url", o.url},
              {"endpoint", route},
              {"request_url",
               fmt::format("http://{}:{}{}",
                           target.host.find(':') != std::string::npos ? "[" + target.host + "]"
                                                                      : target.host,
                           target.port, route_path(target, route))},
              {"model", model},
              {"burstiness", o.burstiness},
              {"max_concurrency", o.max_concurrency},
              {"shared_prefix_len", o.shared_prefix_len},
              {"ignore_eos", o.ignore_eos},
              {"min_tokens", o.min_tokens},
              {"temperature", o.temperature},
              {"slo_ttft_ms", o.slo.ttft_ms},
              {"slo_tpot_ms", o.slo.tpot_ms}};
    if (runs.size() == 1)
        j.update(runs[0]);
    else
        j["runs"] = runs;
    int completed = 0;
    for (const auto& r : runs) completed += r["completed"].get<int>();
    if (!o.plot.empty()) write_plot(j, o.plot);
    if (o.json_out) {
        std::printf("%s\n", j.dump(2).c_str());
        std::fflush(stdout);
    } else if (runs.size() == 1) {
        const json& r = runs[0];
        const double dur = r["duration_s"].get<double>();
        std::printf(
            "completed %d, failed %d in %.2f s | %.2f req/s | %.1f output tok/s | goodput %.2f "
            "req/s\n",
            r["completed"].get<int>(), r["failed"].get<int>(), dur,
            r["request_throughput"].get<double>(), r["output_throughput"].get<double>(),
            r["goodput"].get<double>());
        std::printf("%-8s %10s %10s %10s %10s\n", "ms", "mean", "p50", "p90", "p99");
        for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
            std::printf("%-8s %10.1f %10.1f %10.1f %10.1f\n",
                        std::string(k).substr(0, std::strlen(k) - 3).c_str(),
                        r[k]["mean"].get<double>(), r[k]["p50"].get<double>(),
                        r[k]["p90"].get<double>(), r[k]["p99"].get<double>());
    } else {
        std::printf("%-8s %6s %6s %8s %10s %8s %9s %9s %9s %9s\n", "rate", "done", "failed",
                    "req/s", "out tok/s", "goodput", "ttft p50", "ttft p99", "tpot p50",
                    "tpot p99");
        for (const auto& r : runs)
            std::printf("%-8s %6d %6d %8.2f %10.1f %8.2f %9.1f %9.1f %9.1f %9.1f\n",
                        r["request_rate"].get<std::string>().c_str(), r["completed"].get<int>(),
                        r["failed"].get<int>(), r["request_throughput"].get<double>(),
                        r["output_throughput"].get<double>(), r["goodput"].get<double>(),
                        r["ttft_ms"]["p50"].get<double>(), r["ttft_ms"]["p99"].get<double>(),
                        r["tpot_ms"]["p50"].get<double>(), r["tpot_ms"]["p99"].get<double>());
    }
    if (completed == 0)
        throw ExitError(fmt::format("no request completed (is a server answering {}{}?)", o.url,
                                    route_path(target, route).substr(target.base_path.size())));
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
    auto o = std::make_shared<BenchServeOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "serve", "load a running OpenAI-compatible server (ferry serve, llama.cpp's, vLLM ...)");
    cmd->add_option("--base-url,--url", o->url,
                    "the server: http://HOST:PORT, or an OpenAI client's base URL (.../v1)")
        ->capture_default_str();
    cmd->add_option("--endpoint", o->endpoint,
                    "completions or chat (default: chat when the dataset has \"messages\")");
    cmd->add_option("--api-key", o->api_key);
    cmd->add_option("--model", o->model,
                    "model field of the requests (default: the first of GET /v1/models)");
    cmd->add_option("--label", o->label, "a name for this run in the JSON (which server, ...)");
    cmd->add_option("--num-prompts", o->num_prompts)
        ->capture_default_str()
        ->check(CLI::Range(1, 10000));
    cmd->add_option("--request-rate", o->request_rates,
                    "requests per second, or inf; several (1,2,4,inf) run one after another")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--burstiness", o->burstiness, "gamma shape of arrivals (1 = Poisson)")
        ->capture_default_str()
        ->check(CLI::Range(0.01, 100.0));
    cmd->add_option("--max-concurrency", o->max_concurrency, "requests in flight at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--shared-prefix-len", o->shared_prefix_len,
                    "every prompt starts with the same this many words (about a token each; a "
                    "system message for chat): the prefix cache's workload")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--input-len", o->input_len,
                    "prompt length in tokens after any shared prefix: N or MIN MAX")
        ->expected(1, 2);
    cmd->add_option("--output-len", o->output_len, "output length in tokens: N or MIN MAX")
        ->expected(1, 2);
    cmd->add_option("--dataset", o->dataset,
                    "JSONL of {\"prompt\": ...} or {\"messages\": [...]} lines, with an optional "
                    "\"output_len\" (used in turn, repeated when --num-prompts asks for more); "
                    "bench/datasets/chat-turns.jsonl is a chat workload");
    cmd->add_flag("--ignore-eos,!--no-ignore-eos", o->ignore_eos,
                  "ask for exactly max_tokens (ignore_eos; servers that do not take it stop "
                  "early, which the report counts)")
        ->capture_default_str();
    cmd->add_flag("--min-tokens", o->min_tokens,
                  "also send min_tokens = max_tokens, for servers that fix the length that way "
                  "(vLLM, llama-cpp-python's server)");
    cmd->add_option("--temperature", o->temperature)
        ->capture_default_str()
        ->check(CLI::Range(0.0, 2.0));
    o->slo.add_to(*cmd);
    cmd->add_option("--timeout", o->timeout_s, "stop sending and waiting after this many seconds")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 86400.0));
    cmd->add_option("--seed", o->seed)->capture_default_str();
    cmd->add_flag("--json", o->json_out, "print the results as JSON");
    add_plot_option(*cmd, o->plot);

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
