#include "server/structured_output.h"

#include <fmt/format.h>

namespace ferry::server {

namespace {

using json = nlohmann::ordered_json;
using Kind = engine::Constraint::Kind;

struct Reader {
    std::string& error;
    std::string& param;
    std::optional<ConstraintField> found;
    bool compact = false;

    bool fail(std::string msg, std::string p) {
        if (error.empty()) {
            error = std::move(msg);
            param = std::move(p);
        }
        return false;
    }
    bool set(engine::Constraint c, std::string p) {
        if (found)
            return fail(
                fmt::format("'{}' and '{}' both constrain the output; send one", found->param, p),
                p);
        found = ConstraintField{std::move(c), std::move(p)};
        return true;
    }

    bool schema(const json& s, bool strict, const std::string& p) {
        if (!s.is_object() && !s.is_boolean())
            return fail(fmt::format("'{}' must be a JSON Schema object", p), p);
        engine::Constraint c;
        c.kind = Kind::JsonSchema;
        c.schema = s;
        c.strict = strict;
        return set(std::move(c), p);
    }
    bool text(Kind k, const json& v, const std::string& p) {
        if (!v.is_string()) return fail(fmt::format("'{}' must be a string", p), p);
        if (v.get<std::string>().empty()) return fail(fmt::format("'{}' is empty", p), p);
        engine::Constraint c;
        c.kind = k;
        c.text = v.get<std::string>();
        return set(std::move(c), p);
    }
    bool choice(const json& v, const std::string& p) {
        if (!v.is_array() || v.empty())
            return fail(fmt::format("'{}' must be a non-empty array of strings", p), p);
        engine::Constraint c;
        c.kind = Kind::Choice;
        for (const json& x : v) {
            if (!x.is_string() || x.get<std::string>().empty())
                return fail(fmt::format("'{}' must hold non-empty strings", p), p);
            c.choices.push_back(x.get<std::string>());
        }
        return set(std::move(c), p);
    }
    bool json_object(const std::string& p) {
        engine::Constraint c;
        c.kind = Kind::JsonObject;
        return set(std::move(c), p);
    }

    // OpenAI: {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema,
    // strict}}. llama.cpp also takes {"type": "json_object", "schema": {...}}.
    bool response_format(const json& rf) {
        const std::string p = "response_format";
        if (!rf.is_object()) return fail("'response_format' must be an object", p);
        auto t = rf.find("type");
        if (t == rf.end() || !t->is_string())
            return fail("'response_format.type' must be a string", p);
        const std::string type = t->get<std::string>();
        if (type == "text") return true;
        if (type == "json_object") {
            if (auto s = rf.find("schema"); s != rf.end() && !s->is_null())
                return schema(*s, false, p);
            return json_object(p);
        }
        if (type == "json_schema") {
            auto js = rf.find("json_schema");
            if (js == rf.end() || !js->is_object())
                return fail("'response_format.json_schema' must be an object", p);
            bool strict = false;
            if (auto st = js->find("strict"); st != js->end() && !st->is_null()) {
                if (!st->is_boolean())
                    return fail("'response_format.json_schema.strict' must be a boolean", p);
                strict = st->get<bool>();
            }
            if (auto n = js->find("name"); n != js->end() && !n->is_null() && !n->is_string())
                return fail("'response_format.json_schema.name' must be a string", p);
            auto s = js->find("schema");
            // OpenAI's schema is optional: without one the reply is any JSON object.
            if (s == js->end() || s->is_null()) return json_object(p);
            return schema(*s, strict, p);
        }
        return fail(fmt::format("'response_format.type' must be text, json_object or "
                                "json_schema, not '{}'",
                                type),
                    p);
    }

    // vLLM's structured_outputs: exactly one of json, regex, choice, grammar, json_object.
    bool structured_outputs(const json& so) {
        const std::string p = "structured_outputs";
        if (!so.is_object()) return fail("'structured_outputs' must be an object", p);
        for (const auto& [key, v] : so.items()) {
            if (v.is_null()) continue;
            const std::string where = p + "." + key;
            if (key == "json") {
                if (v.is_string()) {
                    json parsed = json::parse(v.get<std::string>(), nullptr, false);
                    if (parsed.is_discarded())
                        return fail(fmt::format("'{}' is not valid JSON", where), where);
                    if (!schema(parsed, false, where)) return false;
                } else if (!schema(v, false, where)) {
                    return false;
                }
            } else if (key == "regex") {
                if (!text(Kind::Regex, v, where)) return false;
            } else if (key == "choice") {
                if (!choice(v, where)) return false;
            } else if (key == "grammar") {
                if (!text(Kind::Grammar, v, where)) return false;
            } else if (key == "json_object") {
                if (!v.is_boolean())
                    return fail(fmt::format("'{}' must be a boolean", where), where);
                if (v.get<bool>() && !json_object(where)) return false;
            } else if (key == "disable_any_whitespace") {
                if (!v.is_boolean())
                    return fail(fmt::format("'{}' must be a boolean", where), where);
                compact = v.get<bool>();
            } else if (key == "disable_additional_properties") {
                // ferry's grammars never produce properties a schema does not list (unless its
                // additionalProperties asks for them), so true changes nothing; false would
                // ask for more than that.
                if (!v.is_boolean() || !v.get<bool>())
                    return fail(fmt::format("'{}' other than true is not supported", where), where);
            } else if (key == "whitespace_pattern") {
                return fail("'structured_outputs.whitespace_pattern' is not supported", where);
            } else {
                return fail(
                    fmt::format("'{}' is not a structured_outputs field ferry knows", where),
                    where);
            }
        }
        return true;
    }
};

}  // namespace

std::optional<ConstraintField> parse_constraint(const json& body, std::string& error,
                                                std::string& error_param) {
    Reader r{error, error_param, std::nullopt, false};
    auto get = [&](const char* name) -> const json* {
        auto it = body.find(name);
        return it == body.end() || it->is_null() ? nullptr : &*it;
    };
    if (const json* v = get("response_format")) r.response_format(*v);
    if (const json* v = get("guided_json")) {
        if (v->is_string()) {
            json parsed = json::parse(v->get<std::string>(), nullptr, false);
            if (parsed.is_discarded())
                r.fail("'guided_json' is not valid JSON", "guided_json");
            else
                r.schema(parsed, false, "guided_json");
        } else {
            r.schema(*v, false, "guided_json");
        }
    }
    if (const json* v = get("guided_regex")) r.text(Kind::Regex, *v, "guided_regex");
    if (const json* v = get("guided_choice")) r.choice(*v, "guided_choice");
    if (const json* v = get("guided_grammar")) r.text(Kind::Grammar, *v, "guided_grammar");
    if (const json* v = get("structured_outputs")) r.structured_outputs(*v);
    if (const json* v = get("grammar")) r.text(Kind::Grammar, *v, "grammar");
    if (const json* v = get("json_schema")) r.schema(*v, false, "json_schema");
    if (const json* v = get("guided_decoding_backend"); v && !v->is_string())
        r.fail("'guided_decoding_backend' must be a string", "guided_decoding_backend");
    if (!error.empty()) return std::nullopt;
    if (r.found && r.compact) r.found->constraint.compact = true;
    return std::move(r.found);
}

}  // namespace ferry::server
