#include "cli/loopback_http.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"

namespace ferry::cli {

Target parse_loopback_url(const std::string& url) {
    std::string rest = url;
    if (rest.rfind("http://", 0) != 0) throw ExitError("--url must start with http://");
    rest = rest.substr(7);
    rest = rest.substr(0, rest.find('/'));
    auto colon = rest.rfind(':');
    // An IPv6 literal's own colons are inside the brackets.
    if (colon != std::string::npos && rest.find(']', colon) != std::string::npos)
        colon = std::string::npos;
    Target t{rest.substr(0, colon), 80};
    if (colon != std::string::npos) {
        const std::string port = rest.substr(colon + 1);
        if (port.empty() || port.size() > 5 ||
            port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
            std::stoi(port) > 65535)
            throw ExitError(fmt::format("--url: bad port '{}'", port));
        t.port = std::stoi(port);
    }
    if (!t.host.empty() && t.host.front() == '[') t.host = t.host.substr(1, t.host.size() - 2);
    if (t.host == "localhost") t.host = "127.0.0.1";
    if (t.host != "127.0.0.1" && t.host != "::1")
        throw ExitError("ferry bench serve only targets loopback (127.0.0.1, ::1, localhost)");
    return t;
}

int connect_to(const Target& t, double recv_timeout_s) {
    addrinfo hints{}, *ai = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &ai) != 0 || !ai)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) return -1;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(recv_timeout_s);
    tv.tv_usec = static_cast<suseconds_t>((recv_timeout_s - double(tv.tv_sec)) * 1e6);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

bool send_all(int fd, const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        sent += size_t(n);
    }
    return true;
}

std::string http_request(const Target& t, const std::string& method, const std::string& path,
                         const std::string& body, const std::string& api_key) {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + t.host + "\r\n";
    if (!body.empty() || method == "POST")
        req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n";
    if (!api_key.empty()) req += "Authorization: Bearer " + api_key + "\r\n";
    req += "Connection: close\r\n\r\n";
    return req + body;
}

namespace {

// The body of a chunked answer, or false while it is not all there.
bool dechunk(const std::string& raw, std::string& out) {
    out.clear();
    size_t at = 0;
    for (;;) {
        const size_t eol = raw.find("\r\n", at);
        if (eol == std::string::npos) return false;
        const size_t size = std::strtoull(raw.c_str() + at, nullptr, 16);
        if (size == 0) return true;
        if (raw.size() < eol + 2 + size + 2) return false;
        out.append(raw, eol + 2, size);
        at = eol + 2 + size + 2;
    }
}

}  // namespace

HttpReply fetch(const Target& t, const std::string& method, const std::string& path,
                const std::string& body, const std::string& api_key, double timeout_s) {
    using Clock = std::chrono::steady_clock;
    HttpReply r;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    const int fd = connect_to(t, std::min(timeout_s, 1.0));
    if (fd < 0) {
        r.error = "connect";
        return r;
    }
    if (!send_all(fd, http_request(t, method, path, body, api_key))) {
        close(fd);
        r.error = "send";
        return r;
    }
    std::string raw;
    char buf[16384];
    size_t head_end = std::string::npos;
    bool chunked = false;
    long long length = -1;
    r.error = "timeout";
    while (Clock::now() < deadline) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (n <= 0) {
            // The server closed: complete when the body had no other framing.
            r.complete = head_end != std::string::npos && !chunked && length < 0;
            if (r.complete) r.body = raw.substr(head_end);
            r.error = r.complete ? "" : "closed";
            break;
        }
        raw.append(buf, size_t(n));
        if (head_end == std::string::npos) {
            const size_t e = raw.find("\r\n\r\n");
            if (e == std::string::npos) continue;
            head_end = e + 4;
            if (raw.compare(0, 9, "HTTP/1.1 ") == 0 || raw.compare(0, 9, "HTTP/1.0 ") == 0)
                r.status = std::atoi(raw.c_str() + 9);
            std::string head = raw.substr(0, e);
            for (auto& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
            chunked = head.find("transfer-encoding: chunked") != std::string::npos;
            if (auto cl = head.find("content-length:"); cl != std::string::npos)
                length = std::atoll(head.c_str() + cl + 15);
        }
        if (chunked && dechunk(raw.substr(head_end), r.body)) {
            r.complete = true;
            break;
        }
        if (!chunked && length >= 0 && raw.size() >= head_end + size_t(length)) {
            r.body = raw.substr(head_end, size_t(length));
            r.complete = true;
            break;
        }
    }
    if (r.complete) r.error.clear();
    close(fd);
    return r;
}

}  // namespace ferry::cli
