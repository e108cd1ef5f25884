// SentencePiece BPE as llama.cpp runs a GGUF whose tokenizer.ggml.model is "llama" (Llama 2,
// Mistral, TinyLlama, Gemma): special tokens are cut out of the raw text first; each text
// fragment that starts the input or follows a special token gets a space prepended when the
// model asks for it (add_space_prefix); spaces become U+2581; the text starts as one symbol
// per character and the adjacent pair whose joined text is the highest-scoring token merges
// first; a character no token covers falls back to its <0xNN> byte tokens.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {

// What the tokenizer needs from tokenizer.ggml.*, as plain values so tests can build a
// vocabulary without a GGUF file. Defaults are llama.cpp's for an SPM vocabulary.
struct SpmVocab {
    std::vector<std::string> tokens;  // "▁the", "<0x0A>", "<start_of_turn>"
    std::vector<float> scores;        // empty means all 0
    std::vector<TokenAttr> attrs;     // empty means all Normal
    std::vector<uint8_t> strip;       // kLstrip / kRstrip by id (special_split.h); empty: none
    Token bos = 1, eos = 2, unk = 0, eot = -1, eom = -1;
    bool add_bos = true, add_eos = false;
    bool add_space_prefix = true;
};

// tokenizer.ggml.* of a GGUF whose tokenizer.ggml.model is "llama".
Expected<SpmVocab> read_spm_vocab(const gguf::File& file);

class SpmTokenizer final : public Tokenizer {
  public:
    static Expected<std::unique_ptr<SpmTokenizer>> create(SpmVocab vocab);

    std::vector<Token> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const override;
    std::string token_to_piece(Token id, bool render_special = false) const override;
    // As llama_detokenize: at the start, the first token loses one leading space.
    std::string decode(std::span<const Token> ids, bool render_special = false,
                       bool at_start = true) const override;

    int32_t n_vocab() const override { return static_cast<int32_t>(tokens_.size()); }
    Token bos() const override { return bos_; }
    Token eos() const override { return eos_; }
    bool is_eog(Token id) const override;
    bool add_bos() const override { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    const std::string& token_text(Token id) const override;
    TokenAttr token_attr(Token id) const override;
    Token find_token(std::string_view text) const override;

  private:
    SpmTokenizer() = default;
    void encode_fragment(std::string_view escaped, std::vector<Token>& out) const;
    void push_bytes(std::string_view bytes, std::vector<Token>& out) const;

    std::vector<std::string> tokens_;
    std::vector<float> scores_;
    std::vector<TokenAttr> attrs_;
    std::vector<uint8_t> strip_;
    std::vector<std::string> pieces_;  // what each token decodes to, special ones rendered
    std::unordered_map<std::string_view, Token> text_to_id_;  // views into tokens_
    std::array<Token, 256> byte_token_{};
    std::vector<Token> specials_;  // longest text first
    std::vector<bool> eog_;
    Token bos_ = -1, eos_ = -1, unk_ = -1;
    bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
};

}  // namespace ferry::tokenizer
