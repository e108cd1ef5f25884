// Python's operators on template values: arithmetic, `in`, iteration, slicing and `str % args`.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/pystr.h"

namespace ferry::tokenizer::jinja {

namespace {

const char* op_symbol(BinOp op) {
    switch (op) {
        case BinOp::Add:
            return "+";
        case BinOp::Sub:
            return "-";
        case BinOp::Mul:
            return "*";
        case BinOp::Div:
            return "/";
        case BinOp::FloorDiv:
            return "//";
        case BinOp::Mod:
            return "%";
        case BinOp::Pow:
            return "**";
    }
    return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
    fail("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), type_name(a),
         type_name(b));
}

// Python ints are unbounded; ours are 64-bit, and an overflow is refused rather than wrapped.
[[noreturn]] void overflow() {
    fail("integer result does not fit in 64 bits");
}

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
    if (times <= 0)
        return seq.is_string() ? Value("") : seq.is_tuple() ? Value::tuple({}) : Value::list();
    if (seq.is_string()) {
        const std::string& s = seq.as_string();
        in.check_size(s.size() * size_t(times));
        std::string out;
        out.reserve(s.size() * size_t(times));
        for (int64_t i = 0; i < times; ++i) out += s;
        return out;
    }
    const List& items = seq.items();
    in.count_iterations(int64_t(items.size()) * times);
    List out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
    return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

// Python's float `//`: from fmod, not floor(a / b), whose rounded quotient can land on the
// next integer (-18773113910795480.0 // 3).
double float_floor_div(double a, double b) {
    const double mod = std::fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
    if (div == 0) return std::copysign(0.0, a / b);
    double q = std::floor(div);
    if (div - q > 0.5) q += 1.0;
    return q;
}

double float_mod(double a, double b) {
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    if (m == 0) m = std::copysign(0.0, b);
    return m;
}

Value arith(Interpreter& in, BinOp op, const Value& a, const Value& b) {
    const bool ints = a.is_integral() && b.is_integral();
    switch (op) {
        case BinOp::Add:
        case BinOp::Sub:
        case BinOp::Mul: {
            if (ints) {
                int64_t r;
                const bool o = op == BinOp::Add ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
                               : op == BinOp::Sub
                                   ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                                   : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
                if (o) overflow();
                return r;
            }
            const double x = a.as_float(), y = b.as_float();
            return op == BinOp::Add ? x + y : op == BinOp::Sub ? x - y : x * y;
        }
        case BinOp::Div:
            if (b.as_float() == 0) {
                if (ints) fail("division by zero");
                fail("float division by zero");
            }
            return a.as_float() / b.as_float();
        case BinOp::FloorDiv:
            if (ints) {
                if (b.as_int() == 0) fail("integer division or modulo by zero");
                if (a.as_int() == INT64_MIN && b.as_int() == -1) overflow();
                return floor_div(a.as_int(), b.as_int());
            }
            if (b.as_float() == 0) fail("float floor division by zero");
            return float_floor_div(a.as_float(), b.as_float());
        case BinOp::Mod:
            if (ints) {
                if (b.as_int() == 0) fail("integer modulo by zero");
                if (b.as_int() == -1) return int64_t(0);
                int64_t m = a.as_int() % b.as_int();
                if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
                return m;
            }
            if (b.as_float() == 0) fail("float modulo");
            return float_mod(a.as_float(), b.as_float());
        case BinOp::Pow:
            if (ints && b.as_int() >= 0) {
                int64_t r = 1, base = a.as_int();
                for (int64_t e = b.as_int(); e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(r, base, &r)) overflow();
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
                }
                return r;
            }
            if (a.as_float() == 0 && b.as_float() < 0)
                fail("0.0 cannot be raised to a negative power");
            return std::pow(a.as_float(), b.as_float());
    }
    (void)in;
    fail("unknown operator");
}

}  // namespace

