// The HTTP front end end to end: the input is the bytes a client sends on one connection
// (request line, headers, body, possibly several pipelined requests), written to a real
// `ferry serve` listener on loopback with a model-free service behind it (fuzz_service.h), then
// the write side is closed and the answer read to the end. A server that never closes the
// connection, crashes or trips a sanitizer is a finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "fuzz_service.h"
#include "fuzz_target.h"
#include "server/http_server.h"

namespace {

ferry::server::HttpServer& server() {
    static ferry::fuzz::FuzzService service;
    static auto srv = [] {
        ferry::server::ServerOptions o;
        o.port = 0;
        o.api_key = "sk-fuzz";
        o.max_body_bytes = 64 << 10;
        o.model_names = {"m", "alias"};
        o.log_requests = false;
        o.handle_signals = false;
        auto s = std::make_unique<ferry::server::HttpServer>(o);
        if (!s->start().ok()) {
            std::fprintf(stderr, "fuzz_http: the server did not start\n");
            std::abort();
        }
        s->set_service(&service);
        return s;
    }();
    return *srv;
}

}  // namespace

FERRY_FUZZ_TARGET(http)(const uint8_t* data, size_t size) {
    const int port = server().port();
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // Every run is a new connection that this side closes first, so each leaves a TIME_WAIT
    // for a minute: at thousands of runs a second one source address's ~28k ephemeral ports
    // run out (connect: EADDRNOTAVAIL). Spreading the runs over 256 loopback source addresses
    // gives each its own ports; a connect that still finds none free waits, it is no finding.
    static uint32_t run = 0;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f010000u | (run++ % 256u + 1u));  // 127.1.0.1-127.1.1.0
    int fd = -1;
    for (int tries = 0;; ++tries) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0 &&
            connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
            break;
        const int err = errno;
        if (fd >= 0) close(fd);
        if (err != EADDRNOTAVAIL || tries == 200) {
            std::fprintf(stderr, "fuzz_http: no connection to the server: %s\n",
                         std::strerror(err));
            std::abort();
        }
        usleep(50000);
    }
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    // The server may answer (and close) before reading everything: a failed send is fine.
    for (size_t at = 0; at < size;) {
        const ssize_t n = send(fd, data + at, size - at, MSG_NOSIGNAL);
        if (n <= 0) break;
        at += size_t(n);
    }
    shutdown(fd, SHUT_WR);
    char buf[16384];
    for (;;) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            std::fprintf(stderr, "fuzz_http: no end of the answer after 10 s\n");
            std::abort();
        }
        break;  // closed (or reset)
    }
    close(fd);
    return 0;
}
