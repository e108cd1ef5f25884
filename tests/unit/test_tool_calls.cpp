// Tool calling's pieces without a model: request parsing, the forcing grammar (every sentence
// of it parses back into calls whose arguments fit the schema), the output parsers per
// format, and streaming's hold-back of a possible trigger.
#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace ferry::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson weather_tools() {
    return ojson::parse(R"({"tools": [
      {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
      {"type": "function", "function": {"name": "get_time"}}]})");
}

ToolRequest parse_ok(const ojson& body) {
    std::string err, param;
    auto r = parse_tools(body, err, param);
    EXPECT_TRUE(err.empty()) << err;
    EXPECT_TRUE(r.has_value());
    return r.value_or(ToolRequest{});
}

std::string parse_err(const ojson& body) {
    std::string err, param;
    auto r = parse_tools(body, err, param);
    EXPECT_FALSE(r.has_value());
    return err;
}

TEST(ToolCalls, ParsesToolsAndChoices) {
    ojson body = weather_tools();
    ToolRequest r = parse_ok(body);
    ASSERT_EQ(r.functions.size(), 2u);
    EXPECT_EQ(r.choice, ToolRequest::Choice::Auto);
    EXPECT_EQ(r.functions[1].parameters["type"], "object");  // absent parameters: no arguments
    body["tool_choice"] = "required";
    EXPECT_EQ(parse_ok(body).choice, ToolRequest::Choice::Required);
    body["tool_choice"] = ojson::parse(R"({"type": "function", "function": {"name": "get_time"}})");
    r = parse_ok(body);
    EXPECT_EQ(r.choice, ToolRequest::Choice::Named);
    EXPECT_EQ(r.named, "get_time");
    body["parallel_tool_calls"] = false;
    EXPECT_FALSE(parse_ok(body).parallel);
}

TEST(ToolCalls, RefusesMalformedTools) {
    ojson body = weather_tools();
    body["tool_choice"] = ojson::parse(R"({"type": "function", "function": {"name": "nope"}})");
    EXPECT_NE(parse_err(body).find("'nope'"), std::string::npos);
    body["tool_choice"] = "sometimes";
    EXPECT_NE(parse_err(body).find("sometimes"), std::string::npos);
    EXPECT_NE(parse_err(ojson{{"tool_choice", "required"}}).find("needs 'tools'"),
              std::string::npos);
    EXPECT_NE(
        parse_err(ojson{{"tools",
                         ojson::array({{{"type", "function"}, {"function", {{"name", "a b"}}}}})}})
            .find("name"),
        std::string::npos);
    EXPECT_NE(parse_err(ojson{{"functions", ojson::array()}}).find("deprecated"),
              std::string::npos);
    ojson dup = weather_tools();
    dup["tools"][1]["function"]["name"] = "get_weather";
    EXPECT_NE(parse_err(dup).find("two tools"), std::string::npos);
    std::string err, param;
    EXPECT_FALSE(parse_tools(ojson{{"model", "x"}}, err, param).has_value());
    EXPECT_TRUE(err.empty());  // no tools: not an error
}

