// Hugging Face tokenizers' decoders for BPE models: ByteLevel, Metaspace, ByteFallback,
// Fuse, Strip, Replace and Sequence, run as the library runs them: each step rewrites the
// list of token strings the step before it left. No decoder joins the tokens with spaces.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace ferry::tokenizer {

class HfDecoder {
  public:
    // j: tokenizer.json's "decoder" value; null means none.
    static Expected<HfDecoder> from_json(const nlohmann::json& j);

    // tokens: the tokens' strings (vocabulary text, added tokens' content).
    // at_start: the tokens begin the text (Metaspace drops the first token's replacement
    // characters, a Strip after Fuse strips the text's start); otherwise they continue one.
    // raw: byte tokens and byte-level characters give their bytes unchecked (one token's
    // piece) instead of the library's U+FFFD for bytes that are not UTF-8 together.
    std::string decode(std::vector<std::string> tokens, bool at_start, bool raw) const;

  private:
    enum class Kind { ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace };
    struct Step {
        Kind kind;
        std::string text{};  // Metaspace: the replacement; Strip: the character; Replace: content
        std::shared_ptr<const Regex> pattern{};  // Replace
        bool prepend = true;                     // Metaspace: prepend_scheme is not "never"
        size_t start = 0, stop = 0;              // Strip
    };
    static Status add(const nlohmann::json& j, std::vector<Step>& steps);
    std::vector<Step> steps_;
    bool none_ = true;
};

}  // namespace ferry::tokenizer
