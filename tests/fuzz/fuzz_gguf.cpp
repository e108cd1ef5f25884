// The GGUF reader, then what loading a model reads from it next: the architecture's hyper-
// parameters and the tokenizer. Untrusted: a model file from anywhere.
#include <span>

#include "fuzz_target.h"
#include "gguf/gguf_file.h"
#include "model/llama_config.h"
#include "tokenizer/tokenizer.h"

FERRY_FUZZ_TARGET(gguf)(const uint8_t* data, size_t size) {
    auto file = ferry::gguf::File::parse(std::span(data, size), "fuzz.gguf");
    if (!file.ok()) return 0;
    (void)ferry::model::read_llama_config(**file);
    auto tok = ferry::tokenizer::Tokenizer::from_gguf(**file);
    if (tok.ok()) (void)(*tok)->encode("Hello, world! 123 <|im_start|>", true, true);
    return 0;
}
