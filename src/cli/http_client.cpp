#include "cli/http_client.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"

namespace ferry::cli {

Target parse_http_url(const std::string& url, const std::string& option) {
    std::string rest = url;
    if (rest.rfind("https://", 0) == 0)
        throw ExitError(fmt::format(
            "{}: https is not supported (the benchmark speaks plain http; aim it at the server's "
            "http port, or a local TLS-terminating proxy)",
            option));
    if (rest.rfind("http://", 0) != 0) throw ExitError(option + " must start with http://");
    rest = rest.substr(7);
    const size_t slash = rest.find('/');
    Target t;
    if (slash != std::string::npos) {
        t.base_path = rest.substr(slash);
        while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
        rest = rest.substr(0, slash);
    }
    auto colon = rest.rfind(':');
    // An IPv6 literal's own colons are inside the brackets.
    if (colon != std::string::npos && rest.find(']', colon) != std::string::npos)
        colon = std::string::npos;
    t.host = rest.substr(0, colon);
    t.port = 80;
    if (colon != std::string::npos) {
        const std::string port = rest.substr(colon + 1);
        if (port.empty() || port.size() > 5 ||
            port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
            std::stoi(port) > 65535)
            throw ExitError(fmt::format("{}: bad port '{}'", option, port));
        t.port = std::stoi(port);
    }
    if (!t.host.empty() && t.host.front() == '[') {
        if (t.host.back() != ']') throw ExitError(fmt::format("{}: bad host '{}'", option, t.host));
        t.host = t.host.substr(1, t.host.size() - 2);
    }
    if (t.host.empty()) throw ExitError(fmt::format("{}: no host in '{}'", option, url));
    if (t.host == "localhost") t.host = "127.0.0.1";
    return t;
}

bool is_loopback(const Target& t) {
    return t.host == "::1" || t.host.rfind("127.", 0) == 0;
}

std::string route_path(const Target& t, const std::string& route) {
    // "/v1" in both: the base URL already names the API version.
    if (t.base_path.size() >= 3 && t.base_path.compare(t.base_path.size() - 3, 3, "/v1") == 0 &&
        route.rfind("/v1/", 0) == 0)
        return t.base_path + route.substr(3);
    return t.base_path + route;
}

int connect_to(const Target& t, double recv_timeout_s) {
    addrinfo hints{}, *ai = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &ai) != 0 || !ai)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    // A host that does not answer fails within the read timeout (at most 10 s), not the
    // kernel's two minutes: Linux bounds connect() by the send timeout.
    if (fd >= 0) {
        const double s = std::min(recv_timeout_s, 10.0);
        timeval tv{};
        tv.tv_sec = static_cast<time_t>(s);
        tv.tv_usec = static_cast<suseconds_t>((s - double(tv.tv_sec)) * 1e6);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
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

HttpReply fetch(const Target& t, const std::string& method, const std::string& path,
                const std::string& body, const std::string& api_key, double timeout_s) {
    using Clock = ResponseStream::Clock;
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
    ResponseStream in(fd);
    while (in.next(r.body, deadline)) {
    }
    close(fd);
    r.status = in.status();
    r.complete = in.ended();
    if (!r.complete) r.error = in.error().empty() ? "closed" : in.error();
    return r;
}

}  // namespace ferry::cli

namespace ferry::cli {

bool ResponseStream::dechunk(std::string& out) {
    while (!ended_) {
        if (chunk_crlf_due_) {
            if (raw_.size() < 2) return true;
            if (raw_.compare(0, 2, "\r\n") != 0) return false;
            raw_.erase(0, 2);
            chunk_crlf_due_ = false;
        }
        if (chunk_left_ > 0) {
            const size_t n = std::min<size_t>(raw_.size(), size_t(chunk_left_));
            if (n == 0) return true;
            out.append(raw_, 0, n);
            raw_.erase(0, n);
            chunk_left_ -= static_cast<long long>(n);
            chunk_crlf_due_ = chunk_left_ == 0;
            continue;
        }
        const size_t eol = raw_.find("\r\n");
        if (eol == std::string::npos) return raw_.size() < 1024;  // a size line is short
        // The size in hex, then optional ";extensions".
        size_t digits = 0;
        long long size = 0;
        while (digits < eol && std::isxdigit(static_cast<unsigned char>(raw_[digits]))) {
            if (digits >= 15) return false;
            const char c = char(std::tolower(static_cast<unsigned char>(raw_[digits])));
            size = size * 16 + (c <= '9' ? c - '0' : c - 'a' + 10);
            ++digits;
        }
        if (digits == 0 || (digits < eol && raw_[digits] != ';' && raw_[digits] != ' '))
            return false;
        raw_.erase(0, eol + 2);
        if (size == 0)
            ended_ = true;  // trailers, if any, are not read
        else
            chunk_left_ = size;
    }
    return true;
}

bool ResponseStream::read_more(Clock::time_point deadline) {
    char buf[16384];
    while (Clock::now() < deadline) {
        const ssize_t n = recv(fd_, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (n < 0) {
            error_ = "closed";
            return false;
        }
        if (n == 0) {
            // The server closed: the end of a body that had no other framing.
            if (head_done_ && !chunked_ && length_ < 0)
                ended_ = true;
            else
                error_ = "closed";
            return false;
        }
        raw_.append(buf, size_t(n));
        return true;
    }
    error_ = "timeout";
    return false;
}

bool ResponseStream::next(std::string& out, Clock::time_point deadline) {
    const size_t before = out.size();
    while (!ended_ && error_.empty()) {
        if (!head_done_) {
            const size_t e = raw_.find("\r\n\r\n");
            if (e == std::string::npos) {
                if (!read_more(deadline)) break;
                continue;
            }
            if (raw_.compare(0, 9, "HTTP/1.1 ") == 0 || raw_.compare(0, 9, "HTTP/1.0 ") == 0)
                status_ = std::atoi(raw_.c_str() + 9);
            std::string head = raw_.substr(0, e);
            for (auto& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
            chunked_ = head.find("transfer-encoding: chunked") != std::string::npos;
            if (auto cl = head.find("content-length:"); cl != std::string::npos && !chunked_)
                length_ = std::atoll(head.c_str() + cl + 15);
            raw_.erase(0, e + 4);
            head_done_ = true;
            if (length_ == 0) ended_ = true;
            continue;
        }
        if (chunked_) {
            if (!dechunk(out)) {
                error_ = "malformed chunk";
                break;
            }
        } else {
            size_t n = raw_.size();
            if (length_ >= 0) n = std::min<size_t>(n, size_t(length_ - body_seen_));
            out.append(raw_, 0, n);
            raw_.erase(0, n);
            body_seen_ += static_cast<long long>(n);
            if (length_ >= 0 && body_seen_ >= length_) ended_ = true;
        }
        if (out.size() > before) return true;
        if (!ended_ && !read_more(deadline)) break;
    }
    return out.size() > before;
}

}  // namespace ferry::cli
