// The functions every template can call, as transformers' environment defines them:
// range (bounded as the sandbox bounds it), dict, namespace, raise_exception, strftime_now.
#include <ctime>

#include "tokenizer/jinja/args.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/interpreter.h"

namespace ferry::tokenizer::jinja {

namespace {

// jinja2's sandbox refuses larger ranges (MAX_RANGE), with this message.
constexpr int64_t kMaxRange = 100000;

Value g_range(Interpreter&, CallArgs& a) {
    if (!a.named.empty()) fail("range() takes no keyword arguments");
    if (a.positional.empty() || a.positional.size() > 3)
        fail("range expected at most 3 arguments, got {}", a.positional.size());
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
        stop = int_arg(a.positional[0]);
    } else {
        start = int_arg(a.positional[0]);
        stop = int_arg(a.positional[1]);
        if (a.positional.size() == 3) step = int_arg(a.positional[2]);
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
    const __int128 n =
        span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -step);
    if (n > kMaxRange)
        fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
    List out;
    out.reserve(size_t(n));
    for (int64_t i = 0; i < int64_t(n); ++i) out.emplace_back(start + i * step);
    return Value::list(std::move(out));
}

// dict(mapping_or_pairs, **kwargs), the constructor namespace() shares.
Dict build_dict(const char* fn, CallArgs& a) {
    if (a.positional.size() > 1)
        fail("{} expected at most 1 argument, got {}", fn, a.positional.size());
    Dict d;
    if (!a.positional.empty()) {
        const Value& src = a.positional[0];
        if (src.is_dict() || src.is_namespace()) {
            for (const auto& [k, v] : src.dict_ref().items()) d.set(k, v);
        } else {
            for (const auto& pair : iterate(src)) {
                if (!pair.is_sequence() || pair.items().size() != 2)
                    fail("{}: each element must be a sequence of 2 items", fn);
                d.set(pair.items()[0], pair.items()[1]);
            }
        }
    }
    for (auto& [k, v] : a.named) d.set(Value(k), v);
    return d;
}

Value g_dict(Interpreter&, CallArgs& a) {
    return Value::dict(build_dict("dict", a));
}

Value g_namespace(Interpreter& in, CallArgs& a) {
    Dict d = build_dict("namespace", a);
    for (const auto& [k, v] : d.items())
        if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
            fail(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, but "
                "got "
                "'{}'. Please rename the attribute.",
                k.as_string());
    Value ns = Value::make_namespace(std::move(d));
    in.own_namespace(ns);
    return ns;
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
    Params p("raise_exception", a, {"message"}, 1);
    throw TemplateError(to_str(p[0]));
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
    Params p("strftime_now", a, {"format"}, 1);
    const std::string& given = str_arg(p[0], "strftime() argument 1");
    // transformers formats a naive datetime.now(): it has no zone, so %Z and %z print nothing.
    std::string fmt;
    for (size_t i = 0; i < given.size(); ++i) {
        if (given[i] == '%' && i + 1 < given.size()) {
            const char c = given[++i];
            if (c != 'Z' && c != 'z') fmt += {'%', c};
        } else {
            fmt += given[i];
        }
    }
    if (fmt.empty()) return "";
    std::string buf(64 + fmt.size() * 8, '\0');
    for (int tries = 0; tries < 4; ++tries) {
        const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &in.now());
        if (n > 0) return buf.substr(0, n);
        buf.resize(buf.size() * 4);
    }
    return "";
}

}  // namespace

void add_globals(Frame& f) {
    f.set("range", Value::callable("range", g_range));
    f.set("dict", Value::callable("dict", g_dict));
    f.set("namespace", Value::callable("namespace", g_namespace));
    f.set("raise_exception", Value::callable("raise_exception", g_raise_exception));
    f.set("strftime_now", Value::callable("strftime_now", g_strftime_now));
}

}  // namespace ferry::tokenizer::jinja
