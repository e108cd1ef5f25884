// OpenAI request validation: a JSON body as /v1/chat/completions and /v1/completions read it
// (messages, content parts, tools and tool_choice, response_format and the vLLM / llama.cpp
// constraint fields, sampling, stop, logprobs, n), against a service with a real chat template
// and constraint compiler; an accepted request is then answered through the response builders.
#include <string>

#include "fuzz_service.h"
#include "fuzz_target.h"
#include "server/openai_schema.h"

FERRY_FUZZ_TARGET(openai_request)(const uint8_t* data, size_t size) {
    static ferry::fuzz::FuzzService service;
    using namespace ferry::server;
    ApiError err;
    auto body = parse_body(std::string(reinterpret_cast<const char*>(data), size), err);
    if (!body) return 0;
    for (Endpoint kind : {Endpoint::Chat, Endpoint::Completions}) {
        auto r = parse_generation(*body, kind, service, {"m", "alias"}, err);
        if (!r) {
            (void)error_body(err);
            continue;
        }
        // One choice per prompt and sample, made of the prompt's last tokens.
        std::vector<Choice> choices;
        for (const auto& prompt : r->prompts)
            for (int i = 0; i < r->params.n; ++i) {
                Choice c;
                for (size_t t = prompt.size() > 4 ? prompt.size() - 4 : 0; t < prompt.size(); ++t) {
                    c.tokens.push_back(prompt[t]);
                    c.logprobs.push_back(-1.0f);
                    c.top_logprobs.push_back({{prompt[t], -1.0f}});
                }
                c.text = service.decode(c.tokens);
                c.completion_tokens = static_cast<int>(c.tokens.size());
                c.finish = ferry::engine::FinishReason::Length;
                choices.push_back(std::move(c));
            }
        (void)dump(full_response(*r, service, "id", 0, "m", choices, {}));
    }
    return 0;
}
