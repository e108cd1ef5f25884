// Fill-in-the-middle prompts against Hugging Face's `tokenizers` (tests/golden/fim, written by
// scripts/gen-golden-fim.py), and a model without the tokens refused by name.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/fim.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

TEST(Fim, PromptsEqualTokenizersOnTheSameText) {
    const std::string dir = testing::golden_dir() + "/fim";
    auto tok =
        Tokenizer::from_tokenizer_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    const FimTokens f = find_fim_tokens(**tok);
    ASSERT_TRUE(f.found());
    EXPECT_EQ((*tok)->token_text(f.prefix), "<|fim_prefix|>");
    EXPECT_EQ((*tok)->token_text(f.middle), "<|fim_middle|>");
    std::ifstream in(dir + "/golden.json");
    const auto golden = nlohmann::json::parse(in);
    ASSERT_GE(golden["cases"].size(), 4u);
    for (const auto& c : golden["cases"]) {
        const auto prefix = c["prefix"].get<std::string>();
        SCOPED_TRACE(prefix);
        auto ids = fim_prompt(**tok, (*tok)->encode(prefix, false), c["suffix"].get<std::string>());
        ASSERT_TRUE(ids.ok()) << ids.error().message;
        EXPECT_EQ(*ids, c["ids"].get<std::vector<Token>>());
    }
}

TEST(Fim, AModelWithoutTheTokensIsRefusedByName) {
    const auto& tok = *testing::default_model().tokenizer;  // SmolLM2: no FIM tokens
    EXPECT_FALSE(find_fim_tokens(tok).found());
    auto ids = fim_prompt(tok, tok.encode("def f(", false), "):\n");
    ASSERT_FALSE(ids.ok());
    EXPECT_NE(ids.error().message.find("fill-in-the-middle"), std::string::npos);
}

}  // namespace
}  // namespace ferry::tokenizer
