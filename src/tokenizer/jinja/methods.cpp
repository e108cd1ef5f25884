// `a.b` and `a[b]`: dict keys and the methods of str, list and dict that templates call
// (`content.strip()`, `message.get('x')`, `'{}'.format(x)`). Methods that would change a list
// or dict in place are refused as ImmutableSandboxedEnvironment refuses them.
#include <array>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/args.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/pystr.h"

namespace ferry::tokenizer::jinja {

namespace {

constexpr std::array kStrMethods = {
    "capitalize",   "casefold",     "center",  "count",      "endswith",   "find",    "format",
    "index",        "isalnum",      "isalpha", "isdecimal",  "isdigit",    "islower", "isnumeric",
    "isspace",      "isupper",      "join",    "ljust",      "lower",      "lstrip",  "partition",
    "removeprefix", "removesuffix", "replace", "rfind",      "rindex",     "rjust",   "rpartition",
    "rsplit",       "rstrip",       "split",   "splitlines", "startswith", "strip",   "swapcase",
    "title",        "upper",        "zfill"};
constexpr std::array kDictMethods = {"items", "keys", "values", "get", "copy"};
constexpr std::array kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array kListMethods = {"count", "index", "copy"};
constexpr std::array kListUnsafe = {"append", "clear",  "extend",  "insert",
                                    "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool one_of(const std::array<const char*, N>& names, std::string_view n) {
    for (const char* x : names)
        if (n == x) return true;
    return false;
}

std::optional<std::string> opt_str(const Params& p, size_t i, std::string_view what) {
    if (!p.has(i) || p[i].is_none()) return std::nullopt;
    return str_arg(p[i], what);
}

std::string pad(const std::string& s, int64_t width, char32_t fill, char align) {
    const int64_t n = int64_t(pystr::length(s));
    if (width <= n) return s;
    std::string f;
    pystr::append_utf8(f, fill);
    const int64_t total = width - n;
    // CPython's str.center gives the odd pad to the left only when the width is odd too.
    const int64_t left = align == '<' ? 0 : align == '>' ? total : total / 2 + (total & width & 1);
    std::string out;
    for (int64_t i = 0; i < left; ++i) out += f;
    out += s;
    for (int64_t i = 0; i < total - left; ++i) out += f;
    return out;
}

char32_t fill_arg(const Params& p, size_t i) {
    if (!p.has(i)) return U' ';
    const std::u32string u = pystr::decode(str_arg(p[i], "fillchar"));
    if (u.size() != 1) fail("The fill character must be exactly one character long");
    return u[0];
}

// One `{...}` replacement field's format spec, as format(value, spec) reads it:
// [[fill]align][sign][#][0][width][,][.precision][type].
std::string format_spec(const Value& v, std::string_view spec) {
    if (spec.empty()) return to_str(v);
    const std::u32string u = pystr::decode(spec);
    size_t i = 0;
    char32_t fill = U' ';
    char align = 0;
    auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (u.size() >= 2 && is_align(u[1])) {
        fill = u[0], align = char(u[1]), i = 2;
    } else if (!u.empty() && is_align(u[0])) {
        align = char(u[0]), i = 1;
    }
    std::string sign;
    if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' ')) sign = char(u[i++]);
    bool alt = false;
    if (i < u.size() && u[i] == '#') alt = true, ++i;
    if (i < u.size() && u[i] == '0') {
        if (!align) fill = U'0', align = '=';
        ++i;
    }
    int64_t width = 0;
    while (i < u.size() && u[i] >= '0' && u[i] <= '9') width = width * 10 + (u[i++] - '0');
    bool comma = false;
    if (i < u.size() && u[i] == ',') comma = true, ++i;
    int precision = -1;
    if (i < u.size() && u[i] == '.') {
        ++i;
        precision = 0;
        while (i < u.size() && u[i] >= '0' && u[i] <= '9')
            precision = precision * 10 + int(u[i++] - '0');
    }
    char type = 0;
    if (i < u.size()) type = char(u[i++]);
    if (i != u.size() || comma || alt) fail("unsupported format spec '{}'", spec);

