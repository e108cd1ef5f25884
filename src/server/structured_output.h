// The request fields that constrain an output, in every dialect clients send them: OpenAI's
// `response_format` (json_object, json_schema with `strict`), vLLM's `guided_json` /
// `guided_regex` / `guided_choice` / `guided_grammar` and its newer `structured_outputs`
// object, and llama.cpp's `grammar` and `json_schema`. Two constraints in one request are a
// 400, as is a malformed one; what the grammar engine cannot honour is refused when compiled.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/constraint.h"

namespace ferry::server {

struct ConstraintField {
    engine::Constraint constraint;
    std::string param;  // the field it came from, for errors
};

// nullopt with `error` empty: the request is unconstrained; with `error` set: a 400 naming
// `error_param`.
std::optional<ConstraintField> parse_constraint(const nlohmann::ordered_json& body,
                                                std::string& error, std::string& error_param);

}  // namespace ferry::server
