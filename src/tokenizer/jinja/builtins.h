// What a template can name besides its variables: filters (`x | trim`), tests (`x is string`),
// the methods of str, list and dict (`s.strip()`), the globals transformers provides
// (`raise_exception`, `strftime_now`, `namespace`, `range`, `dict`), and Python's operators on
// values. Each behaves as in jinja2's ImmutableSandboxedEnvironment under transformers, down to
// its error messages where a template could show them to a user.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace ferry::tokenizer::jinja {

class Interpreter;
struct Frame;

// The parser refuses unknown names at load time, as jinja2 does when it compiles.
bool is_filter(std::string_view name);
// jinja2's own filters that ferry does not run: a template may name one in a branch it never
// takes (jinja2 compiles it), so the parser lets them through and running one is the error.
bool is_unsupported_filter(std::string_view name);
bool is_test(std::string_view name);
Value apply_filter(Interpreter& in, std::string_view name, const Value& subject, CallArgs& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& subject, CallArgs& args);

// `a.b` (attribute, then item) and `a[b]` (item, then attribute), jinja2's getattr/getitem.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's operators.
Value binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b);
Value negate(const Value& v, bool minus);
bool contains(const Value& container, const Value& item);               // `item in container`
List iterate(const Value& v);                                           // `for x in v`, list(v)
std::string percent_format(const std::string& fmt, const Value& args);  // str % args

void add_globals(Frame& f);

}  // namespace ferry::tokenizer::jinja
