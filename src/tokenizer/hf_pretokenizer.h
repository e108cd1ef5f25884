// Hugging Face tokenizers' pre-tokenizers for BPE models: ByteLevel (GPT-2's regex and byte
// alphabet, add_prefix_space), Metaspace (replacement, prepend_scheme, split), Split (a
// string or regex, every delimiter behaviour, invert), Digits, WhitespaceSplit and Sequence.
// Each step splits every piece the step before it produced, as the library does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace ferry::tokenizer {

struct PrePiece {
    std::string text;
    bool at_origin;  // starts at the very beginning of the input (Metaspace's "first")
};

class HfPreTokenizer {
  public:
    // j: tokenizer.json's "pre_tokenizer" value; null means none.
    static Expected<HfPreTokenizer> from_json(const nlohmann::json& j);
    // Replaces `pieces` by their pre-tokens; empty ones are dropped, as the library does.
    void split(std::vector<PrePiece>& pieces) const;

    // How a delimiter match is kept (tokenizers' SplitDelimiterBehavior).
    enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

  private:
    enum class Kind { ByteLevel, Metaspace, Split, WhitespaceSplit };
    enum class Prepend { Always, First, Never };
    struct Step {
        Kind kind;
        std::shared_ptr<const Regex> pattern{};  // ByteLevel (when use_regex), Split, Digits
        Behavior behavior = Behavior::Isolated;
        bool invert = false;
        bool add_prefix_space = false;  // ByteLevel
        std::string replacement{};      // Metaspace
        Prepend prepend = Prepend::Always;
        bool split = true;  // Metaspace
    };
    static Status add(const nlohmann::json& j, std::vector<Step>& steps);
    std::vector<Step> steps_;
};

}  // namespace ferry::tokenizer
