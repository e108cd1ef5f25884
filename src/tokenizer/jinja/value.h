// The values a template computes with, and Python's rules for them. Templates were written
// against Python: `True` prints as "True", `1 == 1.0`, `[1] != (1,)`, an empty list is false,
// dicts keep insertion order, and a missing attribute is jinja2's Undefined (prints empty,
// iterates empty, fails when used as a value). A prompt must come out byte for byte as
// transformers renders it, so these rules are Python's, not C++'s.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::tokenizer::jinja {

class Value;
class Dict;
class Interpreter;
struct Callable;
using List = std::vector<Value>;

class Value {
  public:
    enum class Kind : uint8_t {
        Undefined,
        None,
        Bool,
        Int,
        Float,
        String,
        List,
        Tuple,
        Dict,
        Namespace,
        Callable
    };

    Value() = default;  // undefined, with no hint
    Value(std::nullptr_t) : kind_(Kind::None) {}
    Value(bool b) : kind_(Kind::Bool), data_(b) {}
    Value(int i) : kind_(Kind::Int), data_(int64_t(i)) {}
    Value(int64_t i) : kind_(Kind::Int), data_(i) {}
    Value(double d) : kind_(Kind::Float), data_(d) {}
    Value(std::string s) : kind_(Kind::String), data_(std::move(s)) {}
    Value(std::string_view s) : Value(std::string(s)) {}
    Value(const char* s) : Value(std::string(s)) {}

    // `why` is the message of the error raised when the undefined is used as a value.
    static Value undefined(std::string why);
    static Value list(List items = {});
    static Value tuple(List items);
    static Value dict();
    static Value dict(Dict d);
    static Value make_namespace(Dict d);
    static Value callable(std::string name,
                          std::function<Value(Interpreter&, struct CallArgs&)> fn);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_float() const { return kind_ == Kind::Float; }
    bool is_number() const {  // bool is an int in Python
        return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float;
    }
    bool is_integral() const { return kind_ == Kind::Bool || kind_ == Kind::Int; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_list() const { return kind_ == Kind::List; }
    bool is_tuple() const { return kind_ == Kind::Tuple; }
    bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
    bool is_dict() const { return kind_ == Kind::Dict; }
    bool is_namespace() const { return kind_ == Kind::Namespace; }
    bool is_callable() const { return kind_ == Kind::Callable; }

    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const;   // bool or int
    double as_float() const;  // bool, int or float
    const std::string& as_string() const { return std::get<std::string>(data_); }
    const std::string& undefined_hint() const { return std::get<std::string>(data_); }
    const List& items() const { return *std::get<std::shared_ptr<List>>(data_); }
    List& items() { return *std::get<std::shared_ptr<List>>(data_); }
    const Dict& dict_ref() const { return *std::get<std::shared_ptr<Dict>>(data_); }
    Dict& dict_ref() { return *std::get<std::shared_ptr<Dict>>(data_); }
    const Callable& callable_ref() const { return *std::get<std::shared_ptr<Callable>>(data_); }
    // The same list, dict, namespace or function (Python's `is`, the `sameas` test).
    bool same_object(const Value& o) const;

  private:
    Kind kind_ = Kind::Undefined;
    std::variant<std::string, bool, int64_t, double, std::shared_ptr<List>, std::shared_ptr<Dict>,
                 std::shared_ptr<Callable>>
        data_;
};

// Insertion-ordered, keyed by value equality (1, 1.0 and True are one key, as in Python).
// Dicts in templates are small (a message, a tool's schema), so a vector is the fast choice.
class Dict {
  public:
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(Value key, Value value);
    size_t size() const { return items_.size(); }
    bool empty() const { return items_.empty(); }
    void clear() { items_.clear(); }
    const std::vector<std::pair<Value, Value>>& items() const { return items_; }

  private:
    std::vector<std::pair<Value, Value>> items_;
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> named;
};

struct Callable {
    std::string name;
    std::function<Value(Interpreter&, CallArgs&)> fn;
};

// Python's rules. Those that can fail (an undefined used as a value, '<' between a str and an
// int) throw TemplateError with Python's message.
bool truthy(const Value& v);
std::string to_str(const Value& v);     // str(v); undefined prints empty
std::string to_repr(const Value& v);    // repr(v), as inside a printed list
std::string type_name(const Value& v);  // 'str', 'int', 'dict', 'NoneType', ...
bool equal(const Value& a, const Value& b);
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge };
bool compare(CmpOp op, const Value& a, const Value& b);
[[noreturn]] void fail_undefined(const Value& v);

// JSON in (a conversation, tools) with its key order kept, and out as Python's json.dumps.
Value from_json(const nlohmann::ordered_json& j);
struct JsonStyle {
    std::optional<std::string> indent;  // none: one line
    std::string item_sep = ", ", key_sep = ": ";
    bool ensure_ascii = false;
    bool sort_keys = false;
};
std::string dump_json(const Value& v, const JsonStyle& style);

}  // namespace ferry::tokenizer::jinja
