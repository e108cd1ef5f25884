// Errors at boundaries (file formats, CLI, HTTP) travel as values: a caller can print a
// one-line message and exit non-zero without ever seeing an exception escape.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace ferry {

// What kind of failure, for a caller that reacts to it rather than printing it: most are the
// request's or the file's (Invalid); Unavailable means the same call may succeed later (the
// engine's queue is full), which a server reports as "try again" rather than "bad request".
// Invalid: the request's own fault. Unavailable: busy now, try again (a full queue). Down: the
// engine cannot serve at all (a tensor-parallel rank died or hangs).
enum class ErrorCode { Invalid, Unavailable, Down };

struct Error {
    std::string message;
    ErrorCode code = ErrorCode::Invalid;
};

template <class... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
    return Error{fmt::format(f, std::forward<Args>(args)...)};
}

template <class... Args>
Error make_error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
    return Error{fmt::format(f, std::forward<Args>(args)...), code};
}

template <class T>
class [[nodiscard]] Expected {
  public:
    Expected(T value) : v_(std::move(value)) {}
    Expected(Error e) : v_(std::move(e)) {}

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() & { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    const T& value() const& { return std::get<0>(v_); }
    T& operator*() & { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    const Error& error() const { return std::get<1>(v_); }

  private:
    std::variant<T, Error> v_;
};

class [[nodiscard]] Status {
  public:
    Status() = default;
    Status(Error e) : err_(std::move(e)), ok_(false) {}
    static Status Ok() { return {}; }
    bool ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const Error& error() const { return err_; }

  private:
    Error err_;
    bool ok_ = true;
};

}  // namespace ferry
