// Byte-level BPE (GPT-2 family) as llama.cpp implements it: special tokens are cut out of
// the raw text first, the pre-tokenizer splits the rest, and each piece's bytes are merged
// pairwise by merge rank.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {

// What the tokenizer needs from tokenizer.ggml.*, as plain values so tests can build a
// tiny vocabulary without a GGUF file.
struct BpeVocab {
    std::vector<std::string> tokens;  // byte-level text, e.g. "Ġthe"
    std::vector<TokenAttr> attrs;     // empty means all Normal
    std::vector<uint8_t> strip;       // kLstrip / kRstrip by id (special_split.h); empty: none
    std::vector<std::string> merges;  // "Ġ t", in rank order
    std::string pre = "default";
    Token bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
    std::optional<bool> add_bos, add_eos;  // unset: the pre-tokenizer's default
};

class BpeTokenizer final : public Tokenizer {
  public:
    static Expected<std::unique_ptr<BpeTokenizer>> create(BpeVocab vocab);

    std::vector<Token> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const override;
    std::string token_to_piece(Token id, bool render_special = false) const override;

    int32_t n_vocab() const override { return static_cast<int32_t>(tokens_.size()); }
    Token bos() const override { return bos_; }
    Token eos() const override { return eos_; }
    bool is_eog(Token id) const override;
    bool add_bos() const override { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    const std::string& token_text(Token id) const override;
    TokenAttr token_attr(Token id) const override;
    Token find_token(std::string_view text) const override;
    const PreTokenizer& pre_tokenizer() const { return *pre_; }

  private:
    BpeTokenizer() = default;
    void encode_piece(std::string_view raw, std::vector<Token>& out) const;

    struct Merge {
        int32_t rank;
        Token result;
    };

    std::vector<std::string> tokens_;
    std::vector<TokenAttr> attrs_;
    std::vector<uint8_t> strip_;
    std::vector<std::string> pieces_;  // decoded bytes per token, so decode is a copy
    std::unordered_map<std::string_view, Token> text_to_id_;  // views into tokens_
    std::unordered_map<uint64_t, Merge> merges_;              // key: left id << 32 | right id
    std::array<Token, 256> byte_token_{};
    std::vector<Token> specials_;  // longest text first, as llama.cpp matches them
    std::vector<bool> eog_;
    std::shared_ptr<const PreTokenizer> pre_;
    Token bos_ = -1, eos_ = -1;
    bool add_bos_ = false, add_eos_ = false;
};

}  // namespace ferry::tokenizer
