#include "server/tool_calls.h"

#include <cctype>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace ferry::server {

using ojson = nlohmann::ordered_json;

const char* tool_format_name(ToolFormat f) {
    switch (f) {
        case ToolFormat::Hermes:
            return "hermes";
        case ToolFormat::Llama3:
            return "llama3_json";
        case ToolFormat::Mistral:
            return "mistral";
    }
    return "?";
}

ToolTemplate tool_template_of(std::string_view src) {
    ToolTemplate t;
    t.renders_tools = src.find("tools") != std::string_view::npos;
    t.renders_tool_calls = src.find("tool_calls") != std::string_view::npos;
    if (src.find("[TOOL_CALLS]") != std::string_view::npos)
        t.format = ToolFormat::Mistral;
    else if (src.find("<tool_call>") != std::string_view::npos)
        t.format = ToolFormat::Hermes;
    else if (src.find("<|python_tag|>") != std::string_view::npos ||
             src.find("\"parameters\"") != std::string_view::npos)
        t.format = ToolFormat::Llama3;
    // A template that shows no tool format is taught Hermes' through the system prompt.
    if (!t.renders_tools) t.format = ToolFormat::Hermes;
    return t;
}

namespace {

bool valid_function_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (char c : n)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
    return true;
}

std::string random_call_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += alphabet[rng() % 62];
    return id;
}

// Whether obj[key] is the string `want` (or absent, when that is allowed). Not json::value():
// it throws on a field of another type, and a request's fields are whatever the client sent.
bool field_is(const ojson& obj, const char* key, std::string_view want, bool absent_ok) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return absent_ok;
    return it->is_string() && it->get_ref<const std::string&>() == want;
}

// How many bytes at the end of `text` are the start of `tag` cut off (its proper prefixes only):
// what a stream holds back, and what a reply cut by max_tokens must not show.
size_t cut_off_tag(std::string_view text, std::string_view tag) {
    for (size_t k = std::min(tag.size() - 1, text.size()); k > 0; --k)
        if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
    return 0;
}

}  // namespace