    std::string body;
    char buf[512];
    if (v.is_string() || (type == 's')) {
        if (!v.is_string()) fail("Unknown format code 's' for object of type '{}'", type_name(v));
        body = v.as_string();
        if (precision >= 0) body = pystr::encode(pystr::decode(body).substr(0, size_t(precision)));
        if (!align) align = '<';
    } else if (v.is_number()) {
        const bool int_type =
            type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b';
        if (int_type) {
            if (v.is_float()) fail("Unknown format code '{}' for object of type 'float'", type);
            const long long x = (long long)v.as_int();
            if (type == 'b') {
                unsigned long long m = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
                std::string bits;
                do bits.insert(bits.begin(), char('0' + (m & 1))), m >>= 1;
                while (m);
                body = (x < 0 ? "-" : "") + bits;
            } else {
                std::snprintf(buf, sizeof buf,
                              type == 'd'   ? "%lld"
                              : type == 'x' ? "%llx"
                              : type == 'X' ? "%llX"
                                            : "%llo",
                              x);
                body = buf;
            }
        } else if (type == 0 && v.is_integral() && precision < 0) {
            body = v.is_bool() ? to_str(v) : std::to_string(v.as_int());
        } else if (type == 0 && precision < 0) {
            body = to_str(v);
        } else {
            const double d = v.as_float();
            const int p = precision < 0 ? 6 : precision;
            if (type == '%') {
                std::snprintf(buf, sizeof buf, "%.*f%%", p, d * 100);
            } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' ||
                       type == 'G') {
                const char f[] = {'%', '.', '*', type, 0};
                std::snprintf(buf, sizeof buf, f, p, d);
            } else if (type == 0) {
                std::snprintf(buf, sizeof buf, "%.*g", p, d);
            } else {
                fail("Unknown format code '{}' for object of type '{}'", type, type_name(v));
            }
            body = buf;
        }
        if (!sign.empty() && sign != "-" && !body.empty() && body[0] != '-') body = sign + body;
        if (!align) align = '>';
    } else {
        if (type) fail("Unknown format code '{}' for object of type '{}'", type, type_name(v));
        body = to_str(v);
        if (!align) align = '<';
    }
    if (align == '=') {
        std::string sgn;
        if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' '))
            sgn = body.substr(0, 1), body.erase(0, 1);
        return sgn + pad(body, width - int64_t(sgn.size()), fill, '>');
    }
    return pad(body, width, fill, align);
}

// str.format: {} {0} {name}, with !r/!s and a format spec; not attribute or index fields.
std::string str_format(const std::string& fmt, const CallArgs& a) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        const char c = fmt[i];
        if (c == '}') {
            if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
                out.push_back('}');
                ++i;
                continue;
            }
            fail("Single '}}' encountered in format string");
        }
        if (c != '{') {
            out.push_back(c);
            continue;
        }
        if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out.push_back('{');
            ++i;
            continue;
        }
        const size_t close = fmt.find('}', i);
        if (close == std::string::npos) fail("Single '{{' encountered in format string");
        std::string field = fmt.substr(i + 1, close - i - 1);
        i = close;
        std::string spec;
        if (size_t colon = field.find(':'); colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field.resize(colon);
        }
        char conv = 0;
        if (size_t bang = field.find('!'); bang != std::string::npos) {
            if (bang + 2 != field.size()) fail("invalid conversion in format string");
            conv = field[bang + 1];
            field.resize(bang);
        }
        if (field.find_first_of(".[") != std::string::npos)
            fail("format fields with attributes or indexes ('{}') are not supported", field);
        const Value* v = nullptr;
        if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
            const size_t k = field.empty() ? auto_index++ : std::stoul(field);
            if (k >= a.positional.size())
                fail("Replacement index {} out of range for positional args tuple", k);
            v = &a.positional[k];
        } else {
            for (const auto& [name, x] : a.named)
                if (name == field) v = &x;
            if (!v) fail("KeyError: '{}'", field);
        }
        Value shown = conv == 'r' || conv == 'a' ? Value(to_repr(*v))
                      : conv == 's'              ? Value(to_str(*v))
                                                 : *v;
        out += format_spec(shown, spec);
    }
    return out;
}

