#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/stack.h"

namespace ferry::grammar {

namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxNesting = 100;
// Integers are written with at most 16 digits, as llama.cpp does: beyond 2^53 a JSON reader
// would round them anyway, and a bound keeps a model from emitting digits forever.
constexpr int64_t kIntMax = 9'999'999'999'999'999;
// The sum of all {m,n} counts the grammar asks the GBNF parser to expand.
constexpr int64_t kMaxRepeatBudget = 100'000;

// Rules every compiled schema may use, by name. Names here have no '_'; compiled rules are
// `root` or have one; the GBNF parser's own helper rules have a '-': no two can collide.
struct Primitive {
    const char* name;
    const char* body;
    std::vector<const char*> deps;
};

const std::vector<Primitive>& primitives() {
    static const std::vector<Primitive> p = {
        {"ws", R"g(( " " | "\n" [ \t]{0,20} )?)g", {}},
        {"hex", R"g([0-9a-fA-F])g", {}},
        // An escape \uXXXX never names half of a surrogate pair alone: readers such as
        // nlohmann::json refuse that.
        {"char",
         R"g([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CeEfF] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} "\\u" [dD] [c-fC-F] hex{2} ) ))g",
         {"hex"}},
        {"string", R"g("\"" char* "\"")g", {"char"}},
        {"integer", R"g("-"? ( "0" | [1-9] [0-9]{0,15} ))g", {}},
        {"number",
         R"g("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)g",
         {}},
        {"boolean", R"g("true" | "false")g", {}},
        {"value",
         R"g(object | array | string | number | boolean | "null")g",
         {"object", "array", "string", "number", "boolean"}},
        {"object",
         R"g("{" ws ( string ":" ws value ( "," ws string ":" ws value )* ws )? "}")g",
         {"ws", "string", "value"}},
        {"array", R"g("[" ws ( value ( "," ws value )* ws )? "]")g", {"ws", "value"}},
        {"kchar", R"g([^"\\\x00-\x1F])g", {}},
        // Formats, as Python's jsonschema FormatChecker checks them (dates through
        // datetime.date.fromisoformat: years 0001-9999, real month lengths, leap years).
        {"year",
         R"g([1-9] [0-9]{3} | "0" ( [1-9] [0-9]{2} | "0" ( [1-9] [0-9] | "0" [1-9] ) ))g",
         {}},
        {"leapyear",
         R"g([0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [48] | [2468] [048] | [13579] [26] ) "00")g",
         {}},
        {"date",
         R"g(year "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | leapyear "-02-29")g",
         {"year", "leapyear"}},
        {"hour", R"g([01] [0-9] | "2" [0-3])g", {}},
        {"time",
         R"g(hour ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] hour ":" [0-5] [0-9] ))g",
         {"hour"}},
        {"datetime", R"g(date "T" time)g", {"date", "time"}},
        {"uuid", R"g(hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12})g", {"hex"}},
        {"hostlabel", R"g([a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?)g", {}},
        // At most three labels of at most 63 characters stay under the 253 a hostname may
        // have; the last is letters only, which every checker accepts as a top-level domain.
        {"hostname", R"g(( hostlabel "." ){0,2} [a-zA-Z]{2,63})g", {"hostlabel"}},
        {"email",
         R"g([a-zA-Z0-9_%+-]+ ( "." [a-zA-Z0-9_%+-]+ )* "@" ( hostlabel "." )+ [a-zA-Z]{2,24})g",
         {"hostlabel"}},
        {"octet", R"g("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])g", {}},
        {"ipv4", R"g(octet "." octet "." octet "." octet)g", {"octet"}},
    };
    return p;
}

const std::map<std::string_view, const char*>& formats() {
    static const std::map<std::string_view, const char*> f = {
        {"date-time", "datetime"}, {"date", "date"},         {"time", "time"}, {"uuid", "uuid"},
        {"email", "email"},        {"hostname", "hostname"}, {"ipv4", "ipv4"},
    };
    return f;
}

// Keywords that never change which instances are valid.
const std::set<std::string_view>& annotations() {
    static const std::set<std::string_view> a = {
        "title",       "description",    "examples",        "default",          "$schema",
        "$id",         "$comment",       "deprecated",      "readOnly",         "writeOnly",
        "$anchor",     "$dynamicAnchor", "contentEncoding", "contentMediaType", "contentSchema",
        "$vocabulary", "$defs",          "definitions",
    };
    return a;
}

const std::set<std::string_view>& supported() {
    static const std::set<std::string_view> s = {
        "type",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    };
    return s;
}

const std::set<std::string_view>& refused() {
    static const std::set<std::string_view> r = {
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "multipleOf",
        "contains",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
        "$dynamicRef",
        "$recursiveRef",
        "$recursiveAnchor",
    };
    return r;
}

const std::vector<std::string>& all_types() {
    static const std::vector<std::string> t = {"null",   "boolean", "object", "array",
                                               "number", "integer", "string"};
    return t;
}

std::string dump(const Json& v) {
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string pointer_token(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out += c;
    }
    return out;
}

std::string sanitize(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (out.size() >= 32) break;
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        out += ok ? c : '_';
    }
    return out.empty() ? "p" : out;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
    return out;
}

std::string group(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    return "( " + join(alts, " | ") + " )";
}

bool all_same(std::string_view s, char c) {
    return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; });
}

std::string quote(std::string_view digits) {
    std::string out(1, '"');
    out += digits;
    out += '"';
    return out;
}

std::string digit_class(char lo, char hi) {
    if (lo == hi) return quote(std::string(1, lo));
    if (lo == '0' && hi == '9') return "[0-9]";
    return std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) {
    if (n == 0) return "";
    if (n == 1) return " [0-9]";
    return fmt::format(" [0-9]{{{}}}", n);
}

// Digit strings of x.size() digits (leading zeros allowed) from x to y inclusive.
std::vector<std::string> fixed_width_range(const std::string& x, const std::string& y) {
    const size_t n = x.size();
    if (x == y) return {quote(x)};
    if (n == 1) return {digit_class(x[0], y[0])};
    const std::string xr = x.substr(1), yr = y.substr(1);
    if (x[0] == y[0]) return {quote(x.substr(0, 1)) + " " + group(fixed_width_range(xr, yr))};
    std::vector<std::string> out;
    char lo = x[0], hi = y[0];
    if (!all_same(xr, '0')) {
        out.push_back(quote(x.substr(0, 1)) + " " +
                      group(fixed_width_range(xr, std::string(n - 1, '9'))));
        ++lo;
    }
    const bool y_full = all_same(yr, '9');
    if (!y_full) --hi;
    if (lo <= hi) out.push_back(digit_class(lo, hi) + any_digits(n - 1));
    if (!y_full)
        out.push_back(quote(y.substr(0, 1)) + " " +
                      group(fixed_width_range(std::string(n - 1, '0'), yr)));
    return out;
}

