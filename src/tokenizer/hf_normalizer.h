// Hugging Face tokenizers' normalizers that BPE models ship with: Sequence, Prepend,
// Replace (a string or a regex), Strip, ByteLevel, and the Unicode normal forms NFC, NFD,
// NFKC and NFKD (utf8proc's tables; Qwen2/2.5/3, GPT-NeoX and OLMo normalize to NFC). The
// others (Lowercase, StripAccents, BertNormalizer, Precompiled, Nmt) fail by name instead of
// normalizing differently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace ferry::tokenizer {

class HfNormalizer {
  public:
    // j: tokenizer.json's "normalizer" value; null means none.
    static Expected<HfNormalizer> from_json(const nlohmann::json& j);
    std::string normalize(std::string_view text) const;
    bool empty() const { return steps_.empty(); }

  private:
    enum class Kind { Prepend, Replace, Strip, ByteLevel, Unicode };
    struct Step {
        Kind kind;
        std::string text{};  // Prepend: what; Replace: the replacement
        std::shared_ptr<const Regex> pattern{};
        bool left = false, right = false;  // Strip
        int form = 0;                      // Unicode: utf8proc's options for the normal form
    };
    static Status add(const nlohmann::json& j, std::vector<Step>& steps);
    std::vector<Step> steps_;
};

}  // namespace ferry::tokenizer
