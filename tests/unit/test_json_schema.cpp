// The JSON Schema compiler: each supported keyword on instances it must and must not accept,
// the comma logic of optional properties, integer and number ranges checked value by value,
// and every refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace ferry::grammar {
namespace {

using ojson = nlohmann::ordered_json;

struct Schema : GbnfUnderTest {
    explicit Schema(const std::string& schema, bool strict = false) {
        JsonSchemaOptions opt;
        opt.strict = strict;
        load(json_schema_to_gbnf(ojson::parse(schema), opt));
    }
};

void check(const std::string& schema, const std::vector<std::string>& yes,
           const std::vector<std::string>& no, bool strict = false) {
    Schema s(schema, strict);
    ASSERT_TRUE(s.grammar) << schema << ": " << s.error;
    for (const auto& t : yes)
        EXPECT_TRUE(s(t)) << schema << " should accept " << t << "\n" << s.gbnf;
    for (const auto& t : no)
        EXPECT_FALSE(s(t)) << schema << " should reject " << t << "\n" << s.gbnf;
}

std::string refusal(const std::string& schema, bool strict = false) {
    JsonSchemaOptions opt;
    opt.strict = strict;
    auto e = json_schema_to_gbnf(ojson::parse(schema), opt);
    return e ? std::string("(compiled)") : e.error().message;
}

#define EXPECT_REFUSED(schema, what)                                                             \
    do {                                                                                         \
        const std::string err_ = refusal(schema);                                                \
        EXPECT_NE(err_.find(what), std::string::npos)                                            \
            << (schema) << ": expected an error about '" << (what) << "', got '" << err_ << "'"; \
    } while (0)

TEST(JsonSchema, FormatsWithLengths) {
    // Loose enough bounds leave the format as it is; email and hostname narrow to fit.
    check(R"({"type":"string","format":"date","minLength":1,"maxLength":10})", {"\"2024-02-29\""},
          {"\"2023-02-29\""});
    check(R"({"type":"string","format":"email","maxLength":12})",
          {"\"ab@cd.io\"", "\"a@b.io\"", "\"abc@defg.xy\""},
          {"\"abcdef@ghijk.com\"", "\"ab.cd\"", "\"a@b.c\""});
    check(R"({"type":"string","format":"hostname","maxLength":9})", {"\"ab.cdef\"", "\"host\""},
          {"\"abcdefgh.com\"", "\"a.b\""});
}

TEST(JsonSchema, AnyValue) {
    for (const char* schema : {"{}", "true", R"({"description": "anything"})"})
        check(schema,
              {"1", "-0.5e3", "\"x\"", "true", "null", "[]", "[ ]", "{}", R"({"a":[1,{"b":null}]})",
               "{ \"a\": 1 }", "[1, \"a\"]"},
              {"", "{a:1}", "01", "[1,]", "\"", "nul", "1 ", " 1", "{\"a\" : 1}"});
}

TEST(JsonSchema, WhitespaceIsBounded) {
    const std::string indent20(20, ' '), indent21(21, ' ');
    check(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
          {R"({"a":1})", R"({"a": 1})", "{\n  \"a\": 1\n}", "{\n" + indent20 + "\"a\": 1}",
           "{ \"a\":1 }"},
          {R"({"a":  1})", "{\n" + indent21 + "\"a\": 1}", "{  \"a\":1}", "{\"a\"  :1}",
           "{\"a\":1} ", "{\t\"a\":1}"});
}

TEST(JsonSchema, JsonObject) {
    auto g = Grammar::parse(json_object_gbnf());
    ASSERT_TRUE(g.ok()) << g.error().message;
    for (const char* yes : {"{}", R"({"a":1})", R"({"a": {"b": [1, 2]}, "c": "d"})"})
        EXPECT_TRUE(accepts(*g, yes)) << yes;
    for (const char* no : {"[]", "1", "\"a\"", "{", R"({"a"})"})
        EXPECT_FALSE(accepts(*g, no)) << no;
}

TEST(JsonSchema, Strings) {
    check(R"({"type":"string"})",
          {R"("")", R"("abc")", R"("a\"b")", R"("\\")", R"("\/\b\f\n\r\t")", R"("\u00e9")",
           "\"\xC3\xA9\"", R"("\ud83d\ude00")", R"("\uD83D\uDE00")"},
          {R"("abc)", R"(abc)", R"("\x")", "\"a\nb\"", R"("\ud83d")", R"("\ude00")", R"("\u12")",
           "\"\t\"", R"("a"b")"});
}

