// How the interpreter fails inside itself. Rendering unwinds from deep in an expression (an
// undefined attribute, raise_exception in a macro in a loop), so the interpreter throws this and
// Template turns it into an Error value at its boundary; nothing outside jinja/ sees it.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace ferry::tokenizer::jinja {

class TemplateError : public std::runtime_error {
  public:
    explicit TemplateError(std::string message, int line = 0)
        : std::runtime_error(std::move(message)), line_(line) {}
    int line() const { return line_; }
    // The first node that sees an error without a line gives it its own.
    void set_line_if_unset(int line) {
        if (line_ == 0) line_ = line;
    }

  private:
    int line_;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw TemplateError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ferry::tokenizer::jinja
