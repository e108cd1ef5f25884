// Incremental decoding the way Hugging Face's DecodeStream and vLLM's detokenizer do it: the
// text a new id adds is decode(context + new) minus decode(context), where the context is the
// ids emitted last. Decoders that join neighbouring tokens (byte fallback runs, byte-level
// bytes) or treat the first token specially then stream exactly as they decode.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(std::string_view s) {
    return s.size() >= kReplacement.size() &&
           s.substr(s.size() - kReplacement.size()) == kReplacement;
}

}  // namespace

std::string StreamDecoder::text(size_t from, size_t to) const {
    std::span<const Token> ids(ids_.data() + from, to - from);
    // Only a window that begins where the stream began sees start-of-text rules.
    return tok_.decode(ids, /*render_special=*/false, at_start_ && !trimmed_ && from == 0);
}

std::string StreamDecoder::advance(bool at_end) {
    const std::string before = text(prefix_, read_);
    const std::string now = text(prefix_, ids_.size());
    std::string out;
    if (now.size() <= before.size() && !at_end) return out;
    // Decoders used here only ever append to the context's text; if one did not, the new
    // text is taken past the context's length rather than repeating it.
    std::string_view added = std::string_view(now).substr(std::min(before.size(), now.size()));
    if (!at_end) {
        // Hold back text that more ids may still change: an unfinished character, or a
        // replacement character a byte-fallback run produced before its last byte came.
        std::string check;
        if (utf8_sanitize(added, false, check) < added.size() || ends_with_replacement(added))
            return out;
    }
    utf8_sanitize(added, at_end, out);
    prefix_ = read_;
    read_ = ids_.size();
    if (at_end) prefix_ = read_;
    if (prefix_ > 0) {  // keep only the context
        ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
        read_ -= prefix_;
        prefix_ = 0;
        trimmed_ = true;
    }
    return out;
}

std::string StreamDecoder::push(Token id) {
    ids_.push_back(id);
    return advance(false);
}

std::string StreamDecoder::flush() {
    return advance(true);
}

}  // namespace ferry::tokenizer
