// SentencePiece BPE and tokenizer.json tokenizers on tiny hand-made vocabularies: each rule
// pinned down on its own (byte fallback, merge ties, space prefixes, prepend schemes, split
// behaviours, decoders), and the errors for components ferry does not implement.
#include <algorithm>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

using json = nlohmann::json;
using Ids = std::vector<Token>;
const std::string kSp = "\xE2\x96\x81";  // U+2581

// ---- SentencePiece ----

// ids: 0 <unk>, 1 <s>, 2 </s>, 3 <ctl>, 4 <ud>, 5..260 <0x00>..<0xFF>, then pieces.
SpmVocab spm_vocab() {
    SpmVocab v;
    auto add = [&](std::string t, float score, TokenAttr a) {
        v.tokens.push_back(std::move(t));
        v.scores.push_back(score);
        v.attrs.push_back(a);
    };
    add("<unk>", 0, TokenAttr::Unknown);
    add("<s>", 0, TokenAttr::Control);
    add("</s>", 0, TokenAttr::Control);
    add("<ctl>", 0, TokenAttr::Control);
    add("<ud>", 0, TokenAttr::UserDefined);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        add(name, 0, TokenAttr::Byte);
    }
    for (std::string c : {std::string("a"), std::string("b"), std::string("c"), std::string("h"),
                          std::string("i"), kSp})
        add(c, -10, TokenAttr::Normal);
    add("ab", -1, TokenAttr::Normal);  // "ab" and "bc" tie: the leftmost pair merges
    add("bc", -1, TokenAttr::Normal);
    add(kSp + "h", -2, TokenAttr::Normal);
    add(kSp + "hi", -3, TokenAttr::Normal);
    add("hi", -4, TokenAttr::Normal);
    return v;
}

std::unique_ptr<SpmTokenizer> spm(SpmVocab v) {
    auto t = SpmTokenizer::create(std::move(v));
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    return std::move(t.value());
}

TEST(SpmTiny, ScoresPickTheMergeAndTiesGoLeft) {
    auto t = spm(spm_vocab());
    t = spm([] {
        auto v = spm_vocab();
        v.add_space_prefix = false;
        return v;
    }());
    // "abc": ab and bc score the same; the leftmost merges, leaving c.
    EXPECT_EQ(t->encode("abc", false), (Ids{t->find_token("ab"), t->find_token("c")}));
    // Higher score first: ▁h (-2) merges before hi (-4), then ▁h + i -> ▁hi.
    EXPECT_EQ(t->encode(" hi", false), (Ids{t->find_token(kSp + "hi")}));
}

TEST(SpmTiny, UnknownCharactersFallBackToBytes) {
    auto t = spm(spm_vocab());
    // "é" is C3 A9, ids 5 + byte; the space prefix makes ▁ first.
    EXPECT_EQ(t->encode("\xC3\xA9", false), (Ids{t->find_token(kSp), 5 + 0xC3, 5 + 0xA9}));
    EXPECT_EQ(t->decode(t->encode("\xC3\xA9 abc", false)), "\xC3\xA9 abc");
    // Without byte tokens, an unknown character is <unk>.
    SpmVocab v = spm_vocab();
    for (int b = 0; b < 256; ++b)
        v.attrs[5 + b] = TokenAttr::Normal, v.tokens[5 + b] = std::to_string(b) + "x";
    auto no_bytes = spm(std::move(v));
    EXPECT_EQ(no_bytes->encode("\xC3\xA9", false), (Ids{no_bytes->find_token(kSp), 0, 0}));
}

TEST(SpmTiny, SpacePrefixAfterStartAndSpecialsAndBos) {
    auto t = spm(spm_vocab());
    Token sp = t->find_token(kSp), hi = t->find_token(kSp + "hi");
    EXPECT_EQ(t->encode("hi", true), (Ids{1, hi}));
    // Control tokens only with parse_special; the text after one gets its own prefix.
    EXPECT_EQ(t->encode("<ctl>hi", false, true), (Ids{3, hi}));
    EXPECT_NE(t->encode("<ctl>hi", false, false).front(), 3);
    // User-defined tokens are matched even without parse_special.
    EXPECT_EQ(t->encode("<ud>hi", false, false), (Ids{4, hi}));
    EXPECT_EQ(t->encode("a<ud>", false, false), (Ids{sp, t->find_token("a"), 4}));
    EXPECT_EQ(t->encode("", true), (Ids{1}));  // no text, no prefix
    // Decoding drops the prepended space at the start only, and not after a BOS.
    EXPECT_EQ(t->decode(Ids{hi}), "hi");
    EXPECT_EQ(t->decode(Ids{hi}, false, /*at_start=*/false), " hi");
    EXPECT_EQ(t->decode(Ids{1, hi}), " hi");
    EXPECT_EQ(t->decode(Ids{1, hi}, true), "<s> hi");
    EXPECT_TRUE(t->is_eog(2));
    EXPECT_TRUE(t->is_eog(t->find_token("</s>")));
}