TEST(JsonSchema, Numbers) {
    check(R"({"type":"number"})",
          {"0", "-0", "1", "-1.5", "1e10", "1.5E-3", "12.25e+2", "1234567890123456"},
          {"01", ".5", "1.", "+1", "1e", "NaN", "Infinity", "--1", "1e100", "12345678901234567",
           "\"1\""});
    check(R"({"type":"integer"})", {"0", "-12", "9999999999999999"},
          {"1.0", "01", "-", "1e3", "12345678901234567", "true"});
    check(R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"});
    check(R"({"type":"null"})", {"null"}, {"None", "\"null\"", ""});
    check(R"({"type":["string","null"]})", {"\"a\"", "null"}, {"1", "[]"});
    check(R"({"type":["integer","boolean"],"minimum":3})", {"3", "4", "true"}, {"2", "null"});
}

TEST(JsonSchema, EnumAndConst) {
    check(R"({"enum":["a", 1, null, {"x":[1,2]}, [true], "q\"uote", 2.5]})",
          {R"("a")", "1", "null", R"({"x":[1,2]})", "[true]", R"("q\"uote")", "2.5"},
          {R"("b")", R"({"x": [1,2]})", "2", "[ true]", R"("q"uote")"});
    check(R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")", "fixed"});
    check(R"({"const":{"b":1,"a":2}})", {R"({"b":1,"a":2})"}, {R"({"a":2,"b":1})"});
    check(R"({"type":"string","enum":["x","y",3]})", {R"("x")", R"("y")"}, {"3"});
    check(R"({"type":"integer","const":2.0})", {"2.0"}, {"2"});
    check(R"({"enum":["a","b"],"const":"b"})", {R"("b")"}, {R"("a")"});
}

TEST(JsonSchema, ObjectPropertiesInDeclaredOrder) {
    const std::string schema = R"({"type":"object","properties":{
        "b":{"type":"integer"},"a":{"type":"string"},"c":{"type":"boolean"}},"required":["a"]})";
    check(schema,
          {R"({"a":"x"})", R"({"b":1,"a":"x"})", R"({"b":1,"a":"x","c":true})",
           R"({"a":"x","c":true})", R"({ "b": 1, "a": "x" })"},
          {"{}", R"({"a":"x","b":1})", R"({"b":1})", R"({"a":"x",})", R"({,"a":"x"})",
           R"({"a":"x","d":1})", R"({"a":1})", R"({"c":true,"a":"x"})"});
}

// Every subset of optional properties, in order, with exactly the right commas.
TEST(JsonSchema, OptionalPropertySubsets) {
    for (const char* req : {"[]", R"(["c"])", R"(["a","d"])"}) {
        const std::string schema =
            std::string(R"({"type":"object","properties":{"a":{"type":"integer"},
            "b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"}},"required":)") +
            req + "}";
        Schema s(schema);
        ASSERT_TRUE(s.grammar) << s.error;
        const auto required = ojson::parse(req);
        const char* names[] = {"a", "b", "c", "d"};
        for (int mask = 0; mask < 16; ++mask) {
            std::string text = "{";
            bool ok = true;
            for (int i = 0; i < 4; ++i) {
                const bool present = mask & (1 << i);
                const bool is_req =
                    std::find(required.begin(), required.end(), names[i]) != required.end();
                if (is_req && !present) ok = false;
                if (!present) continue;
                if (text.size() > 1) text += ",";
                text += "\"" + std::string(names[i]) + "\":" + std::to_string(i);
            }
            text += "}";
            EXPECT_EQ(s(text), ok) << req << " " << text << "\n" << s.gbnf;
            const std::string spaced =
                text.size() > 2 ? "{ " + text.substr(1, text.size() - 2) + " }" : "{ }";
            EXPECT_EQ(s(spaced), ok) << req << " " << spaced << "\n" << s.gbnf;
            if (text.size() > 2) {
                EXPECT_FALSE(s(text.substr(0, text.size() - 1) + ",}")) << text;
                EXPECT_FALSE(s("{," + text.substr(1))) << text;
            }
        }
    }
}

