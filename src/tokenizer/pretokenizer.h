// Splits text into the pieces BPE merges may not cross, with the regexes llama.cpp picks
// for each tokenizer.ggml.pre value. Several regexes apply in sequence: each one splits
// the pieces the previous one produced, and text between matches stays a piece too.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::tokenizer {

class PreTokenizer {
  public:
    // name: tokenizer.ggml.pre ("smollm", "gpt2", "llama-bpe", ...); unknown names fail.
    static Expected<std::shared_ptr<const PreTokenizer>> create(std::string_view name);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Pieces are views into `text`; concatenated they give `text` back.
    std::vector<std::string_view> split(std::string_view text) const;
    const std::string& name() const { return name_; }
    // Llama-3 style: a piece that is already a whole vocab entry is taken as is.
    bool ignore_merges() const { return ignore_merges_; }
    bool default_add_bos() const { return default_add_bos_; }

  private:
    PreTokenizer() = default;
    std::string name_;
    std::vector<void*> codes_;  // pcre2_code_8*, kept opaque so pcre2.h stays in the .cpp
    bool ignore_merges_ = false;
    bool default_add_bos_ = false;
};

}  // namespace ferry::tokenizer
