#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

std::string StreamDecoder::push(Token id) {
    pending_ += tok_.token_to_piece(id);
    std::string out;
    size_t used = utf8_sanitize(pending_, /*at_end=*/false, out);
    pending_.erase(0, used);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    utf8_sanitize(pending_, /*at_end=*/true, out);
    pending_.clear();
    return out;
}

}  // namespace ferry::tokenizer
