#include "server/http_server.h"

#include <sys/resource.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/auth.h"
#include "server/chat_page.h"
#include "server/openai_schema.h"
#include "server/prometheus.h"
#include "server/sse.h"

namespace ferry::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::string_view sv(beast::string_view s) {
    return {s.data(), s.size()};
}

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// X-Request-Id is echoed into logs and JSON, so only a short printable token is honoured.
bool sane_request_id(std::string_view s) {
    if (s.empty() || s.size() > 128) return false;
    for (char c : s)
        if (!(std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.' || c == ':'))
            return false;
    return true;
}

std::string random_id() {
    static std::atomic<uint64_t> counter{0};
    static const uint64_t salt = std::random_device{}();
    uint64_t x = (salt << 20) ^ counter.fetch_add(1);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return fmt::format("{:016x}", x);
}

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
    ServerOptions opt;
    asio::io_context ioc;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
    tcp::acceptor acceptor{ioc};
    asio::signal_set signals{ioc};
    asio::steady_timer drain_timer{ioc};
    std::vector<std::thread> threads;
    std::atomic<Service*> service{nullptr};
    std::atomic<bool> draining{false};
    std::atomic<bool> stopped{false};
    std::atomic<int> active_generations{0};
    // Requests being prepared off the I/O threads (Session::prepare); a drain waits for them.
    std::atomic<int> preparing{0};
    // Where a request's parsing runs: a chat template over a long conversation, a megabyte
    // prompt's tokenization or a new grammar's compilation (seconds for a large enum) would
    // otherwise hold the I/O thread, and with it every other connection's stream.
    asio::thread_pool prep{2};
    Clock::time_point drain_start;
    std::atomic<bool> aborted_all{false};
    int bound_port = 0;

    std::atomic<int64_t> connections{0};
    std::atomic<uint64_t> rejected{0}, disconnects{0};
    std::mutex responses_mu;
    std::map<std::pair<std::string, int>, uint64_t> responses;
    std::map<std::string, engine::Histogram> durations;

    void count_response(const char* route, int status, double seconds) {
        std::lock_guard<std::mutex> lk(responses_mu);
        ++responses[{route, status}];
        auto [it, fresh] = durations.try_emplace(route);
        if (fresh) it->second = engine::Histogram::latency_seconds();
        it->second.observe(seconds);
    }
    std::mutex log_mu;

    explicit Impl(ServerOptions o) : opt(std::move(o)) {}

    const std::string& model_id() const {
        static const std::string none = "ferry";
        return opt.model_names.empty() ? none : opt.model_names.front();
    }

    void log(const std::string& line) {
        if (!opt.log_requests) return;
        // A line can quote a client's bytes (a path, a parse error) cut at a length limit:
        // it goes out as valid UTF-8 on one line, so a log reader neither chokes nor is fooled.
        std::string clean = valid_utf8(line);
        for (char& c : clean)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
        std::lock_guard<std::mutex> lk(log_mu);
        std::fputs(clean.c_str(), stderr);
        std::fputc('\n', stderr);
    }

    void do_accept();
    void begin_shutdown();
    void drain_tick();
};

namespace {

using Impl = HttpServer::Impl;

// One generation request (all its prompts and their n choices) on one connection.
struct Gen {
    GenRequest req;
    std::vector<engine::RequestId> ids;
    std::vector<Choice> choices;
    std::vector<size_t> lp_sent;       // logprob entries already streamed, per choice
    std::vector<size_t> text_len;      // bytes streamed, per choice (completions text_offset)
    std::vector<size_t> content_sent;  // tool calling: bytes of each choice's text streamed
    int remaining = 0;
    Usage usage;
    std::vector<bool> prompt_counted;
    std::string id;
    int64_t created = 0;
    bool rejected = false;  // refused after some prompts were queued: ignore their events
    bool first_token_seen = false;
    double ttft_ms = 0;
};

class Session : public std::enable_shared_from_this<Session> {
  public:
    Session(tcp::socket sock, std::shared_ptr<Impl> srv)
        : stream_(std::move(sock)), srv_(std::move(srv)) {
        srv_->connections.fetch_add(1);
    }
    ~Session() { srv_->connections.fetch_sub(1); }

    void start() { do_read(); }

  private:
    beast::tcp_stream stream_;
    std::shared_ptr<Impl> srv_;
    beast::flat_buffer buf_;
    std::optional<http::request_parser<http::string_body>> parser_;
    http::request<http::string_body> req_;
    std::shared_ptr<http::response<http::string_body>> res_;
    std::string request_id_;
    Clock::time_point t0_;
    bool keep_alive_ = true;

    // Generation state (touched only on this connection's strand).
    std::shared_ptr<Gen> gen_;
    bool streaming_ = false;
    bool headers_sent_ = false;
    bool client_gone_ = false;
    bool writing_ = false;
    bool stream_done_ = false;  // all chunks, [DONE] and the terminator are queued
    std::string pending_, inflight_;
    char watch_buf_[256];
    int status_ = 0;
    const char* route_label_ = "other";  // the route matched, for /metrics

    void do_read() {
        parser_.emplace();
        parser_->body_limit(uint64_t(srv_->opt.max_body_bytes));
        parser_->header_limit(64 * 1024);
        // Idle keep-alive connections and slow senders are dropped rather than held forever.
        stream_.expires_after(std::chrono::seconds(120));
        http::async_read_header(stream_, buf_, *parser_,
                                beast::bind_front_handler(&Session::on_header, shared_from_this()));
    }

    // A client that sends `Expect: 100-continue` (curl does for bodies over 1 MB) waits for a
    // 100 before its body, a second if none comes; its Content-Length is already checked
    // against --max-body-bytes here, so a body too large is refused without being sent.
    void on_header(beast::error_code ec, size_t n) {
        if (ec) return on_read(ec, n);
        auto self = shared_from_this();
        auto read_body = [this, self] {
            http::async_read(stream_, buf_, *parser_,
                             beast::bind_front_handler(&Session::on_read, self));
        };
        const auto& h = parser_->get();
        if (auto it = h.find(http::field::expect);
            it != h.end() && beast::iequals(it->value(), "100-continue") && !parser_->is_done()) {
            static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            return asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                                     [this, self, read_body](beast::error_code wec, size_t) {
                                         if (wec) return close();
                                         read_body();
                                     });
        }
        read_body();
    }

    void on_read(beast::error_code ec, size_t) {
        if (ec == http::error::end_of_stream || ec == asio::error::eof ||
            ec == asio::error::connection_reset || ec == beast::error::timeout ||
            ec == asio::error::operation_aborted)
            return close();
        t0_ = Clock::now();
        route_label_ = "other";
        request_id_ = random_id();
        if (ec == http::error::body_limit) {
            keep_alive_ = false;
            ApiError e;
            e.status = 413;
            e.code = "request_too_large";
            e.message = fmt::format("the request body exceeds {} bytes (--max-body-bytes)",
                                    srv_->opt.max_body_bytes);
            return send_error(e, "?", "?");
        }
        if (ec) {  // malformed HTTP: answer once, then hang up
            keep_alive_ = false;
            return send_error(bad_request(fmt::format("malformed HTTP request: {}", ec.message())),
                              "?", "?");
        }
        req_ = parser_->release();
        keep_alive_ = req_.keep_alive();
        if (auto it = req_.find("X-Request-Id");
            it != req_.end() && sane_request_id(sv(it->value())))
            request_id_ = std::string(sv(it->value()));
        stream_.expires_never();
        guarded([&] { route(); });
    }

    // What a handler throws ends its own request (a 500, or an error event once a stream has
    // begun) and never the I/O thread that serves every other connection.
    template <class F>
    void guarded(F&& f) {
        try {
            f();
        } catch (const std::exception& e) {
            internal_error(e.what());
        }
    }

    // `work` (a request's parsing, which may take long) on the server's preparation pool, then
    // `then(result)` back on this connection's strand; what `work` throws ends the request as
    // a handler's throw does. Nothing else of this session runs meanwhile: its next read
    // starts only after the response.
    template <class Work, class Then>
    void prepare(Work work, Then then) {
        using Result = decltype(work());
        // Counted from here until `then` has run (or the work is dropped at a hard stop), so a
        // drain never stops between the two; `then` starts its generation before the count
        // drops.
        struct Counted {
            std::atomic<int>* n;
            explicit Counted(std::atomic<int>* c) : n(c) { n->fetch_add(1); }
            Counted(Counted&& o) noexcept : n(std::exchange(o.n, nullptr)) {}
            Counted(const Counted&) = delete;
            ~Counted() {
                if (n) n->fetch_sub(1);
            }
        };
        asio::post(srv_->prep, [self = shared_from_this(), exec = stream_.get_executor(),
                                work = std::move(work), then = std::move(then),
                                counted = Counted(&srv_->preparing)]() mutable {
            std::optional<Result> result;
            std::string failure;
            try {
                result.emplace(work());
            } catch (const std::exception& e) {
                failure = e.what();
            } catch (...) {
                failure = "an unknown exception";
            }
            try {
                asio::post(exec, [self, result = std::move(result), failure = std::move(failure),
                                  then = std::move(then), counted = std::move(counted)]() mutable {
                    if (result)
                        self->guarded([&] { then(std::move(*result)); });
                    else
                        self->guarded([&] { self->internal_error(failure); });
                });
            } catch (...) {  // out of memory for the handler: the connection just closes
            }
        });
    }

    void internal_error(const std::string& what) {
        srv_->log(fmt::format("{} internal error: {}", request_id_, what));
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.code = "internal_error";
        e.message = "the server failed on this request: " + what;
        keep_alive_ = false;
        if (auto g = gen_) {
            if (Service* b = srv_->service.load())
                for (auto id : g->ids) b->abort(id);
            if (g->remaining > 0) {  // finish_generation has not counted it out
                g->remaining = 0;
                srv_->active_generations.fetch_sub(1);
            }
            gen_.reset();
        }
        if (stream_done_ || client_gone_) return;
        if (headers_sent_) {
            queue_chunk(sse_event(error_body(e)));
            queue_chunk(sse_done());
            pending_ += "0\r\n\r\n";
            stream_done_ = true;
            flush();
            return;
        }
        send_error(e);
    }

    std::string target_path() const {
        std::string_view t = sv(req_.target());
        auto q = t.find('?');
        return std::string(q == std::string_view::npos ? t : t.substr(0, q));
    }

    void route() {
        const std::string path = target_path();
        const auto method = req_.method();
        const bool get = method == http::verb::get || method == http::verb::head;
        const bool post = method == http::verb::post;

        enum class R {
            Page,
            Health,
            Metrics,
            Models,
            Model,
            Completions,
            Chat,
            Tokenize,
            Detokenize,
            None
        };
        R r = R::None;
        bool want_get = true;
        if (path == "/" || path == "/index.html")
            r = R::Page;
        else if (path == "/health")
            r = R::Health;
        else if (path == "/metrics")
            r = R::Metrics;
        else if (path == "/v1/models")
            r = R::Models;
        else if (path.rfind("/v1/models/", 0) == 0)
            r = R::Model;
        else if (path == "/v1/completions")
            r = R::Completions, want_get = false;
        else if (path == "/v1/chat/completions")
            r = R::Chat, want_get = false;
        else if (path == "/tokenize")
            r = R::Tokenize, want_get = false;
        else if (path == "/detokenize")
            r = R::Detokenize, want_get = false;
        static constexpr const char* kLabels[] = {"/",
                                                  "/health",
                                                  "/metrics",
                                                  "/v1/models",
                                                  "/v1/models/{id}",
                                                  "/v1/completions",
                                                  "/v1/chat/completions",
                                                  "/tokenize",
                                                  "/detokenize",
                                                  "other"};
        route_label_ = kLabels[static_cast<int>(r)];
        if (method == http::verb::options) return send_text(204, "", "text/plain");
        if (r == R::None) {
            ApiError e;
            e.status = 404;
            e.type = "not_found_error";
            e.message = fmt::format("no route for {} {}", std::string(sv(req_.method_string())),
                                    path.substr(0, 200));
            return send_error(e);
        }
        if ((want_get && !get) || (!want_get && !post)) {
            ApiError e;
            e.status = 405;
            e.message = fmt::format("{} takes {}", path, want_get ? "GET" : "POST");
            return send_error(e, {}, {}, want_get ? "GET, HEAD" : "POST");
        }
        if (r == R::Page) return send_text(200, chat_page_html(), "text/html; charset=utf-8");
        if (r == R::Health) {
            if (srv_->draining) return send_unavailable("the server is shutting down");
            const Service* b = srv_->service.load();
            if (!b) return send_unavailable("the model is loading");
            if (auto why = b->failure()) return send_unavailable(*why);
            return send_json(200, json{{"status", "ok"}});
        }
        const bool keyed =
            authorized(sv(req_[http::field::authorization]), srv_->opt.api_key) ||
            (!srv_->opt.api_key.empty() && req_.find("x-api-key") != req_.end() &&
             authorized("Bearer " + std::string(sv(req_["x-api-key"])), srv_->opt.api_key));
        if (r == R::Metrics) {
            // Metrics say what a server runs and how busy it is: behind the key, unless the
            // operator exposes them (--public-metrics) for a scraper without one.
            if (!keyed && !srv_->opt.public_metrics) return send_unauthorized();
            Service* b = srv_->service.load();
            ServerCounters c;
            c.connections_open = srv_->connections.load();
            c.rejected_queue_full = srv_->rejected.load();
            c.client_disconnects = srv_->disconnects.load();
            c.process = read_process_stats();
            {
                std::lock_guard<std::mutex> lk(srv_->responses_mu);
                c.responses = srv_->responses;
                c.duration = srv_->durations;
            }
            return send_text(
                200,
                render_prometheus(b ? b->metrics() : engine::EngineMetrics{}, c, srv_->model_id()),
                "text/plain; version=0.0.4; charset=utf-8");
        }
        // Everything below is the API proper: keyed, and only once a model is there.
        if (!keyed) return send_unauthorized();
        if (srv_->draining) return send_unavailable("the server is shutting down");
        Service* b = srv_->service.load();
        if (!b) return send_unavailable("the model is loading");
        switch (r) {
            case R::Models:
                return models(*b, "");
            case R::Model:
                return models(*b, path.substr(std::strlen("/v1/models/")));
            case R::Tokenize:
                return tokenize(*b);
            case R::Detokenize:
                return detokenize(*b);
            case R::Completions:
                return generate(*b, Endpoint::Completions);
            case R::Chat:
                return generate(*b, Endpoint::Chat);
            default:
                return;
        }
    }

    void send_unauthorized() {
        ApiError e;
        e.status = 401;
        e.type = "authentication_error";
        e.code = "invalid_api_key";
        e.message =
            "a valid API key is required: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'";
        send_error(e);
    }

    json model_card(const Service& b) const {
        return json{{"id", srv_->model_id()},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "ferry"},
                    {"max_model_len", b.max_model_len()}};
    }

    void models(const Service& b, const std::string& one) {
        if (one.empty())
            return send_json(200, json{{"object", "list"}, {"data", json::array({model_card(b)})}});
        for (const auto& n : srv_->opt.model_names)
            if (n == one) return send_json(200, model_card(b));
        ApiError e;
        e.status = 404;
        e.type = "not_found_error";
        e.code = "model_not_found";
        e.message = fmt::format("The model '{}' does not exist", one.substr(0, 200));
        send_error(e);
    }

    // Why the body's `model` is not one this server serves, if it is not.
    static std::optional<ApiError> model_error(const json& body,
                                               const std::vector<std::string>& names) {
        auto it = body.find("model");
        if (it == body.end() || it->is_null()) return std::nullopt;
        if (!it->is_string()) return bad_request("'model' must be a string", "model");
        for (const auto& n : names)
            if (n == it->get<std::string>()) return std::nullopt;
        ApiError e;
        e.status = 404;
        e.type = "not_found_error";
        e.code = "model_not_found";
        e.message =
            fmt::format("The model '{}' does not exist", it->get<std::string>().substr(0, 200));
        return e;
    }

    bool check_model(const json& body) {
        auto e = model_error(body, srv_->opt.model_names);
        if (e) send_error(*e);
        return !e;
    }

    // A 200's JSON, or the error to send instead.
    struct Answer {
        std::optional<json> ok;
        ApiError err;
        static Answer error(ApiError e) { return {std::nullopt, std::move(e)}; }
    };

    static Answer tokenize_answer(const std::string& text, const Service& b,
                                  const std::vector<std::string>& names) {
        ApiError err;
        auto body = parse_body(text, err);
        if (!body) return Answer::error(err);
        if (auto e = model_error(*body, names)) return Answer::error(*e);
        bool add_special = true;
        if (auto it = body->find("add_special_tokens"); it != body->end() && !it->is_null()) {
            if (!it->is_boolean())
                return Answer::error(
                    bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
            add_special = it->get<bool>();
        }
        if (auto it = body->find("messages"); it != body->end()) {
            // Reuse the chat validation by asking for a one-token chat completion.
            json probe = *body;
            probe.erase("add_special_tokens");
            probe["max_tokens"] = 1;
            auto g = parse_generation(probe, Endpoint::Chat, b, names, err);
            if (!g) {
                if (err.param == "max_tokens")
                    err = bad_request("the conversation fills the context", "messages");
                return Answer::error(err);
            }
            return {json{{"tokens", g->prompts[0]},
                         {"count", g->prompts[0].size()},
                         {"max_model_len", b.max_model_len()}},
                    {}};
        }
        auto it = body->find("prompt");
        if (it == body->end())
            return Answer::error(
                bad_request("'prompt' (a string) or 'messages' is required", "prompt"));
        if (!it->is_string())
            return Answer::error(bad_request("'prompt' must be a string", "prompt"));
        for (const auto& [key, v] : body->items())  // never a field dropped without a word
            if (key != "model" && key != "prompt" && key != "add_special_tokens")
                return Answer::error(bad_request(
                    fmt::format("Unrecognized request argument supplied: {}", key.substr(0, 80)),
                    key));
        auto ids = b.encode(it->get<std::string>(), add_special);
        return {json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", b.max_model_len()}},
                {}};
    }

    void tokenize(const Service& b) {
        prepare([&b, body = std::move(req_.body()),
                 names = &srv_->opt.model_names] { return tokenize_answer(body, b, *names); },
                [this](Answer a) {
                    if (!a.ok) return send_error(a.err);
                    send_json(200, *a.ok);
                });
    }

    void detokenize(const Service& b) {
        ApiError err;
        auto body = parse_body(req_.body(), err);
        if (!body) return send_error(err);
        if (!check_model(*body)) return;
        auto it = body->find("tokens");
        if (it == body->end() || !it->is_array())
            return send_error(bad_request("'tokens' must be an array of token ids", "tokens"));
        std::vector<int32_t> ids;
        for (const json& t : *it) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= b.n_vocab())
                return send_error(bad_request(
                    fmt::format("'tokens' must hold integers in [0, {})", b.n_vocab()), "tokens"));
            ids.push_back(int32_t(t.get<int64_t>()));
        }
        send_json(200, json{{"prompt", valid_utf8(b.decode(ids))}});
    }

    // ---- generation ----------------------------------------------------------------------

    struct Prepared {
        std::optional<GenRequest> req;
        ApiError err;
    };

    void generate(Service& b, Endpoint kind) {
        prepare(
            [&b, kind, body = std::move(req_.body()), names = &srv_->opt.model_names] {
                Prepared p;
                if (auto j = parse_body(body, p.err))
                    p.req = parse_generation(*j, kind, b, *names, p.err);
                return p;
            },
            [this, &b, kind](Prepared p) {
                if (!p.req) return send_error(p.err);
                // Prepared after the grace period aborted every running request: nothing would
                // abort this one before the hard stop.
                if (srv_->aborted_all) return send_unavailable("the server is shutting down");
                start_generation(b, kind, std::move(*p.req));
            });
    }

    void start_generation(Service& b, Endpoint kind, GenRequest parsed) {
        auto g = std::make_shared<Gen>();
        g->req = std::move(parsed);
        g->id = (kind == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + request_id_;
        g->created = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
        const int n = g->req.params.n;
        const size_t np = g->req.prompts.size();
        g->choices.resize(np * size_t(n));
        g->lp_sent.assign(g->choices.size(), 0);
        g->text_len.assign(g->choices.size(), 0);
        g->content_sent.assign(g->choices.size(), 0);
        g->prompt_counted.assign(np, false);
        g->remaining = int(g->choices.size());
        gen_ = g;
        streaming_ = g->req.stream;
        keep_alive_ = false;  // one generation per connection keeps disconnect watching simple
        srv_->active_generations.fetch_add(1);

        auto self = shared_from_this();
        auto exec = stream_.get_executor();
        for (size_t p = 0; p < np; ++p) {
            std::vector<int32_t> ids = g->req.prompts[p];
            g->usage.prompt_tokens += int(ids.size());
            auto cb = [self, g, p, exec](const engine::TokenEvent& ev) {
                asio::post(exec,
                           [self, g, p, ev] { self->guarded([&] { self->on_event(g, p, ev); }); });
            };
            auto id = b.add_request(std::move(ids), g->req.params, std::move(cb));
            if (!id) {
                g->rejected = true;
                for (auto x : g->ids) b.abort(x);
                gen_.reset();
                srv_->active_generations.fetch_sub(1);
                ApiError e = bad_request(id.error().message);
                if (id.error().code == ErrorCode::Unavailable) {
                    e.status = 429;
                    e.type = "rate_limit_error";
                    e.code = "queue_full";
                    srv_->rejected.fetch_add(1);
                } else if (id.error().code == ErrorCode::Down) {
                    e.status = 503;
                    e.type = "server_error";
                    e.code = "service_unavailable";
                }
                return send_error(e);
            }
            g->ids.push_back(*id);
        }
        watch_disconnect();
    }

    // A read that only completes when the client hangs up (or sends bytes we ignore): the
    // signal to abort at once instead of generating into a dead socket.
    void watch_disconnect() {
        stream_.socket().async_read_some(
            asio::buffer(watch_buf_), [self = shared_from_this()](beast::error_code ec, size_t) {
                if (!self->gen_) return;
                if (!ec) return self->watch_disconnect();
                if (ec == asio::error::operation_aborted && self->stream_done_) return;
                self->client_went_away();
            });
    }

    void client_went_away() {
        if (client_gone_ || !gen_) return;
        client_gone_ = true;
        if (gen_->remaining > 0) {
            srv_->disconnects.fetch_add(1);
            if (Service* b = srv_->service.load())
                for (auto id : gen_->ids) b->abort(id);
        }
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream_.socket().close(ec);
    }

    void on_event(const std::shared_ptr<Gen>& g, size_t prompt, const engine::TokenEvent& ev) {
        if (g->rejected || g != gen_) return;
        const size_t ci = prompt * size_t(g->req.params.n) + size_t(ev.index);
        if (ci >= g->choices.size()) return;
        Choice& c = g->choices[ci];
        if (c.finish != engine::FinishReason::None) return;
        if (!g->first_token_seen && ev.token >= 0) {
            g->first_token_seen = true;
            g->ttft_ms = ms_since(t0_);
        }
        if (ev.prompt_logprobs && !c.prompt_lp) {
            c.prompt_lp = ev.prompt_logprobs;
            if (g->req.echo && g->req.logprobs)
                prepend_prompt_logprobs(c, g->req.prompts[prompt], *c.prompt_lp);
        }
        if (ev.token >= 0) {
            c.tokens.push_back(ev.token);
            if (g->req.logprobs) {
                c.logprobs.push_back(ev.logprob);
                c.top_logprobs.push_back(ev.top_logprobs);
            }
        }
        c.text += ev.text;
        c.completion_tokens = std::max(c.completion_tokens, ev.completion_tokens);
        if (ev.finished) {
            c.finish = ev.finish_reason == engine::FinishReason::None ? engine::FinishReason::Stop
                                                                      : ev.finish_reason;
            if (c.finish == engine::FinishReason::Error) {
                // The whole answer fails: the other prompts' requests stop too.
                c.error = ev.error;
                if (Service* b = srv_->service.load())
                    for (size_t p = 0; p < g->ids.size(); ++p)
                        if (p != prompt) b->abort(g->ids[p]);
            }
            if (!g->prompt_counted[prompt]) {
                g->prompt_counted[prompt] = true;
                g->usage.cached_tokens += ev.cached_tokens;
            }
            g->remaining--;
        }
        if (streaming_ && !client_gone_ && c.finish != engine::FinishReason::Error)
            stream_event(*g, ci, ev);
        if (g->remaining == 0) finish_generation();
    }

    // With tools, content streams until a call may be starting; the calls go out whole when
    // the choice ends, as one tool_calls delta, then the finish reason "tool_calls".
    void stream_tool_event(Gen& g, size_t ci, const engine::TokenEvent& ev) {
        Choice& c = g.choices[ci];
        const bool first = !c.started;
        size_t& sent = g.content_sent[ci];
        auto send_text = [&](const std::string& text, engine::FinishReason fr) {
            const bool is_first = !c.started;
            c.started = true;
            queue_chunk(sse_event(dump(stream_chunk(g.req, g.id, g.created, srv_->model_id(),
                                                    int(ci), text, is_first, nullptr, fr))));
        };
        if (!ev.finished) {
            const size_t safe = streamable_content(c.text, g.req.tool_format);
            if (safe > sent || first) {
                send_text(safe > sent ? c.text.substr(sent, safe - sent) : std::string(),
                          engine::FinishReason::None);
                sent = std::max(sent, safe);
            }
            return;
        }
        ParsedToolOutput p = parse_tool_calls(c.text, g.req.tool_format);
        if (p.calls.empty()) {
            send_text(c.text.substr(std::min(sent, c.text.size())), c.finish);
            return;
        }
        const bool is_first = !c.started;
        c.started = true;
        queue_chunk(sse_event(dump(tool_calls_chunk(g.req, g.id, g.created, srv_->model_id(),
                                                    int(ci), p.calls, is_first))));
        json end = stream_chunk(g.req, g.id, g.created, srv_->model_id(), int(ci), "", false,
                                nullptr, c.finish);
        if (c.finish == engine::FinishReason::Stop)
            end["choices"][0]["finish_reason"] = "tool_calls";
        queue_chunk(sse_event(dump(end)));
    }

    void stream_event(Gen& g, size_t ci, const engine::TokenEvent& ev) {
        if (g.req.parses_tool_calls()) return stream_tool_event(g, ci, ev);
        Choice& c = g.choices[ci];
        std::string text = ev.text;
        const bool first = !c.started;
        if (first && g.req.kind == Endpoint::Completions && g.req.echo)
            text = g.req.prompt_texts[ci / size_t(g.req.params.n)] + text;
        json lp = nullptr;
        if (g.req.logprobs && g.lp_sent[ci] < c.tokens.size()) {
            lp = logprobs_json(g.req.kind, *srv_->service.load(), c, g.lp_sent[ci], c.tokens.size(),
                               g.text_len[ci]);
            g.lp_sent[ci] = c.tokens.size();
        }
        const bool has_news = !text.empty() || !lp.is_null() || ev.finished ||
                              (first && g.req.kind == Endpoint::Chat);
        if (!has_news) return;
        c.started = true;
        g.text_len[ci] += text.size();
        json chunk = stream_chunk(g.req, g.id, g.created, srv_->model_id(), int(ci), text, first,
                                  lp, ev.finished ? c.finish : engine::FinishReason::None);
        if (first && g.req.prompt_logprobs >= 0 && c.prompt_lp) {  // vLLM's: on the first chunk
            const size_t p = ci / size_t(g.req.params.n);
            json plp = prompt_logprobs_json(*srv_->service.load(), g.req.prompts[p], *c.prompt_lp);
            if (g.req.kind == Endpoint::Chat)
                chunk["prompt_logprobs"] = std::move(plp);
            else
                chunk["choices"][0]["prompt_logprobs"] = std::move(plp);
        }
        queue_chunk(sse_event(dump(chunk)));
    }

    void finish_generation() {
        auto g = gen_;
        srv_->active_generations.fetch_sub(1);
        for (const auto& c : g->choices) g->usage.completion_tokens += c.completion_tokens;
        const char* reason =
            g->choices.empty() ? "stop" : engine::finish_reason_name(g->choices[0].finish);
        // The client is still here, so an abort came from the server: its shutdown's grace
        // period ran out. That is an error to report, not a completion to pass off as one.
        bool failed = false;
        for (const auto& c : g->choices)
            failed |= !client_gone_ && c.finish == engine::FinishReason::Abort;
        ApiError down;
        down.status = 503;
        down.type = "server_error";
        down.code = "shutting_down";
        down.message = "the server is shutting down; the request was aborted before it finished";
        for (const auto& c : g->choices)
            if (c.finish == engine::FinishReason::Error) {
                failed = true;
                down.status = 500;
                down.code = "internal_error";
                down.message = "the request failed while generating: " + c.error;
                break;
            }
        if (failed && !streaming_) {
            stream_done_ = true;
            return send_error(down, std::string(sv(req_.method_string())), target_path());
        }
        status_ = 200;
        // nginx's 499 for a client that left, in the log as in /metrics.
        const int logged = client_gone_ ? 499 : 200;
        srv_->count_response(route_label_, logged, ms_since(t0_) / 1000.0);
        srv_->log(
            fmt::format("{} {} {} {} prompt={} output={} ttft={:.1f}ms e2e={:.1f}ms finish={}{}",
                        request_id_, std::string(sv(req_.method_string())), target_path(), logged,
                        g->usage.prompt_tokens, g->usage.completion_tokens, g->ttft_ms,
                        ms_since(t0_), reason, client_gone_ ? " (client gone)" : ""));
        if (client_gone_) return;
        if (streaming_) {
            // The 200 is long sent: the error goes as an event, as OpenAI streams errors.
            if (failed) queue_chunk(sse_event(error_body(down)));
            if (g->req.include_usage)
                queue_chunk(sse_event(
                    dump(usage_chunk(g->req, g->id, g->created, srv_->model_id(), g->usage))));
            queue_chunk(sse_done());
            pending_ += "0\r\n\r\n";
            stream_done_ = true;
            flush();
            return;
        }
        json resp = full_response(g->req, *srv_->service.load(), g->id, g->created,
                                  srv_->model_id(), g->choices, g->usage);
        stream_done_ = true;
        send_json(200, resp, /*log=*/false);
    }

    // Chunked transfer encoding frames each SSE event so the connection needs no length.
    void queue_chunk(const std::string& data) {
        if (!headers_sent_) {
            headers_sent_ = true;
            pending_ += fmt::format(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                "Cache-Control: no-cache\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n"
                "X-Request-Id: {}\r\nAccess-Control-Allow-Origin: *\r\n\r\n",
                request_id_);
        }
        pending_ += fmt::format("{:x}\r\n", data.size());
        pending_ += data;
        pending_ += "\r\n";
        flush();
    }

    void flush() {
        if (writing_ || client_gone_) return;
        if (pending_.empty()) {
            if (stream_done_) close();
            return;
        }
        writing_ = true;
        inflight_.swap(pending_);
        pending_.clear();
        asio::async_write(stream_.socket(), asio::buffer(inflight_),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->writing_ = false;
                              self->inflight_.clear();
                              if (ec) return self->client_went_away();
                              self->flush();
                          });
    }

    // ---- plain responses -----------------------------------------------------------------

    void send_unavailable(const std::string& why) {
        ApiError e;
        e.status = 503;
        e.type = "service_unavailable";
        e.message = why;
        send_error(e);
    }

    // `allow`: the methods a 405's route takes (RFC 9110 requires the header with it).
    void send_error(const ApiError& e, const std::string& method = {}, const std::string& path = {},
                    const char* allow = nullptr) {
        auto res = make_response(e.status, error_body(e), "application/json");
        if (allow) res->set(http::field::allow, allow);
        if (e.status == 429) res->set(http::field::retry_after, "1");
        if (e.status == 503) res->set(http::field::retry_after, "5");
        if (e.status == 401) res->set(http::field::www_authenticate, "Bearer");
        log_plain(e.status, method, path, e.message);
        write_response(res);
    }

    void send_json(int status, const json& j, bool log = true) {
        auto res = make_response(status, dump(j), "application/json");
        if (log) log_plain(status, {}, {}, {});
        write_response(res);
    }

    void send_text(int status, std::string body, const char* type) {
        auto res = make_response(status, std::move(body), type);
        log_plain(status, {}, {}, {});
        write_response(res);
    }

    void log_plain(int status, std::string method, std::string path, const std::string& msg) {
        status_ = status;
        srv_->count_response(route_label_, status, ms_since(t0_) / 1000.0);
        if (method.empty()) method = std::string(sv(req_.method_string()));
        if (path.empty()) path = target_path();
        srv_->log(fmt::format("{} {} {} {} e2e={:.1f}ms{}{}", request_id_, method,
                              path.substr(0, 200), status, ms_since(t0_), msg.empty() ? "" : " ",
                              msg.substr(0, 200)));
    }

    std::shared_ptr<http::response<http::string_body>> make_response(int status, std::string body,
                                                                     const char* type) {
        auto res = std::make_shared<http::response<http::string_body>>(
            http::int_to_status(unsigned(status)), 11);
        res->set(http::field::server, "ferry");
        res->set(http::field::content_type, type);
        res->set("X-Request-Id", request_id_);
        res->set(http::field::access_control_allow_origin, "*");
        // A preflight gets back the headers it asks for: browser SDKs send their own
        // (the openai JS SDK's X-Stainless-*, OpenAI-Organization, ...).
        const auto asked = req_.find(http::field::access_control_request_headers);
        res->set(http::field::access_control_allow_headers,
                 asked != req_.end() && !asked->value().empty()
                     ? std::string(sv(asked->value()))
                     : std::string("Authorization, Content-Type, X-Request-Id, X-Api-Key"));
        res->set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
        res->keep_alive(keep_alive_ && !srv_->draining);
        if (req_.method() != http::verb::head) res->body() = std::move(body);
        res->prepare_payload();
        return res;
    }

    void write_response(std::shared_ptr<http::response<http::string_body>> res) {
        res_ = res;
        stream_.expires_after(std::chrono::seconds(60));
        http::async_write(stream_, *res_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec || !self->res_->keep_alive()) return self->close();
                              self->res_.reset();
                              self->do_read();
                          });
    }

    void close() {
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        stream_.socket().close(ec);
    }
};

}  // namespace

