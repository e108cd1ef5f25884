// jinja2's tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...), with Python's
// answers: a bool is a number, a string is iterable and a sequence, jinja2's Undefined is
// iterable and a sequence too.
#include <string_view>
#include <unordered_map>

#include "tokenizer/jinja/args.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pystr.h"

namespace ferry::tokenizer::jinja {

namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

Value one_arg(const char* test, CallArgs& a) {
    Params p(test, a, {"other"}, 1);
    return p[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) {
    return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs&) {
    return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs&) {
    return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) {
    return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs&) {
    return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs&) {
    return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs&) {
    return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs&) {
    return v.is_float();
}
bool t_number(Interpreter&, const Value& v, CallArgs&) {
    return v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs&) {
    return v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) {
    return v.is_callable() || v.is_undefined();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) {
    return false;
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
    return pystr::islower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
    return pystr::isupper(to_str(v));
}

// jinja2's odd, even and divisibleby are Python's `v % m == r`: the `%` operator itself, so a
// float takes part too (2.5 is neither odd nor even, 4.0 is even).
bool mod_is(Interpreter& in, const Value& v, int64_t m, int64_t r) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) fail("the value must be a number, not {}", type_name(v));
    return compare(CmpOp::Eq, binary_op(in, BinOp::Mod, v, Value(m)), Value(r));
}

bool t_odd(Interpreter& in, const Value& v, CallArgs&) {
    return mod_is(in, v, 2, 1);
}
bool t_even(Interpreter& in, const Value& v, CallArgs&) {
    return mod_is(in, v, 2, 0);
}
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
    return mod_is(in, v, int_arg(one_arg("divisibleby", a)), 0);
}

bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
    return compare(CmpOp::Eq, v, one_arg("eq", a));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
    return compare(CmpOp::Ne, v, one_arg("ne", a));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
    return compare(CmpOp::Lt, v, one_arg("lt", a));
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
    return compare(CmpOp::Le, v, one_arg("le", a));
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
    return compare(CmpOp::Gt, v, one_arg("gt", a));
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
    return compare(CmpOp::Ge, v, one_arg("ge", a));
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
    return contains(one_arg("in", a), v);
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
    return v.same_object(one_arg("sameas", a));
}
bool t_filter(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() && (is_filter(v.as_string()) || is_unsupported_filter(v.as_string()));
}
bool t_test(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() && is_test(v.as_string());
}

const std::unordered_map<std::string_view, TestFn>& tests() {
    static const std::unordered_map<std::string_view, TestFn> table = {
        {"boolean", t_boolean},
        {"callable", t_callable},
        {"defined", t_defined},
        {"divisibleby", t_divisibleby},
        {"eq", t_eq},
        {"==", t_eq},
        {"equalto", t_eq},
        {"escaped", t_escaped},
        {"even", t_even},
        {"false", t_false},
        {"filter", t_filter},
        {"float", t_float},
        {"ge", t_ge},
        {">=", t_ge},
        {"gt", t_gt},
        {">", t_gt},
        {"greaterthan", t_gt},
        {"in", t_in},
        {"integer", t_integer},
        {"iterable", t_iterable},
        {"le", t_le},
        {"<=", t_le},
        {"lower", t_lower},
        {"lt", t_lt},
        {"<", t_lt},
        {"lessthan", t_lt},
        {"mapping", t_mapping},
        {"ne", t_ne},
        {"!=", t_ne},
        {"none", t_none},
        {"number", t_number},
        {"odd", t_odd},
        {"sameas", t_sameas},
        {"sequence", t_sequence},
        {"string", t_string},
        {"test", t_test},
        {"true", t_true},
        {"undefined", t_undefined},
        {"upper", t_upper},
    };
    return table;
}

}  // namespace

bool is_test(std::string_view name) {
    return tests().count(name) != 0;
}

bool apply_test(Interpreter& in, std::string_view name, const Value& subject, CallArgs& args) {
    auto it = tests().find(name);
    if (it == tests().end()) fail("unknown test '{}'", name);
    return it->second(in, subject, args);
}

}  // namespace ferry::tokenizer::jinja