int64_t pow10(size_t n) {
    int64_t p = 1;
    while (n--) p *= 10;
    return p;
}

// Integers in [a, b], 0 <= a <= b <= kIntMax, written without leading zeros.
std::vector<std::string> nonneg_range(int64_t a, int64_t b) {
    std::vector<std::string> out;
    const size_t la = std::to_string(a).size(), lb = std::to_string(b).size();
    for (size_t len = la; len <= lb; ++len) {
        const int64_t first = len == 1 ? 0 : pow10(len - 1), last = pow10(len) - 1;
        const int64_t x = std::max(a, first), y = std::min(b, last);
        // Every number of this length and all longer ones up to b's: one rule for them all.
        if (len > 1 && x == first && b == pow10(lb) - 1) {
            out.push_back(len == lb ? "[1-9]" + any_digits(len - 1)
                                    : fmt::format("[1-9] [0-9]{{{},{}}}", len - 1, lb - 1));
            break;
        }
        for (auto& s : fixed_width_range(std::to_string(x), std::to_string(y)))
            out.push_back(std::move(s));
    }
    return out;
}

// Integers in [lo, hi], -kIntMax <= lo <= hi <= kIntMax.
std::vector<std::string> int_range(int64_t lo, int64_t hi) {
    std::vector<std::string> out;
    if (lo < 0) out.push_back("\"-\" " + group(nonneg_range(hi < 0 ? -hi : 1, -lo)));
    if (hi >= 0)
        for (auto& s : nonneg_range(std::max<int64_t>(lo, 0), hi)) out.push_back(std::move(s));
    return out;
}

bool empty_interval(int64_t l, bool lx, std::optional<int64_t> h, bool hx) {
    return h && (*h < l || (*h == l && (lx || hx)));
}

// Decimals v >= 0 (no exponent) with l < v or l <= v (lx), and v < h or v <= h (hx) when h is
// given, for integers l, h. Writing v = n + f (n its integer part, 0 <= f < 1): n strictly
// inside the bounds takes any fraction, n == l only a non-zero one when l is exclusive, n == h
// only a zero one when h is inclusive.
std::vector<std::string> nonneg_decimal(int64_t l, bool lx, std::optional<int64_t> h, bool hx) {
    std::vector<std::string> out;
    const int64_t a = lx ? l + 1 : l, b = h ? *h - 1 : kIntMax;
    if (a <= b) out.push_back(group(nonneg_range(a, b)) + R"g( ( "." [0-9]{1,16} )?)g");
    if (lx && (!h || *h > l))
        out.push_back(quote(std::to_string(l)) + R"g( "." "0"{0,15} [1-9] [0-9]{0,15})g");
    if (h && !hx && (*h > l || !lx))
        out.push_back(quote(std::to_string(*h)) + R"g( ( "." "0"{1,16} )?)g");
    return out;
}

long double number_of(const Json& v) {
    if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
    if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
    return static_cast<long double>(v.get<double>());
}

bool matches_type(const Json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") {
        if (v.is_number_integer()) return true;
        if (!v.is_number_float()) return false;
        const double d = v.get<double>();
        return std::isfinite(d) && d == std::floor(d);
    }
    return false;
}

struct Expr {
    std::string text;
    bool atomic = true;  // one name, literal or parenthesized group: usable anywhere
};

struct Bound {
    long double v = 0;
    bool exclusive = false;
};

class SchemaCompiler {
  public:
    SchemaCompiler(const Json& root, const JsonSchemaOptions& opt) : root_(root), opt_(opt) {}

    Expected<std::string> run() {
        reserve("root");
        refs_[""] = RefState{"root", true, 0};
        auto body = compile_body(root_, "", "root");
        if (!body) return body.error();
        define("root", body->text);
        if (too_big())
            return make_error(
                "the schema compiles to a grammar larger than the limit ({} "
                "characters, {} repeated items)",
                kMaxSchemaGrammarChars, kMaxRepeatBudget);
        std::string out;
        for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
        return out;
    }

  private:
    struct RefState {
        std::string name;
        bool in_progress = false;
        int depth = 0;  // depth_ when its compilation began
    };

    static Error at(const std::string& path, std::string_view msg) {
        return make_error("at #{}: {}", path, msg);
    }
    bool too_big() const { return chars_ > kMaxSchemaGrammarChars || repeats_ > kMaxRepeatBudget; }

    // ---- rules ----

    std::string unique(const std::string& hint) {
        if (!index_.count(hint)) return hint;
        for (int n = 2;; ++n) {
            std::string name = hint + "_" + std::to_string(n);
            if (!index_.count(name)) return name;
        }
    }
    std::string reserve(const std::string& hint) {
        std::string name = unique(hint);
        index_[name] = rules_.size();
        rules_.emplace_back(name, "");
        return name;
    }
    void define(const std::string& name, std::string body) {
        chars_ += name.size() + body.size() + 6;
        rules_[index_.at(name)].second = std::move(body);
    }
    // A rule for `body`, shared with any earlier rule of the same body.
    std::string add_rule(const std::string& hint, std::string body) {
        if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
        std::string name = reserve(hint);
        by_body_[body] = name;
        define(name, std::move(body));
        return name;
    }
    std::string use(const char* name) {
        if (index_.count(name)) return name;
        for (const auto& p : primitives()) {
            if (std::string_view(p.name) != name) continue;
            index_[name] = rules_.size();
            // Compact JSON (vLLM's disable_any_whitespace): the blank rule matches nothing.
            rules_.emplace_back(name, opt_.compact && std::string_view(name) == "ws"
                                          ? std::string(R"g("")g")
                                          : std::string(p.body));
            chars_ += std::string_view(p.body).size();
            for (const char* d : p.deps) use(d);
            return name;
        }
        return name;  // not reached: every caller names a primitive
    }
    Expr as_atom(const std::string& hint, Expr e) {
        if (e.atomic) return e;
        return {add_rule(hint, std::move(e.text)), true};
    }
    // `expr` (atomic) repeated lo..hi times (no hi: unbounded).
    std::string rep(const std::string& expr, int64_t lo, std::optional<int64_t> hi) {
        repeats_ += hi ? *hi : lo + 1;
        if (hi && *hi == 0) return "";
        if (hi && lo == *hi) return lo == 1 ? expr : fmt::format("{}{{{}}}", expr, lo);
        if (!hi)
            return lo == 0 ? expr + "*" : lo == 1 ? expr + "+" : fmt::format("{}{{{},}}", expr, lo);
        if (lo == 0 && *hi == 1) return expr + "?";
        return fmt::format("{}{{{},{}}}", expr, lo, *hi);
    }

