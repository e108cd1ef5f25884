// Byte-level BPE: a tiny hand-made vocabulary pins the algorithm down without a model file;
// the SmolLM2 GGUF checks real ids against llama.cpp's (tests/golden/tokenizer.json).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

// All 256 byte tokens first (id == byte value), then merge results, then two specials.
BpeVocab tiny_vocab() {
    BpeVocab v;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(bytes_to_unicode(std::string(1, char(b))));
    v.merges = {"l l", "h e", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor ld", "l d"};
    for (const auto& m : v.merges) {
        std::string joined = m;
        joined.erase(joined.find(' '), 1);
        v.tokens.push_back(joined);
    }
    v.attrs.assign(v.tokens.size(), TokenAttr::Normal);
    v.tokens.push_back("<|im_start|>");
    v.attrs.push_back(TokenAttr::Control);
    v.tokens.push_back("<|im_end|>");
    v.attrs.push_back(TokenAttr::Control);
    v.tokens.push_back("<|im");  // a shorter special that must lose to the longer ones
    v.attrs.push_back(TokenAttr::Control);
    v.eos = static_cast<Token>(v.tokens.size()) - 2;
    v.pre = "smollm";
    return v;
}

std::unique_ptr<BpeTokenizer> tiny() {
    auto t = BpeTokenizer::create(tiny_vocab());
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    return std::move(t.value());
}

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
    std::vector<std::string> out;
    for (auto s : p.split(text)) out.emplace_back(s);
    return out;
}

