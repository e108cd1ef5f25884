// Byte-level BPE tokenizer built from a GGUF file's tokenizer.ggml.* metadata.
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
    virtual ~Tokenizer() = default;

    // add_special: prepend BOS / append EOS as the model's add_bos/add_eos flags say.
    // parse_special: text like "<|im_start|>" becomes its control token instead of bytes.
    virtual std::vector<Token> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = true) const = 0;
    // The bytes a token stands for (byte-level decoding undone); control tokens give their
    // text only when render_special is set.
    virtual std::string token_to_piece(Token id, bool render_special = false) const = 0;
    std::string decode(std::span<const Token> ids, bool render_special = false) const;

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
// boundaries, so a terminal never prints half a character.
class StreamDecoder {
  public:
    explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
    std::string push(Token id);  // the newly completed text, possibly empty
    std::string flush();         // whatever is left (invalid bytes become U+FFFD)

  private:
    const Tokenizer& tok_;
    std::string pending_;
};

}  // namespace ferry::tokenizer
