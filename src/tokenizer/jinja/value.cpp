#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pystr.h"

namespace ferry::tokenizer::jinja {

namespace {

// Values nest only as deep as their JSON or literals do; printing and comparing recurse, so a
// hostile 100 000-deep tools list must be refused rather than overflow the stack.
constexpr int kMaxNesting = 512;

void check_depth(int depth) {
    if (depth > kMaxNesting) fail("value nested more than {} levels deep", kMaxNesting);
}

}  // namespace

Value Value::undefined(std::string why) {
    Value v;
    v.data_ = std::move(why);
    return v;
}

Value Value::list(List items) {
    Value v;
    v.kind_ = Kind::List;
    v.data_ = std::make_shared<List>(std::move(items));
    return v;
}

Value Value::tuple(List items) {
    Value v = list(std::move(items));
    v.kind_ = Kind::Tuple;
    return v;
}

Value Value::dict() {
    return dict(Dict{});
}

Value Value::dict(Dict d) {
    Value v;
    v.kind_ = Kind::Dict;
    v.data_ = std::make_shared<Dict>(std::move(d));
    return v;
}

Value Value::make_namespace(Dict d) {
    Value v = dict(std::move(d));
    v.kind_ = Kind::Namespace;
    return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
    Value v;
    v.kind_ = Kind::Callable;
    v.data_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

int64_t Value::as_int() const {
    return kind_ == Kind::Bool ? int64_t(std::get<bool>(data_)) : std::get<int64_t>(data_);
}

double Value::as_float() const {
    if (kind_ == Kind::Float) return std::get<double>(data_);
    return double(as_int());
}

bool Value::same_object(const Value& o) const {
    if (kind_ != o.kind_) return false;
    switch (kind_) {
        case Kind::List:
        case Kind::Tuple:
            return &items() == &o.items();
        case Kind::Dict:
        case Kind::Namespace:
            return &dict_ref() == &o.dict_ref();
        case Kind::Callable:
            return &callable_ref() == &o.callable_ref();
        case Kind::None:
        case Kind::Undefined:
            return true;
        case Kind::Bool:
            return as_bool() == o.as_bool();
        default:
            return equal(*this, o);  // small ints and interned strings, near enough
    }
}

const Value* Dict::find(const Value& key) const {
    if (key.is_string()) return find(std::string_view(key.as_string()));
    for (const auto& [k, v] : items_)
        if (equal(k, key)) return &v;
    return nullptr;
}

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items_)
        if (k.is_string() && k.as_string() == key) return &v;
    return nullptr;
}

void Dict::set(Value key, Value value) {
    for (auto& [k, v] : items_) {
        if (equal(k, key)) {
            v = std::move(value);
            return;
        }
    }
    items_.emplace_back(std::move(key), std::move(value));
}

bool truthy(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None:
            return false;
        case Value::Kind::Bool:
            return v.as_bool();
        case Value::Kind::Int:
            return v.as_int() != 0;
        case Value::Kind::Float:
            return v.as_float() != 0.0;
        case Value::Kind::String:
            return !v.as_string().empty();
        case Value::Kind::List:
        case Value::Kind::Tuple:
            return !v.items().empty();
        case Value::Kind::Dict:
            return !v.dict_ref().empty();
        case Value::Kind::Namespace:
        case Value::Kind::Callable:
            return true;
    }
    return false;
}

std::string type_name(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined:
            return "Undefined";
        case Value::Kind::None:
            return "NoneType";
        case Value::Kind::Bool:
            return "bool";
        case Value::Kind::Int:
            return "int";
        case Value::Kind::Float:
            return "float";
        case Value::Kind::String:
            return "str";
        case Value::Kind::List:
            return "list";
        case Value::Kind::Tuple:
            return "tuple";
        case Value::Kind::Dict:
            return "dict";
        case Value::Kind::Namespace:
            return "Namespace";
        case Value::Kind::Callable:
            return "function";
    }
    return "object";
}

void fail_undefined(const Value& v) {
    const std::string& hint = v.undefined_hint();
    throw TemplateError(hint.empty() ? "an undefined value was used" : hint);
}

