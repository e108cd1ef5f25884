// jinja2's built-in filters that chat templates use, with transformers' own `tojson`
// (json.dumps with ensure_ascii=False, so non-ASCII text stays as it is and HTML characters are
// not escaped). Filters jinja2 has and this interpreter lacks (wordwrap, groupby, urlize, ...)
// are unknown names, which the parser reports when the template loads.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "tokenizer/jinja/args.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/pystr.h"

namespace ferry::tokenizer::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0, item first; a default
// replaces an undefined at every step (so "a.b" with a default survives a missing a).
Value lookup_path(const Value& item, const Value& attribute, const Value& dflt = Value()) {
    auto step = [&](Value v) {
        return v.is_undefined() && !dflt.is_undefined() && !dflt.is_none() ? dflt : v;
    };
    if (!attribute.is_string()) return step(get_item(item, attribute));
    Value v = item;
    for (const std::string& part : pystr::split(attribute.as_string(), std::string("."), -1)) {
        const bool digits = !part.empty() && part.size() < 18 &&
                            part.find_first_not_of("0123456789") == std::string::npos;
        v = step(get_item(v, digits ? Value(int64_t(std::stoll(part))) : Value(part)));
    }
    return v;
}

Value ignore_case(const Value& v) {
    return v.is_string() ? Value(pystr::lower(v.as_string())) : v;
}

// The key a sort, unique, min or max compares: the attribute (a comma list gives a list of
// keys, as jinja2's make_multi_attrgetter), lower-cased unless case-sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
    auto one = [&](const Value& attr) {
        Value v = attr.is_none() ? item : lookup_path(item, attr);
        return case_sensitive ? v : ignore_case(v);
    };
    if (attribute.is_string() && attribute.as_string().find(',') != std::string::npos) {
        List keys;
        for (const std::string& a : pystr::split(attribute.as_string(), std::string(","), -1))
            keys.push_back(one(Value(a)));
        return Value::list(std::move(keys));
    }
    return one(attribute);
}

bool less(const Value& a, const Value& b) {
    return compare(CmpOp::Lt, a, b);
}

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
    Params("abs", a, {});
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) fail("bad operand type for abs(): '{}'", type_name(v));
    if (v.is_float()) return std::fabs(v.as_float());
    if (v.as_int() == INT64_MIN) fail("integer result does not fit in 64 bits");
    return v.as_int() < 0 ? -v.as_int() : v.as_int();
}

Value f_attr(Interpreter&, const Value& v, CallArgs& a) {
    Params p("attr", a, {"name"}, 1);
    return get_attr(v, str_arg(p[0], "attribute name"));
}

Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
    Params p("batch", a, {"linecount", "fill_with"}, 1);
    const int64_t n = int_arg(p[0]);
    if (n <= 0) fail("batch() needs a positive line count");
    List out, cur;
    for (auto& x : iterate(v)) {
        if (int64_t(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
        cur.push_back(std::move(x));
    }
    if (!cur.empty()) {
        if (p.has(1) && !p[1].is_none())
            while (int64_t(cur.size()) < n) cur.push_back(p[1]);
        out.push_back(Value::list(std::move(cur)));
    }
    return Value::list(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
    Params("capitalize", a, {});
    return pystr::capitalize(to_str(v));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
    Params p("center", a, {"width"});
    CallArgs inner;
    inner.positional.push_back(p.get_or(0, int64_t(80)));
    return get_attr(Value(to_str(v)), "center").callable_ref().fn(in, inner);
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
    Params p("default", a, {"default_value", "boolean"});
    const bool boolean = p.has(1) && truthy(p[1]);
    if (v.is_undefined() || (boolean && !truthy(v))) return p.get_or(0, "");
    return v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
    Params p("dictsort", a, {"case_sensitive", "by", "reverse"});
    const bool cs = p.has(0) && truthy(p[0]);
    const std::string by = p.has(1) ? str_arg(p[1], "by") : "key";
    if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
    if (!v.is_dict()) fail("dictsort needs a mapping, not {}", type_name(v));
    std::vector<std::pair<Value, Value>> items = v.dict_ref().items();
    const size_t pos = by == "key" ? 0 : 1;
    auto key = [&](const std::pair<Value, Value>& kv) {
        const Value& x = pos == 0 ? kv.first : kv.second;
        return cs ? x : ignore_case(x);
    };
    const bool rev = p.has(2) && truthy(p[2]);
    std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        return rev ? less(key(y), key(x)) : less(key(x), key(y));
    });
    List out;
    for (auto& [k, x] : items) out.push_back(Value::tuple({k, x}));
    return Value::list(std::move(out));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
    Params("escape", a, {});
    std::string out;
    for (char c : to_str(v)) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return out;
}

