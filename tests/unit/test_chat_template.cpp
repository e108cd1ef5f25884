// ChatTemplate against real Jinja2: tests/golden/chat_template.json is written by
// scripts/gen-golden-chat.py, which renders real models' templates (tests/golden/templates/)
// over several conversations with Python's jinja2 exactly as transformers' apply_chat_template
// does, and records the error where the template raises one.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ferry::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

ojson load_golden() {
    std::ifstream in(ferry::testing::golden_dir() + "/chat_template.json");
    if (!in.good()) return {};
    return ojson::parse(in);  // ordered: dict order reaches the templates as Python's does
}

// The moment the golden file's strftime_now was fixed to.
std::tm golden_now(const ojson& golden) {
    std::tm t{};
    const std::string iso = golden.at("now");
    std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour,
                &t.tm_min, &t.tm_sec);
    t.tm_year -= 1900;
    t.tm_mon -= 1;
    std::mktime(&t);
    return t;
}

ChatTemplate smollm2_like() {
    const std::string src =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
        "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    return ChatTemplate::from_source(src, "", "").value();
}

TEST(ChatTemplate, MatchesJinjaGolden) {
    const ojson golden = load_golden();
    ASSERT_TRUE(golden.is_object()) << "missing tests/golden/chat_template.json "
                                       "(scripts/gen-golden-chat.py writes it)";
    const std::string dir = ferry::testing::golden_dir() + "/templates/";
    std::map<std::string, ChatTemplate> templates;
    for (const auto& [name, t] : golden.at("templates").items()) {
        const std::string src = read_text(dir + t.at("file").get<std::string>());
        ASSERT_FALSE(src.empty()) << name;
        auto tmpl = ChatTemplate::from_source(src, t.at("bos"), t.at("eos"));
        ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.error().message;
        tmpl->fix_time(golden_now(golden));
        templates.emplace(name, std::move(*tmpl));
    }
    std::map<std::string, int> per_template;
    size_t rendered = 0, raised = 0;
    for (const auto& c : golden.at("cases")) {
        const std::string name = c.at("template"),
                          label = name + " / " + c.at("label").get<std::string>();
        std::vector<ChatMessage> messages;
        for (const auto& m : c.at("messages")) {
            auto msg = ChatMessage::from_json(m);
            ASSERT_TRUE(msg.ok()) << label << ": " << msg.error().message;
            messages.push_back(std::move(*msg));
        }
        auto out = templates.at(name).apply(messages, c.at("add_generation_prompt").get<bool>(),
                                            c.value("tools", ojson()), c.value("extra", ojson()));
        if (c.contains("expected")) {
            ASSERT_TRUE(out.ok()) << label << ": " << out.error().message;
            EXPECT_EQ(*out, c.at("expected").get<std::string>()) << label;
            ++rendered;
        } else {
            // jinja2 raised; ferry must fail too, with jinja2's message (raise_exception's text,
            // or the undefined/type error), after "chat template line N: ".
            ASSERT_FALSE(out.ok()) << label << " rendered, but jinja2 raised " << c.at("error");
            const std::string& msg = out.error().message;
            EXPECT_EQ(msg.rfind("chat template line ", 0), 0u) << label << ": " << msg;
            EXPECT_TRUE(msg.ends_with(": " + c.at("error").get<std::string>()))
                << label << ": " << msg << " vs " << c.at("error");
            ++raised;
        }
        ++per_template[name];
    }
    EXPECT_GE(templates.size(), 12u);
    for (const auto& [name, n] : per_template) EXPECT_GE(n, 6) << name;
    EXPECT_GE(rendered, 200u);
    EXPECT_GE(raised, 10u);
}

TEST(ChatTemplate, SmolLM2FromTheModelFile) {
    auto f = gguf::File::open(ferry::testing::default_model_path());
    if (!f.ok()) GTEST_SKIP() << f.error().message;
    auto src = (*f)->get_string("tokenizer.chat_template");
    ASSERT_TRUE(src.has_value());
    auto tmpl = ChatTemplate::from_source(*src, "<|im_start|>", "<|im_end|>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    EXPECT_EQ(tmpl->apply({{"user", "Hi"}}).value(),
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
              "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(tmpl->apply({{"system", "S"}, {"user", "U"}}, false).value(),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
}

TEST(ChatTemplate, BadTemplatesAreRefusedWithTheLine) {
    auto empty = ChatTemplate::from_source("", "", "");
    ASSERT_FALSE(empty.ok());
    EXPECT_NE(empty.error().message.find("no chat template"), std::string::npos);
    auto unknown = ChatTemplate::from_source(
        "{% for m in messages %}\n{{ m.content | frobnicate }}\n{% endfor %}", "", "");
    ASSERT_FALSE(unknown.ok());
    EXPECT_EQ(unknown.error().message, "chat template line 2: unknown filter 'frobnicate'");
    // jinja2's own filters that ferry lacks load (a branch may never run them) and fail, by
    // name, on the conversation that does.
    auto lacking = ChatTemplate::from_source(
        "{% for m in messages %}\n{{ m.content | wordwrap }}\n{% endfor %}", "", "");
    ASSERT_TRUE(lacking.ok()) << lacking.error().message;
    auto applied = lacking->apply({{"user", "U"}}, true);
    ASSERT_FALSE(applied.ok());
    EXPECT_NE(applied.error().message.find("jinja2's filter 'wordwrap' is not supported"),
              std::string::npos)
        << applied.error().message;
    auto unclosed = ChatTemplate::from_source("{% if messages %}x", "", "");
    ASSERT_FALSE(unclosed.ok());
    EXPECT_EQ(
        unclosed.error().message,
        "chat template line 1: unexpected end of template: the '{% if %}' block from line 1 is "
        "not closed");
}

TEST(ChatTemplate, RaiseExceptionBecomesTheError) {
    auto t = ChatTemplate::from_source(
        "{% for m in messages %}\n{% if m.role == 'system' %}\n{{ raise_exception('System role not "
        "supported') }}\n{% endif %}{{ m.content }}{% endfor %}",
        "", "");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->apply({{"user", "fine"}}).value(), "fine");
    auto r = t->apply({{"system", "S"}, {"user", "U"}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "chat template line 3: System role not supported");
}

TEST(ChatTemplate, MessagesReachTheTemplateInOpenAIShape) {
    auto t = ChatTemplate::from_source(
        "{{ messages | tojson }}|{{ tools | tojson }}|{{ documents }}", "", "");
    ASSERT_TRUE(t.ok());
    const auto msg = ChatMessage::from_json(ojson::parse(R"({"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]})"));
    ASSERT_TRUE(msg.ok()) << msg.error().message;
    ChatMessage tool{"tool", "42"};
    tool.tool_call_id = "c1";
    tool.name = "f";
    const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    // A null content is no key at all (transformers drops None values); arguments stay as given.
    EXPECT_EQ(
        t->apply({msg.value(), tool}, false, tools).value(),
        R"([{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": )"
        R"({"name": "f", "arguments": "{\"x\": 1}"}}]}, {"role": "tool", "content": "42", )"
        R"("tool_call_id": "c1", "name": "f"}]|[{"type": "function", "function": {"name": "f"}}]|None)");
    // Without tools the template sees None, as transformers passes it.
    EXPECT_EQ(t->apply({{"user", "u"}}, false).value(),
              R"([{"role": "user", "content": "u"}]|null|None)");
}

