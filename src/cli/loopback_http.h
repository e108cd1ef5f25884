// The HTTP client `ferry bench serve` and its soak use: plain sockets to a server on this
// machine (loopback only, so a benchmark cannot be aimed elsewhere), one request a connection.
#pragma once

#include <string>

namespace ferry::cli {

struct Target {
    std::string host;
    int port = 0;
};

// "http://127.0.0.1:8080[/...]"; anything but loopback (127.0.0.1, ::1, localhost) exits.
Target parse_loopback_url(const std::string& url);

// A connected socket whose reads time out after recv_timeout_s, or -1.
int connect_to(const Target& t, double recv_timeout_s);
bool send_all(int fd, const std::string& bytes);

// The request's head (and body): Host, Content-Type: application/json, Content-Length,
// the key when there is one, Connection: close.
std::string http_request(const Target& t, const std::string& method, const std::string& path,
                         const std::string& body, const std::string& api_key);

struct HttpReply {
    int status = 0;         // 0: no status line came back
    std::string body;       // de-chunked
    bool complete = false;  // the whole body arrived (Content-Length, chunk terminator or close)
    std::string error;      // "connect", "send", "timeout", "closed", when not complete
};

// One request, the whole answer read (up to timeout_s in all).
HttpReply fetch(const Target& t, const std::string& method, const std::string& path,
                const std::string& body, const std::string& api_key, double timeout_s);

}  // namespace ferry::cli