TEST(SpmTiny, StreamingStartsOrContinues) {
    auto t = spm(spm_vocab());
    Ids ids = t->encode("hi hi", false);
    std::string from_start, continued;
    StreamDecoder a(*t, /*at_start=*/true), b(*t);
    for (Token id : ids) from_start += a.push(id), continued += b.push(id);
    from_start += a.flush();
    continued += b.flush();
    EXPECT_EQ(from_start, "hi hi");  // as decode(ids)
    EXPECT_EQ(continued, " hi hi");  // as a reply after a prompt: its first space stays
}

// ---- tokenizer.json ----

json tiny_json() {
    return json::parse(R"({
      "added_tokens": [
        {"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false},
        {"id": 1, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false},
        {"id": 2, "content": "</s>", "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false},
        {"id": 3, "content": "[X]", "special": false, "lstrip": true, "rstrip": true, "single_word": false, "normalized": false}
      ],
      "normalizer": null,
      "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
      "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
      "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
        "ignore_merges": false,
        "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "[X]": 3, "<0xC3>": 4, "<0xA9>": 5,
                  "▁": 6, "a": 7, "b": 8, "aa": 9, "▁a": 10, "▁aa": 11, "ab": 12},
        "merges": ["a a", ["▁", "a"], "▁a a", "a b"]}
    })");
}

std::unique_ptr<Tokenizer> hf(const json& j, const std::string& config = {}) {
    auto t = Tokenizer::from_tokenizer_json(j.dump(), config);
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    return t.ok() ? std::move(t.value()) : nullptr;
}

std::string hf_error(const json& j) {
    auto t = Tokenizer::from_tokenizer_json(j.dump());
    return t.ok() ? "" : t.error().message;
}

TEST(HfTiny, MergesByRankTiesLeftmostAndBytesFallBack) {
    auto t = hf(tiny_json());
    ASSERT_TRUE(t);
    // "▁aaa": ▁+a (rank 1) loses to a+a (rank 0) at the leftmost place: ▁ aa a -> no ▁ aa merge.
    EXPECT_EQ(t->encode("aaa", false), (Ids{6, 9, 7}));
    EXPECT_EQ(t->encode("ab", false), (Ids{10, 8}));  // ▁a (rank 1) before a b (rank 3)
    // é is not in the vocabulary: its bytes are; "z" is neither, so <unk>, fused with "q".
    EXPECT_EQ(t->encode("\xC3\xA9", false), (Ids{6, 4, 5}));
    EXPECT_EQ(t->encode("zq", false), (Ids{6, 0}));
    EXPECT_EQ(t->encode("ab", true), (Ids{1, 10, 8}));
    EXPECT_TRUE(t->add_bos());
    EXPECT_EQ(t->bos(), 1);
}

TEST(HfTiny, MetaspacePrependSchemes) {
    auto with = [](const char* scheme) {
        json j = tiny_json();
        j["pre_tokenizer"]["prepend_scheme"] = scheme;
        return hf(j);
    };
    // "first" prepends only where the input starts, not after an added token.
    EXPECT_EQ(with("first")->encode("</s>a", false), (Ids{2, 7}));
    EXPECT_EQ(with("always")->encode("</s>a", false), (Ids{2, 10}));
    EXPECT_EQ(with("never")->encode("a", false), (Ids{7}));
    EXPECT_EQ(with("first")->encode("a", false), (Ids{10}));
    // split: each ▁ starts a new piece, so "a a" cannot merge across it.
    json j = tiny_json();
    j["pre_tokenizer"]["split"] = true;
    EXPECT_EQ(hf(j)->encode("a a", false), (Ids{10, 10}));
}

TEST(HfTiny, AddedTokensStripAndParse) {
    auto t = hf(tiny_json());
    // lstrip / rstrip: the spaces around [X] go with it.
    EXPECT_EQ(t->encode("a [X] a", false), (Ids{10, 3, 7}));
    // Without special parsing, <s> is text (here: unknown characters, fused).
    EXPECT_EQ(t->encode("<s>", false, true), (Ids{1}));
    EXPECT_EQ(t->encode("<s>", false, false), (Ids{6, 0}));
}

