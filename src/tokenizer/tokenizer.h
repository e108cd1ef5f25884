// The tokenizer interface and where tokenizers come from: a GGUF file's tokenizer.ggml.*
// metadata (byte-level BPE, SentencePiece BPE) or a Hugging Face tokenizer.json.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_file.h"

namespace ferry::tokenizer {

using Token = int32_t;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
enum class TokenAttr : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

class Tokenizer {
  public:
    // Fails clearly for a tokenizer model or pre-tokenizer ferry does not implement.
    static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
    // A Hugging Face tokenizer.json, given as a path or as the JSON text itself (text starting
    // with '{'); tokenizer_config.json (path or text, may be empty) names BOS/EOS and may
    // override whether they are added. Fails naming any component ferry does not implement.
    // also_eog: ids that end a generation too (generation_config.json's eos_token_id list);
    // an id outside the vocabulary is an error.
    static Expected<std::unique_ptr<Tokenizer>> from_tokenizer_json(
        std::string_view tokenizer_json, std::string_view tokenizer_config_json = {},
        std::span<const Token> also_eog = {});
    virtual ~Tokenizer() = default;

    // add_special: prepend BOS / append EOS as the model's add_bos/add_eos flags say.
    // parse_special: text like "<|im_start|>" becomes its control token instead of bytes.
    virtual std::vector<Token> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = true) const = 0;
    // The bytes a token stands for (byte-level decoding undone); control tokens give their
    // text only when render_special is set.
    virtual std::string token_to_piece(Token id, bool render_special = false) const = 0;
    // The text of `ids`, as the model's reference library decodes them. at_start: the ids begin
    // a text, so start-of-text rules apply (SentencePiece drops the space it prepended when
    // encoding); otherwise they continue one, as a generated reply continues its prompt.
    // The default concatenates token_to_piece.
    virtual std::string decode(std::span<const Token> ids, bool render_special = false,
                               bool at_start = true) const;

    virtual int32_t n_vocab() const = 0;
    virtual Token bos() const = 0;  // -1 when absent
    virtual Token eos() const = 0;
    virtual bool is_eog(Token id) const = 0;  // ends a generation (eos, eot, <|im_end|>, ...)
    virtual bool add_bos() const = 0;
    virtual const std::string& token_text(Token id) const = 0;  // as stored in the vocab
    virtual TokenAttr token_attr(Token id) const = 0;
    virtual Token find_token(std::string_view text) const = 0;  // -1 when absent
};

// Turns a stream of token ids into text that is only ever cut at UTF-8 character
// boundaries, so a terminal never prints half a character. Everything pushed, then flushed,
// gives decode(ids, false, at_start) whenever decode finds nothing invalid. It decodes a short
// window of recent ids with the tokenizer's own decode, so decoders that look at neighbouring
// tokens (byte fallback, a stripped first space) stream exactly as they decode. The one
// difference is kept on purpose: a byte-fallback run that turns invalid after a valid prefix
// was sent (<0x34> streams "4" at once; a later <0xCF> makes Hugging Face's decode give every
// byte of the run as U+FFFD) keeps what was sent, as vLLM's incremental detokenizer does,
// rather than holding every byte run back until a token ends it. at_start false (the
// default): the ids continue a prompt.
class StreamDecoder {
  public:
    explicit StreamDecoder(const Tokenizer& tok, bool at_start = false)
        : tok_(tok), at_start_(at_start) {}
    std::string push(Token id);  // the newly completed text, possibly empty
    std::string flush();         // whatever is left (invalid bytes become U+FFFD)

  private:
    std::string text(size_t from, size_t to) const;  // decode(ids_[from, to))
    std::string advance(bool at_end);

    const Tokenizer& tok_;
    bool at_start_;
    std::vector<Token> ids_;  // the window: [prefix_, read_) is context already emitted
    size_t prefix_ = 0, read_ = 0;
    bool trimmed_ = false;  // ids_ no longer begins at the stream's first id
};

}  // namespace ferry::tokenizer