Value str_method(Interpreter& in, const std::string& name, const std::string& s, CallArgs& a) {
    const std::string fn = "str." + name;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        Params p(fn, a, {"chars"});
        return pystr::strip(s, opt_str(p, 0, "chars"), name != "rstrip", name != "lstrip");
    }
    if (name == "split" || name == "rsplit") {
        Params p(fn, a, {"sep", "maxsplit"});
        const auto sep = opt_str(p, 0, "sep");
        if (sep && sep->empty()) fail("empty separator");
        const int64_t maxsplit = p.has(1) ? int_arg(p[1]) : -1;
        List out;
        for (auto& part :
             name == "split" ? pystr::split(s, sep, maxsplit) : pystr::rsplit(s, sep, maxsplit))
            out.emplace_back(std::move(part));
        return Value::list(std::move(out));
    }
    if (name == "splitlines") {
        Params p(fn, a, {"keepends"});
        List out;
        for (auto& part : pystr::splitlines(s, p.has(0) && truthy(p[0])))
            out.emplace_back(std::move(part));
        return Value::list(std::move(out));
    }
    if (name == "startswith" || name == "endswith") {
        Params p(fn, a, {"prefix", "start", "end"}, 1);
        if (p.has(1) || p.has(2)) fail("{}() with start or end is not supported", fn);
        auto test = [&](const Value& x) {
            const std::string& t = str_arg(x, fn + " first arg");
            return name == "startswith" ? s.starts_with(t) : s.ends_with(t);
        };
        if (p[0].is_tuple()) {
            for (const auto& x : p[0].items())
                if (test(x)) return true;
            return false;
        }
        if (!p[0].is_string())
            fail("{} first arg must be str or a tuple of str, not {}", name, type_name(p[0]));
        return test(p[0]);
    }
    if (name == "upper") return Params(fn, a, {}), Value(pystr::upper(s));
    if (name == "lower" || name == "casefold") return Params(fn, a, {}), Value(pystr::lower(s));
    if (name == "title") return Params(fn, a, {}), Value(pystr::title(s));
    if (name == "capitalize") return Params(fn, a, {}), Value(pystr::capitalize(s));
    if (name == "swapcase") return Params(fn, a, {}), Value(pystr::swapcase(s));
    if (name == "replace") {
        Params p(fn, a, {"old", "new", "count"}, 2);
        std::string r =
            pystr::replace(s, str_arg(p[0], "replace() argument 1"),
                           str_arg(p[1], "replace() argument 2"), p.has(2) ? int_arg(p[2]) : -1);
        in.check_size(r.size());
        return r;
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
        Params p(fn, a, {"sub", "start", "end"}, 1);
        if (p.has(1) || p.has(2)) fail("{}() with start or end is not supported", fn);
        const std::string& sub = str_arg(p[0], "must be str");
        if (name == "count") return pystr::count(s, sub);
        const int64_t at =
            name == "find" || name == "index" ? pystr::find(s, sub) : pystr::rfind(s, sub);
        if (at < 0 && (name == "index" || name == "rindex")) fail("substring not found");
        return at;
    }
    if (name == "join") {
        Params p(fn, a, {"iterable"}, 1);
        std::string out;
        const List items = iterate(p[0]);
        for (size_t i = 0; i < items.size(); ++i) {
            if (!items[i].is_string())
                fail("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
            if (i) out += s;
            out += items[i].as_string();
            in.check_size(out.size());
        }
        return out;
    }
    if (name == "format") {
        std::string r = str_format(s, a);
        in.check_size(r.size());
        return r;
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
        Params p(fn, a, {"width", "fillchar"}, 1);
        const int64_t w = int_arg(p[0]);
        in.check_size(size_t(std::max<int64_t>(w, 0)));
        return pad(s, w, fill_arg(p, 1), name == "center" ? '^' : name == "ljust" ? '<' : '>');
    }
    if (name == "zfill") {
        Params p(fn, a, {"width"}, 1);
        const int64_t w = int_arg(p[0]);
        in.check_size(size_t(std::max<int64_t>(w, 0)));
        std::string body = s, sign;
        if (!body.empty() && (body[0] == '-' || body[0] == '+'))
            sign = body.substr(0, 1), body.erase(0, 1);
        return sign + pad(body, w - int64_t(sign.size()), U'0', '>');
    }
    if (name == "partition" || name == "rpartition") {
        Params p(fn, a, {"sep"}, 1);
        const std::string& sep = str_arg(p[0], "must be str");
        if (sep.empty()) fail("empty separator");
        const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (at == std::string::npos)
            return name == "partition" ? Value::tuple({s, "", ""}) : Value::tuple({"", "", s});
        return Value::tuple({s.substr(0, at), sep, s.substr(at + sep.size())});
    }
    if (name == "removeprefix" || name == "removesuffix") {
        Params p(fn, a, {"affix"}, 1);
        const std::string& x = str_arg(p[0], "must be str");
        if (name == "removeprefix") return s.starts_with(x) ? s.substr(x.size()) : s;
        return s.ends_with(x) && !x.empty() ? s.substr(0, s.size() - x.size()) : s;
    }
    Params p(fn, a, {});
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return pystr::isdigit(s);
    if (name == "isalpha") return pystr::isalpha(s);
    if (name == "isalnum") return pystr::isalnum(s);
    if (name == "isspace") return pystr::isspace(std::string_view(s));
    if (name == "isupper") return pystr::isupper(s);
    if (name == "islower") return pystr::islower(s);
    fail("'str' object has no attribute '{}'", name);
}

Value dict_items(const Dict& d) {
    List out;
    for (const auto& [k, v] : d.items()) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
}