Value f_first(Interpreter&, const Value& v, CallArgs& a) {
    Params("first", a, {});
    if (v.is_sequence())
        return v.items().empty() ? Value::undefined("No first item, sequence was empty.")
                                 : v.items()[0];
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items[0];
}

Value f_last(Interpreter&, const Value& v, CallArgs& a) {
    Params("last", a, {});
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
}

// Python's float(str): surrounding whitespace, digits with single underscores between them,
// inf/nan spelled any case; anything else is not a float.
std::optional<double> parse_float(const std::string& text) {
    std::string s = pystr::strip(text, std::nullopt, true, true), clean;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '_') {
            if (i == 0 || i + 1 == s.size() || !std::isdigit((unsigned char)s[i - 1]) ||
                !std::isdigit((unsigned char)s[i + 1]))
                return std::nullopt;
            continue;
        }
        clean.push_back(s[i]);
    }
    if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;
    std::string low = pystr::lower(clean);
    const std::string_view body =
        std::string_view(low).substr(low[0] == '+' || low[0] == '-' ? 1 : 0);
    if (body == "inf" || body == "infinity" || body == "nan") {
        const double x = body == "nan" ? NAN : INFINITY;
        return low[0] == '-' ? -x : x;
    }
    if (body.find_first_not_of("0123456789.e+-") != std::string_view::npos) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(clean.c_str(), &end);
    if (end != clean.c_str() + clean.size()) return std::nullopt;
    return d;
}

std::optional<double> to_float(const Value& v) {
    if (v.is_number()) return v.as_float();
    if (v.is_string()) return parse_float(v.as_string());
    return std::nullopt;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
    Params p("float", a, {"default"});
    if (auto d = to_float(v)) return *d;
    return p.get_or(0, 0.0);
}

// Python's int(str, base): whitespace, a sign, underscores between digits, an optional 0x/0o/0b
// prefix matching the base.
std::optional<int64_t> parse_int(const std::string& text, int base) {
    std::string s = pystr::strip(text, std::nullopt, true, true);
    size_t i = 0;
    bool neg = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i + 1 < s.size() && s[i] == '0') {
        const char p = char(std::tolower((unsigned char)s[i + 1]));
        if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) i += 2;
    }
    if (i >= s.size()) return std::nullopt;
    int64_t v = 0;
    bool prev_digit = false;
    for (; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '_') {
            if (!prev_digit) return std::nullopt;
            prev_digit = false;
            continue;
        }
        const int d = std::isdigit((unsigned char)c)   ? c - '0'
                      : std::isalpha((unsigned char)c) ? std::tolower(c) - 'a' + 10
                                                       : 99;
        if (d >= base) return std::nullopt;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
            return std::nullopt;
        prev_digit = true;
    }
    if (!prev_digit) return std::nullopt;
    return neg ? -v : v;
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
    Params p("int", a, {"default", "base"});
    const int base = p.has(1) ? int(int_arg(p[1])) : 10;
    if (base < 2 || base > 36) fail("int() base must be >= 2 and <= 36");
    if (v.is_integral()) return v.as_int();
    std::optional<double> d;
    if (v.is_string()) {
        if (auto i = parse_int(v.as_string(), base)) return *i;
        d = parse_float(v.as_string());
    } else if (v.is_float()) {
        d = v.as_float();
    }
    if (d) {
        if (!std::isfinite(*d))
            fail("cannot convert float {} to integer", std::isnan(*d) ? "NaN" : "infinity");
        if (std::fabs(*d) >= 9.2e18) fail("integer result does not fit in 64 bits");
        return int64_t(std::trunc(*d));
    }
    return p.get_or(0, int64_t(0));
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
    if (!a.positional.empty() && !a.named.empty())
        fail("can't handle positional and keyword arguments at the same time");
    Value args;
    if (!a.named.empty()) {
        Dict d;
        for (auto& [k, x] : a.named) d.set(Value(k), x);
        args = Value::dict(std::move(d));
    } else {
        args = Value::tuple(a.positional);
    }
    std::string s = percent_format(to_str(v), args);
    in.check_size(s.size());
    return s;
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
    Params p("indent", a, {"width", "first", "blank"});
    std::string ind;
    if (p.has(0) && p[0].is_string())
        ind = p[0].as_string();
    else
        ind = std::string(size_t(std::max<int64_t>(0, p.has(0) ? int_arg(p[0]) : 4)), ' ');
    const bool first = p.has(1) && truthy(p[1]), blank = p.has(2) && truthy(p[2]);
    // jinja2 appends a newline first so that splitlines keeps a trailing empty line.
    const std::vector<std::string> lines = pystr::splitlines(to_str(v) + "\n", false);
    std::string rv;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t i = 1; i < lines.size(); ++i)
            rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
    }
    if (first) rv = ind + rv;
    in.check_size(rv.size());
    return rv;
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
    Params("items", a, {});
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, x] : v.dict_ref().items()) out.push_back(Value::tuple({k, x}));
    return Value::list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
    Params p("join", a, {"d", "attribute"});
    const std::string sep = p.has(0) ? to_str(p[0]) : "";
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(p.has(1) && !p[1].is_none() ? lookup_path(x, p[1]) : x);
        in.check_size(out.size());
    }
    return out;
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
    Params("length", a, {});
    switch (v.kind()) {
        case Value::Kind::Undefined:
            return int64_t(0);
        case Value::Kind::String:
            return int64_t(pystr::length(v.as_string()));
        case Value::Kind::List:
        case Value::Kind::Tuple:
            return int64_t(v.items().size());
        case Value::Kind::Dict:
            return int64_t(v.dict_ref().size());
        default:
            fail("object of type '{}' has no len()", type_name(v));
    }
}

