// Every kind of tokenizer ferry reads, against the reference library's ids and text for the
// same ~125 strings (tests/golden/tokenizers/, written by scripts/gen-golden-tokenizers.py):
// SentencePiece BPE from a GGUF against llama.cpp, three tokenizer.json files against Hugging
// Face tokenizers. Each case checks encode with and without BOS/EOS and special parsing,
// decode with and without special tokens, and that streaming the ids one at a time gives the
// decoded text in pieces that are never a broken UTF-8 sequence.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "test_util.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

using json = nlohmann::json;

std::string dir(const std::string& kind) {
    return ferry::testing::golden_dir() + "/tokenizers/" + kind;
}

json read(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "golden file missing: " << path;
    return in.good() ? json::parse(in) : json();
}

std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

std::string case_text(const json& c) {
    return c.contains("bytes") ? from_hex(c["bytes"]) : c["text"].get<std::string>();
}

// The decoded text a case records under `key` (as hex when it is not UTF-8).
std::string want_text(const json& c, const std::string& key) {
    return c.contains(key + "_hex") ? from_hex(c[key + "_hex"]) : c.at(key).get<std::string>();
}

// Compares one tokenizer with one golden file; returns how many cases matched in full.
int check_golden(const Tokenizer& tok, const json& golden) {
    const auto& cases = golden.at("cases");
    EXPECT_GE(cases.size(), 80u);
    int matched = 0;
    for (const auto& c : cases) {
        const std::string text = case_text(c);
        const auto ids = c.at("ids").get<std::vector<Token>>();
        const auto ids_bos = c.at("ids_bos").get<std::vector<Token>>();
        bool ok = true;
        auto expect = [&](bool cond) { ok = ok && cond; };
        auto got = tok.encode(text, false, true);
        EXPECT_EQ(got, ids) << "encode: " << c.dump();
        expect(got == ids);
        got = tok.encode(text, true, true);
        EXPECT_EQ(got, ids_bos) << "encode, add_special: " << c.dump();
        expect(got == ids_bos);
        got = tok.encode(text, false, false);
        EXPECT_EQ(got, c.at("ids_raw").get<std::vector<Token>>())
            << "encode, no special parsing: " << c.dump();
        expect(got == c.at("ids_raw").get<std::vector<Token>>());
        for (const auto& [key, seq] :
             {std::pair{"decode_ids", &ids}, {"decode_ids_bos", &ids_bos}}) {
            std::string plain = tok.decode(*seq, false), special = tok.decode(*seq, true);
            EXPECT_EQ(plain, want_text(c, key)) << key << ": " << c.dump();
            EXPECT_EQ(special, want_text(c, std::string(key) + "_special"))
                << key << "_special: " << c.dump();
            expect(plain == want_text(c, key) &&
                   special == want_text(c, std::string(key) + "_special"));

            // Streaming from the start of the text gives the same text, in whole characters.
            StreamDecoder stream(tok, /*at_start=*/true);
            std::string streamed;
            for (Token id : *seq) {
                std::string piece = stream.push(id), check;
                EXPECT_EQ(utf8_sanitize(piece, true, check), piece.size());
                EXPECT_EQ(check, piece) << "a broken UTF-8 sequence streamed: " << c.dump();
                streamed += piece;
            }
            streamed += stream.flush();
            std::string valid;
            utf8_sanitize(plain, true, valid);
            EXPECT_EQ(streamed, valid) << "stream vs decode: " << c.dump();
            expect(streamed == valid);
        }
        matched += ok;
    }
    return matched;
}

// The trimmed Gemma 3 vocabulary: the kept tokens at their ids, the rest empty placeholders.
SpmVocab trimmed_gemma(bool add_space_prefix) {
    json v = read(dir("gemma3-spm") + "/vocab.json");
    SpmVocab s;
    const auto n = v.at("n_vocab").get<size_t>();
    s.tokens.assign(n, "");
    s.scores.assign(n, 0.0f);
    s.attrs.assign(n, TokenAttr::Unused);
    for (const auto& t : v.at("tokens")) {
        auto id = t[0].get<size_t>();
        s.tokens[id] = t[1].get<std::string>();
        s.scores[id] = t[2].get<float>();
        s.attrs[id] = static_cast<TokenAttr>(t[3].get<int>());
    }
    s.bos = v.at("bos");
    s.eos = v.at("eos");
    s.unk = v.at("unk");
    s.add_bos = v.at("add_bos");
    s.add_eos = v.at("add_eos");
    s.add_space_prefix = add_space_prefix;
    return s;
}

std::unique_ptr<Tokenizer> spm(SpmVocab v) {
    auto t = SpmTokenizer::create(std::move(v));
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    return t.ok() ? std::unique_ptr<Tokenizer>(std::move(t.value())) : nullptr;
}