std::optional<ToolRequest> parse_tools(const ojson& body, std::string& error, std::string& param) {
    auto fail = [&](std::string msg, std::string p) -> std::optional<ToolRequest> {
        error = std::move(msg);
        param = std::move(p);
        return std::nullopt;
    };
    auto get = [&](const char* name) -> const ojson* {
        auto it = body.find(name);
        return it == body.end() || it->is_null() ? nullptr : &*it;
    };
    if (get("functions") || get("function_call"))
        return fail(
            "'functions' and 'function_call' are deprecated; send 'tools' and 'tool_choice'",
            get("functions") ? "functions" : "function_call");
    const ojson* tools = get("tools");
    const ojson* choice = get("tool_choice");
    ToolRequest r;
    if (const ojson* p = get("parallel_tool_calls")) {
        if (!p->is_boolean())
            return fail("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
        r.parallel = p->get<bool>();
    }
    if (!tools || (tools->is_array() && tools->empty())) {
        if (choice && !(choice->is_string() && (*choice == "none" || *choice == "auto")))
            return fail("'tool_choice' needs 'tools'", "tool_choice");
        return std::nullopt;
    }
    if (!tools->is_array()) return fail("'tools' must be an array", "tools");
    if (tools->size() > 128)  // OpenAI's own limit; each tool is a grammar alternative
        return fail(fmt::format("'tools' holds {} tools; at most 128", tools->size()), "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
        const ojson& t = (*tools)[i];
        const std::string where = fmt::format("tools[{}]", i);
        if (!t.is_object()) return fail(fmt::format("'{}' must be an object", where), "tools");
        if (!field_is(t, "type", "function", true))
            return fail(fmt::format("'{}.type' must be 'function'", where), "tools");
        auto f = t.find("function");
        if (f == t.end() || !f->is_object())
            return fail(fmt::format("'{}.function' must be an object", where), "tools");
        auto name = f->find("name");
        if (name == f->end() || !name->is_string() ||
            !valid_function_name(name->get<std::string>()))
            return fail(
                fmt::format("'{}.function.name' must be 1-64 letters, digits, _ or -", where),
                "tools");
        ToolFunction fn;
        fn.name = name->get<std::string>();
        for (const auto& other : r.functions)
            if (other.name == fn.name)
                return fail(fmt::format("two tools are named '{}'", fn.name), "tools");
        auto params = f->find("parameters");
        if (params == f->end() || params->is_null())
            fn.parameters = ojson{{"type", "object"}, {"properties", ojson::object()}};
        else if (!params->is_object())
            return fail(fmt::format("'{}.function.parameters' must be a JSON Schema object", where),
                        "tools");
        else
            fn.parameters = *params;
        r.functions.push_back(std::move(fn));
    }
    r.tools = *tools;
    if (choice) {
        if (choice->is_string()) {
            const std::string c = choice->get<std::string>();
            if (c == "none")
                r.choice = ToolRequest::Choice::None;
            else if (c == "auto")
                r.choice = ToolRequest::Choice::Auto;
            else if (c == "required")
                r.choice = ToolRequest::Choice::Required;
            else
                return fail(fmt::format("'tool_choice' must be none, auto, required or a "
                                        "function, not '{}'",
                                        c),
                            "tool_choice");
        } else if (choice->is_object()) {
            auto f = choice->find("function");
            if (!field_is(*choice, "type", "function", false) || f == choice->end() ||
                !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
                return fail(
                    "'tool_choice' as an object must be {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}",
                    "tool_choice");
            r.named = (*f)["name"].get<std::string>();
            bool known = false;
            for (const auto& fn : r.functions) known |= fn.name == r.named;
            if (!known)
                return fail(
                    fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.named),
                    "tool_choice");
            r.choice = ToolRequest::Choice::Named;
        } else {
            return fail("'tool_choice' must be a string or an object", "tool_choice");
        }
    }
    return r;
}

Expected<std::string> tool_call_gbnf(const ToolRequest& r, ToolFormat format) {
    const char* args_key = format == ToolFormat::Llama3 ? "parameters" : "arguments";
    std::string alts, rules;
    int k = 0;
    for (const ToolFunction& fn : r.functions) {
        if (r.choice == ToolRequest::Choice::Named && fn.name != r.named) continue;
        auto args = grammar::json_schema_to_gbnf(fn.parameters);
        if (!args)
            return make_error("the parameters of tool '{}' {}", fn.name, args.error().message);
        const std::string prefix = fmt::format("t{}-", k++);
        rules += grammar::prefix_rule_names(*args, prefix) + "\n";
        alts += fmt::format(
            "{}{} {}root", alts.empty() ? "" : " | ",
            grammar::gbnf_literal(fmt::format("\"{}\", \"{}\": ", fn.name, args_key)), prefix);
    }
    const std::string call_body = "\"{\\\"name\\\": \" (" + alts + ") \"}\"";
    std::string g;
    switch (format) {
        case ToolFormat::Hermes:
            g = "root ::= call" + std::string(r.parallel ? " (\"\\n\" call)*" : "") + "\n" +
                "call ::= \"<tool_call>\\n\" " + call_body + " \"\\n</tool_call>\"\n";
            break;
        case ToolFormat::Llama3:
            g = "root ::= " + call_body + "\n";  // Llama 3 calls one function per turn
            break;
        case ToolFormat::Mistral:
            g = "root ::= \"[\" call" + std::string(r.parallel ? " (\", \" call)*" : "") +
                " \"]\"\ncall ::= " + call_body + "\n";
            break;
    }
    return g + rules;
}

std::string tool_call_trigger(ToolFormat format) {
    switch (format) {
        case ToolFormat::Hermes:
            return "<tool_call>";
        case ToolFormat::Llama3:
            return "{\"name\"";
        case ToolFormat::Mistral:
            return "[{\"name\"";
    }
    return {};
}

size_t streamable_content(const std::string& text, ToolFormat format) {
    const std::string trigger = tool_call_trigger(format);
    if (const size_t at = text.find(trigger); at != std::string::npos) return at;
    // Llama 3 and Mistral calls are the whole reply: a reply that opens with one is held.
    if (format != ToolFormat::Hermes) {
        const size_t first = text.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return 0;
        if (text[first] == trigger[0]) {
            const std::string_view rest = std::string_view(text).substr(first);
            const size_t n = std::min(rest.size(), trigger.size());
            if (rest.substr(0, n) == std::string_view(trigger).substr(0, n)) return first;
        }
    }
    return text.size() - cut_off_tag(text, trigger);
}

std::string tool_system_prompt(const ToolRequest& r) {
    std::string s =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : r.tools) {
        s += '\n';
        s += t.dump();
    }
    s += "\n</tools>\n\nFor each function call, return a json object with function name and "
         "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
         "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    return s;
}

