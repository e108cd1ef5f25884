#include "engine/stop_text.h"

#include <algorithm>

namespace ferry::engine {

std::string StopText::push(int32_t token) {
    if (stopped_) return {};
    held_ += decoder_.push(token);
    return release();
}

std::string StopText::flush() {
    if (stopped_) return {};
    held_ += decoder_.flush();
    std::string out = release();
    if (stopped_) return out;
    out += held_;
    held_.clear();
    return out;
}

std::string StopText::release() {
    // A complete stop string: everything before the earliest one is the last text (the first
    // listed wins a tie, which matters only when it is included).
    size_t cut = std::string::npos, len = 0;
    for (const auto& s : stops_)
        if (size_t at = s.empty() ? std::string::npos : held_.find(s); at < cut) {
            cut = at;
            len = s.size();
        }
    if (cut != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, cut + (include_ ? len : 0));
        held_.clear();
        return out;
    }
    // Keep the longest tail that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const auto& s : stops_)
        for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len)
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

}  // namespace ferry::engine