Value f_list(Interpreter&, const Value& v, CallArgs& a) {
    Params("list", a, {});
    return Value::list(iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
    Params("lower", a, {});
    return pystr::lower(to_str(v));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
    Params("upper", a, {});
    return pystr::upper(to_str(v));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
    if (!truthy(v)) return Value::list();
    List items = iterate(v), out;
    if (a.positional.empty()) {
        const Value* attr = nullptr;
        Value dflt;
        for (auto& [k, x] : a.named) {
            if (k == "attribute")
                attr = &x;
            else if (k == "default")
                dflt = x;
            else
                fail("Unexpected keyword argument '{}'", k);
        }
        if (!attr) fail("map requires a filter argument");
        for (const auto& x : items) out.push_back(lookup_path(x, *attr, dflt));
        return Value::list(std::move(out));
    }
    const std::string name = str_arg(a.positional[0], "map's filter name");
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.named = a.named;
    for (const auto& x : items) {
        CallArgs copy = rest;
        out.push_back(apply_filter(in, name, x, copy));
    }
    return Value::list(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
    Params p(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
    const bool cs = p.has(0) && truthy(p[0]);
    const Value attr = p.get_or(1, nullptr);
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    Value best_key = sort_key(items[0], attr, cs);
    for (size_t i = 1; i < items.size(); ++i) {
        Value k = sort_key(items[i], attr, cs);
        if (want_max ? less(best_key, k) : less(k, best_key)) best = i, best_key = std::move(k);
    }
    return items[best];
}

Value f_max(Interpreter&, const Value& v, CallArgs& a) {
    return min_max(v, a, true);
}
Value f_min(Interpreter&, const Value& v, CallArgs& a) {
    return min_max(v, a, false);
}

Value select_reject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool by_attr) {
    if (!truthy(v)) return Value::list();
    size_t off = 0;
    Value attr;
    if (by_attr) {
        if (a.positional.empty()) fail("Missing parameter for attribute name");
        attr = a.positional[0];
        off = 1;
    }
    std::string test;
    CallArgs rest;
    if (a.positional.size() > off) {
        test = str_arg(a.positional[off], "test name");
        rest.positional.assign(a.positional.begin() + long(off) + 1, a.positional.end());
        rest.named = a.named;
    }
    List out;
    for (auto& x : iterate(v)) {
        Value subject = by_attr ? lookup_path(x, attr) : x;
        bool r;
        if (test.empty()) {
            r = truthy(subject);
        } else {
            CallArgs copy = rest;
            r = apply_test(in, test, subject, copy);
        }
        if (r == select) out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
    return select_reject(in, v, a, true, false);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
    return select_reject(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
    return select_reject(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
    return select_reject(in, v, a, false, true);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
    Params p("replace", a, {"old", "new", "count"}, 2);
    const int64_t count = p.has(2) && !p[2].is_none() ? int_arg(p[2]) : -1;
    std::string r = pystr::replace(to_str(v), to_str(p[0]), to_str(p[1]), count);
    in.check_size(r.size());
    return r;
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
    Params("reverse", a, {});
    if (v.is_string()) {
        std::u32string u = pystr::decode(v.as_string());
        std::reverse(u.begin(), u.end());
        return pystr::encode(u);
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
    Params p("round", a, {"precision", "method"});
    const int64_t prec = p.has(0) ? int_arg(p[0]) : 0;
    const std::string method = p.has(1) ? str_arg(p[1], "method") : "common";
    if (method != "common" && method != "ceil" && method != "floor")
        fail("method must be common, ceil or floor");
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) fail("type {} doesn't define __round__ method", type_name(v));
    if (method == "common") {
        if (v.is_integral()) {
            if (prec >= 0) return v.as_int();
            if (prec < -18) return int64_t(0);
            // Python rounds an int to tens, hundreds, ... half to even, and keeps it an int.
            int64_t q = 1;
            for (int64_t k = 0; k < -prec; ++k) q *= 10;
            const int64_t x = v.as_int();
            int64_t r = x % q;
            if (r < 0) r += q;
            int64_t base = x - r;
            if (2 * r > q || (2 * r == q && (base / q) % 2 != 0)) base += q;
            return base;
        }
        const double d = v.as_float();
        if (!std::isfinite(d) || prec > 300) return d;
        if (prec < 0) {
            const double scale = std::pow(10.0, double(-prec));
            return std::nearbyint(d / scale) * scale;
        }
        // printf rounds the exact binary value, ties to even: Python's correctly rounded round().
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", int(prec), d);
        return std::strtod(buf, nullptr);
    }
    const double scale = std::pow(10.0, double(prec)), d = v.as_float() * scale;
    return (method == "ceil" ? std::ceil(d) : std::floor(d)) / scale;
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
    Params("safe", a, {});
    return to_str(v);
}

Value f_sort(Interpreter&, const Value& v, CallArgs& a) {
    Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
    const bool rev = p.has(0) && truthy(p[0]), cs = p.has(1) && truthy(p[1]);
    const Value attr = p.get_or(2, nullptr);
    List items = iterate(v);
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(sort_key(items[i], attr, cs), i);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return rev ? less(y.first, x.first) : less(x.first, y.first);
    });
    List out;
    for (const auto& [k, i] : keyed) out.push_back(items[i]);
    return Value::list(std::move(out));
}

Value f_string(Interpreter&, const Value& v, CallArgs& a) {
    Params("string", a, {});
    return to_str(v);
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
    Params p("sum", a, {"attribute", "start"});
    Value total = p.get_or(1, int64_t(0));
    for (const auto& x : iterate(v))
        total = binary_op(in, BinOp::Add, total,
                          p.has(0) && !p[0].is_none() ? lookup_path(x, p[0]) : x);
    return total;
}

Value f_title(Interpreter&, const Value& v, CallArgs& a) {
    Params("title", a, {});
    // jinja2 splits at runs of whitespace and -({[< and capitalises each piece.
    const std::u32string u = pystr::decode(to_str(v));
    auto is_delim = [](char32_t c) {
        return pystr::isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    };
    std::string out;
    size_t i = 0;
    while (i < u.size()) {
        size_t j = i;
        const bool delim = is_delim(u[i]);
        while (j < u.size() && is_delim(u[j]) == delim) ++j;
        const std::string piece = pystr::encode(std::u32string_view(u).substr(i, j - i));
        if (delim) {
            out += piece;
        } else {
            std::string head;
            pystr::append_utf8(head, u[i]);
            out += pystr::upper(head) +
                   pystr::lower(pystr::encode(std::u32string_view(u).substr(i + 1, j - i - 1)));
        }
        i = j;
    }
    return out;
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
    Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle st;
    st.ensure_ascii = p.has(0) && truthy(p[0]);
    st.sort_keys = p.has(3) && truthy(p[3]);
    if (p.has(1) && !p[1].is_none()) {
        st.indent = p[1].is_string()
                        ? p[1].as_string()
                        : std::string(size_t(std::max<int64_t>(0, int_arg(p[1]))), ' ');
        st.item_sep = ",";
    }
    if (p.has(2) && !p[2].is_none()) {
        if (!p[2].is_sequence() || p[2].items().size() != 2)
            fail("tojson separators must be a pair of strings");
        st.item_sep = str_arg(p[2].items()[0], "item separator");
        st.key_sep = str_arg(p[2].items()[1], "key separator");
    }
    std::string s = dump_json(v, st);
    in.check_size(s.size());
    return s;
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
    Params p("trim", a, {"chars"});
    std::optional<std::string> chars;
    if (p.has(0) && !p[0].is_none()) chars = str_arg(p[0], "trim chars");
    return pystr::strip(to_str(v), chars, true, true);
}

Value f_unique(Interpreter&, const Value& v, CallArgs& a) {
    Params p("unique", a, {"case_sensitive", "attribute"});
    const bool cs = p.has(0) && truthy(p[0]);
    const Value attr = p.get_or(1, nullptr);
    List out, seen;
    for (auto& x : iterate(v)) {
        Value k = sort_key(x, attr, cs);
        bool dup = false;
        for (const auto& s : seen) dup = dup || equal(s, k);
        if (dup) continue;
        seen.push_back(std::move(k));
        out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
    Params("wordcount", a, {});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : pystr::decode(to_str(v))) {
        std::string one;
        pystr::append_utf8(one, c);
        const bool w = c == '_' || pystr::isalnum(one);
        if (w && !in_word) ++n;
        in_word = w;
    }
    return n;
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
    static const std::unordered_map<std::string_view, FilterFn> table = {
        {"abs", f_abs},
        {"attr", f_attr},
        {"batch", f_batch},
        {"capitalize", f_capitalize},
        {"center", f_center},
        {"count", f_length},
        {"d", f_default},
        {"default", f_default},
        {"dictsort", f_dictsort},
        {"e", f_escape},
        {"escape", f_escape},
        {"first", f_first},
        {"float", f_float},
        {"forceescape", f_escape},
        {"format", f_format},
        {"indent", f_indent},
        {"int", f_int},
        {"items", f_items},
        {"join", f_join},
        {"last", f_last},
        {"length", f_length},
        {"list", f_list},
        {"lower", f_lower},
        {"map", f_map},
        {"max", f_max},
        {"min", f_min},
        {"reject", f_reject},
        {"rejectattr", f_rejectattr},
        {"replace", f_replace},
        {"reverse", f_reverse},
        {"round", f_round},
        {"safe", f_safe},
        {"select", f_select},
        {"selectattr", f_selectattr},
        {"sort", f_sort},
        {"string", f_string},
        {"sum", f_sum},
        {"title", f_title},
        {"tojson", f_tojson},
        {"trim", f_trim},
        {"unique", f_unique},
        {"upper", f_upper},
        {"wordcount", f_wordcount},
    };
    return table;
}

}  // namespace

bool is_filter(std::string_view name) {
    return filters().count(name) != 0;
}

bool is_unsupported_filter(std::string_view name) {
    static constexpr std::string_view kNames[] = {
        "filesizeformat", "groupby",   "pprint", "random",   "slice",  "striptags",
        "truncate",       "urlencode", "urlize", "wordwrap", "xmlattr"};
    for (std::string_view n : kNames)
        if (n == name) return true;
    return false;
}

Value apply_filter(Interpreter& in, std::string_view name, const Value& subject, CallArgs& args) {
    auto it = filters().find(name);
    if (it == filters().end()) {
        if (is_unsupported_filter(name))
            fail("jinja2's filter '{}' is not supported by ferry's template engine", name);
        fail("unknown filter '{}'", name);
    }
    return it->second(in, subject, args);
}

}  // namespace ferry::tokenizer::jinja
