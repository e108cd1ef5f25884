// tokenizer.json (and tokenizer_config.json) as a Hugging Face directory brings them: the input
// is the tokenizer.json text, optionally followed by a NUL and a tokenizer_config.json. What
// is built from it then encodes and decodes a fixed text.
#include <string>
#include <string_view>

#include "fuzz_target.h"
#include "tokenizer/tokenizer.h"

FERRY_FUZZ_TARGET(tokenizer_json)(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const size_t nul = in.find('\0');
    const std::string_view tok_json = in.substr(0, nul);
    const std::string_view config = nul == std::string_view::npos ? "" : in.substr(nul + 1);
    // from_tokenizer_json reads text starting with '{' as JSON and anything else as a path.
    if (tok_json.empty() || tok_json[0] != '{') return 0;
    if (!config.empty() && config[0] != '{') return 0;
    auto tok = ferry::tokenizer::Tokenizer::from_tokenizer_json(tok_json, config);
    if (!tok.ok()) return 0;
    auto ids =
        (*tok)->encode("Hello, world!  caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd <s></s>", true, true);
    (void)(*tok)->decode(ids, true, true);
    return 0;
}
