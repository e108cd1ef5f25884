#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>
#include <tuple>

namespace ferry::tokenizer {

namespace {

using jinja::Value;
using ojson = nlohmann::ordered_json;

// The dict a template sees for a message, keys in OpenAI's order; a missing field is a missing
// key, never None, because templates test `'tool_calls' in message` and `content is defined`.
Value message_value(const ChatMessage& m) {
    jinja::Dict d;
    d.set("role", m.role);
    if (m.content) d.set("content", *m.content);
    if (!m.tool_calls.empty()) {
        jinja::List calls;
        for (const ToolCall& c : m.tool_calls) {
            jinja::Dict fn;
            fn.set("name", c.name);
            fn.set("arguments", jinja::from_json(c.arguments));
            jinja::Dict call;
            call.set("id", c.id);
            call.set("type", c.type);
            call.set("function", Value::dict(std::move(fn)));
            calls.push_back(Value::dict(std::move(call)));
        }
        d.set("tool_calls", Value::list(std::move(calls)));
    }
    if (m.tool_call_id) d.set("tool_call_id", *m.tool_call_id);
    if (m.name) d.set("name", *m.name);
    return Value::dict(std::move(d));
}

Error template_error(const Error& e) {
    return make_error("chat template {}", e.message);
}

}  // namespace

Expected<ChatMessage> ChatMessage::from_json(const ojson& m) {
    if (!m.is_object()) return make_error("a message must be a JSON object");
    ChatMessage out;
    auto str = [&](const char* key, std::optional<std::string>& dst) -> Status {
        auto it = m.find(key);
        if (it == m.end() || it->is_null()) return Status::Ok();
        if (!it->is_string()) return make_error("a message's '{}' must be a string", key);
        dst = it->get<std::string>();
        return Status::Ok();
    };
    std::optional<std::string> role;
    if (Status s = str("role", role); !s) return s.error();
    if (!role) return make_error("a message needs a 'role'");
    out.role = *role;
    for (auto [key, dst] :
         {std::pair{"content", &out.content}, std::pair{"tool_call_id", &out.tool_call_id},
          std::pair{"name", &out.name}})
        if (Status s = str(key, *dst); !s) return s.error();
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
        if (!tc->is_array()) return make_error("a message's 'tool_calls' must be an array");
        for (const ojson& c : *tc) {
            if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
                return make_error("each tool call needs a 'function' object");
            ToolCall call;
            // Not json::value(), which throws on a field of another type.
            for (auto [key, dst, fallback] :
                 {std::tuple{"id", &call.id, ""}, std::tuple{"type", &call.type, "function"}}) {
                auto it = c.find(key);
                if (it == c.end() || it->is_null())
                    *dst = fallback;
                else if (it->is_string())
                    *dst = it->get<std::string>();
                else
                    return make_error("a tool call's '{}' must be a string", key);
            }
            const ojson& fn = c["function"];
            if (!fn.contains("name") || !fn["name"].is_string())
                return make_error("each tool call's function needs a 'name' string");
            call.name = fn["name"].get<std::string>();
            if (fn.contains("arguments")) call.arguments = fn["arguments"];
            out.tool_calls.push_back(std::move(call));
        }
    }
    return out;
}

Expected<ChatTemplate> ChatTemplate::from_source(const std::string& source, std::string bos_text,
                                                 std::string eos_text) {
    if (source.empty())
        return make_error("the model has no chat template (tokenizer.chat_template)");
    auto t = jinja::Template::parse(source);
    if (!t) return template_error(t.error());
    ChatTemplate c;
    c.tmpl_ = std::move(*t);
    c.bos_ = std::move(bos_text);
    c.eos_ = std::move(eos_text);
    c.source_ = source;
    return c;
}

Expected<ChatTemplate> ChatTemplate::from_file(const std::string& path, std::string bos_text,
                                               std::string eos_text) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error("cannot read the chat template file {}", path);
    std::stringstream ss;
    ss << in.rdbuf();
    auto t = from_source(ss.str(), std::move(bos_text), std::move(eos_text));
    if (!t) return make_error("{}: {}", path, t.error().message);
    return t;
}

Expected<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt, const ojson& tools,
                                          const ojson& extra) const {
    if (!tools.is_null() && !tools.is_array()) return make_error("'tools' must be a list of tools");
    if (!extra.is_null() && !extra.is_object())
        return make_error("extra chat template variables must be a JSON object");
    std::vector<std::pair<std::string, Value>> vars;
    try {
        // transformers passes the special tokens first, so the caller's variables override them.
        vars.emplace_back("bos_token", bos_);
        vars.emplace_back("eos_token", eos_);
        if (extra.is_object()) {
            for (const auto& [k, v] : extra.items()) {
                if (k == "messages" || k == "tools" || k == "documents" ||
                    k == "add_generation_prompt")
                    return make_error("'{}' cannot be passed as an extra chat template variable",
                                      k);
                vars.emplace_back(k, jinja::from_json(v));
            }
        }
        jinja::List msgs;
        for (const ChatMessage& m : messages) msgs.push_back(message_value(m));
        vars.emplace_back("messages", Value::list(std::move(msgs)));
        vars.emplace_back("tools", jinja::from_json(tools));
        vars.emplace_back("documents", nullptr);
        vars.emplace_back("add_generation_prompt", add_generation_prompt);
    } catch (const std::exception& e) {  // a conversation nested too deep to convert
        return make_error("chat template input: {}", e.what());
    }
    jinja::RenderOptions opts;
    opts.now = now_;
    auto out = tmpl_.render(vars, opts);
    if (!out) return template_error(out.error());
    return out;
}

}  // namespace ferry::tokenizer
