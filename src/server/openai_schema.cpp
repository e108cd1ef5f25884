#include "server/openai_schema.h"

#include <cmath>
#include <limits>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "server/structured_output.h"

namespace ferry::server {

ApiError bad_request(std::string message, std::string param) {
    ApiError e;
    e.status = 400;
    e.message = std::move(message);
    e.param = std::move(param);
    return e;
}

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string valid_utf8(const std::string& s) {
    return json::parse(dump(json(s))).get<std::string>();
}

std::string error_body(const ApiError& e) {
    json err = {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
    return dump(json{{"error", err}});
}

namespace {

// Bounds on what one request may ask for, beyond the body's size (--max-body-bytes).
constexpr size_t kMaxMessages = 2048;
constexpr size_t kMaxStopBytes = 1024;

// Depth of [ and { outside strings; a cheap pass that keeps the parser away from bombs.
int json_depth(const std::string& s) {
    int depth = 0, max_depth = 0;
    bool in_str = false, esc = false;
    for (char c : s) {
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '[' || c == '{')
            max_depth = std::max(max_depth, ++depth);
        else if (c == ']' || c == '}')
            --depth;
    }
    return max_depth;
}

const char* type_name(const json& j) {
    switch (j.type()) {
        case json::value_t::null:
            return "null";
        case json::value_t::boolean:
            return "boolean";
        case json::value_t::string:
            return "string";
        case json::value_t::array:
            return "array";
        case json::value_t::object:
            return "object";
        case json::value_t::number_float:
            return "number";
        default:
            return "integer";
    }
}

struct Fields {
    const json& body;
    ApiError& err;
    bool failed = false;

    const json* get(const char* name) {
        auto it = body.find(name);
        if (it == body.end() || it->is_null()) return nullptr;
        return &*it;
    }
    bool fail(std::string msg, const char* param) {
        if (!failed) err = bad_request(std::move(msg), param);
        failed = true;
        return false;
    }
    bool type_error(const char* name, const char* want, const json& v) {
        return fail(fmt::format("'{}' must be {}, not {}", name, want, type_name(v)), name);
    }

    // Integers may arrive as 16.0 from some clients; anything fractional or out of range fails.
    bool integer(const char* name, int64_t& out, int64_t lo, int64_t hi) {
        const json* v = get(name);
        if (!v) return true;
        return to_integer(name, *v, out, lo, hi);
    }
    bool to_integer(const char* name, const json& v, int64_t& out, int64_t lo, int64_t hi) {
        int64_t x = 0;
        if (v.is_number_integer() && !v.is_number_unsigned()) {
            x = v.get<int64_t>();
        } else if (v.is_number_unsigned()) {
            uint64_t u = v.get<uint64_t>();
            if (u > uint64_t(std::numeric_limits<int64_t>::max()))
                return fail(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
            x = int64_t(u);
        } else if (v.is_number_float()) {
            double d = v.get<double>();
            if (!std::isfinite(d) || d != std::floor(d)) return type_error(name, "an integer", v);
            if (std::fabs(d) > 9e15)  // 1e30 is a whole number, only far out of range
                return fail(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
            x = int64_t(d);
        } else {
            return type_error(name, "an integer", v);
        }
        if (x < lo || x > hi)
            return fail(fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x),
                        name);
        out = x;
        return true;
    }
    bool number(const char* name, double& out, double lo, double hi, bool lo_open = false) {
        const json* v = get(name);
        if (!v) return true;
        if (!v->is_number()) return type_error(name, "a number", *v);
        double d = v->get<double>();
        if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
            return fail(fmt::format("'{}' must be {} {} and <= {}, got {}", name,
                                    lo_open ? ">" : ">=", lo, hi, d),
                        name);
        out = d;
        return true;
    }
    bool boolean(const char* name, bool& out) {
        const json* v = get(name);
        if (!v) return true;
        if (!v->is_boolean()) return type_error(name, "a boolean", *v);
        out = v->get<bool>();
        return true;
    }
};

bool parse_messages(const json& msgs, std::vector<tokenizer::ChatMessage>& out, Fields& f) {
    if (!msgs.is_array()) return f.type_error("messages", "an array", msgs);
    if (msgs.empty()) return f.fail("'messages' must not be empty", "messages");
    // Each message is rendered by the template before the context is checked: a bound keeps a
    // body of a million tiny messages from costing the interpreter's time first.
    if (msgs.size() > kMaxMessages)
        return f.fail(
            fmt::format("'messages' holds {} messages; at most {}", msgs.size(), kMaxMessages),
            "messages");
    for (size_t i = 0; i < msgs.size(); ++i) {
        const json& m = msgs[i];
        std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) return f.fail(fmt::format("'{}' must be an object", where), "messages");
        auto role = m.find("role");
        if (role == m.end() || !role->is_string())
            return f.fail(fmt::format("'{}.role' must be a string", where), "messages");
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";
        if (r != "system" && r != "user" && r != "assistant" && r != "tool")
            return f.fail(fmt::format("'{}.role' must be system, developer, user, assistant or "
                                      "tool, not '{}'",
                                      where, r),
                          "messages");
        std::optional<std::string> content;  // a null one is absent, as transformers has it
        auto c = m.find("content");
        if (c == m.end() || c->is_null()) {
            if (r != "assistant")
                return f.fail(fmt::format("'{}.content' is required", where), "messages");
        } else if (c->is_string()) {
            content = c->get<std::string>();
        } else if (c->is_array()) {
            // Content parts: only text is understood; images and audio are refused by name.
            content.emplace();
            for (const json& part : *c) {
                if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
                    return f.fail(
                        fmt::format("'{}.content' parts must be objects with a type", where),
                        "messages");
                if (part["type"] != "text")
                    return f.fail(fmt::format("'{}.content' part type '{}' is not supported", where,
                                              part["type"].get<std::string>()),
                                  "messages");
                auto t = part.find("text");
                if (t == part.end() || !t->is_string())
                    return f.fail(
                        fmt::format("'{}.content' text parts need a string 'text'", where),
                        "messages");
                *content += t->get<std::string>();
            }
        } else {
            return f.fail(fmt::format("'{}.content' must be a string or an array of parts", where),
                          "messages");
        }
        tokenizer::ChatMessage msg(r, std::move(content));
        if (r == "tool" || m.contains("tool_calls")) {
            // The tool fields as the chat template sees them: tool_call_id and name of a result,
            // an assistant's calls.
            auto full = tokenizer::ChatMessage::from_json(m);
            if (!full)
                return f.fail(fmt::format("'{}': {}", where, full.error().message), "messages");
            if (r == "tool" && !full->tool_call_id)
                return f.fail(
                    fmt::format("'{}.tool_call_id' is required for a tool message", where),
                    "messages");
            msg.tool_calls = std::move(full->tool_calls);
            msg.tool_call_id = std::move(full->tool_call_id);
            msg.name = std::move(full->name);
        }
        out.push_back(std::move(msg));
    }
    return true;
}

bool token_list(const json& arr, std::vector<int32_t>& out, int n_vocab, Fields& f,
                const char* name) {
    for (const json& t : arr) {
        int64_t id = 0;
        if (!f.to_integer(name, t, id, 0, n_vocab - 1)) return false;
        out.push_back(int32_t(id));
    }
    return true;
}

}  // namespace

std::optional<json> parse_body(const std::string& body, ApiError& err) {
    if (json_depth(body) > kMaxJsonDepth) {
        err = bad_request(fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth));
        return std::nullopt;
    }
    try {
        json j = json::parse(body);
        if (!j.is_object()) {
            err = bad_request(fmt::format("the body must be a JSON object, not {}", type_name(j)));
            return std::nullopt;
        }
        return j;
    } catch (const json::exception& e) {
        err = bad_request(fmt::format("malformed JSON: {}", e.what()));
        return std::nullopt;
    }
}