TEST(PreTokenizer, SmolLMSplitsDigitsOneByOne) {
    auto p = PreTokenizer::create("smollm");
    ASSERT_TRUE(p.ok());
    using V = std::vector<std::string>;
    EXPECT_EQ(split(**p, "abc 123 x"), (V{"abc", " ", "1", "2", "3", " x"}));
    EXPECT_EQ(split(**p, "Hello, world!  How's it\n\n going"),
              (V{"Hello", ",", " world", "!", " ", " How", "'s", " it", "\n\n", " going"}));
    // The lookahead in \s+(?!\S) stops at the end of a piece, as in llama.cpp.
    EXPECT_EQ(split(**p, "a  1"), (V{"a", "  ", "1"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThree) {
    auto p = PreTokenizer::create("llama-bpe");
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE((*p)->ignore_merges());
    using V = std::vector<std::string>;
    EXPECT_EQ(split(**p, "12345 I'M ok\n\n"), (V{"123", "45", " I", "'M", " ok", "\n\n"}));
}

// llama.cpp's "default" (what a GGUF without tokenizer.ggml.pre gets) is not GPT-2's split:
// punctuation runs first, then GPT-2's, then digit runs, then groups of three digits. Checked
// against llama.cpp's own tokens on a GGUF patched to "default" (8 of 8 strings identical).
TEST(PreTokenizer, LlamaCppsDefaultIsNotGpt2s) {
    auto d = PreTokenizer::create("default");
    auto g = PreTokenizer::create("gpt-2");
    ASSERT_TRUE(d.ok() && g.ok());
    using V = std::vector<std::string>;
    EXPECT_EQ(split(**g, "x 1234567, y!"), (V{"x", " 1234567", ",", " y", "!"}));
    EXPECT_EQ(split(**d, "x 1234567, y!"), (V{"x", " ", "123", "456", "7", ",", " y", "!"}));
    EXPECT_EQ(split(**d, "$3.50"), (V{"$", "3", ".", "50"}));
}

TEST(PreTokenizer, InvalidUtf8BytesBecomeTheirOwnPieces) {
    auto p = PreTokenizer::create("gpt2");
    ASSERT_TRUE(p.ok());
    using V = std::vector<std::string>;
    EXPECT_EQ(split(**p,
                    "ab\xFF"
                    "cd"),
              (V{"ab", "\xFF", "cd"}));
}

TEST(PreTokenizer, UnknownNameIsAnErrorNamingIt) {
    auto p = PreTokenizer::create("klingon-v2");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().message.find("klingon-v2"), std::string::npos);
    BpeVocab v = tiny_vocab();
    v.pre = "klingon-v2";
    auto t = BpeTokenizer::create(v);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find("klingon-v2"), std::string::npos);
}

TEST(BpeTiny, MergesByRank) {
    auto t = tiny();
    Token hello = t->find_token("hello"), world = t->find_token("Ġworld");
    ASSERT_GE(hello, 256);
    ASSERT_GE(world, 256);
    EXPECT_EQ(t->encode("hello world", false), (std::vector<Token>{hello, world}));
    // No merge joins "Ġw" and "o", so " wold" stops at "Ġw" + "o" + "ld".
    EXPECT_EQ(t->encode(" wold", false),
              (std::vector<Token>{t->find_token("Ġw"), 'o', t->find_token("ld")}));
    // Unmerged bytes stay byte tokens (id == byte here).
    EXPECT_EQ(t->encode("zq", false), (std::vector<Token>{'z', 'q'}));
}

TEST(BpeTiny, SpecialTokensLongestFirstOnlyWhenParsing) {
    auto t = tiny();
    Token start = t->find_token("<|im_start|>"), end = t->find_token("<|im_end|>");
    auto ids = t->encode("<|im_start|>hello<|im_end|>", false, true);
    EXPECT_EQ(ids, (std::vector<Token>{start, t->find_token("hello"), end}));
    auto raw = t->encode("<|im_start|>", false, false);
    EXPECT_GT(raw.size(), 1u);
    EXPECT_EQ(t->decode(raw), "<|im_start|>");
}

TEST(BpeTiny, ControlTokensRenderOnlyWhenAsked) {
    auto t = tiny();
    Token start = t->find_token("<|im_start|>");
    EXPECT_EQ(t->token_to_piece(start), "");
    EXPECT_EQ(t->token_to_piece(start, true), "<|im_start|>");
    EXPECT_EQ(t->token_to_piece(t->find_token("Ġworld")), " world");
    EXPECT_TRUE(t->is_eog(t->eos()));
    EXPECT_TRUE(t->is_eog(t->find_token("<|im_end|>")));
    EXPECT_FALSE(t->is_eog(start));
    EXPECT_FALSE(t->add_bos());
}

TEST(BpeTiny, RoundTripsArbitraryBytes) {
    auto t = tiny();
    std::string all;
    for (int b = 0; b < 256; ++b) all += char(b);
    for (std::string s :
         {std::string("héllo wörld 你好 🙂"), all, std::string("\xC3\x28 \xE2\x82")})
        EXPECT_EQ(t->decode(t->encode(s, false, false)), s);
}

TEST(StreamDecoder, HoldsSplitCharactersUntilComplete) {
    auto t = tiny();  // ids 0..255 are the single bytes
    StreamDecoder d(*t);
    EXPECT_EQ(d.push('a'), "a");
    EXPECT_EQ(d.push(0xF0), "");  // 🙂 = F0 9F 99 82
    EXPECT_EQ(d.push(0x9F), "");
    EXPECT_EQ(d.push(0x99), "");
    EXPECT_EQ(d.push(0x82), "\xF0\x9F\x99\x82");
    EXPECT_EQ(d.push(0xC3), "");
    EXPECT_EQ(d.push(0xA9), "\xC3\xA9");
    EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, InvalidSequencesBecomeReplacementCharacters) {
    auto t = tiny();
    StreamDecoder d(*t);
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(d.push(0xFF), fffd);       // can never start a character
    EXPECT_EQ(d.push(0xC3), "");         // could still complete...
    EXPECT_EQ(d.push('x'), fffd + "x");  // ...but did not
    EXPECT_EQ(d.push(0xE2), "");
    EXPECT_EQ(d.push(0x82), "");
    EXPECT_EQ(d.flush(), fffd);  // an unfinished tail at the end
    EXPECT_EQ(d.push(0xED), "");
    EXPECT_EQ(d.push(0xA0), fffd + fffd);  // a surrogate: never valid
    EXPECT_EQ(d.push(t->find_token("<|im_end|>")), "");
}

// A minimal GGUF v3 image holding only string / string-array metadata.
class GgufBuilder {
  public:
    GgufBuilder& str(const std::string& key, const std::string& value) {
        kv(key, 8);
        string(value);
        ++n_kv_;
        return *this;
    }
    GgufBuilder& strs(const std::string& key, const std::vector<std::string>& values) {
        kv(key, 9);
        u32(8);
        u64(values.size());
        for (const auto& v : values) string(v);
        ++n_kv_;
        return *this;
    }
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> out = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
        for (int i = 0; i < 8; ++i) out.push_back(0);  // no tensors
        for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(n_kv_) >> (8 * i)));
        out.insert(out.end(), body_.begin(), body_.end());
        while (out.size() % 32) out.push_back(0);
        return out;
    }

  private:
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) body_.push_back(uint8_t(v >> (8 * i)));
    }
    void u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) body_.push_back(uint8_t(v >> (8 * i)));
    }
    void string(const std::string& s) {
        u64(s.size());
        body_.insert(body_.end(), s.begin(), s.end());
    }
    void kv(const std::string& key, uint32_t type) {
        string(key);
        u32(type);
    }
    std::vector<uint8_t> body_;
    size_t n_kv_ = 0;
};