TEST(JsonSchema, AdditionalProperties) {
    // true: extra keys after the declared ones, never one of the declared names again.
    check(R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"integer"}},
             "additionalProperties":true})",
          {R"({"a":1,"x":"y"})", R"({"x":1})", R"({"abc":1})", R"({"":1,"b":[]})", "{}",
           R"({"a":1,"ab":2,"x":null,"y":{}})", R"({"A":1})"},
          {R"({"a":1,"a":"s"})", R"({"x":1,"a":1})", R"({"ab":1,"ab":2})", R"({"a":1,})"});
    // A schema for the extra values; no properties.
    check(R"({"type":"object","additionalProperties":{"type":"integer"}})",
          {"{}", R"({"x":1,"y":2})", R"({"a\"b":3})"}, {R"({"x":"s"})", R"({"x":1,})"});
    // Absent with properties: only the declared ones (a subset of what is valid).
    check(R"({"type":"object","properties":{"a":{"type":"integer"}}})", {"{}", R"({"a":1})"},
          {R"({"b":1})"});
    // Absent without properties: any object.
    check(R"({"type":"object"})", {"{}", R"({"b":[1]})"}, {"[]"});
    check(R"({"type":"object","additionalProperties":false})", {"{}", "{ }"}, {R"({"a":1})"});
    // Required but not in properties: present, with any value.
    check(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a","z"]})",
          {R"({"a":1,"z":[1,"x"]})"}, {R"({"a":1})", R"({"z":1,"a":1})"});
    // A property whose schema is false is never produced, and not as an extra either.
    check(R"({"type":"object","properties":{"a":false,"b":{"type":"null"}},
             "additionalProperties":true})",
          {R"({"b":null})", R"({"c":1})"}, {R"({"a":1})"});
}

TEST(JsonSchema, StrictMode) {
    const std::string ok = R"({"type":"object","properties":{"a":{"type":"string"},
        "n":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],
             "additionalProperties":false}},
        "required":["a","n"],"additionalProperties":false})";
    check(ok, {R"({"a":"s","n":{"x":1}})"}, {R"({"a":"s"})"}, true);
    EXPECT_NE(refusal(R"({"type":"object","properties":{"a":{"type":"string"},
        "b":{"type":"string"}},"required":["a"],"additionalProperties":false})",
                      true)
                  .find("'b' is missing"),
              std::string::npos);
    EXPECT_NE(
        refusal(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})", true)
            .find("'additionalProperties': false"),
        std::string::npos);
    const std::string nested = refusal(R"({"type":"object","properties":{"n":{"type":"object",
        "properties":{"x":{"type":"integer"}},"additionalProperties":false}},"required":["n"],
        "additionalProperties":false})",
                                       true);
    EXPECT_NE(nested.find("at #/properties/n:"), std::string::npos) << nested;
    // The same schemas are fine outside strict mode.
    EXPECT_EQ(refusal(R"({"type":"object","properties":{"a":{"type":"string"}}})"), "(compiled)");
}

TEST(JsonSchema, Arrays) {
    check(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
          {"[1]", "[1,2,3]", "[ 1, 2 ]", "[\n  1,\n  2\n]"},
          {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]", "[,1]"});
    check(R"({"type":"array"})", {"[]", R"([1,"a",null,{}])"}, {"{}"});
    check(R"({"type":"array","items":{"type":"string"}})", {"[]", R"(["a","b"])"}, {"[1]"});
    check(R"({"type":"array","maxItems":0})", {"[]", "[ ]"}, {"[1]"});
    check(R"({"type":"array","items":{"type":"integer"},"minItems":2})", {"[1,2]", "[1,2,3,4]"},
          {"[1]", "[]"});
    check(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
          {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", "[1]", R"(["a","b"])"});
    check(R"({"prefixItems":[{"type":"string"}],"items":{"type":"integer"},"minItems":2})",
          {R"(["a",1])", R"(["a",1,2])"}, {R"(["a"])", "[]", R"(["a","b"])"});
    check(R"({"prefixItems":[{"type":"string"},{"type":"integer"},{"type":"null"}],
             "minItems":2,"maxItems":4})",
          {R"(["a",1])", R"(["a",1,null])", R"(["a",1,null,{}])"},
          {R"(["a"])", R"(["a",1,null,1,2])", R"(["a",1,1])"});
    check(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"maxItems":1})",
          {"[]", R"(["a"])"}, {R"(["a",1])"});
    // Draft 2019 tuples.
    check(R"({"items":[{"type":"integer"}],"additionalItems":false})", {"[]", "[1]"}, {"[1,2]"});
    check(R"({"type":"array","uniqueItems":false,"items":{"type":"boolean"}})", {"[true,true]"},
          {});
}

