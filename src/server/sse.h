// Server-sent events as the OpenAI streaming API uses them: one `data:` line per JSON chunk,
// a blank line after each, and a literal `[DONE]` at the end.
#pragma once

#include <string>
#include <string_view>

namespace ferry::server {

inline std::string sse_event(std::string_view data) {
    std::string s;
    s.reserve(data.size() + 8);
    s += "data: ";
    s += data;
    s += "\n\n";
    return s;
}

inline std::string sse_done() {
    return "data: [DONE]\n\n";
}

}  // namespace ferry::server