TEST(ToolCalls, ForcingGrammarAcceptsExactlyValidCalls) {
    ojson body = weather_tools();
    body["tool_choice"] = "required";
    const ToolRequest r = parse_ok(body);
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral}) {
        SCOPED_TRACE(tool_format_name(f));
        auto gbnf = tool_call_gbnf(r, f);
        ASSERT_TRUE(gbnf.ok()) << gbnf.error().message;
        auto g = grammar::Grammar::parse(*gbnf);
        ASSERT_TRUE(g.ok()) << g.error().message << "\n" << *gbnf;
        const std::string args_key = f == ToolFormat::Llama3 ? "parameters" : "arguments";
        const std::string call =
            "{\"name\": \"get_weather\", \"" + args_key + "\": {\"city\":\"Oslo\",\"unit\":\"c\"}}";
        const std::string call2 = "{\"name\": \"get_time\", \"" + args_key + "\": {}}";
        std::string text, two;
        switch (f) {
            case ToolFormat::Hermes:
                text = "<tool_call>\n" + call + "\n</tool_call>";
                two = text + "\n<tool_call>\n" + call2 + "\n</tool_call>";
                break;
            case ToolFormat::Llama3:
                text = call;
                break;
            case ToolFormat::Mistral:
                text = "[" + call + "]";
                two = "[" + call + ", " + call2 + "]";
                break;
        }
        EXPECT_TRUE(grammar::accepts(*g, text)) << text;
        if (!two.empty()) {
            EXPECT_TRUE(grammar::accepts(*g, two)) << two;
        }
        // arguments outside the schema, an unknown function, a missing argument
        std::string bad_unit = text, unknown = text, missing = text;
        bad_unit.replace(bad_unit.find("\"c\""), 3, "\"k\"");
        unknown.replace(unknown.find("get_weather"), 11, "get_wetter");
        missing.replace(missing.find(",\"unit\":\"c\""), 11, "");
        EXPECT_FALSE(grammar::accepts(*g, bad_unit));
        EXPECT_FALSE(grammar::accepts(*g, unknown));
        EXPECT_FALSE(grammar::accepts(*g, missing));

        const ParsedToolOutput p = parse_tool_calls(two.empty() ? text : two, f);
        ASSERT_EQ(p.calls.size(), two.empty() ? 1u : 2u);
        EXPECT_EQ(p.calls[0].name, "get_weather");
        EXPECT_EQ(p.calls[0].arguments["city"], "Oslo");
        EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
        EXPECT_TRUE(p.content.empty());
    }
    // A named choice allows that function only.
    ojson named = weather_tools();
    named["tool_choice"] =
        ojson::parse(R"({"type": "function", "function": {"name": "get_time"}})");
    auto named_gbnf = tool_call_gbnf(parse_ok(named), ToolFormat::Hermes);
    ASSERT_TRUE(named_gbnf.ok());
    auto g = grammar::Grammar::parse(*named_gbnf);
    ASSERT_TRUE(g.ok());
    EXPECT_TRUE(grammar::accepts(
        *g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    EXPECT_FALSE(grammar::accepts(
        *g,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"a\",\"unit\":\"c\"}}"
        "\n</tool_call>"));
}

TEST(ToolCalls, ParsesOutputsAroundText) {
    ParsedToolOutput p = parse_tool_calls(
        "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}\n"
        "</tool_call>",
        ToolFormat::Hermes);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].arguments["x"], 1);  // arguments given as a JSON string
    EXPECT_EQ(p.content, "Let me check.");
    p = parse_tool_calls("no calls here", ToolFormat::Hermes);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, "no calls here");
    p = parse_tool_calls("<tool_call>\n{not json}\n</tool_call>", ToolFormat::Hermes);
    EXPECT_TRUE(p.calls.empty());  // a broken call stays text
    p = parse_tool_calls("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", ToolFormat::Mistral);
    EXPECT_EQ(p.calls.size(), 1u);
    p = parse_tool_calls("{\"name\": \"f\", \"parameters\": {\"a\": true}}", ToolFormat::Llama3);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].arguments["a"], true);
    p = parse_tool_calls("{\"answer\": 42}", ToolFormat::Llama3);
    EXPECT_TRUE(p.calls.empty());
}

// max_tokens can cut a reply inside a further call after complete ones (the grammar allows
// several): the cut call's markup must not reach the content.
TEST(ToolCalls, ACallCutOffAfterCompleteOnesLeavesNoMarkupInTheContent) {
    const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    for (const std::string cut : {"\n<tool_call", "\n<tool_", "\n<", "\n<tool_call>\n{\"na"}) {
        const ParsedToolOutput p = parse_tool_calls(call + cut, ToolFormat::Hermes);
        ASSERT_EQ(p.calls.size(), 1u) << cut;
        EXPECT_EQ(p.content, "") << cut;
    }
    // Text before the calls stays; a "<" that is not the tag's start stays too.
    ParsedToolOutput p = parse_tool_calls("See:\n" + call + "\n<tool_", ToolFormat::Hermes);
    EXPECT_EQ(p.content, "See:");
    p = parse_tool_calls(call + " a < b", ToolFormat::Hermes);
    EXPECT_EQ(p.content, "a < b");
    // Without a complete call, what the model wrote is the content, as before.
    p = parse_tool_calls("<tool_call>\n{\"na", ToolFormat::Hermes);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, "<tool_call>\n{\"na");
}