namespace {

std::string repr_at(const Value& v, int depth);

std::string str_at(const Value& v, int depth) {
    check_depth(depth);
    switch (v.kind()) {
        case Value::Kind::Undefined:
            return {};
        case Value::Kind::None:
            return "None";
        case Value::Kind::Bool:
            return v.as_bool() ? "True" : "False";
        case Value::Kind::Int:
            return std::to_string(v.as_int());
        case Value::Kind::Float:
            return pystr::float_repr(v.as_float());
        case Value::Kind::String:
            return v.as_string();
        case Value::Kind::List:
        case Value::Kind::Tuple: {
            const bool tuple = v.is_tuple();
            std::string out = tuple ? "(" : "[";
            const auto& items = v.items();
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                out += repr_at(items[i], depth + 1);
            }
            if (tuple && items.size() == 1) out += ",";
            out += tuple ? ")" : "]";
            return out;
        }
        case Value::Kind::Dict:
        case Value::Kind::Namespace: {
            std::string out = v.is_namespace() ? "<Namespace {" : "{";
            bool first = true;
            for (const auto& [k, x] : v.dict_ref().items()) {
                if (!first) out += ", ";
                first = false;
                out += repr_at(k, depth + 1) + ": " + repr_at(x, depth + 1);
            }
            out += v.is_namespace() ? "}>" : "}";
            return out;
        }
        case Value::Kind::Callable:
            return "<function " + v.callable_ref().name + ">";
    }
    return {};
}

std::string repr_at(const Value& v, int depth) {
    if (v.is_string()) return pystr::repr(v.as_string());
    if (v.is_undefined()) return "Undefined";
    return str_at(v, depth);
}

bool equal_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
        return a.as_float() == b.as_float();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None:
            return true;
        case Value::Kind::String:
            return a.as_string() == b.as_string();
        case Value::Kind::List:
        case Value::Kind::Tuple: {
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equal_at(x[i], y[i], depth + 1)) return false;
            return true;
        }
        case Value::Kind::Dict: {
            const auto &x = a.dict_ref(), &y = b.dict_ref();
            if (x.size() != y.size()) return false;
            for (const auto& [k, v] : x.items()) {
                const Value* w = y.find(k);
                if (!w || !equal_at(v, *w, depth + 1)) return false;
            }
            return true;
        }
        default:
            return a.same_object(b);
    }
}

[[noreturn]] void unorderable(const char* op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    fail("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

const char* op_text(CmpOp op) {
    switch (op) {
        case CmpOp::Lt:
            return "<";
        case CmpOp::Le:
            return "<=";
        case CmpOp::Gt:
            return ">";
        case CmpOp::Ge:
            return ">=";
        default:
            return "==";
    }
}

// Three-way for strings and sequences (lexicographic, as Python's); numbers are compared
// directly by the caller so that NaN answers false to everything.
int order(CmpOp op, const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_integral() && b.is_integral())
            return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
        const double x = a.as_float(), y = b.as_float();
        return x < y ? -1 : x > y;
    }
    if (a.is_string() && b.is_string()) {
        const int c = a.as_string().compare(b.as_string());  // UTF-8 keeps code point order
        return c < 0 ? -1 : c > 0;
    }
    if (a.kind() == b.kind() && a.is_sequence()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equal_at(x[i], y[i], depth + 1)) continue;
            return order(op, x[i], y[i], depth + 1);
        }
        return x.size() < y.size() ? -1 : x.size() > y.size();
    }
    unorderable(op_text(op), a, b);
}

}  // namespace

std::string to_str(const Value& v) {
    return str_at(v, 0);
}
std::string to_repr(const Value& v) {
    return repr_at(v, 0);
}
bool equal(const Value& a, const Value& b) {
    return equal_at(a, b, 0);
}

