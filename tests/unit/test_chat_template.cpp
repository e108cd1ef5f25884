// ChatTemplate against real Jinja2: tests/golden/chat_template.json is written by
// scripts/gen-golden-chat.py, which renders each template (SmolLM2's read from the model
// file, Llama-2/3 and Gemma copied from Hugging Face) with jinja2 as transformers does.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ferry::tokenizer {
namespace {

nlohmann::json load_golden() {
    std::ifstream in(ferry::testing::golden_dir() + "/chat_template.json");
    if (!in.good()) return {};
    return nlohmann::json::parse(in);
}

TEST(ChatTemplate, MatchesJinjaGolden) {
    auto golden = load_golden();
    ASSERT_TRUE(golden.is_object()) << "missing tests/golden/chat_template.json "
                                       "(scripts/gen-golden-chat.py writes it)";
    size_t checked = 0;
    for (const auto& c : golden.at("cases")) {
        const auto& t = golden.at("templates").at(c.at("template").get<std::string>());
        auto tmpl = ChatTemplate::from_source(t.at("source"), t.at("bos"), t.at("eos"));
        ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
        EXPECT_EQ(tmpl->family_name(), t.at("family").get<std::string>());
        std::vector<ChatMessage> messages;
        for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
        EXPECT_EQ(tmpl->apply(messages, c.at("add_generation_prompt").get<bool>()),
                  c.at("expected").get<std::string>())
            << c.at("template") << " / " << c.at("label");
        ++checked;
    }
    EXPECT_GE(checked, 20u);
}

TEST(ChatTemplate, SmolLM2DefaultSystemPromptFromTheModel) {
    auto f = gguf::File::open(ferry::testing::default_model_path());
    if (!f.ok()) GTEST_SKIP() << f.error().message;
    auto src = (*f)->get_string("tokenizer.chat_template");
    ASSERT_TRUE(src.has_value());
    auto tmpl = ChatTemplate::from_source(*src, "<|im_start|>", "<|im_end|>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    EXPECT_EQ(tmpl->family(), ChatTemplate::Family::ChatML);
    EXPECT_EQ(tmpl->apply({{"user", "Hi"}}),
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
              "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(tmpl->apply({{"system", "S"}, {"user", "U"}}, false),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
}

TEST(ChatTemplate, PlainChatMLHasNoDefaultSystem) {
    const std::string src =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
        "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    auto tmpl = ChatTemplate::from_source(src, "", "");
    ASSERT_TRUE(tmpl.ok());
    EXPECT_EQ(tmpl->apply({{"user", "Hi"}}),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, EmptyOrUnknownTemplatesAreRefused) {
    auto empty = ChatTemplate::from_source("", "", "");
    ASSERT_FALSE(empty.ok());
    EXPECT_NE(empty.error().message.find("unsupported chat template"), std::string::npos);
    auto odd = ChatTemplate::from_source("{{ messages[0]['content'] }} ### Response:", "", "");
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.error().message.find("unsupported chat template"), std::string::npos);
    EXPECT_NE(odd.error().message.find("### Response"), std::string::npos);
}

}  // namespace
}  // namespace ferry::tokenizer