TEST(ToolCalls, StreamingHoldsBackAPossibleTrigger) {
    EXPECT_EQ(streamable_content("Hello there", ToolFormat::Hermes), 11u);
    EXPECT_EQ(streamable_content("Hello <tool", ToolFormat::Hermes), 6u);
    EXPECT_EQ(streamable_content("Hi <tool_call>\n{", ToolFormat::Hermes), 3u);
    EXPECT_EQ(streamable_content("<", ToolFormat::Hermes), 0u);
    EXPECT_EQ(streamable_content("{\"na", ToolFormat::Llama3), 0u);
    EXPECT_EQ(streamable_content("Sure, {x}", ToolFormat::Llama3), 9u);
}

TEST(ToolCalls, TemplateFormatDetection) {
    EXPECT_EQ(tool_template_of("{% if tools %}<tool_call>{% endif %}").format, ToolFormat::Hermes);
    EXPECT_EQ(tool_template_of("{{ tools }}[TOOL_CALLS]{{ m.tool_calls }}").format,
              ToolFormat::Mistral);
    EXPECT_EQ(tool_template_of("{{ tools }} <|python_tag|>").format, ToolFormat::Llama3);
    const ToolTemplate plain =
        tool_template_of("{% for m in messages %}{{ m.content }}{% endfor %}");
    EXPECT_FALSE(plain.renders_tools);
    EXPECT_EQ(plain.format, ToolFormat::Hermes);
}

TEST(ToolCalls, LowersMessagesForTemplatesWithoutTools) {
    std::vector<tokenizer::ChatMessage> msgs(3);
    msgs[0] = {"user", "weather?"};
    msgs[1] = {"assistant", std::nullopt};
    tokenizer::ToolCall c;
    c.id = "call_1";
    c.name = "get_weather";
    c.arguments = "{\"city\": \"Oslo\"}";
    msgs[1].tool_calls.push_back(c);
    msgs[2] = {"tool", "12 C"};
    msgs[2].tool_call_id = "call_1";
    lower_tool_messages(msgs);
    EXPECT_TRUE(msgs[1].tool_calls.empty());
    EXPECT_EQ(
        *msgs[1].content,
        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>");
    EXPECT_EQ(msgs[2].role, "user");
    EXPECT_EQ(*msgs[2].content, "<tool_response>\n12 C\n</tool_response>");
}

TEST(StructuredOutputFields, EveryDialectAndConflicts) {
    auto kind_of = [](const char* body) {
        std::string err, param;
        auto c = parse_constraint(ojson::parse(body), err, param);
        EXPECT_TRUE(err.empty()) << body << ": " << err;
        return c ? static_cast<int>(c->constraint.kind) : -1;
    };
    using K = engine::Constraint::Kind;
    EXPECT_EQ(kind_of(R"({"response_format": {"type": "json_object"}})"), int(K::JsonObject));
    EXPECT_EQ(kind_of(R"({"response_format": {"type": "text"}})"), -1);
    EXPECT_EQ(kind_of(R"({"response_format": {"type": "json_schema", "json_schema":
                {"name": "x", "schema": {"type": "object"}, "strict": true}}})"),
              int(K::JsonSchema));
    EXPECT_EQ(kind_of(R"({"guided_json": "{\"type\": \"integer\"}"})"), int(K::JsonSchema));
    EXPECT_EQ(kind_of(R"({"guided_regex": "[0-9]+"})"), int(K::Regex));
    EXPECT_EQ(kind_of(R"({"guided_choice": ["a", "b"]})"), int(K::Choice));
    EXPECT_EQ(kind_of(R"({"guided_grammar": "root ::= \"a\""})"), int(K::Grammar));
    EXPECT_EQ(kind_of(R"({"structured_outputs": {"regex": "a+"}})"), int(K::Regex));
    EXPECT_EQ(kind_of(R"({"grammar": "root ::= \"a\""})"), int(K::Grammar));
    EXPECT_EQ(kind_of(R"({"json_schema": {"type": "string"}})"), int(K::JsonSchema));

    auto error_of = [](const char* body) {
        std::string err, param;
        auto c = parse_constraint(ojson::parse(body), err, param);
        EXPECT_FALSE(c.has_value()) << body;
        return err;
    };
    EXPECT_NE(error_of(R"({"guided_regex": "a", "grammar": "root ::= \"a\""})").find("both"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"response_format": {"type": "yaml"}})").find("yaml"), std::string::npos);
    EXPECT_NE(error_of(R"({"guided_json": "{oops"})").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of(R"({"guided_choice": []})").find("non-empty"), std::string::npos);
    EXPECT_NE(error_of(R"({"structured_outputs": {"lark": "x"}})").find("lark"), std::string::npos);
}

}  // namespace
}  // namespace ferry::server