void lower_tool_messages(std::vector<tokenizer::ChatMessage>& msgs) {
    for (auto& m : msgs) {
        if (m.role == "assistant" && !m.tool_calls.empty()) {
            std::string text = m.content.value_or("");
            for (const auto& c : m.tool_calls) {
                const ojson args =
                    c.arguments.is_string()
                        ? ojson::parse(c.arguments.get<std::string>(), nullptr, false)
                        : c.arguments;
                if (!text.empty()) text += "\n";
                text +=
                    "<tool_call>\n" +
                    ojson{{"name", c.name}, {"arguments", args.is_discarded() ? c.arguments : args}}
                        .dump() +
                    "\n</tool_call>";
            }
            m.content = text;
            m.tool_calls.clear();
        } else if (m.role == "tool") {
            m.role = "user";
            m.content = "<tool_response>\n" + m.content.value_or("") + "\n</tool_response>";
            m.tool_call_id.reset();
            m.name.reset();
        }
    }
}

namespace {

std::string trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(b, e - b + 1));
}

// {"name": ..., "arguments" | "parameters": {...}} as a call; false if it is not one.
bool to_call(const ojson& j, tokenizer::ToolCall& out) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    out.id = random_call_id();
    out.name = j["name"].get<std::string>();
    const char* key = j.contains("arguments") ? "arguments" : "parameters";
    if (!j.contains(key)) {
        out.arguments = ojson::object();
    } else if (j[key].is_string()) {
        // Some models write the arguments as a JSON string, as OpenAI's API sends them.
        ojson parsed = ojson::parse(j[key].get<std::string>(), nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object()) return false;
        out.arguments = parsed;
    } else if (j[key].is_object()) {
        out.arguments = j[key];
    } else {
        return false;
    }
    return true;
}

}  // namespace

ParsedToolOutput parse_tool_calls(const std::string& text, ToolFormat format) {
    ParsedToolOutput out;
    if (format == ToolFormat::Hermes) {
        size_t pos = 0;
        std::string rest;
        while (true) {
            const size_t open = text.find("<tool_call>", pos);
            if (open == std::string::npos) {
                rest += text.substr(pos);
                break;
            }
            rest += text.substr(pos, open - pos);
            const size_t body = open + std::strlen("<tool_call>");
            size_t close = text.find("</tool_call>", body);
            const size_t end = close == std::string::npos ? text.size() : close;
            tokenizer::ToolCall call;
            const ojson j =
                ojson::parse(trim(std::string_view(text).substr(body, end - body)), nullptr, false);
            if (!j.is_discarded() && to_call(j, call))
                out.calls.push_back(std::move(call));
            else if (close != std::string::npos || out.calls.empty())
                rest += text.substr(open, end - open);  // not a call: it stays text
            // else: a further call cut off by max_tokens after complete ones; its markup is
            // not content
            pos = close == std::string::npos ? text.size() : close + std::strlen("</tool_call>");
        }
        if (out.calls.empty()) {
            out.content = text;
            return out;
        }
        // The same for a further call cut off inside its opening tag ("<tool_call" at the end).
        rest.resize(rest.size() - cut_off_tag(rest, "<tool_call>"));
        out.content = trim(rest);
        return out;
    }
    std::string t = trim(text);
    if (format == ToolFormat::Mistral && t.rfind("[TOOL_CALLS]", 0) == 0) t = trim(t.substr(12));
    const char open = format == ToolFormat::Mistral ? '[' : '{';
    if (t.empty() || t[0] != open) {
        out.content = text;
        return out;
    }
    const ojson j = ojson::parse(t, nullptr, false);
    bool ok = !j.is_discarded();
    if (ok) {
        const ojson list = j.is_array() ? j : ojson::array({j});
        for (const auto& item : list) {
            tokenizer::ToolCall call;
            if (!to_call(item, call)) {
                ok = false;
                break;
            }
            out.calls.push_back(std::move(call));
        }
    }
    if (!ok) {
        out.calls.clear();
        out.content = text;
    }
    return out;
}

}  // namespace ferry::server