TEST(JsonSchema, AnyOfOneOfAllOf) {
    check(R"({"anyOf":[{"type":"string"},{"type":"integer"}]})", {"\"a\"", "1"}, {"null", "1.5"});
    check(R"({"oneOf":[{"type":"boolean"},{"const":"x"}],"title":"t"})", {"true", "\"x\""},
          {"\"y\""});
    check(R"({"anyOf":[false,{"type":"null"}]})", {"null"}, {"1"});
    check(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                       {"properties":{"b":{"type":"string"}}}]})",
          {R"({"a":1,"b":"x"})", R"({"a":1})"}, {R"({"b":"x"})", R"({"a":"s"})"});
    check(R"({"allOf":[{"type":"string","maxLength":2}]})", {"\"ab\""}, {"\"abc\""});
    check(R"({"$defs":{"base":{"type":"object","properties":{"id":{"type":"integer"}},
                               "required":["id"]}},
             "allOf":[{"$ref":"#/$defs/base"},{"properties":{"name":{"type":"string"}},
                      "required":["name"]}]})",
          {R"({"id":1,"name":"n"})"}, {R"({"name":"n"})", R"({"id":1})"});
    // The same property in two members must satisfy both.
    check(R"({"allOf":[{"properties":{"o":{"type":"object","properties":{"x":{"type":"integer"}}}}},
                       {"properties":{"o":{"type":"object","properties":{"y":{"type":"integer"}},
                                      "required":["y"]}}}]})",
          {R"({"o":{"x":1,"y":2}})", R"({"o":{"y":2}})"}, {R"({"o":{"x":1}})"});
    // $ref with siblings: both apply.
    check(R"({"$defs":{"a":{"properties":{"a":{"type":"integer"}}}},
             "$ref":"#/$defs/a","properties":{"b":{"type":"integer"}},"required":["b"]})",
          {R"({"a":1,"b":2})", R"({"b":2})"}, {R"({"a":1})"});
}

TEST(JsonSchema, RefsAndRecursion) {
    check(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
             "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
             "$ref":"#/$defs/node"})",
          {R"({"v":1})", R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"},
          {R"({"kids":[]})", R"({"v":1,"kids":[{}]})"});
    check(R"({"type":"object","properties":{"next":{"$ref":"#"}}})",
          {"{}", R"({"next":{}})", R"({"next":{"next":{}}})"}, {R"({"next":1})"});
    check(
        R"({"definitions":{"a/b":{"type":"integer"},"c~d":{"type":"string"},"sp ace":{"type":"null"}},
             "type":"object","properties":{"x":{"$ref":"#/definitions/a~1b"},
             "y":{"$ref":"#/definitions/c~0d"},"z":{"$ref":"#/definitions/sp%20ace"}},
             "required":["x","y","z"]})",
        {R"({"x":1,"y":"s","z":null})"}, {R"({"x":"s","y":"s","z":null})"});
    // Mutual recursion through an array.
    check(R"({"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/b"}},
                       "b":{"anyOf":[{"type":"integer"},{"$ref":"#/$defs/a"}]}},
             "$ref":"#/$defs/b"})",
          {"1", "[]", "[1,[2,[]]]"}, {"[[\"x\"]]"});
}

TEST(JsonSchema, Patterns) {
    check(R"({"type":"string","pattern":"^[a-z]+\\d$"})", {R"("abc1")"},
          {R"("abc")", R"("1")", "abc1"});
    // A quote and a backslash in the pattern appear JSON-escaped in the output.
    check(R"({"type":"string","pattern":"a\"b\\\\c"})", {R"("a\"b\\c")"}, {R"("a"b\c")"});
    check(R"({"type":"string","pattern":"[^x]{2}"})", {R"("\n\"")", R"("ab")"},
          {"\"\n\"", R"("xa")"});
    check(R"({"type":"object","properties":{"zip":{"type":"string","pattern":"^\\d{5}(-\\d{4})?$"}},
             "required":["zip"]})",
          {R"({"zip":"12345"})", R"({"zip":"12345-6789"})"}, {R"({"zip":"1234"})"});
}

