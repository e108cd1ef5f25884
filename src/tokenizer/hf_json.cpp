#include "tokenizer/hf_json.h"

#include <nlohmann/json.hpp>

namespace ferry::tokenizer {

Expected<std::shared_ptr<const Regex>> json_pattern(const nlohmann::json& j) {
    if (j.is_object() && j.contains("String") && j["String"].is_string())
        return Regex::compile(j["String"].get<std::string>(), /*literal=*/true);
    if (j.is_object() && j.contains("Regex") && j["Regex"].is_string())
        return Regex::compile(j["Regex"].get<std::string>(), /*literal=*/false);
    return make_error("pattern {} is neither {{\"String\": ...}} nor {{\"Regex\": ...}}", j.dump());
}

Error unsupported(std::string_view what, std::string_view type, std::string_view supported) {
    if (type.empty()) return make_error("tokenizer.json: {} without a \"type\"", what);
    return make_error("tokenizer.json: {} '{}' is not supported (ferry reads {})", what, type,
                      supported);
}

std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content) {
    std::string out;
    size_t from = 0;
    for (auto [b, e] : pattern.find_all(text)) {
        out.append(text.substr(from, b - from));
        out.append(content);
        from = e;
    }
    out.append(text.substr(from));
    return out;
}

std::string strip_whitespace(std::string_view text, bool left, bool right) {
    static const auto lead = Regex::compile(R"(^\s+)", false);
    static const auto trail = Regex::compile(R"(\s+$)", false);
    std::string_view s = text;
    if (left && lead.ok())
        if (auto m = lead.value()->find_all(s); !m.empty()) s.remove_prefix(m[0].second);
    if (right && trail.ok())
        if (auto m = trail.value()->find_all(s); !m.empty()) s = s.substr(0, m[0].first);
    return std::string(s);
}

}  // namespace ferry::tokenizer