std::string from_gguf_error(const GgufBuilder& b) {
    auto bytes = b.bytes();
    auto f = gguf::File::parse(bytes);
    if (!f.ok()) return "parse failed: " + f.error().message;
    auto t = Tokenizer::from_gguf(**f);
    return t.ok() ? "" : t.error().message;
}

TEST(TokenizerFromGguf, RefusesUnsupportedModelsByName) {
    // 'llama' (SentencePiece) is read now; without its vocabulary it says what is missing.
    std::string spm = from_gguf_error(GgufBuilder().str("tokenizer.ggml.model", "llama"));
    EXPECT_NE(spm.find("tokenizer.ggml.tokens"), std::string::npos) << spm;
    std::string other = from_gguf_error(GgufBuilder().str("tokenizer.ggml.model", "t5"));
    EXPECT_NE(other.find("'t5'"), std::string::npos) << other;
    std::string pre = from_gguf_error(GgufBuilder()
                                          .str("tokenizer.ggml.model", "gpt2")
                                          .str("tokenizer.ggml.pre", "klingon-v2")
                                          .strs("tokenizer.ggml.tokens", {"a", "b", "ab"})
                                          .strs("tokenizer.ggml.merges", {"a b"}));
    EXPECT_NE(pre.find("klingon-v2"), std::string::npos) << pre;
    std::string ok = from_gguf_error(GgufBuilder()
                                         .str("tokenizer.ggml.model", "gpt2")
                                         .strs("tokenizer.ggml.tokens", {"a", "b", "ab"})
                                         .strs("tokenizer.ggml.merges", {"a b"}));
    EXPECT_EQ(ok, "");
}

// ---- the real SmolLM2 vocabulary ----

const Tokenizer* smollm() {
    static std::shared_ptr<gguf::File> file;
    static std::unique_ptr<Tokenizer> tok;
    static bool tried = false;
    if (!tried) {
        tried = true;
        auto f = gguf::File::open(ferry::testing::default_model_path());
        if (!f.ok()) return nullptr;
        file = f.value();
        auto t = Tokenizer::from_gguf(*file);
        EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
        if (t.ok()) tok = std::move(t.value());
    }
    return tok.get();
}

#define REQUIRE_MODEL()                                                                    \
    const Tokenizer* tok = smollm();                                                       \
    if (!tok) GTEST_SKIP() << "model not found: " << ferry::testing::default_model_path(); \
    static_assert(true)

