// JSON Schema (and OpenAI's json_object) compiled to GBNF, so the matcher can force a model's
// output to be an instance of the schema.
//
// The rule throughout: every string the grammar produces validates against the schema. The
// grammar may produce fewer instances than the schema allows (no extra properties unless asked
// for, canonical number and string spellings, bounded whitespace), and what it cannot honour
// exactly is refused with an error naming the keyword and where it is ("at
// #/properties/age: 'multipleOf' is not supported"), never ignored.
//
// The output is JSON with bounded whitespace: `ws ::= ( " " | "\n" [ \t]{0,20} )?` after `{`,
// `[`, `:` and `,` and before `}` and `]`, nowhere else, so a small model cannot loop on blanks
// but can still pretty-print. Properties come in the schema's declared order, as llama.cpp and
// OpenAI produce them; pass an ordered_json to keep that order (nlohmann::json sorts keys).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ferry::grammar {

struct JsonSchemaOptions {
    // OpenAI's strict mode: every object must list all its properties in `required` and set
    // `additionalProperties: false`; a schema that breaks that is an error, as OpenAI answers
    // such a request with a 400.
    bool strict = false;
    // No whitespace at all between tokens (vLLM's disable_any_whitespace).
    bool compact = false;
};

// Bounds that keep a hostile schema from blowing up the grammar: lengths and item counts above
// kMaxSchemaRepeat (a minimum above it is an error; a maximum above it is lowered to it, which
// only narrows the output), and the grammar's size.
inline constexpr int kMaxSchemaRepeat = 4096;
inline constexpr size_t kMaxSchemaGrammarChars = 1 << 20;

Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                          const JsonSchemaOptions& opt = {});
Expected<std::string> json_schema_to_gbnf(const nlohmann::json& schema,
                                          const JsonSchemaOptions& opt = {});

// Any JSON object ({"type": "json_object"}), with the same whitespace.
std::string json_object_gbnf(bool compact = false);

}  // namespace ferry::grammar