namespace {

// Every field a generation request may carry, by endpoint. A field outside these is refused
// with OpenAI's own message: a misspelt `max_token` or `temprature` would otherwise run with
// the defaults (a 4,000-token reply where one was asked for), and a field another server
// honours would be dropped without a word. The no-op fields OpenAI's clients send (`user`,
// `store` false, `metadata`, `service_tier`, `prompt_cache_key`, `safety_identifier`) and
// `guided_decoding_backend` (which engine compiles a constraint, not what it means) are known.
const std::set<std::string_view>& known_fields(Endpoint kind) {
    // clang-format off
    static const std::set<std::string_view> common = {
        "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "seed", "n", "priority", "stream",
        "stream_options", "ignore_eos", "user", "logit_bias", "best_of", "speculation", "stop",
        "stop_token_ids", "logprobs", "prompt_logprobs", "min_tokens",
        "include_stop_str_in_output", "response_format", "guided_json", "guided_regex",
        "guided_choice", "guided_grammar", "guided_decoding_backend", "structured_outputs",
        "grammar", "json_schema", "store", "metadata", "service_tier", "prompt_cache_key",
        "safety_identifier", "reasoning_effort", "modalities", "add_generation_prompt",
        "continue_final_message", "suffix",
        // Chat's, but their no-op values pass on completions too (clients send them by
        // default); the tool parser refuses the rest there by name.
        "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"};
    // clang-format on
    static const std::set<std::string_view> chat = [] {
        auto k = common;
        k.insert({"messages", "max_completion_tokens", "top_logprobs", "chat_template_kwargs"});
        return k;
    }();
    static const std::set<std::string_view> completions = [] {
        auto k = common;
        k.insert({"prompt", "echo"});
        return k;
    }();
    return kind == Endpoint::Chat ? chat : completions;
}

bool check_fields(const json& body, Endpoint kind, Fields& f) {
    const auto& known = known_fields(kind);
    for (const auto& [key, v] : body.items()) {
        if (known.count(key)) continue;
        const std::string name = key.substr(0, 80);
        if (kind == Endpoint::Chat && known_fields(Endpoint::Completions).count(key))
            return f.fail(fmt::format("'{}' is a completions field: send it to /v1/completions{}",
                                      name, key == "prompt" ? " (chat takes 'messages')" : ""),
                          key.c_str());
        if (kind != Endpoint::Chat && known_fields(Endpoint::Chat).count(key))
            return f.fail(
                fmt::format("'{}' is a chat field: send it to /v1/chat/completions", name),
                key.c_str());
        return f.fail(fmt::format("Unrecognized request argument supplied: {}", name), key.c_str());
    }
    if (const json* v = f.get("store"); v && !(v->is_boolean() && !v->get<bool>()))
        return f.fail("'store' other than false is not supported (this server keeps no outputs)",
                      "store");
    for (const char* name : {"metadata"})
        if (const json* v = f.get(name); v && !v->is_object())
            return f.type_error(name, "an object", *v);
    for (const char* name : {"service_tier", "prompt_cache_key", "safety_identifier"})
        if (const json* v = f.get(name); v && !v->is_string())
            return f.type_error(name, "a string", *v);
    if (const json* a = f.get("max_tokens"), *b = f.get("max_completion_tokens");
        a && b && *a != *b)
        return f.fail("'max_tokens' and 'max_completion_tokens' disagree; send one",
                      "max_completion_tokens");
    return true;
}

}  // namespace