TEST(JsonSchema, Formats) {
    check(R"({"type":"string","format":"date"})",
          {R"("2024-02-29")", R"("2000-02-29")", R"("2023-12-31")", R"("0001-01-01")",
           R"("2023-04-30")", R"("1600-02-29")", R"("0004-02-29")"},
          {R"("2023-02-29")", R"("1900-02-29")", R"("2000-02-30")", R"("2023-04-31")",
           R"("0000-01-01")", R"("2023-13-01")", R"("2023-00-10")", R"("2023-1-1")",
           R"("2023-01-00")"});
    check(R"({"type":"string","format":"date-time"})",
          {R"("2024-01-15T10:30:00Z")", R"("2024-01-15T10:30:00.123+05:30")",
           R"("2024-01-15T23:59:59-08:00")"},
          {R"("2024-01-15T10:30:00")", R"("2024-01-15T24:00:00Z")", R"("2024-01-15 10:30:00Z")",
           R"("2024-01-15T10:60:00Z")"});
    check(R"({"type":"string","format":"time"})", {R"("23:59:59Z")", R"("00:00:00.5+01:00")"},
          {R"("23:59:59")", R"("7:00:00Z")"});
    check(
        R"({"type":"string","format":"uuid"})",
        {R"("123e4567-e89b-12d3-a456-426614174000")", R"("123E4567-E89B-12D3-A456-426614174000")"},
        {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400")",
         R"("g23e4567-e89b-12d3-a456-426614174000")"});
    check(R"({"type":"string","format":"email"})",
          {R"("a.b+c@example.com")", R"("x_y@mail.example.co")"},
          {R"("a@b")", R"("@example.com")", R"("a b@example.com")", R"("a@@example.com")"});
    check(R"({"type":"string","format":"hostname"})",
          {R"("example.com")", R"("a-b.example.org")", R"("localhost")"},
          {R"("-a.com")", R"("a-.com")", R"("a..com")", R"("example.123")"});
    check(R"({"type":"string","format":"ipv4"})",
          {R"("192.168.0.1")", R"("0.0.0.0")", R"("255.255.255.255")"},
          {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")", R"("1.1.1.1.1")"});
    // format describes strings only: on other types it is an annotation.
    check(R"({"type":"integer","format":"int32"})", {"5"}, {"\"5\""});
}

TEST(JsonSchema, StringLengths) {
    check(R"({"type":"string","minLength":2,"maxLength":3})",
          {R"("ab")", R"("abc")", R"("a\"b")", R"("\u00e9\u00e9")", "\"\xC3\xA9\xC3\xA9\"",
           R"("\ud83d\ude00x")"},
          {R"("a")", R"("abcd")", R"("")", R"("\u00e9")"});
    check(R"({"type":"string","maxLength":0})", {R"("")"}, {R"("a")"});
    check(R"({"type":"string","minLength":1})", {R"("a")", R"("abcdefghijklmnop")"}, {R"("")"});
    // A maximum above the limit is lowered to it, which still only produces valid strings.
    Schema big(R"({"type":"string","maxLength":100000})");
    ASSERT_TRUE(big.grammar) << big.error;
    EXPECT_TRUE(big("\"" + std::string(kMaxSchemaRepeat, 'a') + "\""));
    EXPECT_FALSE(big("\"" + std::string(kMaxSchemaRepeat + 1, 'a') + "\""));
}

