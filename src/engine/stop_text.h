// Incremental text of one completion with stop strings applied: text that might be the start
// of a stop string is held back until it either completes the stop string (then generation
// ends and the text ends before the stop string, or after it when `include` is set) or turns
// out not to be one (then it is released).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ferry::engine {

class StopText {
  public:
    StopText(const tokenizer::Tokenizer& tok, std::vector<std::string> stops, bool include = false)
        : decoder_(tok), stops_(std::move(stops)), include_(include) {}

    // Feeds a token; returns the text now safe to show. Sets stopped() when a stop string
    // completed (the returned text then ends right before it, or with it when included).
    std::string push(int32_t token);
    // Releases what was held back at the end of a completion.
    std::string flush();
    bool stopped() const { return stopped_; }

  private:
    std::string release();

    tokenizer::StreamDecoder decoder_;
    std::vector<std::string> stops_;
    bool include_ = false;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace ferry::engine