std::optional<GenRequest> parse_generation(const json& body, Endpoint kind, const Service& service,
                                           const std::vector<std::string>& model_names,
                                           ApiError& err) {
    Fields f{body, err};
    if (!check_fields(body, kind, f)) return std::nullopt;
    GenRequest r;
    r.kind = kind;
    r.model = model_names.empty() ? "" : model_names.front();
    if (const json* m = f.get("model")) {
        if (!m->is_string()) return f.type_error("model", "a string", *m), std::nullopt;
        std::string name = m->get<std::string>();
        bool known = false;
        for (const auto& n : model_names) known = known || n == name;
        if (!known) {
            err.status = 404;
            err.type = "not_found_error";
            err.code = "model_not_found";
            err.param = "model";
            err.message = fmt::format("The model '{}' does not exist; this server serves '{}'",
                                      name.substr(0, 200), r.model);
            return std::nullopt;
        }
    }

    // OpenAI's defaults (and the model's generation_config), not the CLI's.
    auto& s = r.params.sampling;
    s = service.default_sampling();
    double d = 0;
    int64_t i = 0;
    if (f.get("temperature") && f.number("temperature", d, 0, 2)) s.temperature = float(d);
    if (f.get("top_p") && f.number("top_p", d, 0, 1, true)) s.top_p = float(d);
    if (f.get("top_k") && f.integer("top_k", i, -1, 1 << 30))
        s.top_k = int(std::max<int64_t>(i, 0));
    if (f.get("min_p") && f.number("min_p", d, 0, 1)) s.min_p = float(d);
    if (f.get("presence_penalty") && f.number("presence_penalty", d, -2, 2))
        s.presence_penalty = float(d);
    if (f.get("frequency_penalty") && f.number("frequency_penalty", d, -2, 2))
        s.frequency_penalty = float(d);
    if (f.get("repetition_penalty") && f.number("repetition_penalty", d, 0, 2, true))
        s.repetition_penalty = float(d);
    if (f.get("seed") && f.integer("seed", i, std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max())) {
        s.seed = uint64_t(i);
        s.has_seed = true;
    }
    if (f.get("n") && f.integer("n", i, 1, 64)) r.params.n = int(i);
    // vLLM's extension: lower runs first, and boards by preempting a worse one when full.
    if (f.get("priority") && f.integer("priority", i, -(int64_t{1} << 30), int64_t{1} << 30))
        r.params.priority = int(i);
    f.boolean("stream", r.stream);
    f.boolean("ignore_eos", r.params.ignore_eos);
    if (const json* so = f.get("stream_options")) {
        if (!so->is_object()) return f.type_error("stream_options", "an object", *so), std::nullopt;
        Fields g{*so, err};
        g.boolean("include_usage", r.include_usage);
        if (g.failed) return std::nullopt;
        if (!r.stream) {
            err = bad_request("'stream_options' is only allowed when 'stream' is true",
                              "stream_options");
            return std::nullopt;
        }
    }
    if (const json* u = f.get("user"); u && !u->is_string()) f.type_error("user", "a string", *u);
    // OpenAI fields this server does not implement: their no-op values pass (clients send
    // them by default), anything that would change the output is refused rather than ignored.
    if (const json* lb = f.get("logit_bias"); lb && !lb->is_null()) {
        // {"token id": bias in [-100, 100]}, as OpenAI takes it.
        if (!lb->is_object()) return f.type_error("logit_bias", "an object", *lb), std::nullopt;
        if (lb->size() > 1024) f.fail("'logit_bias' takes at most 1024 tokens", "logit_bias");
        for (const auto& [key, val] : lb->items()) {
            int64_t id = -1;
            if (!key.empty() && key.size() <= 9 &&
                key.find_first_not_of("0123456789") == std::string::npos)
                id = std::stoll(key);
            if (id < 0 || id >= service.n_vocab()) {
                f.fail(fmt::format("'logit_bias' key '{}' is not a token id (0..{})",
                                   key.substr(0, 40), service.n_vocab() - 1),
                       "logit_bias");
                break;
            }
            if (!val.is_number() || !(val.get<double>() >= -100 && val.get<double>() <= 100)) {
                f.fail("'logit_bias' values must be numbers between -100 and 100", "logit_bias");
                break;
            }
            s.logit_bias.emplace_back(static_cast<int32_t>(id), val.get<float>());
        }
    }
    // Structured outputs: the constraint is compiled here, on the connection's thread, so a
    // new schema never stalls the engine loop; a repeated one comes from the compiler's cache.
    if (!f.failed) {
        std::string cerr, cparam;
        auto cf = parse_constraint(body, cerr, cparam);
        if (!cerr.empty()) {
            f.fail(cerr, cparam.c_str());
        } else if (cf) {
            auto g = service.compile_constraint(cf->constraint);
            if (!g)
                f.fail(fmt::format("'{}' cannot be honoured: {}", cf->param, g.error().message),
                       cf->param.c_str());
            else
                r.params.grammar = *g;
        }
    }
    // Tool calling: `required` and a named function are a grammar from the first token;
    // `auto` is the same grammar, waiting for the format's trigger.
    if (!f.failed) {
        std::string terr, tparam;
        r.tools = parse_tools(body, terr, tparam);
        if (!terr.empty()) {
            f.fail(terr, tparam.c_str());
        } else if (r.tools && kind != Endpoint::Chat) {
            f.fail("'tools' is only supported on /v1/chat/completions", "tools");
        } else if (r.parses_tool_calls() && r.params.grammar) {
            f.fail(
                "'tools' cannot be combined with another output constraint "
                "(response_format, guided_*, grammar) in one request",
                "tools");
        } else if (r.parses_tool_calls()) {
            const ToolFormat fmt = tool_template_of(service.chat_template_source()).format;
            auto gbnf = tool_call_gbnf(*r.tools, fmt);
            engine::Constraint c;
            c.kind = engine::Constraint::Kind::Grammar;
            if (gbnf) c.text = *gbnf;
            auto g = gbnf ? service.compile_constraint(c)
                          : Expected<std::shared_ptr<const grammar::CompiledGrammar>>(gbnf.error());
            if (!g) {
                f.fail(fmt::format("'tools' cannot be honoured: {}", g.error().message), "tools");
            } else {
                r.params.grammar = *g;
                if (r.tools->choice == ToolRequest::Choice::Auto)
                    r.params.grammar_trigger = tool_call_trigger(fmt);
            }
        }
    }
    if (const json* bo = f.get("best_of"); bo && !bo->is_null()) {
        const json* n = f.get("n");
        const int64_t want = n && n->is_number_integer() ? n->get<int64_t>() : 1;
        if (!bo->is_number_integer() || bo->get<int64_t>() != want)
            f.fail("'best_of' other than n is not supported by this server", "best_of");
    }
    // ferry's extension: speculative decoding per request ("off", "ngram", "lookahead", "draft"
    // or "medusa").
    if (const json* sp = f.get("speculation")) {
        if (!sp->is_string()) {
            f.type_error("speculation", "a string", *sp);
        } else if (auto m = engine::parse_spec_method(sp->get<std::string>()); !m) {
            f.fail(m.error().message, "speculation");
        } else {
            r.params.spec = *m;
        }
    }

    if (const json* st = f.get("stop")) {
        if (st->is_string()) {
            r.params.stop.push_back(st->get<std::string>());
        } else if (st->is_array()) {
            if (st->size() > 16) f.fail("'stop' takes at most 16 strings", "stop");
            for (const json& x : *st) {
                if (!x.is_string())
                    return f.type_error("stop", "a string or an array of strings", x), std::nullopt;
                r.params.stop.push_back(x.get<std::string>());
            }
        } else {
            f.type_error("stop", "a string or an array of strings", *st);
        }
        for (const auto& x : r.params.stop) {
            if (x.empty()) f.fail("'stop' strings must not be empty", "stop");
            // Text is held back while it could still become a stop string.
            if (x.size() > kMaxStopBytes)
                f.fail(fmt::format("'stop' strings hold at most {} bytes (one has {})",
                                   kMaxStopBytes, x.size()),
                       "stop");
        }
    }
    if (const json* st = f.get("stop_token_ids")) {
        if (!st->is_array()) return f.type_error("stop_token_ids", "an array", *st), std::nullopt;
        token_list(*st, r.params.stop_token_ids, service.n_vocab(), f, "stop_token_ids");
    }

    if (kind == Endpoint::Completions) {
        if (const json* lp = f.get("logprobs")) {
            if (lp->is_boolean()) {  // tolerated: some clients send the chat shape here
                r.logprobs = lp->get<bool>();
                if (r.logprobs) r.params.top_logprobs = 0;
            } else if (f.integer("logprobs", i, 0, 20)) {
                r.logprobs = true;
                r.params.top_logprobs = int(i);
            }
        }
        f.boolean("echo", r.echo);
        if (r.echo && r.logprobs) r.params.prompt_logprobs = r.params.top_logprobs;
    } else {
        f.boolean("logprobs", r.logprobs);
        if (f.get("top_logprobs") && f.integer("top_logprobs", i, 0, 20)) {
            if (!r.logprobs) f.fail("'top_logprobs' needs 'logprobs': true", "top_logprobs");
            r.params.top_logprobs = int(i);
        } else if (r.logprobs) {
            r.params.top_logprobs = 0;
        }
    }
    if (r.parses_tool_calls() && r.logprobs && r.stream)
        f.fail("'logprobs' with 'tools' is not supported when streaming", "logprobs");
    if (f.get("prompt_logprobs") && f.integer("prompt_logprobs", i, 0, 20)) {
        r.prompt_logprobs = int(i);
        r.params.prompt_logprobs = std::max(r.params.prompt_logprobs, int(i));
        if (r.parses_tool_calls() && r.stream)
            f.fail("'prompt_logprobs' with 'tools' is not supported when streaming",
                   "prompt_logprobs");
    }
    // Fields other servers honour that would change the output here: refused until they are
    // implemented, never ignored.
    // Fill-in-the-middle (completions): the reply is what goes between the prompt and this.
    std::string suffix;
    if (const json* v = f.get("suffix"); v && !v->is_null()) {
        if (!v->is_string())
            f.type_error("suffix", "a string", *v);
        else
            suffix = v->get<std::string>();
    }
    if (!suffix.empty() && kind == Endpoint::Chat)
        f.fail("'suffix' is a completions field (fill-in-the-middle)", "suffix");
    if (!suffix.empty() && r.echo)
        f.fail(
            "'echo' with 'suffix' is not supported: the model reads the prompt wrapped in "
            "fill-in-the-middle tokens, not the prompt as given",
            "echo");
    if (const json* v = f.get("min_tokens");
        v && !(v->is_number_integer() && v->get<int64_t>() == 0))
        f.fail("'min_tokens' is not supported ('ignore_eos': true asks for exactly max_tokens)",
               "min_tokens");
    f.boolean("include_stop_str_in_output", r.params.include_stop_str);
    // vLLM's prefill: the final assistant message is left open and the model continues it
    // (the reply holds only the continuation). It needs the generation prompt off, which is
    // taken as meant when left out.
    bool continue_final = false, add_generation_prompt = true;
    f.boolean("continue_final_message", continue_final);
    if (const json* v = f.get("add_generation_prompt"); v && v->is_boolean())
        add_generation_prompt = v->get<bool>();
    else if (v)
        f.type_error("add_generation_prompt", "a boolean", *v);
    else if (continue_final)
        add_generation_prompt = false;
    if (kind != Endpoint::Chat && (continue_final || !add_generation_prompt))
        f.fail("'continue_final_message' and 'add_generation_prompt' are chat fields",
               continue_final ? "continue_final_message" : "add_generation_prompt");
    if (continue_final && add_generation_prompt)
        f.fail(
            "'continue_final_message' continues the last message, so it needs "
            "'add_generation_prompt': false",
            "continue_final_message");
    // A constraint would start its grammar after the text it did not see.
    if (continue_final && (r.parses_tool_calls() || r.params.grammar))
        f.fail(
            "'continue_final_message' with 'tools' or an output constraint (response_format, "
            "guided_*, grammar) is not supported",
            "continue_final_message");
    if (f.get("reasoning_effort"))
        f.fail(fmt::format("'reasoning_effort' is not supported ({} has no reasoning switch ferry "
                           "knows; Qwen 3's enable_thinking goes in 'chat_template_kwargs')",
                           r.model),
               "reasoning_effort");
    if (const json* v = f.get("modalities");
        v && !(v->is_array() && v->size() == 1 && (*v)[0] == "text"))
        f.fail("'modalities' other than [\"text\"] is not supported", "modalities");
    if (const json* v = f.get("chat_template_kwargs"); v && !v->is_object())
        f.type_error("chat_template_kwargs", "an object", *v);
    if (f.failed) return std::nullopt;

    // Prompts become token ids here, so their length can be checked against the context.
    const int n_vocab = service.n_vocab();
    if (kind == Endpoint::Chat) {
        const json* m = f.get("messages");
        if (!m) return f.fail("'messages' is required", "messages"), std::nullopt;
        std::vector<tokenizer::ChatMessage> msgs;
        if (!parse_messages(*m, msgs, f)) return std::nullopt;
        // Tools reach the template when it renders them; otherwise the model is taught the
        // Hermes format in the system message, and past calls and results are written out in
        // it, so a template that knows nothing of tools still sees the whole exchange.
        const ToolTemplate tt = tool_template_of(service.chat_template_source());
        r.tool_format = tt.format;
        json tools = nullptr;
        if (r.parses_tool_calls()) {
            if (tt.renders_tools) {
                tools = r.tools->tools;
            } else if (!msgs.empty() && msgs[0].role == "system") {
                msgs[0].content =
                    msgs[0].content.value_or("") + "\n\n" + tool_system_prompt(*r.tools);
            } else {
                msgs.insert(msgs.begin(),
                            tokenizer::ChatMessage("system", tool_system_prompt(*r.tools)));
            }
        }
        if (!tt.renders_tools || !tt.renders_tool_calls) lower_tool_messages(msgs);
        // chat_template_kwargs (vLLM's): extra template variables, e.g. enable_thinking.
        const json* kwargs = f.get("chat_template_kwargs");
        if (continue_final && (msgs.empty() || msgs.back().role != "assistant" ||
                               !msgs.back().content || msgs.back().content->empty()))
            return f.fail(
                       "'continue_final_message' needs the last message to be the "
                       "assistant's, with text to continue",
                       "continue_final_message"),
                   std::nullopt;
        auto text = service.apply_chat(msgs, tools, kwargs ? *kwargs : json(nullptr),
                                       add_generation_prompt);
        if (!text) {
            err = bad_request(text.error().message, "messages");
            return std::nullopt;
        }
        if (continue_final) {
            // The template closes the final turn after its text; the prompt ends with the text.
            // Where the text starts comes from a second render with a marker in its place (a
            // search for the text could land in the closing tokens: "end" in <|im_end|>);
            // templates that trim a message are met with the trimmed text.
            auto probe_msgs = msgs;
            probe_msgs.back().content =
                "\x1f"
                "ferry:continue"
                "\x1f";
            auto probe =
                service.apply_chat(probe_msgs, tools, kwargs ? *kwargs : json(nullptr), false);
            size_t at = probe ? probe->find(*probe_msgs.back().content) : std::string::npos;
            if (at != std::string::npos && text->compare(0, at, *probe, 0, at) != 0)
                at = std::string::npos;
            const std::string_view last = *msgs.back().content, ws = " \t\r\n";
            std::string_view want;
            if (at != std::string::npos) {
                const size_t b = last.find_first_not_of(ws);
                const size_t e = last.find_last_not_of(ws);
                for (std::string_view c :
                     {last, b == std::string::npos ? std::string_view{} : last.substr(b, e - b + 1),
                      last.substr(0, e + 1), last.substr(std::min(b, last.size()))})
                    if (!c.empty() && text->compare(at, c.size(), c) == 0) {
                        want = c;
                        break;
                    }
            }
            if (want.empty())
                return f.fail(
                           "'continue_final_message': the chat template does not write the "
                           "last message's text as given, so it cannot be continued",
                           "continue_final_message"),
                       std::nullopt;
            text->resize(at + want.size());
        }
        r.prompts.push_back(service.encode(*text, true));
        r.prompt_texts.push_back(*text);
    } else {
        const json* p = f.get("prompt");
        if (!p) return f.fail("'prompt' is required", "prompt"), std::nullopt;
        // A fill-in-the-middle prompt gets its BOS in front of the prefix token instead.
        auto add_text = [&](const std::string& t) {
            r.prompts.push_back(service.encode(t, suffix.empty()));
            r.prompt_texts.push_back(t);
        };
        if (p->is_string()) {
            add_text(p->get<std::string>());
        } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
            for (const json& x : *p) {
                if (!x.is_string())
                    return f.type_error("prompt", "a string, strings, or token ids", x),
                           std::nullopt;
                add_text(x.get<std::string>());
            }
        } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
            for (const json& x : *p) {
                if (!x.is_array())
                    return f.type_error("prompt", "an array of token-id arrays", x), std::nullopt;
                std::vector<int32_t> ids;
                if (!token_list(x, ids, n_vocab, f, "prompt")) return std::nullopt;
                r.prompt_texts.push_back(service.decode(ids));
                r.prompts.push_back(std::move(ids));
            }
        } else if (p->is_array() && !p->empty()) {
            std::vector<int32_t> ids;
            if (!token_list(*p, ids, n_vocab, f, "prompt")) return std::nullopt;
            r.prompt_texts.push_back(service.decode(ids));
            r.prompts.push_back(std::move(ids));
        } else if (p->is_array()) {
            return f.fail("'prompt' must not be empty", "prompt"), std::nullopt;
        } else {
            return f.type_error("prompt", "a string, strings, or token ids", *p), std::nullopt;
        }
        if (!suffix.empty())
            for (auto& ids : r.prompts) {
                auto fim = service.fill_in_middle(ids, suffix);
                if (!fim) return f.fail(fim.error().message, "suffix"), std::nullopt;
                ids = std::move(*fim);
            }
        if (r.prompts.size() > 64)
            return f.fail("at most 64 prompts per request", "prompt"), std::nullopt;
        if (r.prompts.size() * size_t(r.params.n) > 256)
            return f.fail("prompts x n must be at most 256", "n"), std::nullopt;
    }

    const int ctx = service.max_model_len();
    size_t longest = 0;
    for (const auto& p : r.prompts) {
        if (p.empty())
            return f.fail("the prompt is empty after tokenization", "prompt"), std::nullopt;
        longest = std::max(longest, p.size());
    }
    // Under KV eviction the cache keeps a budget of each sequence, so neither the prompt nor
    // the output is bounded by the context; an output asked for nothing gets one context's worth.
    const bool evicts = service.runs_past_context();
    // max_tokens 0 scores or echoes the prompt and generates nothing (legacy completions), so
    // such a prompt may fill the whole context (lm-eval's rolling windows do).
    const bool score_only_ok =
        kind == Endpoint::Completions && (r.echo || r.params.prompt_logprobs >= 0);
    const char* mt = f.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    const json* mtv = f.get(mt);
    const bool scores_only = score_only_ok && mtv && mtv->is_number() && *mtv == 0;
    if (int64_t(longest) >= ctx + (scores_only ? 1 : 0) && !evicts) {
        f.fail(fmt::format("the prompt is {} tokens, but this model's context is {} tokens; it "
                           "must be at most {} tokens to leave room for one generated token",
                           longest, ctx, ctx - 1),
               kind == Endpoint::Chat ? "messages" : "prompt");
        f.err.code = "context_length_exceeded";  // OpenAI's code: clients trim on it
        return std::nullopt;
    }
    const int room = evicts ? ctx : ctx - int(longest);
    if (mtv) {
        if (!f.integer(mt, i, score_only_ok ? 0 : 1, 1 << 24)) return std::nullopt;
        if (i > room && !evicts) {
            f.fail(fmt::format("this model's context is {} tokens; the prompt takes {} and {} = "
                               "{} asks for {} more, but only {} fit",
                               ctx, longest, mt, i, i, room),
                   mt);
            f.err.code = "context_length_exceeded";
            return std::nullopt;
        }
        r.params.max_tokens = int(i);
    } else {
        // OpenAI's completions default is 16; chat runs to the end of the context.
        r.params.max_tokens = kind == Endpoint::Completions ? std::min(16, room) : room;
    }
    return r;
}