// Every integer in a window, for ranges with negative, zero-crossing, single-value and open ends.
TEST(JsonSchema, IntegerRanges) {
    struct Case {
        std::optional<long> lo, hi;
    };
    const std::vector<Case> cases = {
        {0, 0},     {0, 1},      {1, 9},       {-5, 5},   {-100, -3}, {7, 123},
        {-123, -7}, {10, 99},    {0, 100},     {15, 15},  {-1, -1},   {99, 1000},
        {5, {}},    {{}, -5},    {-37, {}},    {{}, 142}, {101, 109}, {-109, -101},
        {19, 201},  {-201, -19}, {1, 1000000}, {{}, 0},   {0, {}},    {-1000, 999},
    };
    for (const auto& c : cases) {
        ojson schema = {{"type", "integer"}};
        if (c.lo) schema["minimum"] = *c.lo;
        if (c.hi) schema["maximum"] = *c.hi;
        Schema s(schema.dump());
        ASSERT_TRUE(s.grammar) << schema.dump() << ": " << s.error;
        for (long x = -1100; x <= 1100; ++x) {
            const bool in = (!c.lo || x >= *c.lo) && (!c.hi || x <= *c.hi);
            EXPECT_EQ(s(std::to_string(x)), in) << schema.dump() << " on " << x << "\n" << s.gbnf;
        }
        for (long x : {1000000L, 1000001L, -1000000L, 123456789L})
            EXPECT_EQ(s(std::to_string(x)), (!c.lo || x >= *c.lo) && (!c.hi || x <= *c.hi))
                << schema.dump() << " on " << x;
        EXPECT_FALSE(s("01"));
        EXPECT_FALSE(s("1.0"));
    }
    // Exclusive and fractional bounds round inwards.
    check(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", {"1", "9"},
          {"0", "10"});
    check(R"({"type":"integer","minimum":1.5,"maximum":3.9})", {"2", "3"}, {"1", "4"});
    check(R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":3})", {"1", "3"},
          {"0"});
    check(R"({"type":"integer","minimum":-1e300,"maximum":1e300})", {"0", "-5", "9999999999999999"},
          {"1.5"});
}

// Decimals checked against the bounds they were generated from.
TEST(JsonSchema, NumberRanges) {
    check(R"({"type":"number","minimum":0,"maximum":1})",
          {"0", "1", "0.5", "1.0", "1.000", "0.999", "0.0"},
          {"1.5", "-0.1", "1.01", "2", "1e0", "-1", "01"});
    check(R"({"type":"number","exclusiveMinimum":0,"maximum":100})",
          {"0.001", "100", "50.5", "1", "99.99"}, {"0", "0.0", "100.5", "-1", "100.01"});
    struct Case {
        std::optional<long> lo, hi;
        bool lx = false, hx = false;
    };
    const std::vector<Case> cases = {
        {0, 1},
        {0, 100, true},
        {-1, 1},
        {-10, -2, false, true},
        {0, {}},
        {{}, 0, false, true},
        {-3, 7, true, true},
        {5, 5},
        {{}, -2},
        {2, {}, true},
        {-20, 20, false, true},
        {-1, 0, true, false},
    };
    std::mt19937 rng(7);
    for (const auto& c : cases) {
        ojson schema = {{"type", "number"}};
        if (c.lo) schema[c.lx ? "exclusiveMinimum" : "minimum"] = *c.lo;
        if (c.hi) schema[c.hx ? "exclusiveMaximum" : "maximum"] = *c.hi;
        Schema s(schema.dump());
        ASSERT_TRUE(s.grammar) << schema.dump() << ": " << s.error;
        for (int i = 0; i < 3000; ++i) {
            // Canonical decimals: no leading zeros, 0-3 fraction digits.
            const long whole = static_cast<long>(rng() % 30);
            std::string text = (rng() % 2 ? "-" : "") + std::to_string(whole);
            const int frac = static_cast<int>(rng() % 4);
            if (frac) {
                text += ".";
                for (int k = 0; k < frac; ++k) text += static_cast<char>('0' + rng() % 10);
            }
            const double v = std::stod(text);
            const bool in = (!c.lo || (c.lx ? v > *c.lo : v >= *c.lo)) &&
                            (!c.hi || (c.hx ? v < *c.hi : v <= *c.hi));
            // "-0" and "-0.0" are 0, but the grammar never writes them: a subset is fine.
            if (in && text.rfind("-0", 0) == 0 && v == 0) continue;
            EXPECT_EQ(s(text), in) << schema.dump() << " on " << text << "\n" << s.gbnf;
        }
    }
}

TEST(JsonSchema, AnnotationsAreIgnored) {
    check(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","title":"T",
             "description":"d","examples":[1],"default":2,"$comment":"c","deprecated":true,
             "readOnly":true,"writeOnly":false,"type":"integer"})",
          {"1"}, {"\"a\""});
}