    // ---- schemas ----

    Expected<Expr> compile(const Json& s, const std::string& path, const std::string& hint) {
        auto e = compile_body(s, path, hint);
        if (!e) return e;
        return as_atom(hint, std::move(*e));
    }

    Expected<Expr> compile_body(const Json& s, const std::string& path, const std::string& hint) {
        struct Nest {
            int& n;
            ~Nest() { --n; }
        } nest{++nesting_};
        if (nesting_ > kMaxNesting) return at(path, "the schema nests too deeply");
        if (too_big()) return at(path, "the schema compiles to a grammar larger than the limit");
        if (s.is_boolean()) {
            if (s.get<bool>()) return Expr{use("value")};
            return at(path, "the schema is false, which no value matches");
        }
        if (!s.is_object()) return at(path, "a schema must be an object or a boolean");
        for (const auto& [key, v] : s.items()) {
            if (annotations().count(key)) continue;
            if (key == "uniqueItems") {
                if (!v.is_boolean()) return at(path, "'uniqueItems' must be a boolean");
                if (v.get<bool>()) return at(path, "'uniqueItems': true is not supported");
                continue;
            }
            if (refused().count(key)) return at(path, fmt::format("'{}' is not supported", key));
            if (!supported().count(key))
                return at(path,
                          fmt::format("unknown keyword '{}' (refused rather than ignored)", key));
        }
        const std::vector<std::string> keys = validation_keys(s);
        auto has = [&](const char* k) { return s.contains(k); };
        if (has("allOf") || (has("$ref") && keys.size() > 1)) return compile_all_of(s, path, hint);
        if (has("$ref")) return compile_ref(s["$ref"], path);
        if (has("anyOf") || has("oneOf")) return compile_any_of(s, keys, path, hint);
        if (has("enum") || has("const")) return compile_enum(s, keys, path);
        return compile_typed(s, path, hint);
    }

    static std::vector<std::string> validation_keys(const Json& s) {
        std::vector<std::string> k;
        for (const auto& [key, v] : s.items())
            if (!annotations().count(key)) k.push_back(key);
        return k;
    }

    // The schema a '#...' ref points at, and its JSON pointer.
    Expected<std::pair<const Json*, std::string>> resolve(const Json& ref,
                                                          const std::string& path) const {
        if (!ref.is_string()) return at(path, "'$ref' must be a string");
        const std::string r = ref.get<std::string>();
        if (r.empty() || r[0] != '#')
            return at(path, fmt::format("remote '$ref' '{}' is not supported (only '#...' refs "
                                        "within the schema)",
                                        r));
        std::string pointer;
        for (size_t i = 1; i < r.size(); ++i) {  // a URI fragment: %XX escapes
            if (r[i] == '%' && i + 2 < r.size() && std::isxdigit(uint8_t(r[i + 1])) &&
                std::isxdigit(uint8_t(r[i + 2]))) {
                pointer += static_cast<char>(std::stoi(r.substr(i + 1, 2), nullptr, 16));
                i += 2;
            } else {
                pointer += r[i];
            }
        }
        if (!pointer.empty() && pointer[0] != '/')
            return at(path, fmt::format("'$ref' '{}' to an anchor is not supported", r));
        const Json* target = nullptr;
        try {
            const Json::json_pointer p(pointer);
            if (root_.contains(p)) target = &root_.at(p);
        } catch (const Json::exception&) {
        }
        if (!target) return at(path, fmt::format("'$ref' '{}' does not resolve", r));
        return std::make_pair(target, pointer);
    }

    // One rule per referenced schema, named before its body is compiled, so recursion works.
    Expected<Expr> compile_ref(const Json& ref, const std::string& path) {
        auto resolved = resolve(ref, path);
        if (!resolved) return resolved.error();
        const auto& [target, pointer] = *resolved;
        if (auto it = refs_.find(pointer); it != refs_.end()) {
            if (it->second.in_progress && it->second.depth == depth_)
                return at(path, fmt::format("'$ref' '{}' refers back to itself with no object or "
                                            "array in between (infinite recursion)",
                                            ref.get<std::string>()));
            return Expr{it->second.name};
        }
        std::string last = pointer.substr(pointer.rfind('/') + 1);
        const std::string name = reserve("def_" + sanitize(last));
        refs_[pointer] = RefState{name, true, depth_};
        auto body = compile_body(*target, pointer, name);
        if (!body) return body;
        define(name, std::move(body->text));
        refs_[pointer].in_progress = false;
        return Expr{name};
    }

    // allOf, and $ref with sibling keywords (which apply too): one member is compiled as it
    // is; several must all be object schemas, merged into one.
    Expected<Expr> compile_all_of(const Json& s, const std::string& path, const std::string& hint) {
        std::vector<std::pair<Json, std::string>> members;
        Json rest = s;
        rest.erase("allOf");
        if (rest.contains("$ref")) {
            members.emplace_back(Json{{"$ref", rest["$ref"]}}, path);
            rest.erase("$ref");
        }
        if (!validation_keys(rest).empty()) members.emplace_back(rest, path);
        if (s.contains("allOf")) {
            const Json& all = s["allOf"];
            if (!all.is_array() || all.empty())
                return at(path, "'allOf' must be a non-empty array of schemas");
            for (size_t i = 0; i < all.size(); ++i) {
                if (all[i] == true) continue;
                members.emplace_back(all[i], fmt::format("{}/allOf/{}", path, i));
            }
        }
        if (members.empty()) return Expr{use("value")};
        if (members.size() == 1) return compile_body(members[0].first, members[0].second, hint);
        auto merged = merge_objects(members);
        if (!merged) return merged.error();
        return compile_body(*merged, path, hint);
    }