TEST(ChatTemplate, ExtraVariablesAndSpecialTokens) {
    auto t = ChatTemplate::from_source(
        "{{ bos_token }}{% if enable_thinking is defined and not enable_thinking %}/no_think{% "
        "endif %}"
        "{{ add_generation_prompt }}{{ eos_token }}",
        "<s>", "</s>");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->apply({}, true).value(), "<s>True</s>");
    EXPECT_EQ(t->apply({}, false, nullptr, {{"enable_thinking", false}}).value(),
              "<s>/no_thinkFalse</s>");
    // The caller's variables override the special tokens, as in transformers.
    EXPECT_EQ(t->apply({}, false, nullptr, {{"bos_token", "[B]"}}).value(), "[B]False</s>");
    EXPECT_FALSE(t->apply({}, true, nullptr, {{"messages", 1}}).ok());
    EXPECT_FALSE(t->apply({}, true, nullptr, ojson::array()).ok());
    EXPECT_FALSE(t->apply({}, true, ojson::object()).ok());
}

TEST(ChatTemplate, FixedTimeForStrftimeNow) {
    auto t = ChatTemplate::from_source("{{ strftime_now('%d %b %Y') }}", "", "");
    ASSERT_TRUE(t.ok());
    std::tm when{};
    when.tm_year = 124;
    when.tm_mon = 1;
    when.tm_mday = 29;
    std::mktime(&when);
    t->fix_time(when);
    EXPECT_EQ(t->apply({}).value(), "29 Feb 2024");
}

TEST(ChatTemplate, FromFile) {
    const std::string path = ::testing::TempDir() + "/ferry_chat_template_test.jinja";
    {
        std::ofstream out(path);
        out << "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}\n";
    }
    auto t = ChatTemplate::from_file(path, "", "");
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->apply({{"user", "a"}, {"assistant", "b"}}).value(), "[user] a\n[assistant] b\n");
    std::remove(path.c_str());
    auto missing = ChatTemplate::from_file(path, "", "");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find(path), std::string::npos);
}

TEST(ChatTemplate, MessageJsonIsValidated) {
    EXPECT_FALSE(ChatMessage::from_json(ojson::parse(R"({"content": "x"})")).ok());
    EXPECT_FALSE(ChatMessage::from_json(ojson::parse(R"({"role": 3})")).ok());
    EXPECT_FALSE(ChatMessage::from_json(ojson::parse(R"({"role": "user", "content": 5})")).ok());
    EXPECT_FALSE(
        ChatMessage::from_json(ojson::parse(R"({"role": "assistant", "tool_calls": {}})")).ok());
    EXPECT_FALSE(ChatMessage::from_json(
                     ojson::parse(R"({"role": "assistant", "tool_calls": [{"id": "x"}]})"))
                     .ok());
    auto ok = ChatMessage::from_json(ojson::parse(
        R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1]}}}]})"));
    ASSERT_TRUE(ok.ok());
    ASSERT_EQ(ok->tool_calls.size(), 1u);
    EXPECT_EQ(ok->tool_calls[0].type, "function");
    EXPECT_EQ(ok->tool_calls[0].arguments.dump(), R"({"a":[1]})");
    EXPECT_FALSE(ok->content.has_value());
}

TEST(ChatTemplate, HostileConversationsFailCleanly) {
    ChatTemplate t = smollm2_like();
    // Tools nested past what the interpreter walks are refused, not a stack overflow.
    ojson deep = 1;
    for (int i = 0; i < 3000; ++i) deep = ojson::array({deep});
    auto r = t.apply({{"user", "x"}}, true, ojson::array({deep}));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("nested"), std::string::npos);
    // A long conversation is just long.
    std::vector<ChatMessage> many(5000, ChatMessage{"user", std::string(100, 'a')});
    auto big = t.apply(many);
    ASSERT_TRUE(big.ok()) << big.error().message;
    EXPECT_GT(big->size(), 5000u * 100u);
}

}  // namespace
}  // namespace ferry::tokenizer