json usage_json(const Usage& u) {
    json j = {{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
    return j;
}

json logprobs_json(Endpoint kind, const Service& b, const Choice& c, size_t from, size_t to,
                   size_t offset) {
    to = std::min(to, c.tokens.size());
    if (kind == Endpoint::Chat) {
        json content = json::array();
        auto entry = [&](int32_t tok, float lp) {
            std::string piece = b.token_piece(tok);
            json bytes = json::array();
            for (unsigned char ch : piece) bytes.push_back(int(ch));
            return json{{"token", piece}, {"logprob", lp}, {"bytes", bytes}};
        };
        for (size_t k = from; k < to; ++k) {
            json e = entry(c.tokens[k], c.logprobs[k]);
            json tops = json::array();
            for (const auto& t : c.top_logprobs[k]) tops.push_back(entry(t.token, t.logprob));
            e["top_logprobs"] = tops;
            content.push_back(std::move(e));
        }
        return json{{"content", content}};
    }
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    for (size_t k = from; k < to; ++k) {
        std::string piece = b.token_piece(c.tokens[k]);
        tokens.push_back(piece);
        if (std::isnan(c.logprobs[k])) {
            lps.push_back(nullptr);
            tops.push_back(nullptr);
        } else {
            lps.push_back(c.logprobs[k]);
            // Keys must be valid UTF-8: a piece that splits a character gets U+FFFD.
            json t = json::object();
            for (const auto& x : c.top_logprobs[k])
                t[valid_utf8(b.token_piece(x.token))] = x.logprob;
            tops.push_back(std::move(t));
        }
        offsets.push_back(offset);
        offset += piece.size();
    }
    return json{{"tokens", tokens},
                {"token_logprobs", lps},
                {"top_logprobs", tops},
                {"text_offset", offsets}};
}

void prepend_prompt_logprobs(Choice& c, const std::vector<int32_t>& prompt,
                             const engine::PromptLogprobs& lp) {
    std::vector<float> lps{std::numeric_limits<float>::quiet_NaN()};
    std::vector<std::vector<engine::TokenLogprob>> tops(1);
    for (const auto& e : lp) {
        lps.push_back(e.logprob);
        tops.push_back(e.top);
    }
    c.tokens.insert(c.tokens.begin(), prompt.begin(), prompt.end());
    c.logprobs.insert(c.logprobs.begin(), lps.begin(), lps.end());
    c.top_logprobs.insert(c.top_logprobs.begin(), tops.begin(), tops.end());
}

json prompt_logprobs_json(const Service& b, const std::vector<int32_t>& prompt,
                          const engine::PromptLogprobs& lp) {
    json out = json::array({nullptr});
    for (size_t i = 0; i < lp.size() && i + 1 < prompt.size(); ++i) {
        const int32_t tok = prompt[i + 1];
        json e = json::object();
        auto entry = [&](int32_t id, float logprob, int rank) {
            e[std::to_string(id)] = {{"logprob", logprob},
                                     {"rank", rank},
                                     {"decoded_token", valid_utf8(b.token_piece(id))}};
        };
        entry(tok, lp[i].logprob, lp[i].rank);
        for (size_t k = 0; k < lp[i].top.size(); ++k)
            if (lp[i].top[k].token != tok)
                entry(lp[i].top[k].token, lp[i].top[k].logprob, int(k) + 1);
        out.push_back(std::move(e));
    }
    return out;
}

json full_response(const GenRequest& r, const Service& b, const std::string& id, int64_t created,
                   const std::string& model, const std::vector<Choice>& choices, const Usage& u) {
    json cs = json::array();
    for (size_t k = 0; k < choices.size(); ++k) {
        const Choice& c = choices[k];
        json lp = r.logprobs ? logprobs_json(r.kind, b, c, 0, c.tokens.size(), 0) : json(nullptr);
        const char* fr = engine::finish_reason_name(c.finish);
        if (r.kind == Endpoint::Chat) {
            json message = {{"role", "assistant"}, {"content", c.text}};
            if (r.parses_tool_calls()) {
                ParsedToolOutput p = parse_tool_calls(c.text, r.tool_format);
                if (!p.calls.empty()) {
                    message["content"] = p.content.empty() ? json(nullptr) : json(p.content);
                    message["tool_calls"] = tool_calls_json(p.calls, false);
                    if (c.finish == engine::FinishReason::Stop) fr = "tool_calls";
                }
            }
            cs.push_back(
                {{"index", k}, {"message", message}, {"logprobs", lp}, {"finish_reason", fr}});
        } else {
            std::string text = c.text;
            if (r.echo) text = r.prompt_texts[k / size_t(r.params.n)] + text;
            cs.push_back({{"index", k}, {"text", text}, {"logprobs", lp}, {"finish_reason", fr}});
            if (r.prompt_logprobs >= 0 && c.prompt_lp)
                cs.back()["prompt_logprobs"] =
                    prompt_logprobs_json(b, r.prompts[k / size_t(r.params.n)], *c.prompt_lp);
        }
    }
    json out = {{"id", id},
                {"object", r.kind == Endpoint::Chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", cs},
                {"usage", usage_json(u)}};
    if (r.kind == Endpoint::Chat && r.prompt_logprobs >= 0 && !choices.empty() &&
        choices[0].prompt_lp)
        out["prompt_logprobs"] = prompt_logprobs_json(b, r.prompts[0], *choices[0].prompt_lp);
    return out;
}

json stream_chunk(const GenRequest& r, const std::string& id, int64_t created,
                  const std::string& model, int index, const std::string& text, bool first,
                  const json& logprobs, engine::FinishReason finish) {
    json fr = finish == engine::FinishReason::None ? json(nullptr)
                                                   : json(engine::finish_reason_name(finish));
    json choice;
    if (r.kind == Endpoint::Chat) {
        json delta = json::object();
        if (first) delta["role"] = "assistant";
        if (!text.empty() || (first && finish == engine::FinishReason::None))
            delta["content"] = text;
        choice = {
            {"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", fr}};
    } else {
        choice = {{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", fr}};
    }
    json j = {{"id", id},
              {"object", r.kind == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})}};
    if (r.include_usage) j["usage"] = nullptr;
    return j;
}

json tool_calls_json(const std::vector<tokenizer::ToolCall>& calls, bool with_index) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        const auto& c = calls[i];
        json j = json::object();
        if (with_index) j["index"] = i;
        j["id"] = c.id;
        j["type"] = "function";
        j["function"] = {{"name", c.name},
                         {"arguments", c.arguments.is_string() ? c.arguments.get<std::string>()
                                                               : c.arguments.dump()}};
        out.push_back(std::move(j));
    }
    return out;
}

json tool_calls_chunk(const GenRequest& r, const std::string& id, int64_t created,
                      const std::string& model, int index,
                      const std::vector<tokenizer::ToolCall>& calls, bool first) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    delta["tool_calls"] = tool_calls_json(calls, true);
    json j = {{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", json::array({json{{"index", index},
                                            {"delta", delta},
                                            {"logprobs", nullptr},
                                            {"finish_reason", nullptr}}})}};
    if (r.include_usage) j["usage"] = nullptr;
    return j;
}

json usage_chunk(const GenRequest& r, const std::string& id, int64_t created,
                 const std::string& model, const Usage& u) {
    return json{{"id", id},
                {"object", r.kind == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage", usage_json(u)}};
}

}  // namespace ferry::server