bool compare(CmpOp op, const Value& a, const Value& b) {
    switch (op) {
        case CmpOp::Eq:
            return equal(a, b);
        case CmpOp::Ne:
            return !equal(a, b);
        default:
            break;
    }
    if (a.is_number() && b.is_number() && (a.is_float() || b.is_float())) {
        const double x = a.as_float(), y = b.as_float();
        switch (op) {
            case CmpOp::Lt:
                return x < y;
            case CmpOp::Le:
                return x <= y;
            case CmpOp::Gt:
                return x > y;
            default:
                return x >= y;
        }
    }
    const int c = order(op, a, b, 0);
    switch (op) {
        case CmpOp::Lt:
            return c < 0;
        case CmpOp::Le:
            return c <= 0;
        case CmpOp::Gt:
            return c > 0;
        default:
            return c >= 0;
    }
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
    check_depth(depth);
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null:
            return nullptr;
        case nlohmann::ordered_json::value_t::boolean:
            return j.get<bool>();
        case nlohmann::ordered_json::value_t::number_integer:
            return j.get<int64_t>();
        case nlohmann::ordered_json::value_t::number_unsigned: {
            const uint64_t u = j.get<uint64_t>();
            if (u > uint64_t(INT64_MAX)) fail("integer {} is too large", u);
            return int64_t(u);
        }
        case nlohmann::ordered_json::value_t::number_float:
            return j.get<double>();
        case nlohmann::ordered_json::value_t::string:
            return j.get<std::string>();
        case nlohmann::ordered_json::value_t::array: {
            List items;
            items.reserve(j.size());
            for (const auto& x : j) items.push_back(from_json_at(x, depth + 1));
            return Value::list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Dict d;
            for (const auto& [k, x] : j.items()) d.set(Value(k), from_json_at(x, depth + 1));
            return Value::dict(std::move(d));
        }
        default:
            fail("unsupported JSON value ({})", j.type_name());
    }
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out.push_back('"');
    char buf[16];
    auto esc = [&](char32_t c) {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
        out += buf;
    };
    for (char32_t c : pystr::decode(s)) {
        switch (c) {
            case '"':
                out += "\\\"";
                continue;
            case '\\':
                out += "\\\\";
                continue;
            case '\n':
                out += "\\n";
                continue;
            case '\r':
                out += "\\r";
                continue;
            case '\t':
                out += "\\t";
                continue;
            case '\b':
                out += "\\b";
                continue;
            case '\f':
                out += "\\f";
                continue;
            default:
                break;
        }
        if (c < 0x20) {
            esc(c);
        } else if (ensure_ascii && c >= 0x80) {
            if (c >= 0x10000) {
                const char32_t v = c - 0x10000;
                esc(0xD800 + (v >> 10));
                esc(0xDC00 + (v & 0x3FF));
            } else {
                esc(c);
            }
        } else {
            pystr::append_utf8(out, c);
        }
    }
    out.push_back('"');
}

std::string json_float(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
    return pystr::float_repr(d);
}

// json.dumps turns int, float, bool and None keys into strings and refuses anything else.
std::string json_key(const Value& k) {
    switch (k.kind()) {
        case Value::Kind::String:
            return k.as_string();
        case Value::Kind::Bool:
            return k.as_bool() ? "true" : "false";
        case Value::Kind::Int:
            return std::to_string(k.as_int());
        case Value::Kind::Float:
            return json_float(k.as_float());
        case Value::Kind::None:
            return "null";
        default:
            fail("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
}

void dump_at(std::string& out, const Value& v, const JsonStyle& st, int depth) {
    check_depth(depth);
    auto newline = [&](int level) {
        if (!st.indent) return;
        out.push_back('\n');
        for (int i = 0; i < level; ++i) out += *st.indent;
    };
    switch (v.kind()) {
        case Value::Kind::None:
            out += "null";
            return;
        case Value::Kind::Bool:
            out += v.as_bool() ? "true" : "false";
            return;
        case Value::Kind::Int:
            out += std::to_string(v.as_int());
            return;
        case Value::Kind::Float:
            out += json_float(v.as_float());
            return;
        case Value::Kind::String:
            json_string(out, v.as_string(), st.ensure_ascii);
            return;
        case Value::Kind::List:
        case Value::Kind::Tuple: {
            const auto& items = v.items();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out.push_back('[');
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += st.item_sep;
                newline(depth + 1);
                dump_at(out, items[i], st, depth + 1);
            }
            newline(depth);
            out.push_back(']');
            return;
        }
        case Value::Kind::Dict: {
            std::vector<std::pair<std::string, const Value*>> items;
            for (const auto& [k, x] : v.dict_ref().items()) items.emplace_back(json_key(k), &x);
            if (st.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            if (items.empty()) {
                out += "{}";
                return;
            }
            out.push_back('{');
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += st.item_sep;
                newline(depth + 1);
                json_string(out, items[i].first, st.ensure_ascii);
                out += st.key_sep;
                dump_at(out, *items[i].second, st, depth + 1);
            }
            newline(depth);
            out.push_back('}');
            return;
        }
        default:
            fail("Object of type {} is not JSON serializable", type_name(v));
    }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
    return from_json_at(j, 0);
}

std::string dump_json(const Value& v, const JsonStyle& style) {
    std::string out;
    dump_at(out, v, style, 0);
    return out;
}

}  // namespace ferry::tokenizer::jinja