    Expected<Json> merge_objects(std::vector<std::pair<Json, std::string>> members) {
        Json props = Json::object();
        Json required = Json::array();
        std::vector<std::pair<std::set<std::string>, std::string>> closed;
        for (auto& [m, mpath] : members) {
            for (int hops = 0; m.is_object() && m.contains("$ref"); ++hops) {
                if (validation_keys(m).size() > 1 || hops > 16)
                    return at(mpath,
                              "'allOf' can only merge object schemas ('$ref' with other "
                              "keywords inside 'allOf' is not supported)");
                auto resolved = resolve(m["$ref"], mpath);
                if (!resolved) return resolved.error();
                mpath = resolved->second;
                m = Json(*resolved->first);
            }
            if (m.is_boolean()) {
                if (m.get<bool>()) continue;
                return at(mpath, "the schema is false, which no value matches");
            }
            if (!m.is_object()) return at(mpath, "a schema must be an object or a boolean");
            for (const auto& [key, v] : m.items()) {
                if (annotations().count(key)) continue;
                if (key == "type" && (v == "object" || v == Json::array({"object"}))) continue;
                if (key != "properties" && key != "required" && key != "additionalProperties")
                    return at(mpath, fmt::format("'allOf' can only merge object schemas; '{}' is "
                                                 "not supported here",
                                                 key));
            }
            if (m.contains("properties")) {
                if (!m["properties"].is_object())
                    return at(mpath, "'properties' must be an object");
                for (const auto& [name, sub] : m["properties"].items()) {
                    if (!props.contains(name))
                        props[name] = sub;
                    else if (props[name] != sub)
                        props[name] = Json{{"allOf", Json::array({props[name], sub})}};
                }
            }
            if (m.contains("required")) {
                if (!m["required"].is_array()) return at(mpath, "'required' must be an array");
                for (const auto& r : m["required"])
                    if (std::find(required.begin(), required.end(), r) == required.end())
                        required.push_back(r);
            }
            if (m.contains("additionalProperties")) {
                const Json& a = m["additionalProperties"];
                if (a == false) {
                    std::set<std::string> names;
                    if (m.contains("properties"))
                        for (const auto& [name, sub] : m["properties"].items()) names.insert(name);
                    closed.emplace_back(std::move(names), mpath);
                } else if (a != true) {
                    return at(mpath, "'allOf' cannot merge an 'additionalProperties' schema");
                }
            }
        }
        for (const auto& [names, cpath] : closed)
            for (const auto& [name, sub] : props.items())
                if (!names.count(name))
                    return at(cpath, fmt::format("'additionalProperties': false here forbids "
                                                 "property '{}' that another 'allOf' member "
                                                 "defines",
                                                 name));
        Json merged = {{"type", "object"}, {"properties", props}};
        if (!required.empty()) merged["required"] = required;
        if (!closed.empty()) merged["additionalProperties"] = false;
        return merged;
    }

    // oneOf is compiled as anyOf, as llama.cpp does: an output matching two branches would
    // break oneOf's exclusivity, which a grammar cannot check; in practice branches are
    // disjoint (different types, a discriminating const).
    Expected<Expr> compile_any_of(const Json& s, const std::vector<std::string>& keys,
                                  const std::string& path, const std::string& hint) {
        if (s.contains("anyOf") && s.contains("oneOf"))
            return at(path, "'anyOf' together with 'oneOf' is not supported");
        const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
        for (const auto& k : keys)
            if (k != key)
                return at(path, fmt::format("'{}' together with '{}' is not supported (move "
                                            "'{}' into each branch)",
                                            key, k, k));
        const Json& branches = s[key];
        if (!branches.is_array() || branches.empty())
            return at(path, fmt::format("'{}' must be a non-empty array of schemas", key));
        std::vector<std::string> alts;
        for (size_t i = 0; i < branches.size(); ++i) {
            if (branches[i] == false) continue;
            auto e = compile(branches[i], fmt::format("{}/{}/{}", path, key, i),
                             fmt::format("{}_{}", hint, i));
            if (!e) return e;
            if (std::find(alts.begin(), alts.end(), e->text) == alts.end()) alts.push_back(e->text);
        }
        if (alts.empty()) return at(path, fmt::format("no '{}' branch can match anything", key));
        if (alts.size() == 1) return Expr{alts[0]};
        return Expr{join(alts, " | "), false};
    }

    Expected<std::vector<std::string>> types_of(const Json& s, const std::string& path) {
        std::vector<std::string> out;
        if (!s.contains("type")) return out;
        const Json& t = s["type"];
        std::vector<Json> list;
        if (t.is_string())
            list.push_back(t);
        else if (t.is_array() && !t.empty())
            list.assign(t.begin(), t.end());
        else
            return at(path, "'type' must be a string or a non-empty array of strings");
        for (const auto& x : list) {
            if (!x.is_string()) return at(path, "'type' must hold strings");
            const std::string name = x.get<std::string>();
            if (std::find(all_types().begin(), all_types().end(), name) == all_types().end())
                return at(path, fmt::format("unknown type '{}'", name));
            if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
        }
        return out;
    }

    Expected<Expr> compile_enum(const Json& s, const std::vector<std::string>& keys,
                                const std::string& path) {
        for (const auto& k : keys)
            if (k != "enum" && k != "const" && k != "type")
                return at(path, fmt::format("'{}' together with '{}' is not supported",
                                            s.contains("enum") ? "enum" : "const", k));
        auto types = types_of(s, path);
        if (!types) return types.error();
        auto typed = [&](const Json& v) {
            return types->empty() || std::any_of(types->begin(), types->end(),
                                                 [&](const auto& t) { return matches_type(v, t); });
        };
        std::vector<Json> values;
        if (s.contains("enum")) {
            const Json& e = s["enum"];
            if (!e.is_array()) return at(path, "'enum' must be an array");
            if (e.empty()) return at(path, "'enum' is empty, so no value matches");
            for (const auto& v : e)
                if (!s.contains("const") || v == s["const"]) values.push_back(v);
            if (values.empty()) return at(path, "'const' is not one of the 'enum' values");
            std::vector<Json> kept;
            for (auto& v : values)
                if (typed(v)) kept.push_back(std::move(v));
            if (kept.empty()) return at(path, "no 'enum' value matches 'type'");
            values = std::move(kept);
        } else {
            if (!typed(s["const"])) return at(path, "the 'const' value does not match 'type'");
            values.push_back(s["const"]);
        }
        // A set, not a search of the list: a request may carry an enum of 100,000 values, and
        // the quadratic search held the server's I/O thread for seconds (the size bound below
        // stops what would not fit long before the grammar is built).
        std::vector<std::string> alts;
        std::unordered_set<std::string> seen;
        size_t chars = 0;
        for (const auto& v : values) {
            std::string lit = gbnf_literal(dump(v));
            chars += lit.size() + 3;
            if (chars_ + chars > kMaxSchemaGrammarChars)
                return at(path, fmt::format("the 'enum' compiles to a grammar larger than the "
                                            "limit ({} characters)",
                                            kMaxSchemaGrammarChars));
            if (seen.insert(lit).second) alts.push_back(std::move(lit));
        }
        if (alts.size() == 1) return Expr{alts[0]};
        return Expr{join(alts, " | "), false};
    }