Value dict_method(const std::string& name, const Value& self, CallArgs& a) {
    const Dict& d = self.dict_ref();
    const std::string fn = "dict." + name;
    if (name == "get") {
        Params p(fn, a, {"key", "default"}, 1);
        const Value* v = d.find(p[0]);
        return v ? *v : p.get_or(1, nullptr);
    }
    Params p(fn, a, {});
    if (name == "items") return dict_items(d);
    List out;
    if (name == "keys" || name == "values") {
        for (const auto& [k, v] : d.items()) out.push_back(name == "keys" ? k : v);
        return Value::list(std::move(out));
    }
    return Value::dict(d);  // copy
}

Value list_method(const std::string& name, const Value& self, CallArgs& a) {
    const List& items = self.items();
    const std::string fn = (self.is_tuple() ? "tuple." : "list.") + name;
    if (name == "copy") return Params(fn, a, {}), Value::list(items);
    Params p(fn, a, {"value"}, 1);
    if (name == "count") {
        int64_t n = 0;
        for (const auto& x : items) n += equal(x, p[0]);
        return n;
    }
    for (size_t i = 0; i < items.size(); ++i)
        if (equal(items[i], p[0])) return int64_t(i);
    fail("{} is not in list", to_repr(p[0]));
}

Value bound_method(const Value& self, const std::string& name) {
    return Value::callable(name, [self, name](Interpreter& in, CallArgs& a) -> Value {
        switch (self.kind()) {
            case Value::Kind::String:
                return str_method(in, name, self.as_string(), a);
            case Value::Kind::Dict:
                return dict_method(name, self, a);
            default:
                return list_method(name, self, a);
        }
    });
}

Value unsafe_method(const Value& self, const std::string& name) {
    const std::string type = type_name(self);
    return Value::callable(name, [type, name](Interpreter&, CallArgs&) -> Value {
        fail("access to attribute '{}' of '{}' object is unsafe.", name, type);
    });
}

// The attribute half of a lookup: a method of the value's type, or nothing.
std::optional<Value> method_of(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
        case Value::Kind::String:
            if (one_of(kStrMethods, name)) return bound_method(obj, name);
            break;
        case Value::Kind::Dict:
            if (one_of(kDictMethods, name)) return bound_method(obj, name);
            if (one_of(kDictUnsafe, name)) return unsafe_method(obj, name);
            break;
        case Value::Kind::List:
            if (one_of(kListUnsafe, name)) return unsafe_method(obj, name);
            [[fallthrough]];
        case Value::Kind::Tuple:
            if (one_of(kListMethods, name) && !(obj.is_tuple() && name == "copy"))
                return bound_method(obj, name);
            break;
        default:
            break;
    }
    return std::nullopt;
}

// jinja2's object_type_repr, for "'dict object' has no attribute 'x'".
std::string object_type(const Value& v) {
    if (v.is_none()) return "None";
    if (v.is_namespace()) return "Namespace object";
    return type_name(v) + " object";
}

Value missing_attr(const Value& obj, const std::string& name) {
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type(obj), name));
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (auto m = method_of(obj, name)) return *m;
    if (obj.is_dict() || obj.is_namespace())
        if (const Value* v = obj.dict_ref().find(std::string_view(name))) return *v;
    return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail_undefined(obj);
    switch (obj.kind()) {
        case Value::Kind::Dict:
        case Value::Kind::Namespace:
            if (!key.is_undefined())
                if (const Value* v = obj.dict_ref().find(key)) return *v;
            break;
        case Value::Kind::List:
        case Value::Kind::Tuple:
        case Value::Kind::String:
            if (key.is_integral()) {
                int64_t i = key.as_int();
                if (obj.is_string()) {
                    const std::string& s = obj.as_string();
                    if (pystr::is_ascii(s)) {
                        if (i < 0) i += int64_t(s.size());
                        if (i >= 0 && i < int64_t(s.size())) return std::string(1, s[size_t(i)]);
                    } else {
                        const std::u32string u = pystr::decode(s);
                        if (i < 0) i += int64_t(u.size());
                        if (i >= 0 && i < int64_t(u.size()))
                            return pystr::encode(u.substr(size_t(i), 1));
                    }
                } else {
                    const List& items = obj.items();
                    if (i < 0) i += int64_t(items.size());
                    if (i >= 0 && i < int64_t(items.size())) return items[size_t(i)];
                }
            }
            break;
        default:
            break;
    }
    if (key.is_string()) {
        if (auto m = method_of(obj, key.as_string())) return *m;
        return missing_attr(obj, key.as_string());
    }
    return Value::undefined(fmt::format("{} has no element {}", object_type(obj), to_repr(key)));
}

}  // namespace ferry::tokenizer::jinja