void HttpServer::Impl::do_accept() {
    acceptor.async_accept(asio::make_strand(ioc), [self = shared_from_this()](beast::error_code ec,
                                                                              tcp::socket sock) {
        if (!self->acceptor.is_open()) return;
        if (ec) {
            // Out of descriptors: back off briefly instead of spinning on accept.
            auto t = std::make_shared<asio::steady_timer>(self->ioc, std::chrono::milliseconds(50));
            t->async_wait([self, t](beast::error_code) { self->do_accept(); });
            return;
        }
        sock.set_option(tcp::no_delay(true), ec);
        std::make_shared<Session>(std::move(sock), self)->start();
        self->do_accept();
    });
}

void HttpServer::Impl::begin_shutdown() {
    if (draining.exchange(true)) return;
    log("shutting down: no new requests; running ones get the grace period");
    beast::error_code ec;
    acceptor.close(ec);
    signals.cancel(ec);
    drain_start = Clock::now();
    drain_tick();
}

void HttpServer::Impl::drain_tick() {
    const double waited = ms_since(drain_start) / 1000.0;
    // Preparing first: a prepared request starts its generation before it stops counting as
    // preparing, so this order never sees neither (with several I/O threads).
    const int preparing_now = preparing.load();
    if (preparing_now + active_generations.load() == 0 || waited > opt.grace_seconds + 5) {
        // A moment for the last responses to leave the socket buffers, then stop.
        drain_timer.expires_after(std::chrono::milliseconds(100));
        drain_timer.async_wait([self = shared_from_this()](beast::error_code) {
            self->stopped = true;
            self->work.reset();
            self->ioc.stop();
        });
        return;
    }
    if (waited > opt.grace_seconds && !aborted_all) {
        aborted_all = true;
        log(fmt::format("grace period over: aborting {} running requests",
                        active_generations.load()));
        if (Service* b = service.load()) b->abort_all();
    }
    drain_timer.expires_after(std::chrono::milliseconds(50));
    drain_timer.async_wait([self = shared_from_this()](beast::error_code) { self->drain_tick(); });
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

HttpServer::~HttpServer() {
    if (!impl_->stopped) {
        impl_->stopped = true;
        impl_->work.reset();
        impl_->ioc.stop();
    }
    wait();
}

Status HttpServer::start() {
    auto& m = *impl_;
    // Each connection is a descriptor; the default soft limit (often 1024) would cap them.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    beast::error_code ec;
    auto addr = asio::ip::make_address(m.opt.host, ec);
    if (ec) {
        // A name (localhost, the machine's own): one of its addresses.
        tcp::resolver resolver(m.ioc);
        auto found = resolver.resolve(m.opt.host, "", ec);
        if (ec || found.empty())
            return make_error("--host {}: not an address or a name that resolves ({})", m.opt.host,
                              ec.message());
        // IPv4 first: "localhost" should mean 127.0.0.1, where clients look by default.
        addr = found.begin()->endpoint().address();
        for (const auto& e : found)
            if (e.endpoint().address().is_v4()) {
                addr = e.endpoint().address();
                break;
            }
    }
    tcp::endpoint ep(addr, uint16_t(m.opt.port));
    m.acceptor.open(ep.protocol(), ec);
    if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) m.acceptor.bind(ep, ec);
    if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return make_error("cannot listen on {}:{}: {}", m.opt.host, m.opt.port, ec.message());
    m.bound_port = m.acceptor.local_endpoint().port();
    m.work.emplace(m.ioc.get_executor());
    if (m.opt.handle_signals) {
        m.signals.add(SIGTERM);
        m.signals.add(SIGINT);
        m.signals.async_wait([self = impl_](beast::error_code e, int) {
            if (!e) self->begin_shutdown();
        });
    }
    m.do_accept();
    for (int i = 0; i < std::max(1, m.opt.io_threads); ++i)
        m.threads.emplace_back([self = impl_] {
            // The last line of defence (sessions catch their own): a handler that still throws
            // is logged and the loop goes on serving.
            for (;;) {
                try {
                    self->ioc.run();
                    return;
                } catch (const std::exception& e) {
                    self->log(fmt::format("internal error in the I/O loop: {}", e.what()));
                }
            }
        });
    return Status::Ok();
}

int HttpServer::port() const {
    return impl_->bound_port;
}
void HttpServer::set_service(Service* service) {
    impl_->service = service;
}

void HttpServer::shutdown() {
    asio::post(impl_->ioc, [self = impl_] { self->begin_shutdown(); });
}

bool HttpServer::shutting_down() const {
    return impl_->draining || impl_->stopped;
}

void HttpServer::wait() {
    for (auto& t : impl_->threads)
        if (t.joinable()) t.join();
    // A preparation the drain gave up on still uses the service: it ends before wait() does;
    // ones not started are dropped.
    impl_->prep.stop();
    impl_->prep.join();
}

}  // namespace ferry::server
