#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <initializer_list>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

// The patterns are llama.cpp's (llama-vocab.cpp). GPT-2's ends in `\s+` because llama.cpp's
// hand-written GPT-2 splitter falls back to it; with a regex engine it must be spelled out.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kDigits = R"(\p{N})";
// llama.cpp's "default" (also what a file without tokenizer.ggml.pre gets) is not GPT-2's: runs
// of punctuation, then GPT-2's split, then digit runs, then three-digit groups.
constexpr const char* kDefaultPunct = R"([\p{P}\$\+<=>\^~\|]+)";
constexpr const char* kDigitRuns = R"(\p{N}+)";
constexpr const char* kThreeDigits = R"([0-9][0-9][0-9])";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Flavour {
    std::initializer_list<std::string_view> names;
    std::initializer_list<const char*> patterns;
    bool ignore_merges;
    bool add_bos;
};

const std::array<Flavour, 5> kFlavours = {{
    {{"default"}, {kDefaultPunct, kGpt2, kDigitRuns, kThreeDigits}, false, false},
    {{"gpt2", "gpt-2", "phi-2"}, {kGpt2}, false, false},
    {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"},
     {kDigits, kGpt2},
     false,
     false},
    {{"llama3", "llama-v3", "llama-bpe"}, {kLlama3}, true, true},
    {{"qwen2"}, {kQwen2}, false, false},
}};

// PCRE2 refuses invalid UTF-8, so invalid bytes are cut out first as one-byte pieces that
// BPE then gives their byte tokens. The length of the piece starting at s[i]:
size_t next_piece(std::string_view s, size_t i) {
    size_t n = utf8_valid_prefix(s.substr(i));
    return n > 0 ? n : 1;
}

void split_one(const pcre2_code* code, pcre2_match_data* md, std::string_view piece,
               std::vector<std::string_view>& out) {
    auto subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t pos = 0, emitted = 0;
    while (pos < piece.size()) {
        int rc = pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t b = ov[0], e = ov[1];
        if (b > emitted) out.push_back(piece.substr(emitted, b - emitted));
        if (e == b) {  // an empty match: step over one character to make progress
            pos = b + 1;
            while (pos < piece.size() && (static_cast<uint8_t>(piece[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        out.push_back(piece.substr(b, e - b));
        emitted = pos = e;
    }
    if (emitted < piece.size()) out.push_back(piece.substr(emitted));
}

}  // namespace

Expected<std::shared_ptr<const PreTokenizer>> PreTokenizer::create(std::string_view name) {
    const Flavour* found = nullptr;
    for (const auto& f : kFlavours)
        for (auto n : f.names)
            if (n == name) found = &f;
    if (!found) return make_error("unsupported pre-tokenizer '{}' (tokenizer.ggml.pre)", name);

    std::shared_ptr<PreTokenizer> p(new PreTokenizer());
    p->name_ = std::string(name);
    p->ignore_merges_ = found->ignore_merges;
    p->default_add_bos_ = found->add_bos;
    for (const char* given : found->patterns) {
        const std::string pattern = white_space_classes(given);
        int err = 0;
        PCRE2_SIZE err_off = 0;
        pcre2_code* code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return make_error("pre-tokenizer '{}': regex does not compile at {}: {}", name, err_off,
                              reinterpret_cast<const char*>(msg));
        }
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: interpreter otherwise
        p->codes_.push_back(code);
    }
    return std::shared_ptr<const PreTokenizer>(std::move(p));
}

PreTokenizer::~PreTokenizer() {
    for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    for (size_t i = 0, n = 0; i < text.size(); i += n) {
        n = next_piece(text, i);
        pieces.push_back(text.substr(i, n));
    }
    std::vector<std::string_view> next;
    for (void* c : codes_) {
        auto* code = static_cast<const pcre2_code*>(c);
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
        next.clear();
        for (auto piece : pieces) {
            if (utf8_valid_prefix(piece) != piece.size()) {
                next.push_back(piece);
                continue;
            }
            split_one(code, md, piece, next);
        }
        pcre2_match_data_free(md);
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace ferry::tokenizer