TEST(JsonSchema, DeclaredOrderNeedsOrderedJson) {
    const std::string text = R"({"type":"object","properties":{"z":{"type":"integer"},
        "a":{"type":"integer"}},"required":["z","a"]})";
    auto ordered = json_schema_to_gbnf(ojson::parse(text));
    auto sorted = json_schema_to_gbnf(nlohmann::json::parse(text));
    ASSERT_TRUE(ordered.ok() && sorted.ok());
    auto g1 = Grammar::parse(*ordered), g2 = Grammar::parse(*sorted);
    ASSERT_TRUE(g1.ok() && g2.ok());
    EXPECT_TRUE(accepts(*g1, R"({"z":1,"a":2})"));
    EXPECT_TRUE(accepts(*g2, R"({"a":2,"z":1})"));  // nlohmann::json keeps keys sorted
}

TEST(JsonSchema, Refusals) {
    EXPECT_REFUSED(R"({"type":"object","properties":{"age":{"type":"integer","multipleOf":2}}})",
                   "at #/properties/age: 'multipleOf' is not supported");
    EXPECT_REFUSED(R"({"not":{"type":"string"}})", "'not' is not supported");
    EXPECT_REFUSED(R"({"if":{"type":"string"},"then":{"maxLength":2}})", "is not supported");
    EXPECT_REFUSED(R"({"type":"string","else":{}})", "'else' is not supported");
    EXPECT_REFUSED(R"({"type":"object","patternProperties":{"^a":{}}})", "'patternProperties'");
    EXPECT_REFUSED(R"({"type":"object","dependentRequired":{"a":["b"]}})", "'dependentRequired'");
    EXPECT_REFUSED(R"({"type":"object","dependentSchemas":{"a":{}}})", "'dependentSchemas'");
    EXPECT_REFUSED(R"({"type":"object","propertyNames":{"maxLength":3}})", "'propertyNames'");
    EXPECT_REFUSED(R"({"type":"object","unevaluatedProperties":false})", "'unevaluatedProperties'");
    EXPECT_REFUSED(R"({"type":"array","uniqueItems":true})", "'uniqueItems': true");
    EXPECT_REFUSED(R"({"type":"object","minProperties":1})", "'minProperties'");
    EXPECT_REFUSED(R"({"type":"object","maxProperties":1})", "'maxProperties'");
    EXPECT_REFUSED(R"({"type":"array","contains":{"type":"integer"}})", "'contains'");
    EXPECT_REFUSED(R"({"type":"strin"})", "unknown type 'strin'");
    EXPECT_REFUSED(R"({"type":"string","format":"ipv6"})", "format 'ipv6' is not supported");
    EXPECT_REFUSED(R"({"type":"string","nullable":true})", "unknown keyword 'nullable'");
    EXPECT_REFUSED(R"({"type":"string","minLength":3,"maxLength":2})",
                   "'minLength' 3 is greater than 'maxLength' 2");
    EXPECT_REFUSED(R"({"type":"string","minLength":5000})", "above the limit");
    EXPECT_REFUSED(R"({"type":"integer","minimum":5,"maximum":4})", "no integer");
    EXPECT_REFUSED(R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":6})", "no integer");
    EXPECT_REFUSED(R"({"type":"number","minimum":2,"maximum":1})", "no number");
    EXPECT_REFUSED(R"({"type":"number","exclusiveMinimum":1,"maximum":1})", "no number");
    EXPECT_REFUSED(R"({"type":"number","minimum":0.5})", "non-integer bound");
    EXPECT_REFUSED(R"({"type":"array","minItems":3,"maxItems":2})",
                   "'minItems' 3 is greater than 'maxItems' 2");
    EXPECT_REFUSED(R"({"prefixItems":[{}],"items":false,"minItems":2})", "prefixItems");
    EXPECT_REFUSED(R"({"enum":[]})", "'enum' is empty");
    EXPECT_REFUSED(R"({"type":"object","properties":{"a":{}},"required":["b"],
                       "additionalProperties":false})",
                   "required property 'b' is not in 'properties'");
    EXPECT_REFUSED(R"({"type":"integer","const":"a"})", "'const' value does not match 'type'");
    EXPECT_REFUSED(R"({"type":"integer","enum":["a","b"]})", "no 'enum' value matches 'type'");
    EXPECT_REFUSED(R"({"$ref":"#/$defs/missing"})", "does not resolve");
    EXPECT_REFUSED(R"({"$ref":"https://example.com/s.json"})", "remote '$ref'");
    EXPECT_REFUSED(R"({"$ref":"#anchor"})", "anchor");
    EXPECT_REFUSED(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
                   "infinite recursion");
    EXPECT_REFUSED(R"({"$defs":{"a":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/b"}]},
                       "b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
                   "infinite recursion");
    EXPECT_REFUSED("false", "no value matches");
    EXPECT_REFUSED(R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "can only merge object");
    EXPECT_REFUSED(R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},
                               {"properties":{"b":{}}}]})",
                   "forbids property 'b'");
    EXPECT_REFUSED(R"({"type":"string","anyOf":[{"maxLength":2},{"minLength":5}]})",
                   "'anyOf' together with 'type'");
    EXPECT_REFUSED(R"({"enum":["a"],"maxLength":3})", "'enum' together with 'maxLength'");
    EXPECT_REFUSED(R"j({"type":"string","pattern":"(?=a)"})j",
                   "at #: 'pattern': regex: a lookahead");
    EXPECT_REFUSED(R"({"type":"string","pattern":"a+","maxLength":3})", "'pattern' together");
    EXPECT_REFUSED(R"({"type":"string","format":"date","maxLength":3})", "shorter than any 'date'");
    EXPECT_REFUSED(R"({"type":"string","format":"email","minLength":10})",
                   "'minLength' 10 with format 'email'");
    EXPECT_REFUSED(R"({"type":"string","format":"date-time","maxLength":25})",
                   "'maxLength' 25 with format 'date-time'");
    EXPECT_REFUSED(R"({"type":"string","format":"uuid","pattern":"a"})", "'format' together");
    EXPECT_REFUSED(R"({"type":"object","properties":{"a":false},"required":["a"]})",
                   "required property 'a' has the schema false");
    EXPECT_REFUSED(R"({"type":"string","maxLength":-1})", "non-negative integer");
    EXPECT_REFUSED(R"({"type":"integer","minimum":1e20})", "16 digits");
    EXPECT_REFUSED(R"({"type":"object","properties":{"a":{"properties":{"b":{"type":"array",
                       "items":{"type":"integer","multipleOf":3}}}}}})",
                   "at #/properties/a/properties/b/items: 'multipleOf'");
}

