// tokenizer.json's BPE model as Hugging Face tokenizers runs it on one pre-token: a symbol
// per character (with continuing_subword_prefix / end_of_word_suffix where set), characters
// outside the vocabulary as their <0xNN> tokens (byte_fallback) or the unknown token
// (consecutive ones fused with fuse_unk, dropped when there is none), then merges by rank
// through the shared merge loop. ignore_merges takes a pre-token that is a whole token as is.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace ferry::tokenizer {

class HfBpeModel {
  public:
    // j: tokenizer.json's "model"; only type "BPE" is accepted.
    static Expected<HfBpeModel> from_json(const nlohmann::json& j);
    HfBpeModel(HfBpeModel&&) = default;
    HfBpeModel& operator=(HfBpeModel&&) = default;

    void tokenize(std::string_view word, std::vector<int32_t>& out) const;

    // The vocabulary: id -> text ("" where the file has no token), and text -> id.
    const std::vector<std::string>& tokens() const { return tokens_; }
    std::optional<int32_t> find(std::string_view text) const;
    bool byte_fallback() const { return byte_fallback_; }
    int32_t unk() const { return unk_; }

  private:
    HfBpeModel() = default;
    struct Merge {
        uint32_t rank;
        int32_t result;
    };
    std::vector<std::string> tokens_;
    std::unordered_map<std::string, int32_t> vocab_;
    std::unordered_map<uint64_t, Merge> merges_;  // left id << 32 | right id
    std::array<int32_t, 256> byte_tokens_{};      // <0xNN>, -1 when missing
    std::string prefix_, suffix_;                 // continuing_subword_prefix, end_of_word_suffix
    int32_t unk_ = -1;
    bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
};

}  // namespace ferry::tokenizer