    Expected<Expr> compile_typed(const Json& s, const std::string& path, const std::string& hint) {
        auto types = types_of(s, path);
        if (!types) return types.error();
        if (types->empty()) {
            // No `type`: the keywords say what is meant. A schema with only string keywords
            // accepts non-strings too; producing strings alone is a subset, so still valid.
            auto any = [&](std::initializer_list<const char*> ks) {
                return std::any_of(ks.begin(), ks.end(),
                                   [&](const char* k) { return s.contains(k); });
            };
            if (any({"properties", "required", "additionalProperties"})) types->push_back("object");
            if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"}))
                types->push_back("array");
            if (any({"minLength", "maxLength", "pattern", "format"})) types->push_back("string");
            if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
                types->push_back("number");
            if (types->empty()) return Expr{use("value")};
        }
        if (types->size() == 1) return compile_type(s, (*types)[0], path, hint);
        std::vector<std::string> alts;
        for (const auto& t : *types) {
            auto e = compile_type(s, t, path, hint + "_" + t);
            if (!e) return e;
            alts.push_back(as_atom(hint + "_" + t, std::move(*e)).text);
        }
        return Expr{join(alts, " | "), false};
    }

    Expected<Expr> compile_type(const Json& s, const std::string& t, const std::string& path,
                                const std::string& hint) {
        if (t == "null") return Expr{"\"null\""};
        if (t == "boolean") return Expr{use("boolean")};
        if (t == "string") return compile_string(s, path, hint);
        if (t == "integer") return compile_integer(s, path);
        if (t == "number") return compile_number(s, path);
        if (t == "object") return compile_object(s, path, hint);
        return compile_array(s, path, hint);
    }

    Expected<std::optional<int64_t>> count_of(const Json& s, const char* key,
                                              const std::string& path) {
        if (!s.contains(key)) return std::optional<int64_t>();
        const Json& v = s[key];
        if (v.is_number() && number_of(v) >= 0 && matches_type(v, "integer"))
            return std::optional<int64_t>(
                static_cast<int64_t>(std::min<long double>(number_of(v), 1e18L)));
        return at(path, fmt::format("'{}' must be a non-negative integer", key));
    }

    // A lower and an upper limit on a number, each the tighter of the inclusive and the
    // exclusive keyword (and draft 4's boolean exclusiveMinimum / exclusiveMaximum).
    Expected<std::pair<std::optional<Bound>, std::optional<Bound>>> bounds_of(
        const Json& s, const std::string& path) {
        std::optional<Bound> b[2];
        const char* incl[2] = {"minimum", "maximum"};
        const char* excl[2] = {"exclusiveMinimum", "exclusiveMaximum"};
        for (int i = 0; i < 2; ++i) {
            if (s.contains(incl[i])) {
                if (!s[incl[i]].is_number())
                    return at(path, fmt::format("'{}' must be a number", incl[i]));
                b[i] = Bound{number_of(s[incl[i]]), false};
            }
            if (!s.contains(excl[i])) continue;
            const Json& e = s[excl[i]];
            if (e.is_boolean()) {
                if (!e.get<bool>()) continue;
                if (!b[i]) return at(path, fmt::format("'{}': true needs '{}'", excl[i], incl[i]));
                b[i]->exclusive = true;
            } else if (e.is_number()) {
                const Bound x{number_of(e), true};
                if (!b[i] || (i == 0 ? x.v >= b[i]->v : x.v <= b[i]->v)) b[i] = x;
            } else {
                return at(path, fmt::format("'{}' must be a number", excl[i]));
            }
        }
        return std::make_pair(b[0], b[1]);
    }

