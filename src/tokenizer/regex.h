// A compiled PCRE2 pattern (UTF-8, Unicode properties) for the tokenizer.json components
// that split or rewrite text by a pattern; pcre2.h stays in the .cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ferry::tokenizer {

// `pattern` with \s and \S spelled out as Unicode's White_Space. PCRE2 10.42 still counts
// U+180E (whitespace until Unicode 6.3) in \s; tokenizers' Oniguruma and llama.cpp's tables do
// not, and a tokenizer must split where they split.
std::string white_space_classes(std::string_view pattern);

class Regex {
  public:
    // literal: match `pattern` as plain text (a tokenizer.json {"String": ...} pattern).
    static Expected<std::shared_ptr<const Regex>> compile(std::string_view pattern, bool literal);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Non-overlapping matches left to right as [begin, end) byte offsets; after an empty
    // match the search resumes one character on. `text` must be valid UTF-8.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
    // Whether the pattern matches somewhere in `text`.
    bool search(std::string_view text) const;
    const std::string& pattern() const { return pattern_; }

  private:
    Regex() = default;
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace ferry::tokenizer
