// A Hugging Face config.json as the model loader reads it: the JSON parser, then the
// architecture's hyper-parameters (rope scaling, sliding windows, experts, ...).
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.h"
#include "model/llama_config.h"

FERRY_FUZZ_TARGET(hf_config)(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;
    (void)ferry::model::read_llama_config(j, "config.json");
    return 0;
}