TEST(SmolLM2Tokenizer, VocabularyAndSpecialTokens) {
    REQUIRE_MODEL();
    EXPECT_EQ(tok->n_vocab(), 49152);
    EXPECT_EQ(tok->bos(), 1);
    EXPECT_EQ(tok->eos(), 2);
    EXPECT_FALSE(tok->add_bos());
    EXPECT_EQ(tok->find_token("<|im_start|>"), 1);
    EXPECT_EQ(tok->token_text(2), "<|im_end|>");
    EXPECT_EQ(tok->token_attr(1), TokenAttr::Control);
    EXPECT_TRUE(tok->is_eog(2));
    EXPECT_TRUE(tok->is_eog(0));  // <|endoftext|>
    EXPECT_FALSE(tok->is_eog(1));
    auto ids = tok->encode("<|im_start|>user", false, true);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(tok->token_text(ids[1]), "user");
    EXPECT_EQ(tok->encode("hi", true).size(), tok->encode("hi", false).size());  // no BOS
}

TEST(SmolLM2Tokenizer, RoundTripsVariedText) {
    REQUIRE_MODEL();
    const std::vector<std::string> texts = {
        "Hello, world! How's it going?",
        "int main() {\n    return 0;\n}\n",
        "你好，世界。今日は良い天気ですね。",
        "emoji: 🙂👍🏽🇫🇷 and ZWJ 👨‍👩‍👧",
        "    four spaces\n\n\n\ttab   trailing   ",
        "3.14159 12345678901234567890 1,000,000",
        "Ünïcödé àçcénts — “quotes” ‘single’ …",
        "",
        " ",
        "\n",
    };
    for (const auto& s : texts) {
        auto ids = tok->encode(s, false, false);
        EXPECT_EQ(tok->decode(ids), s) << s;
    }
    // Digits are split one by one by the smollm pre-tokenizer.
    EXPECT_EQ(tok->encode("2024", false).size(), 4u);
}

TEST(SmolLM2Tokenizer, EncodeIsFast) {
    REQUIRE_MODEL();
    std::string text;
    for (int i = 0; i < 40; ++i)
        text += "The quick brown fox jumps over the lazy dog 1234 times; naïve café 你好. ";
    auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (int rep = 0; rep < 10; ++rep) n += tok->encode(text, false).size();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double ms_per_100 = ms / (n / 100.0);
    // ~0.06 ms per 100 tokens in Release; sanitizer and -O0 builds get ten times the room.
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
    const double limit = 2.5;
#else
    const double limit = 0.25;
#endif
    EXPECT_LT(ms_per_100, limit) << n << " tokens in " << ms << " ms";
}

TEST(SmolLM2Tokenizer, StreamDecoderMatchesDecode) {
    REQUIRE_MODEL();
    std::string s = "Streaming 你好 🙂👍🏽 café";
    auto ids = tok->encode(s, false);
    StreamDecoder d(*tok);
    std::string out;
    for (Token id : ids) {
        std::string piece = d.push(id);
        std::string check;
        EXPECT_EQ(utf8_sanitize(piece, true, check), piece.size());
        EXPECT_EQ(check, piece) << "emitted a partial character";
        out += piece;
    }
    out += d.flush();
    EXPECT_EQ(out, s);
}

// Golden ids from llama-cpp-python (add_special=False, parse_special=True). A missing file
// is a failure: this is the check that ferry's ids equal llama.cpp's.
TEST(SmolLM2Tokenizer, MatchesLlamaCppGoldenIds) {
    const std::string path = ferry::testing::golden_dir() + "/tokenizer.json";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "golden file missing: " << path;
    REQUIRE_MODEL();
    auto golden = nlohmann::json::parse(in);
    // scripts/gen_golden.py writes {"cases": [...], <provenance>}; a bare list also works.
    const auto& cases = golden.is_object() ? golden.at("cases") : golden;
    ASSERT_TRUE(cases.is_array());
    ASSERT_FALSE(cases.empty());
    for (const auto& c : cases) {
        const std::string text = c.at("text").get<std::string>();
        const auto want = c.at("ids").get<std::vector<Token>>();
        EXPECT_EQ(tok->encode(text, false, true), want) << "text: " << text;
    }
}

}  // namespace
}  // namespace ferry::tokenizer