TEST(TokenizerGolden, SentencePieceGgufMatchesLlamaCpp) {
    json golden = read(dir("gemma3-spm") + "/golden.json");
    EXPECT_FALSE(trimmed_gemma(false).add_space_prefix);
    auto tok = spm(trimmed_gemma(false));
    ASSERT_TRUE(tok);
    int n = check_golden(*tok, golden);
    EXPECT_EQ(n, static_cast<int>(golden["cases"].size()));
    std::cout << "gemma3-spm: " << n << "/" << golden["cases"].size() << " cases match\n";
}

TEST(TokenizerGolden, SentencePieceSpacePrefixMatchesLlamaCpp) {
    json golden = read(dir("gemma3-spm") + "/golden-prefix.json");
    auto tok = spm(trimmed_gemma(true));
    ASSERT_TRUE(tok);
    int n = check_golden(*tok, golden);
    EXPECT_EQ(n, static_cast<int>(golden["cases"].size()));
    std::cout << "gemma3-spm-prefix: " << n << "/" << golden["cases"].size() << " cases match\n";
}

// The whole vocabulary read through Tokenizer::from_gguf, when Gemma 3 is cached
// (scripts/get-model.sh gemma3-270m; `make model` fetches it).
std::string gemma_path() {
    if (const char* p = std::getenv("FERRY_GEMMA3")) return p;
    std::filesystem::path def = ferry::testing::default_model_path();
    return (def.parent_path() / "gemma-3-270m-q4_k_m.gguf").string();
}

TEST(TokenizerGolden, FullGemma3GgufMatchesLlamaCpp) {
    auto f = gguf::File::open(gemma_path());
    if (!f.ok())
        GTEST_SKIP() << "Gemma 3 GGUF not found at " << gemma_path()
                     << " (scripts/get-model.sh gemma3-270m fetches it)";
    auto tok = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    EXPECT_EQ((*tok)->n_vocab(), 262144);
    EXPECT_EQ((*tok)->bos(), 2);
    EXPECT_TRUE((*tok)->add_bos());
    EXPECT_TRUE((*tok)->is_eog((*tok)->find_token("<end_of_turn>")));
    json golden = read(dir("gemma3-spm") + "/golden.json");
    EXPECT_EQ(check_golden(**tok, golden), static_cast<int>(golden["cases"].size()));

    auto v = read_spm_vocab(**f);
    ASSERT_TRUE(v.ok());
    v->add_space_prefix = true;
    auto prefixed = spm(std::move(v.value()));
    json golden_prefix = read(dir("gemma3-spm") + "/golden-prefix.json");
    EXPECT_EQ(check_golden(*prefixed, golden_prefix),
              static_cast<int>(golden_prefix["cases"].size()));
}

// The default model's byte-level BPE, read from its GGUF, against llama.cpp on the same strings.
TEST(TokenizerGolden, DefaultModelGgufMatchesLlamaCpp) {
    const std::string path = ferry::testing::default_model_path();
    auto f = gguf::File::open(path);
    if (!f.ok()) GTEST_SKIP() << "default model not found at " << path << " (make model)";
    auto tok = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    json golden = read(dir("smollm2-gguf") + "/golden.json");
    EXPECT_EQ(check_golden(**tok, golden), static_cast<int>(golden["cases"].size()));
}

void check_tokenizer_json(const std::string& kind) {
    auto tok = Tokenizer::from_tokenizer_json(dir(kind) + "/tokenizer.json",
                                              dir(kind) + "/tokenizer_config.json");
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    json golden = read(dir(kind) + "/golden.json");
    int n = check_golden(**tok, golden);
    EXPECT_EQ(n, static_cast<int>(golden["cases"].size()));
    std::cout << kind << ": " << n << "/" << golden["cases"].size() << " cases match\n";
}

TEST(TokenizerGolden, ByteLevelTokenizerJsonMatchesHfTokenizers) {
    check_tokenizer_json("smollm2-bytelevel");
}

TEST(TokenizerGolden, MetaspaceTokenizerJsonMatchesHfTokenizers) {
    check_tokenizer_json("gemma3-metaspace");
}

TEST(TokenizerGolden, ReplaceNormalizerTokenizerJsonMatchesHfTokenizers) {
    check_tokenizer_json("gemma3-replace");
}

// Qwen2/2.5/3's pipeline: NFC, then its Split regex, then byte-level.
TEST(TokenizerGolden, NfcAndQwen2SplitTokenizerJsonMatchesHfTokenizers) {
    check_tokenizer_json("smollm2-nfc-qwen2");
}

TEST(TokenizerGolden, NfkcTokenizerJsonMatchesHfTokenizers) {
    check_tokenizer_json("smollm2-nfkc");
}

}  // namespace
}  // namespace ferry::tokenizer