Value binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (a.is_number() && b.is_number()) return arith(in, op, a, b);
    switch (op) {
        case BinOp::Add:
            if (a.is_string() || a.is_list() || a.is_tuple()) {
                if (a.kind() != b.kind())
                    fail("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b),
                         type_name(a));
                if (a.is_string()) {
                    in.check_size(a.as_string().size() + b.as_string().size());
                    return a.as_string() + b.as_string();
                }
                List out = a.items();
                out.insert(out.end(), b.items().begin(), b.items().end());
                return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
            }
            break;
        case BinOp::Mul:
            if ((a.is_string() || a.is_sequence()) && b.is_integral())
                return repeat(in, a, b.as_int());
            if ((b.is_string() || b.is_sequence()) && a.is_integral())
                return repeat(in, b, a.as_int());
            if (a.is_string() || a.is_sequence() || b.is_string() || b.is_sequence())
                fail("can't multiply sequence by non-int of type '{}'",
                     type_name(a.is_string() || a.is_sequence() ? b : a));
            break;
        case BinOp::Mod:
            if (a.is_string()) {
                std::string s = percent_format(a.as_string(), b);
                in.check_size(s.size());
                return s;
            }
            break;
        default:
            break;
    }
    unsupported(op, a, b);
}

Value negate(const Value& v, bool minus) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number())
        fail("bad operand type for unary {}: '{}'", minus ? "-" : "+", type_name(v));
    if (!minus) return v.is_bool() ? Value(v.as_int()) : v;
    if (v.is_float()) return -v.as_float();
    if (v.as_int() == INT64_MIN) overflow();
    return -v.as_int();
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Value::Kind::String:
            if (item.is_undefined()) fail_undefined(item);
            if (!item.is_string())
                fail("'in <string>' requires string as left operand, not {}", type_name(item));
            return container.as_string().find(item.as_string()) != std::string::npos;
        case Value::Kind::List:
        case Value::Kind::Tuple:
            for (const auto& x : container.items())
                if (equal(x, item)) return true;
            return false;
        case Value::Kind::Dict:
            return container.dict_ref().find(item) != nullptr;
        case Value::Kind::Undefined:
            return false;  // jinja2's Undefined iterates as empty
        default:
            fail("argument of type '{}' is not iterable", type_name(container));
    }
}

