// The HTTP front of `ferry serve`: Boost.Beast over one Asio io_context, every connection a
// small state machine rather than a thread, so thousands of idle or streaming connections
// cost memory, not cores (see docs/server.md for why not thread-per-connection).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/service.h"

namespace ferry::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;              // 0: any free port (see HttpServer::port())
    std::string api_key;          // empty: no authentication
    bool public_metrics = false;  // /metrics without the key even when one is set
    int64_t max_body_bytes = 4 << 20;
    int io_threads = 1;
    std::vector<std::string> model_names;  // the first is the id /v1/models reports
    double grace_seconds = 10;             // SIGTERM: how long running requests may finish
    bool log_requests = true;              // one line per request on stderr
    bool handle_signals = true;            // SIGTERM/SIGINT start a graceful shutdown
};

class HttpServer {
  public:
    explicit HttpServer(ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds and starts serving on background threads. Until set_service, generation endpoints
    // and /health answer 503 (loading).
    Status start();
    int port() const;
    void set_service(Service* service);

    // Stops accepting, lets running requests finish for the grace period, aborts the rest,
    // then stops. Safe from any thread and from a signal handler's context via Asio.
    void shutdown();
    bool shutting_down() const;
    // Blocks until the server has fully stopped.
    void wait();

    struct Impl;  // public only so the connection code in the .cpp can name it

  private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace ferry::server
