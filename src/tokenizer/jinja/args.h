// Python's binding of call arguments to a builtin's parameters (positional, then by keyword,
// defaults for the rest), with Python's messages when a template calls one wrongly. Internal
// to the builtins.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/value.h"

namespace ferry::tokenizer::jinja {

class Params {
  public:
    // `required` leading parameters must be given.
    Params(std::string_view fn, CallArgs& args, std::initializer_list<const char*> names,
           size_t required = 0)
        : values_(names.size()), given_(names.size(), false) {
        const std::vector<const char*> n(names);
        if (args.positional.size() > n.size())
            fail("{}() takes at most {} argument(s) ({} given)", fn, n.size(),
                 args.positional.size());
        for (size_t i = 0; i < args.positional.size(); ++i) {
            values_[i] = args.positional[i];
            given_[i] = true;
        }
        for (auto& [key, v] : args.named) {
            size_t k = 0;
            while (k < n.size() && key != n[k]) ++k;
            if (k == n.size()) fail("{}() got an unexpected keyword argument '{}'", fn, key);
            if (given_[k]) fail("{}() got multiple values for argument '{}'", fn, key);
            values_[k] = v;
            given_[k] = true;
        }
        for (size_t i = 0; i < required; ++i)
            if (!given_[i]) fail("{}() missing required argument '{}'", fn, n[i]);
    }

    bool has(size_t i) const { return given_[i]; }
    const Value& operator[](size_t i) const { return values_[i]; }
    Value get_or(size_t i, Value fallback) const {
        return given_[i] ? values_[i] : std::move(fallback);
    }

  private:
    std::vector<Value> values_;
    std::vector<bool> given_;
};

inline int64_t int_arg(const Value& v) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_integral()) fail("'{}' object cannot be interpreted as an integer", type_name(v));
    return v.as_int();
}

inline const std::string& str_arg(const Value& v, std::string_view what) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_string()) fail("{} must be str, not {}", what, type_name(v));
    return v.as_string();
}

}  // namespace ferry::tokenizer::jinja