List iterate(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::List:
        case Value::Kind::Tuple:
            return v.items();
        case Value::Kind::Dict: {
            List keys;
            for (const auto& [k, x] : v.dict_ref().items()) keys.push_back(k);
            return keys;
        }
        case Value::Kind::String: {
            List chars;
            const std::string& s = v.as_string();
            if (pystr::is_ascii(s)) {
                for (char c : s) chars.emplace_back(std::string(1, c));
            } else {
                for (char32_t c : pystr::decode(s)) {
                    std::string one;
                    pystr::append_utf8(one, c);
                    chars.emplace_back(std::move(one));
                }
            }
            return chars;
        }
        case Value::Kind::Undefined:
            return {};
        default:
            fail("'{}' object is not iterable", type_name(v));
    }
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (!obj.is_string() && !obj.is_sequence())
        fail("'{}' object is not subscriptable", type_name(obj));
    auto index = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_none()) return std::nullopt;
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_integral())
            fail("slice indices must be integers or None or have an __index__ method");
        return v.as_int();
    };
    const std::optional<int64_t> start = index(start_v), stop = index(stop_v),
                                 step_o = index(step_v);
    const int64_t step = step_o.value_or(1);
    if (step == 0) fail("slice step cannot be zero");

    const bool ascii = obj.is_string() && pystr::is_ascii(obj.as_string());
    std::u32string u;
    if (obj.is_string() && !ascii) u = pystr::decode(obj.as_string());
    const int64_t len = obj.is_string() ? int64_t(ascii ? obj.as_string().size() : u.size())
                                        : int64_t(obj.items().size());
    // slice.indices(len), as CPython computes it.
    const int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t x = *v;
        if (x < 0) {
            x += len;
            if (x < lower) x = lower;
        } else if (x > upper) {
            x = upper;
        }
        return x;
    };
    const int64_t b = clamp(start, step < 0 ? upper : lower),
                  e = clamp(stop, step < 0 ? lower : upper);
    std::vector<int64_t> picks;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) picks.push_back(i);

    if (obj.is_string()) {
        if (ascii) {
            if (step == 1)
                return obj.as_string().substr(size_t(b), size_t(std::max<int64_t>(0, e - b)));
            std::string out;
            for (int64_t i : picks) out.push_back(obj.as_string()[size_t(i)]);
            return out;
        }
        std::u32string out;
        for (int64_t i : picks) out.push_back(u[size_t(i)]);
        return pystr::encode(out);
    }
    List out;
    for (int64_t i : picks) out.push_back(obj.items()[size_t(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

std::string percent_format(const std::string& fmt, const Value& args) {
    const bool mapping = args.is_dict();
    List pos = args.is_tuple() ? args.items() : List{args};
    size_t next = 0;
    std::string out;
    char buf[512];
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out.push_back(fmt[i]);
            continue;
        }
        if (++i >= fmt.size()) fail("incomplete format");
        Value arg;
        bool have_arg = false;
        if (fmt[i] == '(') {
            const size_t close = fmt.find(')', i);
            if (close == std::string::npos) fail("incomplete format key");
            if (!mapping) fail("format requires a mapping");
            const Value* v =
                args.dict_ref().find(std::string_view(fmt).substr(i + 1, close - i - 1));
            if (!v) fail("KeyError: '{}'", fmt.substr(i + 1, close - i - 1));
            arg = *v;
            have_arg = true;
            i = close + 1;
        }
        std::string flags;
        while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
            flags += fmt[i++];
        std::string width, prec;
        while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
            width += fmt[i++];
        if (i < fmt.size() && fmt[i] == '.') {
            prec.push_back('.');
            ++i;
            while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
                prec += fmt[i++];
        }
        if (i >= fmt.size()) fail("incomplete format");
        const char conv = fmt[i];
        if (conv == '%') {
            out.push_back('%');
            continue;
        }
        if (!have_arg) {
            if (next >= pos.size()) fail("not enough arguments for format string");
            arg = pos[next++];
        }
        const std::string spec = "%" + flags + width + prec;
        switch (conv) {
            case 's':
            case 'r':
            case 'a': {
                std::string s = conv == 's' ? to_str(arg) : to_repr(arg);
                if (!prec.empty() && prec.size() > 1) s = s.substr(0, std::stoul(prec.substr(1)));
                const size_t w = width.empty() ? 0 : std::stoul(width), n = pystr::length(s);
                if (n < w) {
                    if (flags.find('-') != std::string::npos)
                        s += std::string(w - n, ' ');
                    else
                        s = std::string(w - n, ' ') + s;
                }
                out += s;
                break;
            }
            case 'd':
            case 'i':
            case 'x':
            case 'X':
            case 'o':
            case 'c': {
                if (!arg.is_number())
                    fail("%{} format: a real number is required, not {}", conv, type_name(arg));
                if (arg.is_float() && !(std::fabs(arg.as_float()) < 9.2e18))
                    fail("%{} format: {} does not fit in 64 bits", conv, to_str(arg));
                const long long v = arg.is_float() ? (long long)std::trunc(arg.as_float())
                                                   : (long long)arg.as_int();
                if (conv == 'c') {
                    pystr::append_utf8(out, char32_t(v));
                    break;
                }
                const std::string f = spec + "ll" + (conv == 'i' ? 'd' : conv);
                std::snprintf(buf, sizeof buf, f.c_str(), v);
                out += buf;
                break;
            }
            case 'f':
            case 'F':
            case 'e':
            case 'E':
            case 'g':
            case 'G': {
                if (!arg.is_number()) fail("must be real number, not {}", type_name(arg));
                std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg.as_float());
                out += buf;
                break;
            }
            default:
                fail("unsupported format character '{}'", conv);
        }
    }
    if (!mapping && next < pos.size()) fail("not all arguments converted during string formatting");
    return out;
}

}  // namespace ferry::tokenizer::jinja
