// A Hugging Face tokenizer.json with a BPE model, run the way the tokenizers library runs
// it: added tokens are cut out of the raw text (leftmost, longest; lstrip / rstrip /
// single_word as flagged), the rest is normalized, added tokens marked "normalized" are cut
// out of that, the pre-tokenizer splits what remains, the BPE model encodes each pre-token,
// and the post-processor's template adds BOS / EOS. Decoding runs the file's decoders.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/hf_bpe_model.h"
#include "tokenizer/hf_decoder.h"
#include "tokenizer/hf_normalizer.h"
#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {

class HfTokenizer final : public Tokenizer {
  public:
    // config: tokenizer_config.json, or null. Fails naming any component ferry lacks.
    static Expected<std::unique_ptr<HfTokenizer>> create(const nlohmann::json& tokenizer,
                                                         const nlohmann::json& config);

    // parse_special false is the library's encode_special_tokens: special added tokens are
    // left in the text; the other added tokens are still matched.
    std::vector<Token> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const override;
    std::string token_to_piece(Token id, bool render_special = false) const override;
    // render_special false is the library's skip_special_tokens.
    std::string decode(std::span<const Token> ids, bool render_special = false,
                       bool at_start = true) const override;

    int32_t n_vocab() const override { return static_cast<int32_t>(tokens_.size()); }
    Token bos() const override { return bos_; }
    Token eos() const override { return eos_; }
    bool is_eog(Token id) const override;
    // `id` ends a generation too (a model's generation_config lists more than tokenizer's EOS).
    Status end_generation_on(Token id);
    bool add_bos() const override;
    const std::string& token_text(Token id) const override;
    TokenAttr token_attr(Token id) const override;
    Token find_token(std::string_view text) const override;

  private:
    struct Added {
        Token id;
        std::string content;
        bool special, lstrip, rstrip, single_word, normalized;
    };
    // Added tokens of one kind (matched on raw or on normalized text), by content.
    struct AddedSet {
        std::unordered_map<std::string, size_t> by_text;  // index into added_
        size_t max_len = 0;
        std::array<bool, 256> first{};  // bytes an added token starts with
    };
    struct Piece {
        Token id;  // -1: text
        std::string text;
        bool at_origin;
    };

    explicit HfTokenizer(HfBpeModel model) : model_(std::move(model)) {}
    std::vector<Piece> split_added(const std::string& text, const AddedSet& set, bool parse_special,
                                   bool at_origin) const;
    std::vector<std::string> token_strings(std::span<const Token> ids, bool render_special) const;

    HfBpeModel model_;
    HfNormalizer normalizer_;
    HfPreTokenizer pre_tokenizer_;
    HfDecoder decoder_;
    std::vector<Added> added_;
    AddedSet raw_added_, normalized_added_;
    std::unordered_map<Token, size_t> added_by_id_;
    std::vector<Token> prefix_, suffix_;  // what the post-processor puts around a sequence
    std::vector<std::string> tokens_;     // id -> text, added tokens' content included
    std::vector<TokenAttr> attrs_;
    std::vector<bool> eog_;
    Token bos_ = -1, eos_ = -1;
};

}  // namespace ferry::tokenizer