TEST(JsonSchema, SizeLimits) {
    ojson values = ojson::array();
    for (int i = 0; i < 1500; ++i) values.push_back(std::to_string(i) + std::string(1000, 'x'));
    EXPECT_REFUSED(ojson({{"enum", values}}).dump(), "larger than the limit");
    // A long enum of short values compiles, each value once however often it is listed (the
    // duplicates were found by a search of the list so far: 100,000 values held a server's I/O
    // thread for 14 s); one too long for the limit is refused as the enum.
    ojson many = ojson::array();
    for (int i = 0; i < 100000; ++i) many.push_back(i % 50000);
    const auto g = json_schema_to_gbnf(ojson({{"enum", many}}));
    ASSERT_TRUE(g) << g.error().message;
    EXPECT_NE(g->find("\"49999\""), std::string::npos);
    EXPECT_EQ(g->find("\"50000\""), std::string::npos);
    size_t alternatives = 0;
    for (size_t at = g->find(" | "); at != std::string::npos; at = g->find(" | ", at + 3))
        ++alternatives;
    EXPECT_EQ(alternatives, 49999u);
    ojson wide = ojson::array();
    for (int i = 0; i < 60000; ++i) wide.push_back(fmt::format("a{:034d}", i));
    EXPECT_REFUSED(ojson({{"enum", wide}}).dump(), "the 'enum' compiles to a grammar larger");
    // Many distinct long strings: past the repetition budget.
    ojson props = ojson::object();
    for (int i = 0; i < 40; ++i)
        props["p" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 4000 + i}};
    EXPECT_REFUSED(ojson({{"type", "object"}, {"properties", props}}).dump(),
                   "larger than the limit");
    // Deep nesting stops, rather than overflowing the stack.
    ojson deep = {{"type", "integer"}};
    for (int i = 0; i < 300; ++i) deep = {{"type", "array"}, {"items", deep}};
    EXPECT_REFUSED(deep.dump(), "nests too deeply");
}

}  // namespace
}  // namespace ferry::grammar