    // A format with minLength / maxLength (pydantic writes them): as it is where every value
    // of the format already fits; email and hostname narrowed to pieces whose lengths add up
    // to at most maxLength; otherwise refused, naming what cannot be met.
    Expected<Expr> bounded_format(std::string_view name, std::optional<int64_t> min_len,
                                  std::optional<int64_t> max_len, const std::string& path,
                                  const std::string& hint) {
        struct Span {
            int64_t lo, hi;  // hi < 0: unbounded
        };
        static const std::map<std::string_view, Span> spans = {
            {"date-time", {20, 35}}, {"date", {10, 10}},     {"time", {9, 24}},  {"uuid", {36, 36}},
            {"ipv4", {7, 15}},       {"hostname", {2, 255}}, {"email", {6, -1}},
        };
        const Span sp = spans.at(name);
        const int64_t lo = min_len.value_or(0);
        const std::string q = R"g("\"")g";
        if (max_len && lo > *max_len)
            return at(path,
                      fmt::format("'minLength' {} is greater than 'maxLength' {}", lo, *max_len));
        if (lo > sp.lo)
            return at(path, fmt::format("'minLength' {} with format '{}' (whose values can be {} "
                                        "characters) is not supported",
                                        lo, name, sp.lo));
        if (!max_len || (sp.hi >= 0 && *max_len >= sp.hi))
            return Expr{add_rule(hint, q + " " + use(formats().at(name)) + " " + q)};
        const int64_t m = *max_len;
        if (m < sp.lo)
            return at(path, fmt::format("'maxLength' {} is shorter than any '{}' ({} characters "
                                        "at least)",
                                        m, name, sp.lo));
        if (name == "email") {
            // local "@" label "." tld, 1 + 1 + 1 + 1 + 2 characters at least
            const int64_t tld = std::clamp<int64_t>((m - 2) / 4, 2, 6);
            const int64_t rest = m - 2 - tld;
            const int64_t local = std::min<int64_t>(64, rest / 2);
            const int64_t label = std::min<int64_t>(63, rest - rest / 2);
            return Expr{add_rule(
                hint,
                fmt::format(
                    R"g({} [a-zA-Z0-9_%+-]{{1,{}}} "@" [a-zA-Z0-9]{{1,{}}} "." [a-zA-Z]{{2,{}}} {})g",
                    q, local, label, tld, q))};
        }
        if (name == "hostname") {
            if (m < 4)
                return Expr{add_rule(hint, fmt::format(R"g({} [a-zA-Z]{{2,{}}} {})g", q, m, q))};
            const int64_t tld = std::min<int64_t>(63, std::max<int64_t>(2, (m - 1) / 2));
            const int64_t label = std::min<int64_t>(63, m - 1 - tld);
            return Expr{add_rule(
                hint, fmt::format(R"g({} ( [a-zA-Z0-9]{{1,{}}} "." )? [a-zA-Z]{{2,{}}} {})g", q,
                                  label, tld, q))};
        }
        return at(path, fmt::format("'maxLength' {} with format '{}' (whose values can be {} "
                                    "characters) is not supported",
                                    m, name, sp.hi));
    }

    Expected<Expr> compile_string(const Json& s, const std::string& path, const std::string& hint) {
        auto min_len = count_of(s, "minLength", path);
        if (!min_len) return min_len.error();
        auto max_len = count_of(s, "maxLength", path);
        if (!max_len) return max_len.error();
        const bool lengths = *min_len || *max_len;
        const std::string q = R"g("\"")g";
        if (s.contains("format")) {
            const Json& f = s["format"];
            if (!f.is_string()) return at(path, "'format' must be a string");
            auto it = formats().find(f.get<std::string>());
            if (it == formats().end())
                return at(path, fmt::format("format '{}' is not supported", f.get<std::string>()));
            if (s.contains("pattern"))
                return at(path, "'format' together with 'pattern' is not supported");
            if (lengths) return bounded_format(it->first, *min_len, *max_len, path, hint);
            return Expr{add_rule(hint, q + " " + use(it->second) + " " + q)};
        }
        if (s.contains("pattern")) {
            const Json& p = s["pattern"];
            if (!p.is_string()) return at(path, "'pattern' must be a string");
            if (lengths)
                return at(path,
                          "'pattern' together with 'minLength' or 'maxLength' is not "
                          "supported");
            auto re = regex_to_gbnf(p.get<std::string>(), RegexTarget::JsonStringContent);
            if (!re) return at(path, fmt::format("'pattern': {}", re.error().message));
            return Expr{add_rule(hint, q + " ( " + *re + " ) " + q)};
        }
        if (!lengths) return Expr{use("string")};
        const int64_t lo = min_len->value_or(0);
        std::optional<int64_t> hi = *max_len;
        if (hi && lo > *hi)
            return at(path, fmt::format("'minLength' {} is greater than 'maxLength' {}", lo, *hi));
        if (lo > kMaxSchemaRepeat)
            return at(path,
                      fmt::format("'minLength' {} is above the limit of {}", lo, kMaxSchemaRepeat));
        if (hi && *hi > kMaxSchemaRepeat) hi = kMaxSchemaRepeat;
        const std::string body = q + " " + rep(use("char"), lo, hi) + " " + q;
        return Expr{add_rule(fmt::format("str_{}_{}", lo, hi ? std::to_string(*hi) : "up"), body)};
    }

    Expected<Expr> compile_integer(const Json& s, const std::string& path) {
        auto b = bounds_of(s, path);
        if (!b) return b.error();
        const auto& [lower, upper] = *b;
        int64_t lo = -kIntMax, hi = kIntMax;
        constexpr long double kLim = static_cast<long double>(kIntMax);
        if (lower) {
            const long double c = lower->exclusive ? std::floor(lower->v) + 1 : std::ceil(lower->v);
            if (c > kLim)
                return at(path,
                          "the lower bound is above the largest integer the grammar writes "
                          "(16 digits)");
            lo = static_cast<int64_t>(std::max(c, -kLim));
        }
        if (upper) {
            const long double c = upper->exclusive ? std::ceil(upper->v) - 1 : std::floor(upper->v);
            if (c < -kLim)
                return at(path,
                          "the upper bound is below the smallest integer the grammar writes "
                          "(16 digits)");
            hi = static_cast<int64_t>(std::min(c, kLim));
        }
        if (lo > hi)
            return at(path,
                      "no integer lies within 'minimum'/'maximum' (and their "
                      "exclusive forms)");
        if (lo == -kIntMax && hi == kIntMax) return Expr{use("integer")};
        auto alts = int_range(lo, hi);
        if (alts.size() == 1 && alts[0].find(' ') == std::string::npos) return Expr{alts[0]};
        return Expr{join(alts, " | "), false};
    }

    Expected<Expr> compile_number(const Json& s, const std::string& path) {
        auto b = bounds_of(s, path);
        if (!b) return b.error();
        const auto& [lower, upper] = *b;
        if (!lower && !upper) return Expr{use("number")};
        constexpr long double kLim = static_cast<long double>(kIntMax);
        for (const auto* x : {&lower, &upper})
            if (*x && (*x)->v != std::floor((*x)->v))
                return at(path, fmt::format("a non-integer bound ({}) on a 'number' is not "
                                            "supported",
                                            static_cast<double>((*x)->v)));
        // Bounds beyond what the grammar writes anyway (16 digits) change nothing.
        std::optional<int64_t> l, h;
        bool lx = false, hx = false;
        if (lower && lower->v >= -kLim) {
            if (lower->v > kLim) return at(path, "the lower bound is above 16 digits");
            l = static_cast<int64_t>(lower->v);
            lx = lower->exclusive;
        }
        if (upper && upper->v <= kLim) {
            if (upper->v < -kLim) return at(path, "the upper bound is below -16 digits");
            h = static_cast<int64_t>(upper->v);
            hx = upper->exclusive;
        }
        // Past the 16 digits the bounds change nothing, but still no exponent: 1e99 would
        // break them.
        if (l && empty_interval(*l, lx, h, hx))
            return at(path,
                      "no number lies within 'minimum'/'maximum' (and their exclusive "
                      "forms)");
        std::vector<std::string> alts;
        // v >= 0, written without a sign.
        if (!h || *h > 0 || (*h == 0 && !hx)) {
            const int64_t pl = l && *l >= 0 ? *l : 0;
            const bool plx = l && *l >= 0 ? lx : false;
            if (!empty_interval(pl, plx, h, hx))
                for (auto& a : nonneg_decimal(pl, plx, h, hx)) alts.push_back(std::move(a));
        }
        // v < 0, written as "-" m with m = -v > 0.
        if (!l || *l < 0) {
            const int64_t ml = h && *h < 0 ? -*h : 0;
            const bool mlx = h && *h < 0 ? hx : true;
            std::optional<int64_t> mh;
            if (l) mh = -*l;
            if (!empty_interval(ml, mlx, mh, lx))
                alts.push_back("\"-\" " + group(nonneg_decimal(ml, mlx, mh, lx)));
        }
        if (alts.empty()) return at(path, "no number lies within the bounds");
        return Expr{join(alts, " | "), false};
    }

    struct Member {
        std::string kv;
        bool required = false;
    };

    Expected<Expr> compile_object(const Json& s, const std::string& path, const std::string& hint) {
        const Json empty = Json::object();
        const Json& props = s.contains("properties") ? s["properties"] : empty;
        if (!props.is_object()) return at(path, "'properties' must be an object");
        std::vector<std::string> required;
        if (s.contains("required")) {
            const Json& r = s["required"];
            if (!r.is_array()) return at(path, "'required' must be an array of strings");
            for (const auto& x : r) {
                if (!x.is_string()) return at(path, "'required' must be an array of strings");
                if (std::find(required.begin(), required.end(), x) == required.end())
                    required.push_back(x.get<std::string>());
            }
        }
        const Json* addl =
            s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
        if (addl && !addl->is_boolean() && !addl->is_object())
            return at(path, "'additionalProperties' must be a boolean or a schema");
        const bool closed = addl && *addl == false;
        if (opt_.strict) {
            for (const auto& [name, sub] : props.items())
                if (std::find(required.begin(), required.end(), name) == required.end())
                    return at(path, fmt::format("strict mode needs every property in 'required' "
                                                "('{}' is missing)",
                                                name));
            if (!closed) return at(path, "strict mode needs 'additionalProperties': false");
        }
        // Without properties, an absent additionalProperties means any object; with them, no
        // other properties are produced (a subset of what the schema allows).
        if (props.empty() && required.empty() && (!addl || *addl == true))
            return Expr{use("object")};

        std::vector<Member> members;
        std::vector<std::string> names;
        auto member = [&](const std::string& name, const Json& sub, const std::string& subpath,
                          bool req) -> std::optional<Error> {
            names.push_back(name);
            if (sub == false) {
                if (req)
                    return at(subpath, fmt::format("required property '{}' has the schema "
                                                   "false",
                                                   name));
                return std::nullopt;
            }
            ++depth_;
            auto v = compile(sub, subpath, hint + "_" + sanitize(name));
            --depth_;
            if (!v) return v.error();
            members.push_back({gbnf_literal(dump(Json(name))) + R"g( ":" ws )g" + v->text, req});
            return std::nullopt;
        };
        auto is_required = [&](const std::string& n) {
            return std::find(required.begin(), required.end(), n) != required.end();
        };
        for (const auto& [name, sub] : props.items())
            if (auto e = member(name, sub, path + "/properties/" + pointer_token(name),
                                is_required(name)))
                return *e;
        // Required but not listed: present, with any value additionalProperties allows.
        for (const auto& name : required) {
            if (props.contains(name)) continue;
            if (closed)
                return at(path, fmt::format("required property '{}' is not in 'properties' and "
                                            "'additionalProperties' is false",
                                            name));
            if (auto e =
                    member(name, addl ? *addl : Json(true), path + "/additionalProperties", true))
                return *e;
        }
        std::string extra;
        if (addl && !closed) {
            ++depth_;
            auto v = compile(*addl, path + "/additionalProperties", hint + "_extra");
            --depth_;
            if (!v) return v.error();
            extra = other_key(names, hint) + R"g( ":" ws )g" + v->text;
        }
        use("ws");
        return Expr{object_body(members, extra, hint), false};
    }

    // Members in declared order, any subset of the optional ones, each after the first
    // preceded by a comma, then any number of extra members. head j: member j is the first one
    // out (every member before it is optional), then tail(j + 1).
    std::string object_body(const std::vector<Member>& m, const std::string& extra,
                            const std::string& hint) {
        const size_t n = m.size();
        auto part = [&](size_t j) {
            const std::string p = R"g("," ws )g" + m[j].kv;
            return m[j].required ? p : "( " + p + " )?";
        };
        const std::string extras = extra.empty() ? "" : R"g(( "," ws )g" + extra + " )*";
        size_t first_req = n;
        for (size_t j = 0; j < n; ++j)
            if (m[j].required) {
                first_req = j;
                break;
            }
        const size_t heads = std::min(first_req + 1, n);
        // tail(i) written out: the members from i on, then the extras.
        auto tail_text = [&](size_t i) {
            std::vector<std::string> parts;
            for (size_t j = i; j < n; ++j) parts.push_back(part(j));
            if (!extras.empty()) parts.push_back(extras);
            return join(parts, " ");
        };
        // With several heads the tails are shared as a chain of rules, so the grammar grows
        // linearly with the number of optional members, not quadratically.
        std::vector<std::string> tail(heads + 1);
        tail[heads] = tail_text(heads);
        if (heads > 1) {
            if (!tail[heads].empty()) tail[heads] = add_rule(hint + "_rest", tail[heads]);
            for (size_t i = heads - 1; i >= 1; --i)
                tail[i] = add_rule(hint + "_rest",
                                   part(i) + (tail[i + 1].empty() ? "" : " " + tail[i + 1]));
        } else {
            for (size_t i = 1; i < heads; ++i) tail[i] = tail_text(i);
        }
        std::vector<std::string> alts;
        for (size_t j = 0; j < heads; ++j)
            alts.push_back(m[j].kv + (tail[j + 1].empty() ? "" : " " + tail[j + 1]));
        const bool nullable = first_req == n;
        if (nullable && !extra.empty()) alts.push_back(extra + " " + extras);
        const std::string open = R"g("{" ws )g", close = R"g( "}")g";
        if (alts.empty()) return open + close.substr(1);
        const std::string inner = alts.size() > 1 ? "( " + join(alts, " | ") + " )" : alts[0];
        if (nullable) return open + "( " + inner + " ws )?" + close;
        return open + inner + " ws" + close;
    }

    // A key that is none of `names`, written with no escapes (so it has one spelling), as a
    // trie: at each node, a character that leaves the trie frees the rest of the key.
    std::string other_key(const std::vector<std::string>& names, const std::string& hint) {
        if (names.empty()) return use("string");
        const std::string q = R"g("\"")g";
        struct Node {
            std::map<uint32_t, std::pair<std::string, size_t>> next;  // cp -> (utf-8, node)
            bool word = false;
        };
        std::vector<Node> trie(1);
        for (const auto& name : names) {
            size_t node = 0;
            bool plain = true;
            for (size_t i = 0; i < name.size() && plain;) {
                const size_t start = i;
                const uint32_t cp = decode_utf8(name, i);
                if (cp < 0x20 || cp == '"' || cp == '\\') {
                    plain = false;
                    break;
                }
                auto it = trie[node].next.find(cp);
                if (it == trie[node].next.end()) {
                    trie.emplace_back();
                    it = trie[node]
                             .next
                             .emplace(
                                 cp, std::make_pair(name.substr(start, i - start), trie.size() - 1))
                             .first;
                }
                node = it->second.second;
            }
            if (plain) trie[node].word = true;
        }
        use("kchar");
        if (trie.size() == 1 && !trie[0].word) return q + " kchar* " + q;
        std::vector<std::string> rule(trie.size());
        for (size_t i = 0; i < trie.size(); ++i) rule[i] = reserve(hint + "_key");
        for (size_t i = 0; i < trie.size(); ++i) {
            std::string cls = R"g([^"\\\x00-\x1F)g";
            std::vector<std::string> alts;
            for (const auto& [cp, edge] : trie[i].next) {
                const bool alnum = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') ||
                                   (cp >= 'A' && cp <= 'Z');
                cls += alnum ? std::string(1, static_cast<char>(cp)) : fmt::format("\\U{:08X}", cp);
                alts.push_back(gbnf_literal(edge.first) + " " + rule[edge.second]);
            }
            alts.insert(alts.begin(), cls + "] kchar*");
            const std::string body = join(alts, " | ");
            define(rule[i], trie[i].word ? body : "( " + body + " )?");
        }
        return q + " " + rule[0] + " " + q;
    }

    Expected<Expr> compile_array(const Json& s, const std::string& path, const std::string& hint) {
        const Json* prefix = nullptr;
        const Json* rest = nullptr;  // nullptr: any value
        std::string rest_path = path + "/items";
        if (s.contains("prefixItems")) {
            prefix = &s["prefixItems"];
            if (s.contains("additionalItems"))
                return at(path,
                          "'additionalItems' with 'prefixItems' is not supported (use "
                          "'items')");
            if (s.contains("items")) rest = &s["items"];
        } else if (s.contains("items") && s["items"].is_array()) {
            prefix = &s["items"];  // draft 2019 and before: a tuple
            if (s.contains("additionalItems")) rest = &s["additionalItems"];
            rest_path = path + "/additionalItems";
        } else if (s.contains("items")) {
            rest = &s["items"];
        }
        if (prefix && !prefix->is_array()) return at(path, "'prefixItems' must be an array");
        if (rest && !rest->is_boolean() && !rest->is_object())
            return at(path, "'items' must be a schema");
        auto min_items = count_of(s, "minItems", path);
        if (!min_items) return min_items.error();
        auto max_items = count_of(s, "maxItems", path);
        if (!max_items) return max_items.error();
        const int64_t lo = min_items->value_or(0);
        std::optional<int64_t> hi = *max_items;
        if (hi && lo > *hi)
            return at(path, fmt::format("'minItems' {} is greater than 'maxItems' {}", lo, *hi));
        if (lo > kMaxSchemaRepeat)
            return at(path,
                      fmt::format("'minItems' {} is above the limit of {}", lo, kMaxSchemaRepeat));
        if (hi && *hi > kMaxSchemaRepeat) hi = kMaxSchemaRepeat;

        bool rest_allowed = !(rest && *rest == false);
        std::vector<std::string> items;
        if (prefix)
            for (size_t i = 0; i < prefix->size(); ++i) {
                if ((*prefix)[i] == false) {  // no item can stand here, so the array ends before
                    rest_allowed = false;
                    break;
                }
                if (hi && static_cast<int64_t>(i) >= *hi) break;
                ++depth_;
                auto e = compile((*prefix)[i], fmt::format("{}/prefixItems/{}", path, i),
                                 fmt::format("{}_{}", hint, i));
                --depth_;
                if (!e) return e;
                items.push_back(e->text);
            }
        const auto k = static_cast<int64_t>(items.size());
        std::optional<int64_t> most = hi;
        if (!rest_allowed) most = hi ? std::min(*hi, k) : k;
        if (most && lo > *most)
            return at(path, fmt::format("'minItems' {} asks for more items than 'prefixItems' "
                                        "allows with 'items': false",
                                        lo));
        std::string r;
        if (rest_allowed && (!most || *most > k)) {
            ++depth_;
            auto e = compile(rest ? *rest : Json(true), rest_path, hint + "_item");
            --depth_;
            if (!e) return e;
            r = e->text;
        }
        use("ws");
        const std::string open = R"g("[" ws )g", close = R"g( "]")g";
        if (most && *most == 0) return Expr{open + close.substr(1), false};
        const std::string more = R"g(( "," ws )g" + r + " )";
        std::string inner;
        if (k == 0) {
            const int64_t first = std::max<int64_t>(lo, 1) - 1;
            const std::string tail =
                rep(more, first, most ? std::optional(*most - 1) : std::nullopt);
            inner = r + (tail.empty() ? "" : " " + tail);
        } else {
            std::string cont;
            if (!r.empty())
                cont = rep(more, std::max<int64_t>(lo - k, 0),
                           most ? std::optional(*most - k) : std::nullopt);
            for (int64_t i = k - 1; i >= 1; --i) {
                const std::string next =
                    R"g("," ws )g" + items[i] + (cont.empty() ? "" : " " + cont);
                cont = i < lo ? next : "( " + next + " )?";
            }
            inner = items[0] + (cont.empty() ? "" : " " + cont);
        }
        if (lo == 0) return Expr{open + "( " + inner + " ws )?" + close, false};
        return Expr{open + inner + " ws" + close, false};
    }

    const Json& root_;
    JsonSchemaOptions opt_;
    std::vector<std::pair<std::string, std::string>> rules_;  // in order, root first
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> by_body_;
    std::map<std::string, RefState> refs_;  // by JSON pointer
    size_t chars_ = 0;
    int64_t repeats_ = 0;
    int nesting_ = 0;
    int depth_ = 0;  // objects and arrays around the schema being compiled
};

}  // namespace

Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                          const JsonSchemaOptions& opt) {
    return SchemaCompiler(schema, opt).run();
}

Expected<std::string> json_schema_to_gbnf(const nlohmann::json& schema,
                                          const JsonSchemaOptions& opt) {
    return json_schema_to_gbnf(nlohmann::ordered_json(schema), opt);
}

std::string json_object_gbnf(bool compact) {
    const nlohmann::ordered_json schema = {{"type", "object"}};
    JsonSchemaOptions opt;
    opt.compact = compact;
    return SchemaCompiler(schema, opt).run().value();
}

}  // namespace ferry::grammar