// tokenizers decides single_word with Rust's regex: `$` is the end of the text, and \w holds
// combining marks but not '²' (a number that is no decimal digit). Checked with tokenizers
// 0.23.3 on tokens built the same way.
TEST(HfTiny, SingleWordTokensUseRustsWordCharacters) {
    json j = tiny_json();
    j["added_tokens"][3]["single_word"] = true;
    j["added_tokens"][3]["lstrip"] = false;
    j["added_tokens"][3]["rstrip"] = false;
    auto t = hf(j);
    ASSERT_TRUE(t);
    auto matched = [&](const std::string& text) {
        const Ids ids = t->encode(text, false);
        return std::find(ids.begin(), ids.end(), Token{3}) != ids.end();
    };
    EXPECT_TRUE(matched("a [X] b"));
    EXPECT_FALSE(matched("a[X]"));
    EXPECT_TRUE(matched("a\n[X]"));            // not a word before it: a newline ends "a\n"
    EXPECT_FALSE(matched("a\xCC\x81[X]"));     // U+0301, a combining mark, is a word character
    EXPECT_TRUE(matched("\xC2\xB2[X]"));       // '²' is not
    EXPECT_FALSE(matched("[X]\xE2\x80\x8D"));  // nor is the zero-width joiner after it: it is
}

// \s and \S are Unicode's White_Space, which U+180E has not been since Unicode 6.3 (PCRE2
// 10.42 still counts it), inside character classes and out.
TEST(TokenizerRegex, WhiteSpaceIsUnicodesWhiteSpace) {
    const std::string mvs = "\xE1\xA0\x8E", nbsp = "\xC2\xA0", ideographic = "\xE3\x80\x80";
    auto matches = [](const char* pattern, const std::string& text) {
        auto re = Regex::compile(pattern, false);
        EXPECT_TRUE(re.ok()) << pattern;
        return re.ok() && (*re)->search(text);
    };
    for (const char* p : {R"(^\s$)", R"(^[\s]$)", R"(^[^\S\r\n]$)"}) {
        EXPECT_FALSE(matches(p, mvs)) << p;
        EXPECT_TRUE(matches(p, nbsp)) << p;
        EXPECT_TRUE(matches(p, ideographic)) << p;
        EXPECT_TRUE(matches(p, "\t")) << p;
    }
    for (const char* p : {R"(^\S$)", R"(^[\S]$)", R"(^[^\s]$)"}) {
        EXPECT_TRUE(matches(p, mvs)) << p;
        EXPECT_FALSE(matches(p, nbsp)) << p;
    }
    // Escapes, a leading ']' and \Q...\E keep their meaning.
    EXPECT_TRUE(matches(R"(^\\s$)", "\\s"));
    EXPECT_TRUE(matches(R"(^[]\s]+$)", "] "));
    EXPECT_TRUE(matches(R"(^\Q\s\E$)", "\\s"));
}

TEST(HfTiny, DecodersRunInOrder) {
    auto t = hf(tiny_json());
    EXPECT_EQ(t->decode(Ids{1, 10, 8}), "ab");  // <s> skipped, then the Strip of " ab"
    EXPECT_EQ(t->decode(Ids{1, 10, 8}, true), "<s> ab");
    EXPECT_EQ(t->decode(Ids{10, 8}, false, /*at_start=*/false), " ab");
    EXPECT_EQ(t->decode(Ids{6, 4, 5}), "\xC3\xA9");
    // A byte run that is not UTF-8 is one U+FFFD per byte token (ByteFallback's rule)...
    EXPECT_EQ(t->decode(Ids{4, 7}),
              "\xEF\xBF\xBD"
              "a");
    // ...and streaming holds it back until it is complete.
    StreamDecoder s(*t, true);
    EXPECT_EQ(s.push(6), "");
    EXPECT_EQ(s.push(4), "");
    EXPECT_EQ(s.push(5), "\xC3\xA9");
    EXPECT_EQ(t->token_to_piece(4), "\xC3");  // one token's piece: the raw byte
}

TEST(HfTiny, ConfigOverridesTheTemplate) {
    auto t = hf(tiny_json(), R"({"bos_token": "<s>", "eos_token": {"content": "</s>"},
                                 "add_bos_token": false, "add_eos_token": true})");
    EXPECT_EQ(t->encode("a", true), (Ids{10, 2}));
    EXPECT_EQ(t->eos(), 2);
    EXPECT_TRUE(t->is_eog(2));
    EXPECT_FALSE(t->add_bos());
}

TEST(HfTiny, IgnoreMergesTakesWholeTokens) {
    json j = tiny_json();
    j["pre_tokenizer"] = nullptr;
    j["model"]["merges"] = json::array();
    EXPECT_EQ(hf(j)->encode("ab", false), (Ids{7, 8}));
    j["model"]["ignore_merges"] = true;
    EXPECT_EQ(hf(j)->encode("ab", false), (Ids{12}));
}

