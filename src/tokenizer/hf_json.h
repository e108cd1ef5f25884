// What the tokenizer.json components share: reading a {"String": ...} / {"Regex": ...}
// pattern, the error naming a component ferry does not implement, and the two text
// rewrites (replace by pattern, strip whitespace) that normalizers and decoders both do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace ferry::tokenizer {

// {"String": " "} is matched literally, {"Regex": "\\s+"} as a regex.
Expected<std::shared_ptr<const Regex>> json_pattern(const nlohmann::json& j);

// "tokenizer.json: <what> '<type>' is not supported (ferry reads <supported>)"
Error unsupported(std::string_view what, std::string_view type, std::string_view supported);

// Every match of `pattern` in `text` replaced by `content`.
std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content);

// Token ids size the id -> text table, so an id may lie at most this far past the entries that
// exist (real vocabularies are dense; an id of two billion would ask for 64 GB).
constexpr int64_t kMaxTokenIdGap = int64_t{1} << 20;

// Unicode white space removed from either end.
std::string strip_whitespace(std::string_view text, bool left, bool right);

}  // namespace ferry::tokenizer
