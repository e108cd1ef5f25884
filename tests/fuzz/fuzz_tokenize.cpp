// The tokenizers on arbitrary bytes: encode (pre-tokenizer regexes, normalizers, special-token
// splitting, byte fallback) and the streaming decoder on arbitrary ids. Byte 0 picks the
// tokenizer, byte 1 the flags, the rest is the text; its bytes read two at a time are also the
// ids streamed. Two properties are checked, not just the absence of crashes: a byte-level BPE
// gives back exactly the valid UTF-8 it encoded, and the stream decoder's pieces are valid
// UTF-8 that add up to decode() whenever decode finds nothing invalid (tokenizer/tokenizer.h
// promises both, and says why a run that turns invalid may differ).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/paths.h"
#include "fuzz_target.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using ferry::tokenizer::StreamDecoder;
using ferry::tokenizer::Token;
using ferry::tokenizer::Tokenizer;

struct Loaded {
    std::unique_ptr<Tokenizer> tok;
    bool byte_level;  // lossless on valid UTF-8, except for bytes its vocabulary lacks
    // The bytes with no token (SmolLM2 has none for 0x04 and 0x06, the golden files' cut
    // vocabularies lack more): dropped, as Hugging Face's BPE drops what it cannot encode
    // without an unk token, so a text holding one is not expected back.
    std::string lost;
};

// The bytes a byte-level BPE has no token for (its byte alphabet's character is not in the
// vocabulary).
std::string unencodable_bytes(const Tokenizer& tok) {
    std::string lost;
    for (int b = 0; b < 256; ++b)
        if (tok.find_token(ferry::tokenizer::bytes_to_unicode(std::string(1, char(b)))) < 0)
            lost += char(b);
    return lost;
}

std::vector<Loaded> load_all() {
    std::vector<Loaded> out;
    // The real models' GGUF tokenizers when they are fetched (make model gemma-model).
    for (const char* name : {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
        const auto path = std::filesystem::path(ferry::default_model_path()).parent_path() / name;
        if (!std::filesystem::exists(path)) continue;
        auto f = ferry::gguf::File::open(path.string());
        if (!f.ok()) continue;
        auto t = Tokenizer::from_gguf(**f);
        if (t.ok()) out.push_back({std::move(*t), name[0] == 'S', {}});
    }
    const std::string g = ferry::fuzz::source_dir() + "/tests/golden/";
    for (const auto& [dir, byte_level] : {std::pair{"tokenizers/smollm2-bytelevel", true},
                                          {"tokenizers/gemma3-metaspace", false},
                                          {"tokenizers/gemma3-replace", false},
                                          {"hf_models/qwen2", true},
                                          {"hf_models/llama", false}}) {
        const std::string d = g + dir;
        const std::string config = d + "/tokenizer_config.json";
        auto t = Tokenizer::from_tokenizer_json(d + "/tokenizer.json",
                                                std::filesystem::exists(config) ? config : "");
        if (t.ok()) out.push_back({std::move(*t), byte_level, {}});
    }
    for (auto& L : out)
        if (L.byte_level) L.lost = unencodable_bytes(*L.tok);
    if (out.empty()) {
        std::fprintf(stderr, "fuzz_tokenize: no tokenizer could be loaded from %s\n", g.c_str());
        std::abort();
    }
    return out;
}

bool valid_utf8(const std::string& s) {
    return ferry::tokenizer::utf8_valid_prefix(s) == s.size();
}

}  // namespace

FERRY_FUZZ_TARGET(tokenize)(const uint8_t* data, size_t size) {
    static const std::vector<Loaded> toks = load_all();
    if (size < 2) return 0;
    const Loaded& L = toks[data[0] % toks.size()];
    const Tokenizer& tok = *L.tok;
    const bool add_special = data[1] & 1, parse_special = data[1] & 2, at_start = data[1] & 4;
    const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);

    const std::vector<Token> ids = tok.encode(text, add_special, parse_special);
    for (Token id : ids)
        if (id < 0 || id >= tok.n_vocab()) std::abort();  // encode made an id outside the vocab
    const std::string back = tok.decode(ids, false, true);
    if (L.byte_level && !add_special && !parse_special && valid_utf8(text) &&
        text.find_first_of(L.lost) == std::string::npos && back != text) {
        std::fprintf(stderr, "byte-level round trip lost the text (%zu -> %zu bytes)\n",
                     text.size(), back.size());
        std::abort();
    }

    std::vector<Token> stream;
    for (size_t i = 2; i + 1 < size; i += 2)
        stream.push_back(static_cast<Token>((data[i] | data[i + 1] << 8) % tok.n_vocab()));
    StreamDecoder dec(tok, at_start);
    std::string streamed;
    for (Token id : stream) streamed += dec.push(id);
    streamed += dec.flush();
    const std::string whole = tok.decode(stream, false, at_start);
    if (!valid_utf8(streamed)) {
        std::fprintf(stderr, "stream decode gave invalid UTF-8 (%zu bytes)\n", streamed.size());
        std::abort();
    }
    static const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD
    if (valid_utf8(whole) && whole.find(replacement) == std::string::npos && streamed != whole) {
        std::fprintf(stderr, "stream decode differs from decode (%zu vs %zu bytes)\n",
                     streamed.size(), whole.size());
        std::abort();
    }
    return 0;
}