TEST(HfTiny, UnsupportedComponentsAreNamed) {
    json j = tiny_json();
    j["model"]["type"] = "WordPiece";
    EXPECT_NE(hf_error(j).find("model 'WordPiece' is not supported"), std::string::npos)
        << hf_error(j);
    j = tiny_json();
    j["model"]["type"] = "Unigram";
    EXPECT_NE(hf_error(j).find("'Unigram'"), std::string::npos);
    j = tiny_json();
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}};
    EXPECT_NE(hf_error(j).find("normalizer 'Lowercase' is not supported"), std::string::npos)
        << hf_error(j);
    j = tiny_json();
    j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
    EXPECT_NE(hf_error(j).find("pre_tokenizer 'BertPreTokenizer'"), std::string::npos);
    j = tiny_json();
    j["decoder"] = {{"type", "WordPiece"}};
    EXPECT_NE(hf_error(j).find("decoder 'WordPiece'"), std::string::npos);
    j = tiny_json();
    j["post_processor"] = {{"type", "Pirate"}};
    EXPECT_NE(hf_error(j).find("post_processor 'Pirate'"), std::string::npos);
    j = tiny_json();
    j["model"]["dropout"] = 0.1;
    EXPECT_NE(hf_error(j).find("dropout"), std::string::npos);
    // Ids size the id -> text table: one far past the entries is refused, not a 64 GB table
    // (a fuzz finding); a gap within reason loads.
    j = tiny_json();
    j["model"]["vocab"]["zz"] = 2000000000;
    EXPECT_NE(hf_error(j).find("vocab id 2000000000 is far past its 14 entries"), std::string::npos)
        << hf_error(j);
    j = tiny_json();
    j["added_tokens"].push_back({{"id", 1500000000}, {"content", "<big>"}});
    EXPECT_NE(hf_error(j).find("added token id 1500000000 is far past"), std::string::npos)
        << hf_error(j);
    // A field of another type than the format's is one clear error (a fuzz finding).
    j = tiny_json();
    j["pre_tokenizer"]["replacement"] = 7;
    EXPECT_NE(hf_error(j).find("a field has the wrong type"), std::string::npos) << hf_error(j);
    j = tiny_json();
    j["model"]["vocab"]["zz"] = 5000;
    j["added_tokens"].push_back({{"id", 9000}, {"content", "<far>"}});
    EXPECT_EQ(hf_error(j), "");
    EXPECT_NE(Tokenizer::from_tokenizer_json("/nonexistent/tokenizer.json")
                  .error()
                  .message.find("cannot open"),
              std::string::npos);
}

std::vector<std::string> pre_split(const json& j, const std::string& text) {
    auto p = HfPreTokenizer::from_json(j);
    EXPECT_TRUE(p.ok());
    std::vector<PrePiece> pieces{{text, true}};
    p->split(pieces);
    std::vector<std::string> out;
    for (auto& x : pieces) out.push_back(x.text);
    return out;
}

TEST(HfPreTokenizer, SplitBehaviours) {
    using V = std::vector<std::string>;
    auto split = [](const char* how, bool invert = false) {
        return json{{"type", "Split"},
                    {"pattern", {{"String", "-"}}},
                    {"behavior", how},
                    {"invert", invert}};
    };
    const std::string s = "a-b--c";
    EXPECT_EQ(pre_split(split("Removed"), s), (V{"a", "b", "c"}));
    EXPECT_EQ(pre_split(split("Isolated"), s), (V{"a", "-", "b", "-", "-", "c"}));
    EXPECT_EQ(pre_split(split("MergedWithPrevious"), s), (V{"a-", "b-", "-", "c"}));
    EXPECT_EQ(pre_split(split("MergedWithNext"), s), (V{"a", "-b", "-", "-c"}));
    EXPECT_EQ(pre_split(split("Contiguous"), s), (V{"a", "-", "b", "--", "c"}));
    EXPECT_EQ(pre_split(split("Removed", true), s), (V{"-", "-", "-"}));  // each match alone
    json digits = {{"type", "Digits"}, {"individual_digits", true}};
    EXPECT_EQ(pre_split(digits, "ab123"), (V{"ab", "1", "2", "3"}));
    digits["individual_digits"] = false;
    EXPECT_EQ(pre_split(digits, "ab123c"), (V{"ab", "123", "c"}));
    json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
    EXPECT_EQ(pre_split(bl, "hi  you"), (V{"\xC4\xA0hi", "\xC4\xA0", "\xC4\xA0you"}));
}

}  // namespace
}  // namespace ferry::tokenizer
