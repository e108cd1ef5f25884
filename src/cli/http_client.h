// The HTTP/1.1 client `ferry bench serve` and its soak use: plain sockets, one request a
// connection, plain http (a benchmark measures the server, not a TLS stack). The soak sends
// hostile traffic, so it only targets this machine (is_loopback); the load generator may be
// aimed at any OpenAI-compatible server.
#pragma once

#include <chrono>
#include <string>

namespace ferry::cli {

struct Target {
    std::string host;
    int port = 0;
    std::string base_path;  // the URL's path without a trailing '/', e.g. "" or "/v1"
};

// "http://host[:port][/path]"; `option` names the flag in errors (https, a bad port).
Target parse_http_url(const std::string& url, const std::string& option = "--url");
bool is_loopback(const Target& t);
// The path to request for an API route ("/v1/completions") under the target's base path, so
// that both "http://h:p" and an OpenAI client's "http://h:p/v1" work.
std::string route_path(const Target& t, const std::string& route);

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

// An answer read as it arrives (a stream of server-sent events): the status line and head,
// then the body's bytes with any chunked framing removed, in the pieces the socket gives.
// Servers differ here: ferry closes the connection at the end of a stream, llama.cpp's
// server and uvicorn send it chunked, whose size lines may fall anywhere in an event.
class ResponseStream {
  public:
    using Clock = std::chrono::steady_clock;
    explicit ResponseStream(int fd) : fd_(fd) {}
    // Appends the next body bytes to `out`. False once the body has ended (ended() true) or
    // the connection failed or the deadline passed (error() says which).
    bool next(std::string& out, Clock::time_point deadline);
    int status() const { return status_; }  // 0 until the head has arrived
    bool ended() const { return ended_; }
    const std::string& error() const { return error_; }

  private:
    bool read_more(Clock::time_point deadline);
    // Chunked framing: takes what raw_ holds, appends the data it carries to `out`, keeps a
    // partial size line or chunk for the next call. False on a malformed size line.
    bool dechunk(std::string& out);
    int fd_;
    std::string raw_;  // received and not yet consumed
    bool head_done_ = false, chunked_ = false, ended_ = false;
    long long length_ = -1, body_seen_ = 0;
    int status_ = 0;
    // Chunked framing: bytes left in the current chunk, and whether its CRLF is still due.
    long long chunk_left_ = 0;
    bool chunk_crlf_due_ = false;
    std::string error_;
};

}  // namespace ferry::cli
